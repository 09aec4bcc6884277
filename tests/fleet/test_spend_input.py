"""Spend ceilings as people set them: the CLI (64 on a bad value), the API (422), the settings.

A ceiling that is negative, zero, not a number, fractional tokens or absurd (over a trillion
tokens, over ten million dollars) is refused with one sentence naming what to fix, and
nothing is stored. Good ones are stored where the workers read them and shown back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from scheduler.schedules import ScheduleStore
from schemas.settings import load_settings
from tests.api_support import READ_TOKEN, TOKENS, WRITE_TOKEN, auth
from tests.cli_support import run_cli
from workers.fleet.redis_client import connect
from workers.fleet.spend import SpendStore

PROD_EU = "examples/snapshots/prod-eu"


@pytest.fixture
def cli_env(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    return redis_url


@pytest.fixture
def api(redis_url: str) -> Iterator[TestClient]:
    from assay.api import create_app

    with TestClient(create_app(load_settings(redis_url=redis_url, api_tokens=TOKENS))) as http:
        yield http


def schedules(redis_url: str) -> ScheduleStore:
    return ScheduleStore(connect(redis_url), "assay", 60)


ADD = ["schedule", "add", "nightly", "pods are ready", "--every", "1h", "--context", "prod"]


WHOLE = "takes a whole number written with the digits 0-9, e.g. 200000; got"
AMOUNT = "takes a number written with the digits 0-9 and a '.', e.g. 5 or 2.50; got"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-tokens-per-day", "-5"], "--max-tokens-per-day: Input should be greater than"),
        (["--max-tokens-per-day", "0"], "--max-tokens-per-day: Input should be greater than"),
        (["--max-tokens-per-day", "lots"], f"--max-tokens-per-day {WHOLE} 'lots'"),
        (["--max-tokens-per-day", "2.5"], f"--max-tokens-per-day {WHOLE} '2.5'"),
        (["--max-tokens-per-day", "1e15"], f"--max-tokens-per-day {WHOLE} '1e15'"),
        (["--max-tokens-per-day", "10000000000000"], "less than or equal to 1000000000000"),
        (["--max-cost-per-day", "-1"], "--max-cost-per-day: Input should be greater than or equal"),
        (["--max-cost-per-day", "a fiver"], f"--max-cost-per-day {AMOUNT} 'a fiver'"),
        (["--max-cost-per-day", "nan"], f"--max-cost-per-day {AMOUNT} 'nan'"),
        (["--max-cost-per-day", "1e12"], "less than or equal to 10000000"),
        # what int() and float() read but is not a number as the docs write one
        (["--max-tokens-per-day", "5,000"], f"--max-tokens-per-day {WHOLE} '5,000'"),
        (["--max-tokens-per-day", "5_000"], f"--max-tokens-per-day {WHOLE} '5_000'"),
        (["--max-tokens-per-day", "+5000"], f"--max-tokens-per-day {WHOLE} '+5000'"),
        (["--max-tokens-per-day", " 5000"], f"--max-tokens-per-day {WHOLE} ' 5000'"),
        (["--max-tokens-per-day", "\u0665\u0660\u0660\u0660"], f"--max-tokens-per-day {WHOLE}"),
        (["--max-cost-per-day", "$2.50"], f"--max-cost-per-day {AMOUNT} '$2.50'"),
        (["--max-cost-per-day", "2_5"], f"--max-cost-per-day {AMOUNT} '2_5'"),
        # under the millionth of a dollar the fleet counts in: was stored as "no ceiling"
        (["--max-cost-per-day", "1e-15"], "greater than or equal to 0.000001"),
        (["--max-cost-per-day", "0.0000009"], "greater than or equal to 0.000001"),
    ],
)
def test_a_bad_schedule_ceiling_exits_64_and_stores_nothing(
    capsys: pytest.CaptureFixture[str], cli_env: str, flags: list[str], message: str
) -> None:
    code, _, err = run_cli(capsys, *ADD, *flags)
    assert code == 64, err
    assert message in err
    assert err.count("\n") == 1, "one sentence"
    assert schedules(cli_env).all() == []


def test_a_bad_batch_ceiling_exits_64_and_starts_nothing(
    capsys: pytest.CaptureFixture[str], cli_env: str
) -> None:
    code, _, err = run_cli(
        capsys, "batch", "pods are ready", "--snapshots", PROD_EU, "--max-cost-total", "-3"
    )
    assert (
        code == 64 and "--max-cost-total: Input should be greater than or equal to 0.000001" in err
    )
    assert connect(cli_env).keys("assay:batch:*") == []


def test_a_bad_fleet_ceiling_in_the_settings_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], cli_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSAY_SPEND_FLEET_TOKENS_PER_HOUR", "-100")
    code, _, err = run_cli(capsys, "spend")
    assert code == 64
    assert "ASSAY_SPEND_FLEET_TOKENS_PER_HOUR (got '-100')" in err


@pytest.mark.parametrize(
    "variable",
    [
        "ASSAY_SPEND_FLEET_COST_USD_PER_DAY",
        "ASSAY_SPEND_SCHEDULE_COST_USD_PER_DAY",
        "ASSAY_SPEND_BATCH_COST_USD",
    ],
)
def test_a_cost_ceiling_under_a_millionth_in_the_settings_is_refused(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    """Kept as 0 millionths, which the workers read as no ceiling at all (fail open)."""
    monkeypatch.setenv(variable, "1e-15")
    code, _, err = run_cli(capsys, "spend")
    assert code == 64
    assert f"{variable} (got '1e-15')" in err and "greater than or equal to 0.000001" in err


def test_a_schedule_ceiling_set_shown_and_dropped_through_the_cli(
    capsys: pytest.CaptureFixture[str], cli_env: str
) -> None:
    flags = ["--max-tokens-per-day", "50000", "--max-cost-per-day", "2.50"]
    code, _, err = run_cli(capsys, *ADD, *flags)
    assert code == 0, err
    (schedule,) = schedules(cli_env).all()
    spend = SpendStore(connect(cli_env), "assay")
    assert spend.client.hget(spend.limits_key, f"schedule:{schedule.id}") == "50000 2500000"
    code, out, _ = run_cli(capsys, "schedule", "show", "nightly")
    assert code == 0
    assert "spend ceiling: 50,000 tokens / $2.50 per UTC day" in out
    assert "0 tokens, $0.00 · ceiling 50,000 tokens (50,000 left), $2.50 ($2.50 left)" in out
    code, _, err = run_cli(capsys, "schedule", "update", "nightly", "--default-spend-ceiling")
    assert code == 0, err
    assert schedules(cli_env).get("nightly").spend is None
    assert spend.client.hget(spend.limits_key, f"schedule:{schedule.id}") is None


SCHEDULE = {
    "name": "nightly",
    "predicate": "pods are ready",
    "targets": {"contexts": ["prod"]},
    "interval_seconds": 3600,
}


@pytest.mark.parametrize(
    "spend",
    [
        {"tokens": -5},
        {"tokens": 0},
        {"tokens": "lots"},
        {"tokens": 2.5},
        {"tokens": True},
        {"tokens": 10**13},
        {"cost_usd": -1},
        {"cost_usd": "a fiver"},
        {"cost_usd": 1e12},
        {},
        {"tokens": 50_000, "per": "week"},
        {"tokens": "5000"},  # text, not a number: pydantic's lax mode read it as 5000
        {"cost_usd": "2.5"},
        {"cost_usd": 1e-16},  # under a millionth of a dollar: was stored as "no ceiling"
        {"cost_usd": 0.0000009},
    ],
)
def test_the_api_refuses_a_bad_ceiling_with_422_and_stores_nothing(
    api: TestClient, redis_url: str, spend: dict[str, Any]
) -> None:
    answer = api.post("/v1/schedules", json={**SCHEDULE, "spend": spend}, headers=auth(WRITE_TOKEN))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"][0]["loc"][:2] == ["body", "spend"]
    assert schedules(redis_url).all() == []
    batch = {"text": "pods are ready", "context_glob": "prod-*", "spend": spend}
    answer = api.post("/v1/batches", json=batch, headers=auth(WRITE_TOKEN))
    assert answer.status_code == 422, answer.text
    assert connect(redis_url).keys("assay:batch:*") == []


def test_the_api_sets_changes_and_shows_a_schedules_ceiling(
    api: TestClient, redis_url: str
) -> None:
    body = {**SCHEDULE, "spend": {"tokens": 80_000}}
    created = api.post("/v1/schedules", json=body, headers=auth(WRITE_TOKEN))
    assert created.status_code == 201, created.text
    view = created.json()
    assert view["spend"] == {"tokens": 80_000, "cost_usd": None}
    (ceiling,) = view["spend_today"]["ceilings"]
    assert (ceiling["resource"], ceiling["limit"], ceiling["remaining"]) == (
        "tokens",
        80_000,
        80_000,
    )
    path = f"/v1/schedules/{view['id']}"
    bad = api.patch(path, json={"spend": {"tokens": -1}}, headers=auth(WRITE_TOKEN))
    assert bad.status_code == 422
    changed = api.patch(path, json={"spend": {"cost_usd": 3}}, headers=auth(WRITE_TOKEN))
    assert changed.status_code == 200, changed.text
    assert changed.json()["spend"] == {"tokens": None, "cost_usd": 3.0}
    spend = SpendStore(connect(redis_url), "assay")
    assert spend.client.hget(spend.limits_key, f"schedule:{view['id']}") == "0 3000000"
    cleared = api.patch(path, json={"spend": None}, headers=auth(WRITE_TOKEN))
    assert cleared.json()["spend"] is None
    assert spend.client.hget(spend.limits_key, f"schedule:{view['id']}") is None
    report = api.get("/v1/spend", headers=auth(READ_TOKEN))
    assert report.status_code == 200 and report.json()["rows"] == []


def test_a_lost_stored_ceiling_is_put_back_by_the_replicas_reconcile(redis_url: str) -> None:
    """The schedule record is the truth; the copy the workers read is repaired from it."""
    from datetime import UTC, datetime

    from schemas.schedule import Schedule, ScheduleTargets
    from schemas.spend import SpendCeiling

    store = schedules(redis_url)
    schedule = store.create(
        Schedule(
            name="nightly",
            predicate="pods are ready",
            targets=ScheduleTargets(contexts=["prod"]),
            interval_seconds=3600,
            spend=SpendCeiling(tokens=70_000),
        )
    )
    spend = SpendStore(connect(redis_url), "assay")
    field = f"schedule:{schedule.id}"
    assert spend.client.hget(spend.limits_key, field) == "70000 0"
    spend.client.hdel(spend.limits_key, field)  # lost (a crash between the two writes)
    spend.client.hset(spend.limits_key, "schedule:sch-gone", "1000 0")  # kept: not ours
    store.reconcile(datetime.now(UTC))
    assert spend.client.hget(spend.limits_key, field) == "70000 0"
    store.remove("nightly")
    assert spend.client.hget(spend.limits_key, field) is None


APPLIED = """\
apiVersion: assay.dev/v1alpha1
kind: Schedule
metadata: {name: nightly}
spec:
  predicate: pods are ready
  targets: {contexts: [prod]}
  every: 1h
  ceilings: CEILINGS
