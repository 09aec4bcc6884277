"""Ids people can paste back, and tables that keep one line per row, as a user meets them.

Before: tables cut ids (``chk-26b66cc1…``) and the cut id was refused (exit 66); `get`
had no ``--wide``; the evidence and step tables of `run` wrapped 2-4 lines a row; `schedule
list` clipped its last column. Now any unique prefix of a run, check or batch id is taken
(the ellipsis copied along too), an ambiguous one is 64 with one sentence naming the ids,
and every table keeps one line per row at 80 columns (cut with an ellipsis), whole with
``--wide``. Real redis-server, real `assay` processes; verdicts recorded through the store
as a worker records them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from assay.client import Client
from scheduler.schedules import ScheduleStore
from schemas.report import Step
from schemas.schedule import ScheduleFire
from schemas.settings import load_settings
from schemas.verdict import Evidence
from tests.assay.test_front_door import ALL_SNAPSHOTS, PLAIN, PROD_EU, assay, one_error_line
from tests.fleet_support import finished_report, snapshot_request
from workers.fleet.probe_store import ProbeStore

LONG_EXCERPT = "web   1/3   " + "a long line of the Deployment table the model cited " * 3
LONG_ARGUMENTS = {"kind": "Deployment", "namespace": "prod", "label_selector": "app=web,tier=fe"}


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    with Client(load_settings(redis_url=redis_url)) as fleet:
        yield fleet


def record(client: Client, verdict: str, *, check_id: str | None = None, text: str = PLAIN) -> str:
    """A finished run with two steps and a cited lookup, as a worker records it; its run id."""
    fields = {"check_id": check_id} if check_id else {}
    request = snapshot_request(text=text, path=PROD_EU, **fields)
    report = finished_report(request, verdict, explanation="web has 1 of 3 ready replicas " * 4)
    now = datetime.now(UTC)
    evidence = Evidence(step=0, tool="get", arguments=LONG_ARGUMENTS, ok=True,
                        excerpt=LONG_EXCERPT, verified=True)  # fmt: skip
    assert report.verdict is not None
    report = report.model_copy(
        update={
            "steps": [
                Step(
                    index=0,
                    kind="COMMAND",
                    tool="get",
                    arguments=LONG_ARGUMENTS,
                    ok=True,
                    output=LONG_EXCERPT,
                    started_at=now,
                ),
                Step(
                    index=1,
                    kind="DONE",
                    started_at=now,
                    action={"action": "DONE", "explanation": "x " * 80},
                ),
            ],
            "verdict": report.verdict.model_copy(update={"evidence": [evidence]}),
        }
    )
    client.store.register_run(request)
    client.store.begin_delivery(request)
    assert client.store.record_verdict(report)
    return request.run_id


def cut_cell(line: str) -> str:
    """The first cell of a table line, as a user copies it (the ellipsis along)."""
    return line.split()[0]


def test_a_cut_id_from_a_table_is_taken_back(redis_url: str, client: Client) -> None:
    run_id = record(client, "false", check_id="web-replicas-in-the-production-cluster-eu-west")
    listing = assay(redis_url, "checks")
    row = next(line for line in listing.stdout.splitlines() if "FALSE" in line)
    cut = cut_cell(row)
    assert cut.endswith("…") and len(cut) < len("web-replicas-in-the-production-cluster-eu-west")
    for pasted in (cut, cut.removesuffix("…")):
        shown = assay(redis_url, "verdict", pasted)
        assert shown.returncode == 1, (pasted, shown.stderr)  # the check's false verdict
        assert "FALSE" in shown.stdout

    history = assay(redis_url, "verdict", cut, "--history", "5")
    short_run = next(cell for cell in history.stdout.split() if cell.startswith(run_id[:8]))
    assert short_run != run_id and short_run.endswith("…")
    run = assay(redis_url, "run", short_run)
    assert run.returncode == 1 and f"run {run_id}" in run.stdout, run.stderr

    started = assay(redis_url, "batch", PLAIN, "--snapshots", ALL_SNAPSHOTS, "--model",
                    "openai/scripted")  # fmt: skip
    batch_id = started.stdout.strip()
    status = assay(redis_url, "batch", "status", batch_id[: len("batch-") + 6])
    assert status.returncode == 75 and batch_id in status.stdout, status.stderr

    store = ProbeStore(client.store.client, prefix="assay")
    assert store.current("web-replicas-in-the-production-cluster-eu-west") is None
    missing = assay(redis_url, "probe", "show", cut)  # a check without a probe: still 66
    assert missing.returncode == 66, missing.stderr
    assert "check 'web-replicas-in-the-production-cluster-eu-west' has no probe" in missing.stderr


def test_an_ambiguous_prefix_names_the_ids_and_exits_64(redis_url: str, client: Client) -> None:
    record(client, "true", check_id="web-a")
    record(client, "false", check_id="web-b")
    record(client, "true", check_id="web")
    ambiguous = assay(redis_url, "verdict", "web-")
    assert ambiguous.returncode == 64, ambiguous.stderr
    line = one_error_line(ambiguous)
    assert "check web-a" in line and "check web-b" in line and "give more" in line, line
    exact = assay(redis_url, "verdict", "web")  # a full id is itself, though it begins others
    assert exact.returncode == 0, exact.stderr
    unknown = assay(redis_url, "verdict", "nothing-begins-so")
    assert unknown.returncode == 66 and "no run or check has id" in unknown.stderr


def test_tables_keep_one_line_per_row_at_80_columns_and_wide_shows_them_whole(
    redis_url: str, client: Client
) -> None:
    run_id = record(client, "false")
    run = assay(redis_url, "run", run_id)
    lines = run.stdout.splitlines()
    steps = [line for line in lines if line.startswith("[step ")]
    assert len(steps) == 2 and all(line.endswith("…") for line in steps), run.stdout
    table = lines[lines.index(next(line for line in lines if "excerpt" in line)) :][:2]
    header, cited = table  # the evidence: its header and one line for its one citation
    assert header.split() == ["step", "lookup", "ok", "found", "excerpt"], run.stdout
    assert cited.split()[:2] == ["0", "get"] and cited.rstrip().endswith("…"), run.stdout
    assert all(len(line) <= 80 for line in [*steps, *table]), run.stdout
    wide = assay(redis_url, "run", run_id, "--wide")
    assert " ".join(LONG_EXCERPT.split()) in wide.stdout and "label_selector" in wide.stdout

    name = "nightly-readiness-of-every-deployment-in-prod"
    added = assay(redis_url, "schedule", "add", name, PLAIN, "--every", "1h",
                  "--snapshots", ALL_SNAPSHOTS)  # fmt: skip
    assert added.returncode == 0, added.stderr
    fired = {f"snapshot:cluster-{n}": f"fired-{n}" for n in range(3)}  # as the scheduler records
    outcomes = ["false", "cannot_determine", "true"]
    for check_id, verdict in zip(fired.values(), outcomes, strict=True):
        record(client, verdict, check_id=check_id)
    schedules = ScheduleStore(client.store.client, "assay", 60)
    now = datetime.now(UTC)
    schedules.record_fire(
        schedules.get(name).id, ScheduleFire(scheduled_at=now, fired_at=now, checks=fired)
    )
    listing = assay(redis_url, "schedule", "list")
    header, row = listing.stdout.splitlines()
    assert len(header) <= 80 and len(row) <= 80, listing.stdout
    assert header.split()[-2:] == ["last", "verdicts"], listing.stdout
    assert row.rstrip().endswith("…") and "false 1" in row, listing.stdout  # cut, not clipped
    whole = assay(redis_url, "schedule", "list", "--wide").stdout
    assert name in whole and "cannot_determine" in whole and "true" in whole, whole

    for command in (["checks"], ["verdict", run_id, "--history", "3"]):
        shown = assay(redis_url, *command)
        assert shown.returncode in (0, 1), (command, shown.stderr)
        assert all(len(line) <= 80 for line in shown.stdout.splitlines()), shown.stdout


def test_get_has_wide(redis_url: str) -> None:
    shown = assay(redis_url, "get", "schedules", "--wide")
    assert shown.returncode == 0, shown.stderr
    narrow = assay(redis_url, "get", "checks", "--narrow")
    assert narrow.returncode == 0, narrow.stderr
