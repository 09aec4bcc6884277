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


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-tokens-per-day", "-5"], "--max-tokens-per-day: Input should be greater than"),
        (["--max-tokens-per-day", "0"], "--max-tokens-per-day: Input should be greater than"),
        (["--max-tokens-per-day", "lots"], "--max-tokens-per-day takes a whole number of tokens"),
        (["--max-tokens-per-day", "2.5"], "--max-tokens-per-day takes a whole number of tokens"),
        (["--max-tokens-per-day", "1e15"], "--max-tokens-per-day takes a whole number of tokens"),
        (["--max-tokens-per-day", "10000000000000"], "less than or equal to 1000000000000"),
        (["--max-cost-per-day", "-1"], "--max-cost-per-day: Input should be greater than 0"),
        (["--max-cost-per-day", "a fiver"], "--max-cost-per-day takes an amount of US dollars"),
        (["--max-cost-per-day", "nan"], "--max-cost-per-day: a cost ceiling must be a finite"),
        (["--max-cost-per-day", "1e12"], "less than or equal to 10000000"),
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
    assert code == 64 and "--max-cost-total: Input should be greater than 0" in err
    assert connect(cli_env).keys("assay:batch:*") == []


def test_a_bad_fleet_ceiling_in_the_settings_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], cli_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSAY_SPEND_FLEET_TOKENS_PER_HOUR", "-100")
    code, _, err = run_cli(capsys, "spend")
    assert code == 64
    assert "ASSAY_SPEND_FLEET_TOKENS_PER_HOUR (got '-100')" in err


def test_a_schedule_ceiling_set_shown_and_dropped_through_the_cli(
    capsys: pytest.CaptureFixture[str], cli_env: str
) -> None:
    flags = ["--max-tokens-per-day", "50,000", "--max-cost-per-day", "$2.50"]
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