"""


@pytest.mark.parametrize(
    ("ceilings", "field", "message"),
    [
        ("{tokensPerDay: 5_000}", "tokensPerDay", "Input should be a valid integer"),
        ("{tokensPerDay: +5000}", "tokensPerDay", "Input should be a valid integer"),
        ("{tokensPerDay: '5000'}", "tokensPerDay", "Input should be a valid integer"),
        ("{tokensPerDay: 0x1388}", "tokensPerDay", "Input should be a valid integer"),
        ("{costPerDayUsd: '2.5'}", "costPerDayUsd", "Input should be a valid number"),
        ("{costPerDayUsd: 1_0.5}", "costPerDayUsd", "Input should be a valid number"),
        (
            "{costPerDayUsd: 1e-15}",
            "costPerDayUsd",
            "Input should be greater than or equal to 0.000001",
        ),
    ],
)
def test_apply_reads_a_documents_ceiling_strictly(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    tmp_path: Path,
    ceilings: str,
    field: str,
    message: str,
) -> None:
    """YAML 1.1 reads 5_000, +5000 and 0x1388 as numbers, and pydantic read '5000' as one:
    each set a ceiling other than what the document's reader sees written."""
    document = tmp_path / "s.yaml"
    document.write_text(APPLIED.replace("CEILINGS", ceilings))
    code, _, err = run_cli(capsys, "apply", "-f", str(document), "--source", "s")
    assert code == 64, err
    assert f"{document}:8: spec.ceilings.{field}: {message}" in err
    assert schedules(cli_env).all() == []
    document.write_text(APPLIED.replace("CEILINGS", "{tokensPerDay: 5000, costPerDayUsd: 2.5}"))
    assert run_cli(capsys, "apply", "-f", str(document), "--source", "s")[0] == 0
    spend = schedules(cli_env).get("nightly").spend
    assert spend is not None and (spend.tokens, spend.cost_usd) == (5000, 2.5)


