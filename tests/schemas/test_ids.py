"""Ids (run, check, batch, schedule) accept only the documented alphabet, at every entry.

An id holding ':' used to collide with store keys: check ``victim:history`` is
the key of check ``victim``'s history stream, so reading it failed and
recording it stopped halfway. These tests send such ids through each entry a
user has (the contract models, the store, the Python client, the CLI) and
expect a clear refusal that names the id and the rule, with nothing stored.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError

from assay.client import Client
from schemas.ids import ID_RULE, InvalidId, check_id
from schemas.request import EvaluationRequest, SnapshotTarget
from schemas.schedule import Schedule, ScheduleTargets
from schemas.settings import AssaySettings, load_settings
from tests.boundary_support import dump_keys, hostile_ids, valid_ids
from tests.fleet_support import ROOT, finished_report, snapshot_request, worker_env
from workers.fleet.redis_client import connect
from workers.fleet.store import VerdictStore

ASSAY = [sys.executable, "-m", "assay.cli"]
PROD_EU = str(ROOT / "examples" / "snapshots" / "prod-eu")


def _request(**fields: object) -> EvaluationRequest:
    return EvaluationRequest.model_validate(
        {"text": "every pod is ready", "target": SnapshotTarget(path=PROD_EU), **fields}
    )


# --- the contract models --------------------------------------------------------------------


@pytest.mark.parametrize("field", ["check_id", "run_id", "batch_id", "schedule_id"])
def test_a_request_refuses_an_id_with_a_colon_and_says_why(field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _request(**{field: "victim:history"})
    message = str(caught.value)
    assert f"{field} 'victim:history' is not a valid id" in message
    assert "characters from A-Z a-z 0-9 . _ -, starting with a letter or digit" in message
    if field != "schedule_id":  # schedule ids are shorter (64), same alphabet
        assert ID_RULE in message


def test_a_schedule_refuses_an_id_outside_the_alphabet() -> None:
    with pytest.raises(ValidationError, match="schedule_id 'nightly:1' is not a valid id"):
        Schedule(
            id="nightly:1",
            name="nightly",
            predicate="pods are ready",
            targets=ScheduleTargets(contexts=["prod"]),
            interval_seconds=300,
        )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_ids())
def test_no_hostile_id_is_accepted_anywhere(value: str) -> None:
    with pytest.raises(InvalidId):
        check_id(value, "check_id")
    for field in ("check_id", "run_id", "batch_id", "schedule_id"):
        if field == "check_id" and value == "":
            continue  # an empty check id means "derive it from the predicate"
        with pytest.raises(ValidationError):
            _request(**{field: value})


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(valid_ids())
def test_every_id_in_the_alphabet_is_accepted(value: str) -> None:
    request = _request(check_id=value, run_id=value, batch_id=value)
    assert (request.check_id, request.run_id, request.batch_id) == (value, value, value)


# --- the store: nothing can bypass the models -------------------------------------------------


@pytest.fixture
def store(redis_url: str) -> VerdictStore:
    return VerdictStore.from_settings(
        AssaySettings(key_prefix="ids", run_ttl_seconds=3600), client=connect(redis_url)
    )


def test_store_reads_refuse_ids_that_would_name_another_key(store: VerdictStore) -> None:
    victim = snapshot_request(check_id="victim")
    store.register_run(victim)
    assert store.record_verdict(finished_report(victim, "true"))
    # "victim:history" is the key of victim's history stream: the reads must not reach Redis
    with pytest.raises(InvalidId, match="check_id 'victim:history'"):
        store.latest_verdict("victim:history")
    with pytest.raises(InvalidId):
        store.history("victim:history")
    with pytest.raises(InvalidId):
        store.run_state("victim:history")
    with pytest.raises(InvalidId):
        store.batch("victim:history")


def test_a_forged_request_with_a_colon_id_stores_nothing(store: VerdictStore) -> None:
    """``model_construct`` skips validation, as a forged broker message would: the store's
    own key builders still refuse the id before any script runs."""
    victim = snapshot_request(check_id="victim")
    store.register_run(victim)
    assert store.record_verdict(finished_report(victim, "true"))
    before = dump_keys(store.client, "ids")
    forged = snapshot_request().model_copy(update={"check_id": "victim:history"})
    with pytest.raises(InvalidId):
        store.register_run(forged)
    with pytest.raises(InvalidId):
        store.record_verdict(finished_report(forged, "false"))
    assert dump_keys(store.client, "ids") == before
    assert store.latest_verdict("victim") is not None
    assert store.history_length("victim") == 1


# --- the Python client ----------------------------------------------------------------------


def test_the_client_refuses_bad_ids_with_a_value_error(redis_url: str) -> None:
    with Client(load_settings(redis_url=redis_url)) as fleet:
        with pytest.raises(ValueError, match="check_id 'victim:history' is not a valid id"):
            fleet.submit("every pod is ready", snapshot=PROD_EU, check_id="victim:history")
        with pytest.raises(ValueError, match="is not a valid id"):
            fleet.verdict("victim:history")
        with pytest.raises(ValueError, match="is not a valid id"):
            fleet.history("a b")
        with pytest.raises(ValueError, match="is not a valid id"):
            fleet.batch_status("batch:1")
        with pytest.raises(ValueError, match="batch_id 'b:1' is not a valid id"):
            fleet.start_batch(
                "every pod is ready",
                snapshots=str(ROOT / "examples" / "snapshots" / "*"),
                batch_id="b:1",
            )
    raw = redis.Redis.from_url(redis_url)
    assert raw.keys("assay:*") == [], "a refused submission stored something"


# --- the CLI --------------------------------------------------------------------------------


def _assay(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ASSAY, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.integration
def test_the_cli_refuses_bad_ids_with_exit_64(redis_url: str, tmp_path: Path) -> None:
    env = worker_env(redis_url)
    store = VerdictStore.from_settings(AssaySettings(), client=connect(redis_url))
    victim = snapshot_request(check_id="victim")
    store.register_run(victim)
    store.record_verdict(finished_report(victim, "true"))
    before = dump_keys(store.client, "assay")
    attempts = [
        ("submit", "every pod is ready", "--snapshot", PROD_EU, "--check-id", "victim:history"),
        ("verdict", "victim:history"),
        ("run", "victim:history"),
        ("batch", "status", "b:1"),
        ("batch", "results", "b:1"),
    ]
    for args in attempts:
        result = _assay(env, *args)
        assert result.returncode == 64, (args, result.stdout, result.stderr)
        assert "is not a valid id" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert dump_keys(store.client, "assay") == before
