"""`assay schedule ...` and the --at/--in parsing, on a real redis-server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import redis as redis_lib

from scheduler.schedules import ScheduleStore
from scheduler.when import (
    WhenError,
    deferral_for,
    explicit_instant,
    parse_duration,
    resolve_not_before,
)
from tests.cli_support import run_cli as run

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def cli_env(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    return redis_url


def schedules(redis_url: str) -> ScheduleStore:
    return ScheduleStore(redis_lib.Redis.from_url(redis_url, decode_responses=True), "assay", 60)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cron", "61 * * * *", "--context", "a"], "invalid cron expression"),
        (["--cron", "0 * * * *", "--tz", "Mars/Base", "--context", "a"], "unknown time zone"),
        (["--every", "10s", "--context", "a"], "under the minimum of 1m"),
        (["--every", "soon", "--context", "a"], "cannot read duration"),
        (["--every", "1h"], "exactly one of --context, --contexts or --snapshots"),
        (["--every", "1h", "--cron", "0 * * * *", "--context", "a"], "exactly one of --cron"),
        (["--context", "a"], "exactly one of --cron"),
        (["--every", "1h", "--tz", "UTC", "--context", "a"], "--tz applies to --cron only"),
        (["--every", "1h", "--context", "a", "--misfire", "later"], "skip or run_once"),
        (["--every", "1h", "--context", "a", "--jitter", "2 hours"], "cannot read duration"),
    ],
)
def test_bad_schedules_exit_64_and_create_nothing(
    capsys: pytest.CaptureFixture[str], cli_env: str, argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, "schedule", "add", "nightly", "pods are ready", *argv)
    assert code == 64
    assert message in err
    assert err.count("\n") == 1  # one sentence
    assert schedules(cli_env).all() == []


def test_schedule_lifecycle(capsys: pytest.CaptureFixture[str], cli_env: str) -> None:
    code, out, _ = run(
        capsys,
        "schedule",
        "add",
        "nightly",
        "no pod in prod runs as root",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Paris",
        "--contexts",
        "prod-*",
        "--misfire",
        "run_once",
        "--jitter",
        "30s",
        "--profile",
        "strict",
    )
    assert code == 0 and "added schedule nightly" in out and "(Europe/Paris)" in out
    stored = schedules(cli_env).get("nightly")
    assert stored.targets.context_glob == "prod-*"
    assert (stored.misfire, stored.jitter_seconds, stored.profile) == ("run_once", 30, "strict")

    code, out, _ = run(capsys, "schedule", "add", "nightly", "x", "--every", "1h", "--context", "a")
    assert code == 64

    code, out, _ = run(capsys, "schedule", "list", "--json")
    [listed] = json.loads(out)
    assert listed["name"] == "nightly" and listed["next_fire_at"] is not None
    next_fire = datetime.fromisoformat(listed["next_fire_at"])
    assert next_fire.astimezone(ZoneInfo("Europe/Paris")).hour == 2

    assert run(capsys, "schedule", "pause", "nightly")[0] == 0
    code, out, _ = run(capsys, "schedule", "show", stored.id, "--json")
    assert json.loads(out)["enabled"] is False and json.loads(out)["next_fire_at"] is None
    assert run(capsys, "schedule", "resume", "nightly")[0] == 0
    code, out, _ = run(capsys, "schedule", "show", "nightly")
    assert "state:       active" in out and "prod-*" in out

    code, out, _ = run(capsys, "schedule", "update", "nightly", "--every", "2h")
    assert code == 0 and "every 2h" in out
    assert run(capsys, "schedule", "update", "nightly", "--every", "5s")[0] == 64
    assert schedules(cli_env).get("nightly").interval_seconds == 7200

    code, out, _ = run(capsys, "schedule", "run-now", "nightly")
    assert code == 0 and "queued a fire" in out
    code, out, _ = run(capsys, "schedule", "list")
    assert "nightly" in out and "active" in out

    assert run(capsys, "schedule", "remove", "nightly")[0] == 0
    code, _, err = run(capsys, "schedule", "show", "nightly")
    assert code == 66 and "no schedule" in err
    assert run(capsys, "schedule", "pause", "nightly")[0] == 66


def test_a_schedule_without_a_profile_runs_strict_unless_assay_profile_is_set(
    capsys: pytest.CaptureFixture[str], cli_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schedules feed alerts: with no --profile they run strict (docs/running-checks.md,
    "Profiles and budgets"); an ASSAY_PROFILE the user set still wins. Before: fast, as a
    one-off check."""
    add = ("schedule", "add")
    assert run(capsys, *add, "plain", "pods are ready", "--every", "1h", "--context", "a")[0] == 0
    assert schedules(cli_env).get("plain").profile == "strict"
    monkeypatch.setenv("ASSAY_PROFILE", "fast")
    assert run(capsys, *add, "chosen", "pods are ready", "--every", "1h", "--context", "a")[0] == 0
    assert schedules(cli_env).get("chosen").profile == "fast"