CHECK = ["check", "pods are ready", "--snapshot", PROD_EU]


@pytest.mark.parametrize(
    ("command", "flag", "value", "message"),
    [
        (ADD, "--max-tokens", "5_000", "takes a whole number written with the digits 0-9"),
        (ADD, "--max-tokens", "+5000", "takes a whole number written with the digits 0-9"),
        (ADD, "--max-tokens", "50", "must be at least 100; got 50"),
        (ADD, "--max-iterations", "0", "must be at least 1; got 0"),
        (ADD, "--timeout", "1_0", "takes a number written with the digits 0-9 and a '.'"),
        (CHECK, "--max-cost", "0", "must be more than 0; got 0"),
        (CHECK, "--max-cost", "1,5", "takes a number written with the digits 0-9 and a '.'"),
        (CHECK, "--max-tokens", "\u0665\u0660\u0660", "takes a whole number written with"),
    ],
)
def test_a_budget_flag_reads_its_number_strictly(
    capsys: pytest.CaptureFixture[str],
    cli_env: str,
    command: list[str],
    flag: str,
    value: str,
    message: str,
) -> None:
    """int() and float() (typer's and click's readers) take 5_000, +5000, 1_0 and digits
    of other scripts; a limit flag takes a number as the docs write one, and says the bound
    it breaks."""
    code, _, err = run_cli(capsys, *command, flag, value)
    assert code == 64, err
    assert f"Invalid value for '{flag}': {message}" in err
    assert schedules(cli_env).all() == []


