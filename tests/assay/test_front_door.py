"""What a newcomer meets at the CLI's front door (issue 10), driven as they drive it.

Real redis-server (the test's own), real `assay` subprocesses, a real `assay
worker` where a worker's behaviour is the point, the API through FastAPI's
test client. No model is ever reached: the no-model paths stop before one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from assay.client import Client
from assay.redis_process import free_port
from assay.worker_presence import read_fleet_models
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.api_support import READ_TOKEN, TOKENS, auth
from tests.conftest import EXAMPLES, ROOT, TEST_SNAPSHOT_ROOTS
from tests.fleet_support import finished_report, snapshot_request, stop_process, wait_until

PLAIN = "every Deployment in namespace prod has at least 2 ready replicas"
PROD_EU = str(EXAMPLES / "snapshots" / "prod-eu")
ALL_SNAPSHOTS = str(EXAMPLES / "snapshots" / "*")
BOX_CHARS = set("─│┃━┏┓┗┛╭╮╰╯┡┩╇┼")


def env_for(redis_url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env["ASSAY_SNAPSHOT_ROOTS"] = TEST_SNAPSHOT_ROOTS
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    if redis_url is not None:
        env["ASSAY_REDIS_URL"] = redis_url
    env.update(extra)
    return env


def assay(redis_url: str | None, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assay.cli", *args],
        cwd=ROOT,
        env=env_for(redis_url, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("assay: error: "), lines[0]
    return lines[0]


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    with Client(load_settings(redis_url=redis_url)) as fleet:
        yield fleet


def record(client: Client, check_id: str, verdict: str, minutes_ago: float = 0) -> str:
    request = snapshot_request(check_id=check_id, path=PROD_EU)
    when = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    client.store.register_run(request)
    client.store.record_verdict(finished_report(request, verdict, finished_at=when))
    return request.run_id


# --- no model anywhere ---------------------------------------------------------------------------


@pytest.fixture
def modelless_worker(redis_url: str, tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "worker.log"
    with log.open("ab") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "assay.cli", "worker", "--concurrency", "2"],
            cwd=ROOT,
            env=env_for(redis_url, ASSAY_LOG_FORMAT="json"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield log
    finally:
        stop_process(worker)


def test_fleet_commands_refuse_at_once_when_no_worker_has_a_model(
    redis_url: str, client: Client, modelless_worker: Path
) -> None:
    assert wait_until(lambda: "no_model_configured" in modelless_worker.read_text(), 60), (
        modelless_worker.read_text()[-2000:]
    )
    warning = next(
        json.loads(line)
        for line in modelless_worker.read_text().splitlines()
        if "no_model_configured" in line and line.startswith("{")
    )
    assert warning["level"] == "warning"
    assert wait_until(lambda: read_fleet_models(client.store.client, "assay").workers >= 1, 30)

    for command in (
        ["submit", "--snapshot", PROD_EU, PLAIN],
        ["batch", PLAIN, "--snapshots", ALL_SNAPSHOTS],
        ["schedule", "add", "nightly", PLAIN, "--every", "1h", "--snapshots", ALL_SNAPSHOTS],
    ):
        refused = assay(redis_url, *command)
        assert refused.returncode == 64, (command, refused.stderr)
        assert "no model is configured" in one_error_line(refused)
    assert client.store.run_state("nothing") is None
    assert client.checks() == [] and client.latest_batch_id() is None

    # A run that reaches the worker anyway (the client does not refuse) is kept out of the
    # check's history, its latest verdict and the change events.
    earlier = record(client, "replicas", "true", minutes_ago=5)
    receipt = client.submit(PLAIN, snapshot=PROD_EU, check_id="replicas")
    verdict = client.wait(receipt.run_id, timeout=90)
    assert verdict.verdict == VerdictKind.CANNOT_DETERMINE and "no model" in (verdict.reason or "")
    assert [v.run_id for v in client.history("replicas")] == [earlier]
    latest = client.verdict("replicas")
    assert latest is not None and latest.run_id == earlier
    assert client.changes("1h") == []


# --- Redis away -------------------------------------------------------------------------------


def test_an_unreachable_redis_is_one_sentence_and_69(tmp_path: Path) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    for command in (
        ["checks"],
        ["verdict", "some-check"],
        ["submit", "--snapshot", PROD_EU, PLAIN],
        ["batch", "status"],
        ["schedule", "list"],
        ["probe", "show", "some-check"],
    ):
        started = time.monotonic()
        result = assay(dead, *command)
        elapsed = time.monotonic() - started
        print(
            f"assay {command[0]} against a dead Redis: exit {result.returncode} in {elapsed:.2f}s"
        )
        assert result.returncode == 69, (command, result.stderr)
        assert "cannot reach the fleet's Redis" in one_error_line(result)


def test_the_client_against_a_dead_redis_says_so_within_seconds() -> None:
    from assay import RedisUnreachable

    port = free_port()  # nothing listens there
    dead = f"redis://:hunter2hunter2@127.0.0.1:{port}/0"
    with Client(load_settings(redis_url=dead)) as fleet:
        for first_use in (
            fleet.checks,
            lambda: fleet.submit(PLAIN, snapshot=PROD_EU),
            lambda: fleet.start_batch(PLAIN, snapshots=ALL_SNAPSHOTS),
        ):
            started = time.monotonic()
            with pytest.raises(RedisUnreachable) as raised:
                first_use()
            elapsed = time.monotonic() - started
            print(f"Client against a dead Redis: RedisUnreachable after {elapsed:.2f}s")
            assert elapsed < 15, "a bound against a hang, not a speed figure"
            message = str(raised.value)
            assert f"cannot reach the fleet's Redis at redis://:***@127.0.0.1:{port}/0" in message
            assert "assay up" in message and "ASSAY_REDIS_URL" in message
            assert "hunter2" not in message
            assert isinstance(raised.value, ConnectionError)


def test_a_dead_separate_broker_is_named_and_nothing_is_registered(redis_url: str) -> None:
    from assay import RedisUnreachable

    dead_broker = f"redis://127.0.0.1:{free_port()}/0"
    settings = load_settings(redis_url=redis_url, broker_url=dead_broker)
    with Client(settings) as fleet:
        with pytest.raises(RedisUnreachable, match="cannot reach the fleet's broker at") as raised:
            fleet.submit(PLAIN, snapshot=PROD_EU, run_id="never-sent")
        assert "ASSAY_BROKER_URL" in str(raised.value)
        assert fleet.run_state("never-sent") is None, "a run no broker holds is not registered"


def test_no_fleet_anywhere_is_69_and_names_the_way_out(tmp_path: Path) -> None:
    result = assay(None, "checks", ASSAY_DATA_DIR=str(tmp_path))
    assert result.returncode == 69
    assert "assay up" in one_error_line(result)


# --- one JSON convention ------------------------------------------------------------------------


def test_cli_json_and_api_json_are_the_same_objects(redis_url: str, client: Client) -> None:
    from assay.api import create_app

    run_id = record(client, "replicas", "false")
    record(client, "roots", "true", minutes_ago=1)
    cli_run = assay(redis_url, "run", run_id, "--json")
    assert cli_run.returncode == 1, cli_run.stderr
    cli_verdict = assay(redis_url, "verdict", "replicas", "--json")
    assert cli_verdict.returncode == 1, cli_verdict.stderr
    cli_checks = assay(redis_url, "checks", "--json", "--changed-since", "1h")
    assert cli_checks.returncode == 0, cli_checks.stderr
    settings = load_settings(redis_url=redis_url, api_tokens=TOKENS)
    with TestClient(create_app(settings)) as api:
        api_verdict = api.get("/v1/checks/replicas", headers=auth(READ_TOKEN))
        api_checks = api.get("/v1/checks?changed_since=1h", headers=auth(READ_TOKEN))
        api_run = api.get(f"/v1/runs/{run_id}", headers=auth(READ_TOKEN))
    assert json.loads(cli_run.stdout) == api_run.json()
    assert api_verdict.status_code == 200 and api_checks.status_code == 200, api_checks.text
    assert json.loads(cli_verdict.stdout) == api_verdict.json()
    assert json.loads(cli_checks.stdout) == api_checks.json()["checks"]
    assert json.loads(cli_verdict.stdout)["finished_at"].endswith("Z")


def test_a_run_whose_report_cannot_be_read_still_shows_its_verdict(
    redis_url: str, client: Client
) -> None:
    """A report written by a newer assay (a codec this one does not know) or damaged in Redis:
    the verdict is stored apart from it, so `assay run` and the API still give the verdict
    and its exit code, and say why the report is missing, instead of failing."""
    from assay.api import create_app

    run_id = record(client, "replicas", "false")
    client.store.client.hset(client.store._run_key(run_id), "report", "zd9:AAAA")
    shown = assay(redis_url, "run", run_id)
    assert shown.returncode == 1, shown.stderr  # the verdict's code: false
    assert "FALSE" in shown.stdout.upper()
    assert "cannot be read" in shown.stderr and "newer" in shown.stderr
    as_json = assay(redis_url, "run", run_id, "--json")
    assert as_json.returncode == 1, as_json.stderr
    settings = load_settings(redis_url=redis_url, api_tokens=TOKENS)
    with TestClient(create_app(settings)) as api:
        api_run = api.get(f"/v1/runs/{run_id}", headers=auth(READ_TOKEN))
    assert api_run.status_code == 200, api_run.text
    body = api_run.json()
    assert body["verdict"]["verdict"] == "false" and body["report"] is None
    assert "newer" in body["report_error"]
    assert json.loads(as_json.stdout) == body


def test_a_run_that_repeated_another_shows_and_one_whose_report_expired_says_so(
    redis_url: str, client: Client
) -> None:
    """A probe re-run that found what the run before it found stores no report: `assay run`
    and the API show the report it repeated, as its own. Once a run's report is no longer
    kept, both say so in one sentence: exit 67 and HTTP 410 ``report_expired``, never 66 or
    404 (the run was real) and never its verdict's code (no report was shown)."""
    from assay.api import create_app

    def probe_run(number: int) -> str:
        request = snapshot_request(check_id="roots", path=PROD_EU, run_id=f"roots-{number}")
        report = finished_report(
            request, "true", finished_at=datetime.now(UTC) - timedelta(minutes=10 - number)
        )
        assert report.verdict is not None
        report.verdict = report.verdict.model_copy(update={"source": "probe"})
        client.store.record_verdict(report.model_copy(update={"model": "(probe)"}))
        return request.run_id

    first, repeat = probe_run(0), probe_run(1)
    shown = assay(redis_url, "run", repeat)
    assert shown.returncode == 0, shown.stderr
    assert f"found exactly what run {first} found" in shown.stdout
    as_json = json.loads(assay(redis_url, "run", repeat, "--json").stdout)
    assert as_json["report"]["repeat_of"] == first and as_json["report"]["run_id"] == repeat

    client.store.client.delete(client.store._run_key(first))  # its TTL ran out
    expired = assay(redis_url, "run", repeat)
    assert expired.returncode == 67, expired.stderr
    [line] = expired.stderr.splitlines()
    assert line.startswith(f"assay: run {repeat}'s report has expired") and "roots" in line
    assert expired.stdout == ""
    settings = load_settings(redis_url=redis_url, api_tokens=TOKENS)
    with TestClient(create_app(settings)) as api:
        answer = api.get(f"/v1/runs/{repeat}", headers=auth(READ_TOKEN))
    assert answer.status_code == 410, answer.text
    assert answer.json()["error"]["code"] == "report_expired"
    assert answer.json()["error"]["message"] == line.removeprefix("assay: ")
    verdict = assay(redis_url, "verdict", repeat)  # the verdict itself is still known
    assert verdict.returncode == 0, verdict.stderr


