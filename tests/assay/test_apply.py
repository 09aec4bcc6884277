"""`assay apply` / `assay get` end to end: the CLI in-process against a real redis-server.

What a user relies on: applying files makes the stored checks and schedules what
they declare; applying them again changes nothing and says so; `get -o yaml` writes
what apply reads (round trip); `--dry-run` prints a diff and writes nothing;
`--prune` removes only what this source created; and a bad file is refused whole
(file, line, field), with nothing applied. The same operation over HTTP is at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib

from scheduler.schedules import ScheduleStore
from schemas.declarative import SOURCE_LABEL
from tests.cli_support import run_cli as run
from workers.fleet.check_definitions import CheckDefinitionStore
from workers.fleet.store import VerdictStore

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = ROOT / "examples" / "snapshots"  # documents in tmp_path name them absolute
PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"

SCHEDULE = f"""\
apiVersion: assay.dev/v1alpha1
kind: Schedule
metadata:
  name: nightly-replicas
  labels: {{team: platform}}
spec:
  predicate: {PREDICATE}
  targets:
    snapshots: ['{SNAPSHOTS}/*']
  cron: "0 2 * * *"
  timeZone: Europe/Berlin
  budget: {{timeout: 5m, maxTokens: 50000}}
"""
CHECK = f"""\
apiVersion: assay.dev/v1alpha1
kind: Check
metadata:
  name: prod-replicas
spec:
  predicate: {PREDICATE}
  targets:
    snapshots: [{SNAPSHOTS}/prod-eu, {SNAPSHOTS}/dev-ap]
  profile: smoke
"""
INTERVAL = """\
apiVersion: assay.dev/v1alpha1
kind: Schedule
metadata:
  name: quarter-hourly
spec:
  predicate: no pod in namespace prod runs as root
  targets: {contexts: [prod-eu]}
  every: 15m
  probe: only