def test_snapshot_targets_are_stored_absolute(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fleet" / "prod-eu").mkdir(parents=True)  # a glob must match a folder today
    code, _, _ = run(
        capsys, "schedule", "add", "snaps", "p", "--every", "1h", "--snapshots", "fleet/*"
    )
    assert code == 0
    assert schedules(cli_env).get("snaps").targets.snapshots == [str(tmp_path / "fleet" / "*")]


def test_no_fleet_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path))
    code, _, err = run(capsys, "schedule", "list")
    assert code == 69 and "assay up" in err


# --- --at / --in / predicates that name their instant -----------------------------------------
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1h30m", 5400),
        ("1d", 86400),
        ("1w", 604800),
        ("45", 45),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "5 parsecs", "0s", "-5m", "1h later"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(WhenError):
        parse_duration(text)


def test_at_and_in() -> None:
    assert resolve_not_before("2027-01-01T00:00:00Z", None, NOW) == datetime(2027, 1, 1, tzinfo=UTC)
    assert resolve_not_before("2026-06-01T14:00:00+02:00", None, NOW + timedelta(minutes=-1)) == NOW
    assert resolve_not_before(None, "2h", NOW) == NOW + timedelta(hours=2)
    assert resolve_not_before(None, None, NOW) is None
    with pytest.raises(WhenError, match="in the past"):
        resolve_not_before("2020-01-01T00:00:00Z", None, NOW)
    with pytest.raises(WhenError, match="no time zone"):
        resolve_not_before("2027-01-01T00:00:00", None, NOW)
    with pytest.raises(WhenError, match="not both"):
        resolve_not_before("2027-01-01T00:00:00Z", "2h", NOW)
    with pytest.raises(WhenError, match="cannot read instant"):
        resolve_not_before("new year", None, NOW)
    with pytest.raises(WhenError, match="five years"):
        resolve_not_before(None, "520w", NOW)


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("on 2027-01-01 the Certificate api-tls is Ready", datetime(2027, 1, 1, tzinfo=UTC)),
        ("On 2027-01-01, the Certificate is Ready", datetime(2027, 1, 1, tzinfo=UTC)),
        ("at 2027-01-01T09:00:00+01:00 the rollout is done", datetime(2027, 1, 1, 8, tzinfo=UTC)),
        ("as of 2027-03-01T00:00Z no pod runs as root", datetime(2027, 3, 1, tzinfo=UTC)),
        ("after 2027-01-01 12:30 the job has run", datetime(2027, 1, 1, 12, 30, tzinfo=UTC)),
        ("no certificate expires before 2027-01-01", None),
        ("the image tag is 2027-01-01", None),
        ("on 2027-13-45 something", None),
        ("on prod every pod is ready", None),
    ],
)
def test_leading_instant_detector(predicate: str, expected: datetime | None) -> None:
    assert explicit_instant(predicate) == expected


def test_only_future_leading_instants_defer() -> None:
    assert deferral_for("on 2027-01-01 the cert is Ready", NOW) == datetime(2027, 1, 1, tzinfo=UTC)
    assert deferral_for("on 2025-01-01 the cert is Ready", NOW) is None