# --- tables, targets, pending --------------------------------------------------------------------


def test_piped_tables_are_plain_fit_80_columns_and_put_failures_first(
    redis_url: str, client: Client
) -> None:
    record(client, "a-check-that-holds-with-a-rather-long-id-0123456789", "true")
    record(client, "replicas", "false", minutes_ago=2)
    listing = assay(redis_url, "checks")
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert not BOX_CHARS & set(listing.stdout)
    assert all(len(line) <= 80 for line in lines), listing.stdout
    rows = [line for line in lines if "snapshot:prod-eu" in line]
    assert "FALSE" in rows[0] and "TRUE" in rows[1]

    bare = assay(redis_url, "checks", "--target", "prod-eu", "--json")
    assert {row["check_id"] for row in json.loads(bare.stdout)} == {
        "a-check-that-holds-with-a-rather-long-id-0123456789",
        "replicas",
    }
    nothing = assay(redis_url, "checks", "--target", "prod-us")
    assert nothing.returncode == 0 and "snapshot:FOLDER" in nothing.stderr


def test_checks_keep_their_check_column_and_show_what_changed(
    redis_url: str, client: Client
) -> None:
    """Before: with short ids the check column vanished (which check changed?), `changed`
    never showed, `--wide` cut the header to `c…`, and the predicate got ~13 characters."""
    record(client, "a", "true", minutes_ago=3)
    record(client, "a", "false")  # a change: true -> false
    record(client, "bb", "true")
    listing = assay(redis_url, "checks")
    lines = listing.stdout.splitlines()
    assert lines[0].split()[:4] == ["check", "verdict", "target", "age"], lines[0]
    assert all(len(line) <= 80 for line in lines), listing.stdout
    rows = {line.split()[0]: line for line in lines[1:] if "snapshot:" in line}
    assert set(rows) == {"a", "bb"}
    predicate = lines[0].index("predicate")
    assert all(len(line[predicate:].strip()) >= 24 for line in rows.values()), listing.stdout
    changes = assay(redis_url, "checks", "--changed-since", "1h")
    [changed] = [line for line in changes.stdout.splitlines() if line.split()[:1] == ["a"]]
    assert "was true" in changed and "FALSE" in changed, changes.stdout
    wide = assay(redis_url, "checks", "--wide")
    header = wide.stdout.splitlines()[0].split()
    assert header == ["check", "verdict", "target", "age", "changed", "predicate"], header
    assert "true → false" in wide.stdout and PLAIN in wide.stdout