"""


@pytest.fixture
def cli_env(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ASSAY_MODEL", "openai/gpt-4o-mini")
    monkeypatch.chdir(ROOT)  # the documents name snapshots relative to the checkout
    return redis_url


def _client(url: str) -> redis_lib.Redis:
    return redis_lib.Redis.from_url(url, decode_responses=True)


def schedules(url: str) -> ScheduleStore:
    return ScheduleStore(_client(url), "assay", 60)


def checks(url: str) -> CheckDefinitionStore:
    return CheckDefinitionStore(_client(url), "assay")


def snapshot_of_store(url: str) -> dict[str, str]:
    """Every key of the store with its value, to prove an apply wrote nothing."""
    client = _client(url)
    out = {}
    for key in sorted(client.keys("*")):
        kind = client.type(key)
        if kind == "hash":
            out[key] = json.dumps(client.hgetall(key), sort_keys=True)
        elif kind == "zset":
            out[key] = json.dumps(client.zrange(key, 0, -1, withscores=True))
        elif kind == "string":
            out[key] = str(client.get(key))
        elif kind == "list":
            out[key] = json.dumps(client.lrange(key, 0, -1))
        else:
            out[key] = kind
    return out


def write(folder: Path, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_apply_creates_then_says_nothing_changed(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    folder = write(tmp_path / "checks", **{"a.yaml": SCHEDULE + "---\n" + CHECK, "b.yml": INTERVAL})
    code, out, err = run(capsys, "apply", "-f", str(folder), "--source", "team-a")
    assert code == 0, err
    assert "schedule/nightly-replicas created" in out
    assert "schedule/quarter-hourly created" in out
    assert "check/prod-replicas created (2 runs queued)" in out

    nightly = schedules(cli_env).get("nightly-replicas")
    assert nightly.cron == "0 2 * * *" and nightly.timezone == "Europe/Berlin"
    assert nightly.budget.timeout_seconds == 300 and nightly.budget.max_tokens == 50000
    assert nightly.targets.snapshots == [str(ROOT / "examples/snapshots/*")]
    assert nightly.labels == {"team": "platform", SOURCE_LABEL: "team-a"}
    assert schedules(cli_env).get("quarter-hourly").interval_seconds == 900
    definition = checks(cli_env).get("prod-replicas")
    assert definition is not None and definition.spec.profile == "smoke"
    # the check was evaluated once per target, under check ids NAME.TARGET
    assert sorted(definition.check_ids.values()) == [
        "prod-replicas.snapshot-dev-ap",
        "prod-replicas.snapshot-prod-eu",
    ]
    verdicts = _verdict_store(cli_env)
    for target, run_id in definition.runs.items():
        state = verdicts.run_state(run_id)
        assert state is not None and state.status == "queued", target
        request = verdicts.run_request(run_id)
        assert request is not None and request.declared_by == "check/prod-replicas"
        assert request.profile == "smoke"

    before = snapshot_of_store(cli_env)
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--source", "team-a")
    assert code == 0
    assert out.splitlines()[-1] == "no changes: 3 objects unchanged"
    assert snapshot_of_store(cli_env) == before  # no revision bumped, no run queued


def _verdict_store(url: str) -> VerdictStore:
    from schemas.settings import load_settings

    return VerdictStore.from_settings(load_settings(redis_url=url), _client(url))


def test_get_yaml_round_trips_through_apply(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra = (
        "probe: only\n  jitter: 30s\n  misfire: run_once\n  paused: true\n  notify: [ops]\n"
        "  evaluation: query\n  budget: {maxIterations: 5, maxCostUsd: 0.5, timeout: 90.5}\n"
        "  ceilings: {tokensPerDay: 250000, costPerDayUsd: 2.5}"
    )
    spread = INTERVAL.replace("probe: only", extra)
    folder = write(tmp_path / "in", **{"all.yaml": "---\n".join([SCHEDULE, CHECK, spread])})
    assert run(capsys, "apply", "-f", str(folder), "--source", "rt")[0] == 0
    out_folder = ["--base", str(tmp_path / "out")]  # where the files will be kept
    code, exported_schedules, _ = run(capsys, "get", "schedules", "-o", "yaml", *out_folder)
    assert code == 0
    code, exported_checks, _ = run(capsys, "get", "checks", "-o", "yaml", *out_folder)
    assert code == 0
    assert "paused: true" in exported_schedules and "jitter: 30s" in exported_schedules
    assert "timeout: 90.5" in exported_schedules and "evaluation: query" in exported_schedules
    assert "tokensPerDay: 250000" in exported_schedules
    spend = schedules(cli_env).get("quarter-hourly").spend
    assert spend is not None and (spend.tokens, spend.cost_usd) == (250000, 2.5)
    before = snapshot_of_store(cli_env)
    exported = write(tmp_path / "out", **{"s.yaml": exported_schedules, "c.yaml": exported_checks})
    code, out, err = run(capsys, "apply", "-f", str(exported), "--source", "rt")
    assert code == 0, err
    assert out.splitlines()[-1] == "no changes: 3 objects unchanged"
    assert snapshot_of_store(cli_env) == before
    # and through standard input, as a pipe would give it: read from the folder the paths
    # were written relative to (standard input has no folder of its own, so the working one)
    monkeypatch.chdir(tmp_path / "out")
    monkeypatch.setattr("sys.stdin", _Stdin(exported_schedules + "---\n" + exported_checks))
    code, out, err = run(capsys, "apply", "-f", "-", "--source", "rt")
    assert code == 0 and out.splitlines()[-1] == "no changes: 3 objects unchanged", err
    assert snapshot_of_store(cli_env) == before


class _Stdin:
    def __init__(self, text: str) -> None:
        self.text = text

    def read(self) -> str:
        return self.text


def test_dry_run_prints_a_diff_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    folder = write(tmp_path / "c", **{"s.yaml": SCHEDULE})
    before = snapshot_of_store(cli_env)
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--dry-run", "--source", "d")
    assert code == 0
    assert "schedule/nightly-replicas created (dry run)" in out
    assert "+++ schedule/nightly-replicas (files)" in out and "+  cron: 0 2 * * *" in out
    assert "nothing applied" in out
    assert snapshot_of_store(cli_env) == before

    assert run(capsys, "apply", "-f", str(folder), "--source", "d")[0] == 0
    write(folder, **{"s.yaml": SCHEDULE.replace('"0 2 * * *"', '"30 3 * * *"')})
    applied = snapshot_of_store(cli_env)
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--dry-run", "--source", "d")
    assert code == 0
    assert "schedule/nightly-replicas configured (dry run)" in out
    assert "-  cron: 0 2 * * *\n+  cron: 30 3 * * *" in out
    assert snapshot_of_store(cli_env) == applied
    assert schedules(cli_env).get("nightly-replicas").cron == "0 2 * * *"


def test_a_changed_check_is_evaluated_again_and_a_changed_schedule_retimed(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    folder = write(tmp_path / "c", **{"x.yaml": CHECK + "---\n" + SCHEDULE})
    assert run(capsys, "apply", "-f", str(folder), "--source", "c")[0] == 0
    first = checks(cli_env).get("prod-replicas")
    assert first is not None
    revision = schedules(cli_env).get("nightly-replicas").revision
    changed = CHECK.replace("profile: smoke", "profile: fast\n  notify: [ops]")
    write(folder, **{"x.yaml": changed + "---\n" + SCHEDULE.replace("5m", "10m")})
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--source", "c")
    assert code == 0
    assert "check/prod-replicas configured (2 runs queued)" in out
    assert "schedule/nightly-replicas configured" in out
    second = checks(cli_env).get("prod-replicas")
    assert second is not None and second.revision == first.revision + 1
    assert set(second.runs.values()).isdisjoint(first.runs.values())
    request = _verdict_store(cli_env).run_request(next(iter(second.runs.values())))
    assert request is not None and request.notify == ["ops"] and request.profile == "fast"
    nightly = schedules(cli_env).get("nightly-replicas")
    assert nightly.budget.timeout_seconds == 600 and nightly.revision == revision + 1


def test_prune_deletes_only_what_this_source_created(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    ours = write(tmp_path / "ours", **{"a.yaml": SCHEDULE + "---\n" + CHECK})
    theirs = write(tmp_path / "theirs", **{"b.yaml": INTERVAL})
    assert run(capsys, "apply", "-f", str(ours), "--source", "ours")[0] == 0
    assert run(capsys, "apply", "-f", str(theirs), "--source", "theirs")[0] == 0
    code, _, err = run(
        capsys, "schedule", "add", "by-hand", PREDICATE, "--every", "1h", "--context", "prod-eu"
    )
    assert code == 0, err

    write(ours, **{"a.yaml": CHECK})  # the schedule left the files
    code, out, _ = run(capsys, "apply", "-f", str(ours), "--source", "ours")
    assert code == 0 and "pruned" not in out  # without --prune nothing is deleted
    assert schedules(cli_env).get("nightly-replicas")

    code, out, _ = run(capsys, "apply", "-f", str(ours), "--source", "ours", "--prune", "--dry-run")
    assert code == 0 and "schedule/nightly-replicas pruned (dry run)" in out
    assert schedules(cli_env).get("nightly-replicas")

    code, out, _ = run(capsys, "apply", "-f", str(ours), "--source", "ours", "--prune")
    assert code == 0
    assert "schedule/nightly-replicas pruned" in out
    assert "check/prod-replicas unchanged" in out
    names = {s.name for s in schedules(cli_env).all()}
    assert names == {"quarter-hourly", "by-hand"}  # another source's and the hand-made one
    assert checks(cli_env).get("prod-replicas") is not None

    write(ours, **{"a.yaml": "# everything moved elsewhere\n"})
    code, out, _ = run(capsys, "apply", "-f", str(ours), "--source", "ours", "--prune")
    assert code == 0 and "check/prod-replicas pruned" in out
    assert checks(cli_env).all() == []
    assert {s.name for s in schedules(cli_env).all()} == {"quarter-hourly", "by-hand"}


def test_an_apply_interrupted_before_its_runs_were_queued_queues_them_next_time(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C (or a broker failure) while a new or changed Check's runs are being queued:
    applying again must evaluate it, not find it stored and say 'unchanged' (its verdicts
    would stay those of what it said before, or none)."""
    import assay.submission

    queue = assay.submission.submit_requests

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    folder = write(tmp_path / "f", **{"c.yaml": CHECK})
    monkeypatch.setattr(assay.submission, "submit_requests", interrupted)
    code, _, _ = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 130
    monkeypatch.setattr(assay.submission, "submit_requests", queue)
    code, out, err = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 0, err
    assert "check/prod-replicas created (2 runs queued)" in out, out