@pytest.mark.parametrize(
    ("cost_usd", "kept"), [(0.000001, "1"), (0.29, "290000"), (0.0000025, "2"), (2.5, "2500000")]
)
def test_a_cost_ceiling_is_kept_as_the_millionths_it_allows(
    api: TestClient, redis_url: str, cost_usd: float, kept: str
) -> None:
    """The fleet counts in millionths of a dollar: a ceiling is kept rounded down (float
    noise aside: 0.29 is 290,000), so it never lets more be spent than it says, and never
    as 0, which reads as no ceiling at all."""
    body = {**SCHEDULE, "spend": {"cost_usd": cost_usd}}
    created = api.post("/v1/schedules", json=body, headers=auth(WRITE_TOKEN))
    assert created.status_code == 201, created.text
    spend = SpendStore(connect(redis_url), "assay")
    assert spend.client.hget(spend.limits_key, f"schedule:{created.json()['id']}") == f"0 {kept}"


def test_a_token_ceiling_written_as_a_number_without_a_fraction_is_taken(
    api: TestClient, redis_url: str
) -> None:
    """JSON Schema's `integer` is any number without a fraction (80000.0 is one): what the
    published schema calls valid, the server takes; text ("80000") it refuses."""
    body = {**SCHEDULE, "spend": {"tokens": 80000.0}}
    created = api.post("/v1/schedules", json=body, headers=auth(WRITE_TOKEN))
    assert created.status_code == 201, created.text
    assert created.json()["spend"] == {"tokens": 80000, "cost_usd": None}