def test_wide_piped_tables_show_every_id_path_and_name_whole(
    redis_url: str, client: Client, tmp_path: Path
) -> None:
    """Before: `--wide` piped still cut ids and paths to fit 80 columns (`schedule list
    --wide`)."""
    long_id = "a-check-whose-id-is-long-enough-to-need-more-than-eighty-columns-0123456789"
    run_id = record(client, long_id, "true")
    deep = tmp_path / ("a-folder-with-a-long-name-" * 4) / "prod-eu"
    deep.parent.mkdir(parents=True)
    import shutil

    shutil.copytree(PROD_EU, deep)
    added = assay(
        redis_url, "schedule", "add", "a-schedule-with-a-rather-long-name-too", PLAIN,
        "--every", "1h", "--snapshots", str(deep),
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    for args, whole in (
        (["checks", "--wide"], [long_id, PLAIN]),
        (["verdict", long_id, "--history", "5", "--wide"], [run_id]),
        (["schedule", "list", "--wide"], [str(deep), "a-schedule-with-a-rather-long-name-too"]),
    ):
        shown = assay(redis_url, *args)
        assert shown.returncode == 0, shown.stderr
        assert "…" not in shown.stdout, (args, shown.stdout)
        for text in whole:
            assert text in shown.stdout, (args, text, shown.stdout)


def test_a_deferred_check_is_pending_with_its_due_time(redis_url: str) -> None:
    submitted = assay(
        redis_url,
        "submit", "--snapshot", PROD_EU, "--check-id", "cert", "--at", "2030-01-01T00:00:00Z",
        "--json", PLAIN,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    run_id = json.loads(submitted.stdout)["run_id"]
    pending = assay(redis_url, "verdict", "cert")
    assert pending.returncode == 75
    # Pending is an answer to come, not an error. Before: `assay: error: run ... is queued`.
    [line] = pending.stderr.splitlines()
    assert line.startswith("assay: ") and "error" not in line, line
    assert "due at 2030-01-01T00:00:00Z" in line
    shown = assay(redis_url, "run", run_id)
    assert shown.returncode == 75 and "wake_at 2030-01-01T00:00:00Z" in shown.stdout
    assert "error" not in shown.stderr and "+00:00" not in shown.stdout + shown.stderr


def test_a_schedule_whose_glob_matches_nothing_is_refused(redis_url: str) -> None:
    refused = assay(
        redis_url, "schedule", "add", "typo", PLAIN, "--every", "1h",
        "--snapshots", str(EXAMPLES / "snapshot" / "*"),
    )  # fmt: skip
    assert refused.returncode == 64
    assert "matches no snapshot folder" in one_error_line(refused)
    assert assay(redis_url, "schedule", "list", "--json").stdout.strip() in ("[]", "")


# --- help and completion -------------------------------------------------------------------------


def _commands(
    command: object, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], object]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_every_option_of_every_command_is_described() -> None:
    import typer

    from assay.cli import app

    root = typer.main.get_command(app)
    undescribed = [
        f"assay {' '.join(path)} {param.opts[0]}"
        for path, command in _commands(root)
        for param in getattr(command, "params", [])
        if param.param_type_name == "option" and not (getattr(param, "help", "") or "").strip()
    ]
    assert undescribed == []
    assert len(list(_commands(root))) > 20


def test_help_has_no_bool_placeholders_or_boxes_and_completion_is_offered() -> None:
    for args in (["--help"], ["submit", "--help"], ["schedule", "add", "--help"]):
        shown = assay(None, *args)
        assert shown.returncode == 0, shown.stderr
        assert "<bool>" not in shown.stdout and not BOX_CHARS & set(shown.stdout)
    assert "--install-completion" in assay(None, "--help").stdout
    script = assay(None, "--show-completion", "bash")
    assert script.returncode == 0 and "complete" in script.stdout


def test_help_lists_every_exit_code_assay_uses() -> None:
    """Before: `assay --help` left out 70 (a bug), 130 (Ctrl-C) and 141 (a closed pipe),
    which a CI job or a shell script meets too."""
    shown = " ".join(assay(None, "--help").stdout.split())
    codes = {
        0: "true", 1: "false", 2: "poorly posed", 3: "cannot determine", 64: "usage error",
        66: "no such id", 69: "unreachable", 70: "internal error", 75: "no verdict yet",
        130: "interrupted (Ctrl-C)", 141: "output closed early",
    }  # fmt: skip
    listed = shown[shown.index("Exit codes:") :]
    for code, meaning in codes.items():
        assert f" {code} " in listed and meaning in listed, (code, listed)
    assert listed.index(" 70 ") < listed.index("internal error") < listed.index(" 75 ")


# --- --scripted beside a fleet command --------------------------------------------------------


def test_a_worker_started_with_scripted_answers_with_the_scripted_model(
    redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    script = str(EXAMPLES / "scripts" / "demo.yaml")
    with log.open("ab") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "assay.cli", "worker", "-c", "2", "--scripted", script],
            cwd=ROOT,
            env=env_for(redis_url),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        waited = assay(redis_url, "submit", "--snapshot", PROD_EU, PLAIN, "--wait")
    finally:
        stop_process(worker)
    assert "SCRIPTED MODEL" in log.read_text()
    assert waited.returncode == 0, waited.stderr + log.read_text()[-2000:]
    assert "TRUE" in waited.stdout and "openai/scripted" in waited.stdout