def test_prune_refuses_an_empty_standard_input(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kustomize build | assay apply -f - --prune` where the command before the pipe failed:
    nothing came in, which is no declaration that every object of the source should go."""
    ours = write(tmp_path / "ours", **{"a.yaml": SCHEDULE + "---\n" + CHECK})
    assert run(capsys, "apply", "-f", str(ours), "--source", "ours")[0] == 0
    before = snapshot_of_store(cli_env)
    for empty in ("", "\n  \n"):
        monkeypatch.setattr("sys.stdin", _Stdin(empty))
        code, out, err = run(capsys, "apply", "-f", "-", "--source", "ours", "--prune")
        assert code == 64, (out, err)
        assert "standard input is empty" in err and "nothing applied" in err
        assert snapshot_of_store(cli_env) == before
    monkeypatch.setattr("sys.stdin", _Stdin("# everything moved elsewhere\n"))
    code, out, _ = run(capsys, "apply", "-f", "-", "--source", "ours", "--prune", "--dry-run")
    assert code == 0 and "check/prod-replicas pruned (dry run)" in out  # said, not silent


def test_prune_needs_a_source_named_on_the_command_line(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A source taken from the path is shared by whoever applies the same path (`-f -` is
    always 'stdin', `-f checks` from two repositories 'checks'): a prune under it deletes
    the other's objects. --prune is refused without --source; applying without is fine."""
    monkeypatch.setattr("sys.stdin", _Stdin(INTERVAL))  # team A, through a pipe
    assert run(capsys, "apply", "-f", "-")[0] == 0
    before = snapshot_of_store(cli_env)
    monkeypatch.setattr("sys.stdin", _Stdin(CHECK))  # team B, through another pipe
    code, out, err = run(capsys, "apply", "-f", "-", "--prune")
    assert code == 64, (out, err)
    assert "--prune needs --source" in err
    assert snapshot_of_store(cli_env) == before
    assert schedules(cli_env).get("quarter-hourly")


def test_a_hand_made_schedule_is_changed_by_apply_but_never_pruned(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    code, _, _ = run(
        capsys, "schedule", "add", "quarter-hourly", "x", "--every", "1h", "--context", "prod-eu"
    )
    assert code == 0
    folder = write(tmp_path / "f", **{"i.yaml": INTERVAL})
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--source", "f")
    assert code == 0 and "schedule/quarter-hourly configured" in out
    adopted = schedules(cli_env).get("quarter-hourly")
    assert adopted.interval_seconds == 900 and SOURCE_LABEL not in adopted.labels
    write(folder, **{"i.yaml": "# empty\n"})
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--source", "f", "--prune")
    assert code == 0 and "pruned" not in out
    assert schedules(cli_env).get("quarter-hourly")


GOOD = CHECK.replace("name: prod-replicas", "name: good-check")
BAD_FILES = [
    # (case, the bad document's text, the line reported, the field, words of the reason)
    ("yaml", "kind: Schedule\nspec: [unclosed\n", 3, "", "not valid YAML"),
    ("kind", INTERVAL.replace("kind: Schedule", "kind: CronJob"), 2, "kind", "Check or Schedule"),
    (
        "version",
        INTERVAL.replace("assay.dev/v1alpha1", "assay.dev/v2"),
        1,
        "apiVersion",
        "v1alpha1",
    ),
    (
        "field",
        INTERVAL.replace("every: 15m", "every: 15m\n  evry: 1h"),
        9,
        "spec.evry",
        "unknown field 'evry'",
    ),
    ("name", INTERVAL.replace("quarter-hourly", "quarter hourly"), 4, "metadata.name", "pattern"),
    ("cron", SCHEDULE.replace("0 2 * * *", "61 * * * *"), 10, "spec.cron", "invalid cron"),
    ("zone", SCHEDULE.replace("Europe/Berlin", "Mars/Base"), 11, "spec.timeZone", "unknown time"),
    (
        "cadence",
        INTERVAL.replace("every: 15m", 'every: 15m\n  cron: "@daily"'),
        5,
        "spec",
        "exactly one of cron or every",
    ),
    ("floor", INTERVAL.replace("15m", "10s"), 8, "spec.every", "under the minimum"),
    ("duration", INTERVAL.replace("15m", "soon"), 8, "spec.every", "cannot read duration"),
    (
        "targets",
        INTERVAL.replace("{contexts: [prod-eu]}", "{contexts: [a], snapshots: [b]}"),
        7,
        "spec.targets",
        "exactly one kind",
    ),
    (
        "outside",
        CHECK.replace(f"[{SNAPSHOTS}/prod-eu, {SNAPSHOTS}/dev-ap]", "[/etc]"),
        8,
        "spec.targets.snapshots[0]",
        "outside",
    ),
    (
        "no match",
        SCHEDULE.replace("examples/snapshots/*", "examples/snapshot/*"),
        9,
        "spec.targets.snapshots[0]",
        "matches no snapshot",
    ),
    (
        "typo",
        INTERVAL.replace("probe: only", "budget: {maxTokns: 5000}"),
        9,
        "spec.budget.maxTokns",
        "unknown field 'maxTokns'; did you mean 'maxTokens'? (this object takes: maxCostUsd, "
        "maxIterations, maxTokens, timeout)",
    ),
    (
        "probe",
        INTERVAL.replace("probe: only", "probe: sometimes"),
        9,
        "spec.probe",
        "'auto', 'off' or 'only'",
    ),
    (
        "policy name",
        CHECK.replace(f"predicate: {PREDICATE}", "policy: {name: never-imported}"),
        6,
        "spec.policy.name",
        "no imported policy is named 'never-imported'",
    ),
    (
        "policy file",
        CHECK.replace(f"predicate: {PREDICATE}", "policy: {file: no-such-policy.yaml}"),
        6,
        "spec.policy.file",
        "no-such-policy.yaml cannot be read (No such file or directory)",
    ),
    (
        "policy refused",
        CHECK.replace(f"predicate: {PREDICATE}", "policy: {file: 1-good.yaml}"),
        6,
        "spec.policy.file",
        "cannot be imported",
    ),
    (
        "both",
        CHECK.replace("profile: smoke", "policy: {name: x}"),
        5,
        "spec",
        "exactly one of predicate and policy",
    ),
    (
        "ceilings",
        INTERVAL.replace("probe: only", "ceilings: {tokensPerDay: 10}"),
        9,
        "spec.ceilings.tokensPerDay",
        "greater than or equal to 1000",
    ),
    (
        "no ceiling",
        INTERVAL.replace("probe: only", "ceilings: {}"),
        9,
        "spec.ceilings",
        "tokensPerDay, costPerDayUsd or both",
    ),
    (
        "sink",
        INTERVAL.replace("probe: only", "notify: [pagr]"),
        9,
        "spec.notify[0]",
        "no sink named 'pagr'",
    ),
    ("model", INTERVAL.replace("probe: only", "model: nonsense-model"), 9, "spec.model", "litellm"),
    (
        "label",
        INTERVAL.replace("name: quarter-hourly", "name: quarter-hourly\n  labels: {team: a b}"),
        5,
        "metadata.labels.team",
        "pattern",
    ),
    ("duplicate", GOOD, 4, "metadata.name", "also defined"),
]


@pytest.mark.parametrize(
    ("case", "bad", "line", "field", "reason"), BAD_FILES, ids=[c[0] for c in BAD_FILES]
)
def test_a_bad_file_is_refused_whole_with_file_line_and_field(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    bad: str,
    line: int,
    field: str,
    reason: str,
) -> None:
    monkeypatch.setenv(
        "ASSAY_NOTIFY_SINKS", json.dumps({"ops": {"type": "webhook", "url": "http://127.0.0.1:9/"}})
    )
    good = write(tmp_path / "files", **{"1-good.yaml": GOOD})
    bad_file = good / "2-bad.yaml"
    bad_file.write_text(bad)
    before = snapshot_of_store(cli_env)
    code, out, err = run(capsys, "apply", "-f", str(good), "--source", "s")
    assert code == 64, (out, err)
    first = err.splitlines()[0]
    where = f"{bad_file}:{line}: "
    assert first.startswith(f"assay: error: {where}{field + ': ' if field else ''}"), first
    assert reason in first, first
    assert "nothing applied" in err
    assert out == ""
    assert snapshot_of_store(cli_env) == before  # not even the good documents


def test_aliases_that_expand_without_bound_are_refused_whole(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    """A YAML alias bomb (10 KB that stands for 2,000,000 values) is a problem in its file,
    found before anything walks the expansion, and nothing is applied."""
    bomb = INTERVAL.replace(
        "metadata:\n",
        "metadata:\n  annotations:\n"
        f"    a: &a [{', '.join(['x'] * 1000)}]\n"
        f"    b: [{', '.join(['*a'] * 2000)}]\n",
    )
    folder = write(tmp_path / "f", **{"a.yaml": GOOD, "b.yaml": bomb})
    before = snapshot_of_store(cli_env)
    code, out, err = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 64, (out, err)
    assert f"{folder / 'b.yaml'}:1: not valid YAML (its aliases expand past 1,000,000 values" in err
    assert snapshot_of_store(cli_env) == before


def test_every_problem_of_every_file_is_listed(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    folder = write(
        tmp_path / "f",
        **{
            "a.yaml": INTERVAL.replace("15m", "soon"),
            "b.yaml": SCHEDULE.replace("Europe/Berlin", "Mars/Base"),
        },
    )
    code, _, err = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 64
    assert f"{folder / 'a.yaml'}:8: spec.every" in err
    assert f"{folder / 'b.yaml'}:11: spec.timeZone" in err
    assert "fix the 2 problems above" in err


def test_another_sources_object_is_refused(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    folder = write(tmp_path / "f", **{"a.yaml": INTERVAL})
    assert run(capsys, "apply", "-f", str(folder), "--source", "one")[0] == 0
    before = snapshot_of_store(cli_env)
    code, _, err = run(capsys, "apply", "-f", str(folder), "--source", "two")
    assert code == 64
    assert "created from source 'one'" in err and ":4: metadata.name:" in err
    assert snapshot_of_store(cli_env) == before


def test_source_and_paths_are_checked_before_anything(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    code, _, err = run(capsys, "apply", "-f", str(tmp_path / "missing.yaml"))
    assert code == 64 and "no such file or folder" in err
    code, _, err = run(capsys, "apply", "-f", str(tmp_path), "--source", "has/slash")
    assert code == 64 and "cannot be a label value" in err
    write(tmp_path / "a", **{"x.yaml": INTERVAL})
    write(tmp_path / "b", **{"y.yaml": CHECK})
    code, _, err = run(capsys, "apply", "-f", str(tmp_path / "a"), "-f", str(tmp_path / "b"))
    assert code == 64 and "--source" in err


def test_a_configmap_folder_is_read_once(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    # a ConfigMap volume: the files are links into a hidden ..data folder
    mount = tmp_path / "mount"
    data = write(mount / "..2026_01_01_00_00_00.000", **{"checks.yaml": INTERVAL})
    (mount / "..data").symlink_to(data.name)
    (mount / "checks.yaml").symlink_to("..data/checks.yaml")
    code, out, err = run(capsys, "apply", "-f", str(mount), "--source", "cm")
    assert code == 0, err
    assert out.splitlines()[0] == "schedule/quarter-hourly created"


def test_the_documents_schema_is_what_the_files_are_checked_against() -> None:
    import jsonschema
    import yaml

    schema = json.loads((ROOT / "schemas/json/apply_document.schema.json").read_text())
    for text in (SCHEDULE, CHECK, INTERVAL):
        jsonschema.validate(yaml.safe_load(text), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load(INTERVAL.replace("every", "evry")), schema)


# --- imported admission policies as checks ------------------------------------------------------

POLICY_SCHEDULE = """\
apiVersion: assay.dev/v1alpha1
kind: Schedule
metadata:
  name: non-root
spec:
  policy: {file: policies/run-as-non-root.yaml}
  targets: {contexts: [prod-eu]}
  every: 1h
"""
POLICY_SET_CHECK = f"""\
apiVersion: assay.dev/v1alpha1
kind: Check
metadata:
  name: baseline
spec:
  policy: {{file: policies/baseline.yaml, set: baseline}}
  targets: {{snapshots: [{SNAPSHOTS}/prod-eu]}}
"""


def test_a_policy_file_is_imported_and_its_check_round_trips(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    from workers.fleet.policy_store import PolicyStore

    policies = ROOT / "examples" / "policies"
    folder = write(tmp_path / "repo", **{"s.yaml": POLICY_SCHEDULE, "c.yaml": POLICY_SET_CHECK})
    write(
        folder / "policies",
        **{
            "run-as-non-root.yaml": (policies / "kyverno-run-as-non-root.yaml").read_text(),
            "baseline.yaml": (policies / "vap-trusted-registries.yaml").read_text()
            + "\n---\n"
            + (policies / "gatekeeper-required-labels.yaml").read_text(),
        },
    )
    code, out, err = run(capsys, "apply", "-f", str(folder), "--source", "pol")
    assert code == 0, err
    assert "schedule/non-root created" in out and "check/baseline created (1 run queued)" in out
    store = PolicyStore(_client(cli_env), prefix="assay")
    assert store.get("run-as-non-root") is not None
    assert store.set_members("baseline") == ["prod-workloads-labelled", "trusted-registries"]
    assert schedules(cli_env).get("non-root").predicate == "policy:run-as-non-root"
    definition = checks(cli_env).get("baseline")
    assert definition is not None
    request = _verdict_store(cli_env).run_request(next(iter(definition.runs.values())))
    assert request is not None and request.text == "policy-set:baseline"

    before = snapshot_of_store(cli_env)
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--source", "pol")
    assert code == 0 and out.splitlines()[-1] == "no changes: 2 objects unchanged"
    assert snapshot_of_store(cli_env) == before  # not even a re-import

    code, exported, _ = run(capsys, "get", "schedules", "-o", "yaml")
    assert "policy:\n    name: run-as-non-root" in exported and "predicate" not in exported
    code, exported_checks, _ = run(
        capsys, "get", "checks", "-o", "yaml", "--base", str(tmp_path / "back")
    )
    assert "policy:\n    set: baseline" in exported_checks
    back = write(tmp_path / "back", **{"s.yaml": exported, "c.yaml": exported_checks})
    code, out, _ = run(capsys, "apply", "-f", str(back), "--source", "pol")
    assert code == 0 and out.splitlines()[-1] == "no changes: 2 objects unchanged"
    assert snapshot_of_store(cli_env) == before

    # the policy changes in git, the schedule document does not: apply re-imports it
    text = (folder / "policies" / "run-as-non-root.yaml").read_text()
    edited = text.replace("'runs as root (runAsUser 0): '", "'root: '", 1)
    assert edited != text
    (folder / "policies" / "run-as-non-root.yaml").write_text(edited)
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--source", "pol", "--dry-run")
    assert code == 0 and "schedule/non-root configured (dry run)" in out
    assert "# policy run-as-non-root: imported from the files" in out


# --- the same over HTTP --------------------------------------------------------------------------


API_TOKEN = "apply-test-token-0123456789"


def _api(redis_url: str, snapshot_root: Path) -> Any:
    """A client of the API over ``redis_url`` (a fleet model set, snapshot roots
    ``snapshot_root``) sending the write token; logs to this test's stderr."""
    from fastapi.testclient import TestClient

    from assay.api import create_app
    from schemas.settings import load_settings
    from workers.engine.logs import configure_logging

    settings = load_settings(
        redis_url=redis_url,
        api_tokens={API_TOKEN: "write"},
        model="openai/gpt-4o-mini",
        snapshot_roots=[str(snapshot_root)],
    )
    configure_logging(settings)  # not an earlier test's stderr
    return TestClient(create_app(settings), headers={"Authorization": f"Bearer {API_TOKEN}"})


def test_the_api_applies_refuses_and_reads_back_like_the_cli(redis_url: str) -> None:
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    schedule = yaml_document(SCHEDULE)
    with _api(redis_url, ROOT) as api:
        late = yaml_document(INTERVAL.replace("15m", "soon"))
        bad = api.post(
            "/v1/apply", json={"source": "api", "documents": [schedule, late]}, headers=headers
        )
        assert bad.status_code == 422, bad.text
        body = bad.json()["error"]
        assert body["code"] == "invalid_documents"
        assert body["details"] == [
            {"file": "documents[1]", "line": 0, "field": "spec.every",
             "msg": body["details"][0]["msg"]}
        ]  # fmt: skip
        assert api.get("/v1/documents/schedules", headers=headers).json() == {"documents": []}

        dry = api.post(
            "/v1/apply",
            json={"source": "api", "documents": [schedule], "dry_run": True},
            headers=headers,
        ).json()
        assert dry["changes"][0]["action"] == "created" and dry["changes"][0]["diff"]
        assert api.get("/v1/documents/schedules", headers=headers).json() == {"documents": []}

        done = api.post(
            "/v1/apply", json={"source": "api", "documents": [schedule]}, headers=headers
        ).json()
        assert done["changed"] is True
        documents = api.get("/v1/documents/schedules", headers=headers).json()["documents"]
        assert [d["metadata"]["name"] for d in documents] == ["nightly-replicas"]
        again = api.post(
            "/v1/apply", json={"source": "api", "documents": documents}, headers=headers
        ).json()
        assert again["changed"] is False and again["summary"] == "no changes: 1 object unchanged"

        kubeconfig = yaml_document(
            INTERVAL.replace("{contexts: [prod-eu]}", "{contexts: [a], kubeconfig: /x}")
        )
        refused = api.post(
            "/v1/apply", json={"source": "api", "documents": [kubeconfig]}, headers=headers
        )
        assert refused.status_code == 422
        error = refused.json()["error"]
        assert error["code"] == "invalid_documents"
        assert error["details"][0]["field"] == "spec.targets.kubeconfig"
        assert "cannot be chosen over HTTP" in error["details"][0]["msg"]


def _api_with_a_stored_schedule(redis_url: str) -> Any:
    """The API over ``redis_url``, its snapshot root examples/snapshots, holding
    ``nightly-replicas`` applied from source ``team-a``."""
    api = _api(redis_url, SNAPSHOTS)
    stored = api.post(
        "/v1/apply", json={"source": "team-a", "documents": [yaml_document(SCHEDULE)]}
    )
    assert stored.status_code == 200, stored.text
    return api


def _named(document: dict[str, Any], name: str, **spec: object) -> dict[str, Any]:
    return {
        **document,
        "metadata": {"name": name},
        "spec": {**document["spec"], **spec},
    }


def test_what_only_the_server_can_judge_is_a_404_with_every_problem_and_nothing_applied(
    redis_url: str,
) -> None:
    """Before: a policy not stored or a snapshot folder outside the roots was a 422, as if
    the document broke a rule the published schema states."""
    with _api_with_a_stored_schedule(redis_url) as api:
        before = api.get("/v1/documents/schedules").json()
        interval = yaml_document(INTERVAL)
        no_policy = _named(interval, "no-policy", policy={"name": "absent"})
        del no_policy["spec"]["predicate"]
        documents = [
            _named(interval, "fine"),
            _named(interval, "outside", targets={"snapshots": ["/elsewhere/snaps"]}),
            no_policy,
        ]
        answer = api.post("/v1/apply", json={"source": "team-b", "documents": documents})
        assert answer.status_code == 404, answer.text
        error = answer.json()["error"]
        assert error["code"] == "named_not_found"
        assert [(d["file"], d["field"], d["code"]) for d in error["details"]] == [
            ("documents[1]", "spec.targets.snapshots[0]", "snapshot_outside_roots"),
            ("documents[2]", "spec.policy.name", "policy_not_found"),
        ]
        assert api.get("/v1/documents/schedules").json() == before


def test_a_conflict_is_a_409_with_every_problem_the_404s_too_and_nothing_applied(
    redis_url: str,
) -> None:
    """Two documents of one name, an object of another source; beside a folder outside the
    roots (a 404 alone): the answer is the conflict's, every problem in details."""
    with _api_with_a_stored_schedule(redis_url) as api:
        before = api.get("/v1/documents/schedules").json()
        interval = yaml_document(INTERVAL)
        documents = [
            _named(interval, "twice"),
            _named(interval, "twice"),
            yaml_document(SCHEDULE),  # team-a's
            _named(interval, "outside", targets={"snapshots": ["/elsewhere/snaps"]}),
        ]
        answer = api.post("/v1/apply", json={"source": "team-b", "documents": documents})
        assert answer.status_code == 409, answer.text
        error = answer.json()["error"]
        assert error["code"] == "documents_conflict"
        assert [(d["file"], d["code"]) for d in error["details"]] == [
            ("documents[1]", "duplicate_document"),
            ("documents[2]", "owned_by_other_source"),
            ("documents[3]", "snapshot_outside_roots"),
        ]
        assert "also defined at documents[0]" in error["details"][0]["msg"]
        assert api.get("/v1/documents/schedules").json() == before
        twice = api.post("/v1/apply", json={"source": "team-b", "documents": documents[:2]})
        assert twice.status_code == 409, twice.text  # planned, and still nothing applied
        assert [d["code"] for d in twice.json()["error"]["details"]] == ["duplicate_document"]
        assert api.get("/v1/documents/schedules").json() == before
        once = api.post("/v1/apply", json={"source": "team-b", "documents": documents[:1]})
        assert once.status_code == 200, once.text


def test_a_document_breaking_its_rules_is_still_a_422_beside_a_conflict(redis_url: str) -> None:
    with _api_with_a_stored_schedule(redis_url) as api:
        before = api.get("/v1/documents/schedules").json()
        interval = yaml_document(INTERVAL)
        documents = [
            _named(interval, "twice"),
            _named(interval, "twice"),  # a conflict
            _named(interval, "too-often", every="10s"),
        ]
        answer = api.post("/v1/apply", json={"source": "team-b", "documents": documents})
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["code"] == "invalid_documents"
        assert error["message"].startswith("documents[2]: spec.every: must be a duration from 1m")
        assert [(d["field"], d.get("code")) for d in error["details"]] == [
            ("spec.every", None),
            ("metadata.name", "duplicate_document"),
        ]
        assert api.get("/v1/documents/schedules").json() == before


# --- checks as code without traps (issue 40) ------------------------------------------------------

POLICIES = ROOT / "examples" / "policies"


def _import_policy(capsys: pytest.CaptureFixture[str], *flags: str) -> None:
    code, _, err = run(
        capsys, "probe", "import", str(POLICIES / "kyverno-run-as-non-root.yaml"), *flags
    )
    assert code == 0, err


def test_get_lists_checks_and_schedules_that_run_an_imported_policy(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The README's steps: import a set, schedule it, `get`. The table read the predicate
    of every document, and a policy's has none: a traceback, exit 70."""
    monkeypatch.setenv("COLUMNS", "200")  # room for every column, uncut
    _import_policy(capsys, "--set", "baseline")
    by_policy = INTERVAL.replace(
        "predicate: no pod in namespace prod runs as root", "policy: {set: baseline}"
    )
    check = CHECK.replace(f"predicate: {PREDICATE}", "policy: {set: baseline}")
    folder = write(tmp_path / "f", **{"s.yaml": by_policy, "c.yaml": check})
    assert run(capsys, "apply", "-f", str(folder), "--source", "s")[0] == 0
    code, out, err = run(capsys, "get", "schedules")
    assert code == 0, err
    assert "policy-set:baseline" in out
    code, out, err = run(capsys, "get", "checks")
    assert code == 0, err
    assert "policy-set:baseline" in out


def test_an_object_naming_no_profile_runs_strict_as_every_unattended_run(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`schedule add`, the API and batches run strict when no profile is named (the
    gitops CronJob goes through apply); apply stored `fast`, the one-off default."""
    folder = write(
        tmp_path / "f", **{"s.yaml": INTERVAL, "c.yaml": CHECK.replace("  profile: smoke\n", "")}
    )
    assert run(capsys, "apply", "-f", str(folder), "--source", "s")[0] == 0
    assert schedules(cli_env).get("quarter-hourly").profile == "strict"
    definition = checks(cli_env).get("prod-replicas")
    assert definition is not None and definition.spec.profile == "strict"
    request = _verdict_store(cli_env).run_request(next(iter(definition.runs.values())))
    assert request is not None and request.profile == "strict"
    code, _, _ = run(capsys, "schedule", "add", "by-hand", "x", "--every", "1h", "--context", "a")
    assert code == 0 and schedules(cli_env).get("by-hand").profile == "strict"  # the same rule
    monkeypatch.setenv("ASSAY_PROFILE", "smoke")  # the operator's choice wins, at both doors
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 0 and "schedule/quarter-hourly configured" in out
    assert schedules(cli_env).get("quarter-hourly").profile == "smoke"


def test_apply_refuses_what_no_live_worker_could_evaluate(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """submit, batch and `schedule add` refuse (64) when live workers run without a model
    and none is named; apply stored the object and every run ended cannot_determine."""
    from assay.worker_presence import presence_key

    announced = {"model": "", "api_base": "", "ready": True}
    _client(cli_env).set(presence_key("assay", "host:1"), json.dumps(announced), ex=30)
    folder = write(tmp_path / "f", **{"s.yaml": INTERVAL})
    before = snapshot_of_store(cli_env)
    code, out, err = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 64, (out, err)
    assert f"{folder / 's.yaml'}:5: spec.model: no model is configured for the fleet" in err
    assert snapshot_of_store(cli_env) == before
    code, _, err = run(capsys, "schedule", "add", "x", "y", "--every", "1h", "--context", "a")
    assert code == 64 and "no model is configured for the fleet" in err  # the same refusal
    # a document naming its model, or running an imported policy, needs no worker's model
    named = INTERVAL.replace("probe: only", "model: openai/gpt-4o-mini")
    _import_policy(capsys)
    by_policy = CHECK.replace(f"predicate: {PREDICATE}", "policy: {name: run-as-non-root}")
    write(folder, **{"s.yaml": named, "c.yaml": by_policy})
    code, out, err = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 0, err


def test_two_checks_keeping_verdicts_under_one_check_id_are_refused(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    """`web` on two targets keeps its verdicts under web.snapshot-prod-eu and
    web.snapshot-dev-ap; a check named web.snapshot-prod-eu keeps its own under the same
    id, and each run overwrote the other's history."""
    web = CHECK.replace("name: prod-replicas", "name: web")
    single = CHECK.replace("name: prod-replicas", "name: web.snapshot-prod-eu").replace(
        f", {SNAPSHOTS}/dev-ap", ""
    )
    folder = write(tmp_path / "f", **{"a.yaml": web, "b.yaml": single})
    before = snapshot_of_store(cli_env)
    code, out, err = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 64, (out, err)
    assert (
        f"{folder / 'b.yaml'}:4: metadata.name: its verdicts on snapshot:prod-eu would be kept "
        "under check id 'web.snapshot-prod-eu', which check 'web' at "
        f"{folder / 'a.yaml'}:1 (on snapshot:prod-eu) uses too"
    ) in err
    assert snapshot_of_store(cli_env) == before
    # across applies too: the stored check keeps its id, the newcomer is refused
    write(folder, **{"b.yaml": "# later\n"})
    assert run(capsys, "apply", "-f", str(folder), "--source", "s")[0] == 0
    other = write(tmp_path / "g", **{"b.yaml": single})
    before = snapshot_of_store(cli_env)
    code, _, err = run(capsys, "apply", "-f", str(other), "--source", "t")
    assert code == 64 and "which the stored check 'web' (on snapshot:prod-eu) uses too" in err
    assert snapshot_of_store(cli_env) == before


def test_a_key_given_twice_is_refused_and_get_output_joins_safely(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    """Two `get -o yaml` files joined without a '---' between made the last document of
    one and the first of the next one mapping (its later keys won): one object vanished,
    and --prune deleted it. Keys given twice are refused, as kubectl refuses them, and
    every document `get` writes opens with '---'."""
    twice = INTERVAL.replace("every: 15m", "every: 15m\n  every: 1h")
    folder = write(tmp_path / "f", **{"a.yaml": twice})
    code, _, err = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 64
    assert (
        f"{folder / 'a.yaml'}:9: not valid YAML (the key 'every' is given twice in one mapping "
        "(first on line 8)"
    ) in err

    both = write(tmp_path / "g", **{"a.yaml": INTERVAL, "b.yaml": SCHEDULE})
    assert run(capsys, "apply", "-f", str(both), "--source", "s")[0] == 0
    kept_in = ["-o", "yaml", "--base", str(tmp_path / "joined")]
    _, first, _ = run(capsys, "get", "schedules", "quarter-hourly", *kept_in)
    _, second, _ = run(capsys, "get", "schedules", "nightly-replicas", *kept_in)
    assert first.startswith("---\n") and second.startswith("---\n")
    joined = write(tmp_path / "joined", **{"all.yaml": first + second})
    code, out, err = run(capsys, "apply", "-f", str(joined), "--source", "s", "--prune")
    assert code == 0, err
    assert out.splitlines()[-1] == "no changes: 2 objects unchanged"
    assert {s.name for s in schedules(cli_env).all()} == {"quarter-hourly", "nightly-replicas"}


DEEP = "[" * 3000 + "]" * 3000


def test_yaml_nested_past_the_limit_is_refused_as_a_problem_not_a_traceback(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    """3,000 levels (6 KB) exhausted Python's stack while composing: exit 70."""
    folder = write(tmp_path / "f", **{"a.yaml": INTERVAL + f"  notify: {DEEP}\n"})
    code, _, err = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 64, err
    assert (
        f"{folder / 'a.yaml'}:10: not valid YAML (nested deeper than 100 levels of mappings "
        "and lists)"
    ) in err
    policy = tmp_path / "deep.yaml"
    policy.write_text(f"apiVersion: v1\nkind: List\nitems: {DEEP}\n")
    code, _, err = run(capsys, "probe", "import", str(policy))
    assert code == 64, err
    assert f"{policy} is not YAML or JSON: line 3: nested deeper than 100 levels" in err


def _policy_check(file: str) -> str:
    return CHECK.replace(f"predicate: {PREDICATE}", f"policy: {{file: '{file}'}}")


def test_a_policy_file_is_a_regular_file_inside_the_documents_folder(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    """/dev/zero was read until memory ran out, a FIFO blocked for ever, and absolute,
    '../' and symlinked paths were read (a parse error then quoted their first line),
    though policy.file is documented as relative to the document's file."""
    import os

    secret = tmp_path / "secret.yaml"
    secret.write_text("password: hunter2-is-my-password: nested\n")
    folder = write(tmp_path / "repo" / "checks", **{"ok.yaml": GOOD})
    os.mkfifo(folder / "fifo.yaml")
    (folder / "link.yaml").symlink_to(secret)
    cases = {
        "/dev/zero": "'/dev/zero' is an absolute path; name the policy file relative to this "
        "document's folder",
        str(secret): "is an absolute path",
        "../../secret.yaml": "'../../secret.yaml' leads out of this document's folder",
        "link.yaml": f"{folder / 'link.yaml'} lies outside {folder} (through a symlink or '..')",
        "fifo.yaml": f"{folder / 'fifo.yaml'} is not a regular file",
    }
    for file, reason in cases.items():
        write(folder, **{"bad.yaml": _policy_check(file)})
        before = snapshot_of_store(cli_env)
        code, out, err = run(capsys, "apply", "-f", str(folder / "bad.yaml"), "--source", "s")
        assert code == 64, (file, out, err)
        assert f"{folder / 'bad.yaml'}:6: spec.policy.file: " in err and reason in err, err
        assert "hunter2" not in err
        assert snapshot_of_store(cli_env) == before
    # a parse error says where, never what the line holds
    (folder / "broken.yaml").write_text("spec: {token: 'hunter2', [unclosed\n")
    write(folder, **{"bad.yaml": _policy_check("broken.yaml")})
    code, _, err = run(capsys, "apply", "-f", str(folder / "bad.yaml"), "--source", "s")
    assert code == 64 and "broken.yaml is not YAML or JSON: line 2: expected" in err
    assert "hunter2" not in err and "unclosed" not in err


def test_a_predicate_naming_a_policy_that_is_not_imported_is_refused(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    """`predicate: policy:NAME` skipped the check `policy: {name: NAME}` gets: applied with
    exit 0, and every fire then ended cannot_determine (`schedule add` exits 66)."""
    folder = write(
        tmp_path / "f",
        **{"a.yaml": INTERVAL.replace("no pod in namespace prod runs as root", "policy:nowhere")},
    )
    before = snapshot_of_store(cli_env)
    code, _, err = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 64
    assert f"{folder / 'a.yaml'}:6: spec.predicate: no imported policy is named 'nowhere'" in err
    assert snapshot_of_store(cli_env) == before
    set_named = INTERVAL.replace("no pod in namespace prod runs as root", "policy-set:none")
    write(folder, **{"a.yaml": set_named})
    code, _, err = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 64 and "spec.predicate: there is no policy set 'none'" in err


def test_a_dry_run_with_a_policy_file_writes_nothing(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    folder = write(tmp_path / "repo", **{"s.yaml": POLICY_SCHEDULE, "c.yaml": POLICY_SET_CHECK})
    write(
        folder / "policies",
        **{
            "run-as-non-root.yaml": (POLICIES / "kyverno-run-as-non-root.yaml").read_text(),
            "baseline.yaml": (POLICIES / "vap-trusted-registries.yaml").read_text(),
        },
    )
    before = snapshot_of_store(cli_env)
    code, out, err = run(capsys, "apply", "-f", str(folder), "--source", "p", "--dry-run")
    assert code == 0, err
    assert (
        "schedule/non-root created (dry run)" in out and "check/baseline created (dry run)" in out
    )
    assert "# policy run-as-non-root: imported from the files (new or changed)" in out
    assert snapshot_of_store(cli_env) == before  # no policy, no set, no object, no run


def test_a_time_zone_change_alone_configures_and_retimes_the_schedule(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    folder = write(tmp_path / "f", **{"s.yaml": SCHEDULE})
    assert run(capsys, "apply", "-f", str(folder), "--source", "s")[0] == 0
    store = schedules(cli_env)
    first = store.get("nightly-replicas")
    before = store.next_fire_at(first)
    write(folder, **{"s.yaml": SCHEDULE.replace("Europe/Berlin", "America/New_York")})
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--dry-run", "--source", "s")
    assert code == 0 and "-  timeZone: Europe/Berlin\n+  timeZone: America/New_York" in out
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--source", "s")
    assert code == 0 and "schedule/nightly-replicas configured" in out
    changed = store.get("nightly-replicas")
    assert changed.timezone == "America/New_York" and changed.revision == first.revision + 1
    after = store.next_fire_at(changed)
    assert before is not None and after is not None and after > datetime.now(UTC)
    assert before.astimezone(UTC).hour in (0, 1)  # 02:00 in Berlin
    assert after.astimezone(UTC).hour in (6, 7)  # re-timed: 02:00 in New York


def test_get_writes_paths_relative_to_the_folder_the_file_is_kept_in(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A repository with its checks and snapshots side by side: paths are read from the
    document's folder, and `get -o yaml --base checks` writes them back that way, so the
    file holds no machine's folders and applies unchanged from any working directory."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(SNAPSHOTS, repo / "snapshots")
    relative = SCHEDULE.replace(f"{SNAPSHOTS}/*", "../snapshots/*")
    write(repo / "checks", **{"s.yaml": relative})
    monkeypatch.chdir(repo)  # the snapshot roots: the working directory
    assert run(capsys, "apply", "-f", "checks", "--source", "repo")[0] == 0
    stored = schedules(cli_env).get("nightly-replicas")
    assert stored.targets.snapshots == [str(repo.resolve() / "snapshots" / "*")]
    code, exported, _ = run(capsys, "get", "schedules", "-o", "yaml", "--base", "checks")
    assert code == 0 and "snapshots:\n    - ../snapshots/*\n" in exported
    assert str(tmp_path) not in exported
    code, from_here, _ = run(capsys, "get", "schedules", "-o", "yaml")  # base: the working dir
    assert "snapshots:\n    - snapshots/*\n" in from_here
    write(repo / "checks", **{"s.yaml": exported})
    before = snapshot_of_store(cli_env)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASSAY_SNAPSHOT_ROOTS", json.dumps([str(repo)]))
    code, out, err = run(capsys, "apply", "-f", str(repo / "checks"), "--source", "repo")
    assert code == 0 and out.splitlines()[-1] == "no changes: 1 object unchanged", err
    assert snapshot_of_store(cli_env) == before


def test_the_example_checks_apply_as_they_are(
    capsys: pytest.CaptureFixture[str], cli_env: str
) -> None:
    """The README's `assay apply -f examples/checks/`, from the repository's root."""
    code, out, err = run(capsys, "apply", "-f", "examples/checks/", "--source", "examples")
    assert code == 0, err
    assert "check/prod-replicas created (3 runs queued)" in out
    assert "schedule/nightly-replicas created" in out
    nightly = schedules(cli_env).get("nightly-replicas")
    assert nightly.targets.snapshots == [str(SNAPSHOTS / "*")] and nightly.profile == "strict"
    code, out, _ = run(capsys, "apply", "-f", "examples/checks/", "--source", "examples")
    assert code == 0 and out.splitlines()[-1] == "no changes: 2 objects unchanged"


def test_apply_json_answers_what_the_api_answers(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    from assay.api_models import ApplyOutcome

    folder = write(tmp_path / "f", **{"s.yaml": INTERVAL})
    code, out, _ = run(capsys, "apply", "-f", str(folder), "--source", "s", "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["summary"] == "1 created"
    assert ApplyOutcome.model_validate(answer).model_dump() == answer  # the API's shape, whole


def test_the_api_refuses_nesting_past_the_limit_with_a_422(redis_url: str) -> None:
    """The same text sent over HTTP ended in a 500 with the connection dropped."""
    from fastapi.testclient import TestClient

    from assay.api import create_app
    from schemas.settings import load_settings

    token = "apply-test-token-0123456789"
    settings = load_settings(redis_url=redis_url, api_tokens={token: "write"})
    headers = {"Authorization": f"Bearer {token}"}
    deep_json: object = []
    for _ in range(150):  # JSON parses it; the limit is the documents' own
        deep_json = [deep_json]
    document = json.loads(json.dumps(yaml_document(INTERVAL)))
    document["spec"]["notify"] = deep_json
    with TestClient(create_app(settings)) as api:
        body = {"source": "api", "documents": [document]}
        answer = api.post("/v1/apply", json=body, headers=headers)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["code"] == "invalid_documents"
        assert error["details"][0]["file"] == "documents[0]"
        assert "nested deeper than 100 levels" in error["details"][0]["msg"]
        answer = api.post("/v1/policies", json={"documents": f"items: {DEEP}"}, headers=headers)
        assert answer.status_code == 200 and answer.json()["imported"] == [], answer.text
        assert "nested deeper than 100 levels" in answer.json()["refused"][0]["reason"]
        assert api.get("/v1/documents/schedules", headers=headers).json() == {"documents": []}


def yaml_document(text: str) -> dict[str, object]:
    import yaml

    loaded: dict[str, object] = yaml.safe_load(text)
    return loaded


TITLE_SET = "\x1b]0;pwned\x07"  # OSC 0: sets the terminal's title
RIGHT_TO_LEFT = "\u202e"  # shows what follows it backwards


def test_text_of_a_file_is_shown_as_text_and_still_round_trips(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    """A predicate holding an escape sequence and a bidirectional override: printed by
    `apply --dry-run` (its diff), `get` (the table) and `get -o yaml` without either, and
    the YAML still applies back as the same object."""
    hostile = CHECK.replace(
        f"predicate: {PREDICATE}", f'predicate: "\\e]0;pwned\\a {PREDICATE} \\u202E reversed"'
    )
    # a plain scalar in YAML (no escape in it): spelled out as it stands, it would change
    plain = CHECK.replace("name: prod-replicas", "name: plain").replace(
        f"predicate: {PREDICATE}", f"predicate: {PREDICATE} {RIGHT_TO_LEFT} reversed"
    )
    folder = write(tmp_path / "c", **{"c.yaml": hostile + "---\n" + plain})
    code, out, err = run(capsys, "apply", "-f", str(folder), "--source", "h", "--dry-run")
    assert code == 0, err
    for shown in (out, err):
        assert TITLE_SET[0] not in shown and RIGHT_TO_LEFT not in shown
    assert f'+  predicate: "\\e]0;pwned\\a {PREDICATE} \\u202E reversed"' in out.splitlines()
    assert run(capsys, "apply", "-f", str(folder), "--source", "h")[0] == 0
    stored = checks(cli_env).get("prod-replicas")
    assert stored is not None and stored.spec.predicate.startswith(TITLE_SET)
    stored = checks(cli_env).get("plain")
    assert stored is not None and stored.spec.predicate.endswith(f"{RIGHT_TO_LEFT} reversed")

    code, out, _ = run(capsys, "get", "checks", "--wide")
    assert code == 0
    assert TITLE_SET[0] not in out and RIGHT_TO_LEFT not in out
    assert f"\\x1b]0;pwned\\x07 {PREDICATE} \\u202e reversed" in out
    code, exported, _ = run(capsys, "get", "checks", "-o", "yaml", "--base", str(tmp_path / "o"))
    assert code == 0
    assert TITLE_SET[0] not in exported and RIGHT_TO_LEFT not in exported
    before = snapshot_of_store(cli_env)
    write(tmp_path / "o", **{"c.yaml": exported})
    code, out, err = run(capsys, "apply", "-f", str(tmp_path / "o"), "--source", "h")
    assert code == 0 and out.splitlines()[-1] == "no changes: 2 objects unchanged", (out, err)
    assert snapshot_of_store(cli_env) == before


def test_a_hostile_key_is_refused_on_one_line_of_text(
    capsys: pytest.CaptureFixture[str], cli_env: str, tmp_path: Path
) -> None:
    key = '"boom\\e]0;pwned\\a\\nassay: error: nothing wrong here"'
    folder = write(tmp_path / "c", **{"c.yaml": CHECK + f"  {key}: 1\n"})
    code, out, err = run(capsys, "apply", "-f", str(folder), "--source", "h")
    assert code == 64 and out == ""
    assert TITLE_SET[0] not in err and TITLE_SET[-1] not in err
    problem, summary = err.splitlines()
    assert "spec.boom\\x1b]0;pwned\\x07\\nassay: error: nothing wrong here" in problem
    assert summary.startswith("assay: error: nothing applied")