def test_a_schedule_id_cut_short_is_taken_back_and_an_ambiguous_one_is_refused(
    capsys: pytest.CaptureFixture[str], cli_env: str
) -> None:
    """`schedule list --wide` ids pasted back cut (as `verdict` takes run ids): a unique
    prefix names its schedule, with or without the ellipsis; one that begins two ids exits
    64 naming both and changes nothing; one that begins none is not found (66)."""
    for name in ("nightly", "hourly"):
        code, _, _ = run(
            capsys, "schedule", "add", name, "pods are ready", "--every", "1h", "--context", "a"
        )
        assert code == 0
    store = schedules(cli_env)
    first, second = sorted(store.ids())
    shared = 4  # "sch-": every id begins with it
    while first[shared] == second[shared]:
        shared += 1
    unique = first[: shared + 1]

    code, out, _ = run(capsys, "schedule", "show", unique + "…", "--json")
    assert code == 0 and json.loads(out)["id"] == first
    assert run(capsys, "schedule", "pause", unique)[0] == 0
    assert store.find(first) is not None and store.find(first).paused  # type: ignore[union-attr]

    code, _, err = run(capsys, "schedule", "remove", first[:shared])
    assert code == 64 and first in err and second in err and err.count("\n") == 1
    assert sorted(store.ids()) == [first, second]

    missing = "sch-" + ("0" if first[4] != "0" and second[4] != "0" else "z")
    assert run(capsys, "schedule", "show", missing)[0] == 66


@pytest.mark.parametrize("cron", ["0 9 * * Mon-Fri", "0 9 * * MON#1", "0 9 L * *", "0 9 * * L5"])
def test_names_in_any_case_and_croniters_day_forms_are_taken(
    capsys: pytest.CaptureFixture[str], cli_env: str, cron: str
) -> None:
    code, _, err = run(capsys, "schedule", "add", "weekday", "p", "--cron", cron, "--context", "a")
    assert code == 0, err
    assert schedules(cli_env).get("weekday").cron == cron


def test_a_schedule_stored_under_wider_rules_still_loads_and_keeps_its_cron(
    capsys: pytest.CaptureFixture[str], cli_env: str
) -> None:
    """An expression croniter takes and fires on, stored before the published pattern (31st
    of January and March), is refused for a new schedule but loads, lists and survives a
    change of another field, rather than every read of the schedules failing."""
    wider = "0 9 31 1,3 *"
    code, _, err = run(
        capsys, "schedule", "add", "month-end", "p", "--cron", wider, "--context", "a"
    )
    assert code == 64 and "not five fields" in err, err
    assert run(capsys, "schedule", "add", "month-end", "p", "--cron", "0 9 1 1,3 *",
               "--context", "a")[0] == 0  # fmt: skip
    store = schedules(cli_env)
    stored = store.get("month-end")
    store.redis.hset(
        store.schedules_key, stored.id, stored.model_copy(update={"cron": wider}).model_dump_json()
    )
    assert store.get("month-end").cron == wider
    code, out, err = run(capsys, "schedule", "list")
    assert code == 0 and "month-end" in out, err
    code, _, err = run(capsys, "schedule", "update", "month-end", "--jitter", "30s")
    assert code == 0, err
    assert store.get("month-end").cron == wider
    code, _, err = run(capsys, "schedule", "update", "month-end", "--cron", "0 9 30 1,3 *")
    assert code == 64 and "not five fields" in err, err


def test_a_predicate_is_shown_as_one_line_of_text(
    capsys: pytest.CaptureFixture[str], cli_env: str
) -> None:
    """`schedule show` prints a predicate's escape sequence (one setting the terminal's
    title) spelled out, and its newline cannot forge a line of the listing."""
    predicate = "pods are ready\x1b]0;pwned\x07\nstate:       paused"
    code, _, err = run(
        capsys, "schedule", "add", "odd", predicate, "--every", "1h", "--context", "a"
    )
    assert code == 0, err
    code, out, _ = run(capsys, "schedule", "show", "odd")
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out
    lines = out.splitlines()
    assert "check:       pods are ready\\x1b]0;pwned\\x07\\nstate:       paused" in lines
    assert [line for line in lines if line.startswith("state:")] == ["state:       active"]
