"""The spend guard on a real fleet: 200 concurrent runs against a small fleet ceiling, with
a worker SIGKILLed mid-call.

Real Celery worker processes (two of 100 threads each, then a replacement for the killed
one), a real redis-server, the scripted model over HTTP through litellm. What must hold:

* spend stops within the documented overshoot: with a provider whose usage stays within each
  call's reservation (the scripted model keeps to ``max_tokens``), none at all;
* every run the ceiling stopped ends ``cannot_determine`` naming the ceiling, never ``true``;
* nothing is lost or double-counted across the kill: every token the model reported is
  counted, and the killed worker's calls in flight are charged their reservation once.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.client import Client
from assay.testing.scripted_model import ScriptedModel
from schemas.budget import Budget
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.fleet_support import (
    NO_CONFIRMER_PROFILE,
    PREDICATE,
    make_snapshots,
    scripted_worker_env,
    start_worker,
    stop_process,
    three_step_script,
    wait_until,
    worker_log_tail,
)
from workers.fleet.redis_client import connect
from workers.fleet.spend import SpendStore

pytestmark = pytest.mark.integration

RUNS = 200
# Tokens per UTC hour: room for about a third of the 200 runs. The scripted model reports
# about 3,600 tokens per call, three calls a run; a run's first call reserves about 19,600
# (its prompt, padded, and the planner's max_tokens), its later ones about 8,500. A smaller
# ceiling is spent by the first calls' reservations alone, and then no run completes.
CEILING = 1_200_000
RUN_TIMEOUT_SECONDS = 20.0
VISIBILITY_SECONDS = "24"  # the killed worker's runs come back after this (> run timeout)
LEASE_MARGIN_SECONDS = "2"  # a reservation outlives its run's deadline by this


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    with Client(load_settings(redis_url=redis_url)) as fleet:
        yield fleet


def _hour_records(spend: SpendStore) -> dict[str, dict[str, str]]:
    return {
        key: spend.client.hgetall(key) for key in spend.client.scan_iter(spend.key("fleet:hour:*"))
    }


def _held_by(spend: SpendStore, worker_log: Path) -> int:
    """Reservations held now by runs the worker logging to ``worker_log`` took (a task id is
    its run id)."""
    received = set(re.findall(r"Task assay\.evaluate\[([^\]]+)\] received", worker_log.read_text()))
    held = spend.client.zrange(spend.inflight_key, 0, -1)
    return sum(spend.client.hget(spend.key("res", rid), "run") in received for rid in held)


def _reservations(spend: SpendStore) -> list[dict[str, str]]:
    return [spend.client.hgetall(key) for key in spend.client.scan_iter(spend.key("res:*"))]


_REFUSED = re.compile(
    r"is reached: ([\d,]+) tokens of ([\d,]+) tokens spent, and the next model call needs "
    r"up to ([\d,]+) tokens"
)
_NO_ROOM = re.compile(
    r"had no room before the run's deadline: ([\d,]+) tokens spent and ([\d,]+) tokens held "
    r"by calls in flight, of ([\d,]+) tokens"
)


def _stopped_only_without_room(reason: str, max_call: int) -> int:
    """Assert the guard's rule for one stopped run, from the figures its reason gives: it
    was refused only when spend alone left no room for its call (returns 1), or waited
    until its deadline only while the calls in flight held the room spend left (returns 0;
    ``max_call``: the largest estimate any call asked).
    How many runs end either way depends on timing; the rule does not."""
    figures = _REFUSED.search(reason)
    if figures is not None:
        spent, limit, needs = (int(n.replace(",", "")) for n in figures.groups())
        assert spent + needs > limit, f"refused with room left: {reason}"
        return 1
    figures = _NO_ROOM.search(reason)
    assert figures is not None, reason
    spent, held, limit = (int(n.replace(",", "")) for n in figures.groups())
    assert held > 0 and spent <= limit < spent + held + max_call, reason
    return 0


@pytest.mark.timeout(420)
def test_two_hundred_runs_against_a_small_fleet_ceiling_with_a_worker_killed_mid_call(
    redis_url: str, client: Client, tmp_path: Path
) -> None:
    make_snapshots(tmp_path / "fleet", RUNS)
    spend = SpendStore(connect(redis_url), "assay")
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log", tmp_path / "worker-c.log"]
    with ScriptedModel(three_step_script(delay=0.5)) as model:
        env = scripted_worker_env(
            redis_url,
            model.url,
            spend_fleet_tokens_per_hour=str(CEILING),
            spend_lease_margin_seconds=LEASE_MARGIN_SECONDS,
            broker_visibility_timeout_seconds=VISIBILITY_SECONDS,
        )
        workers: list[subprocess.Popen[bytes]] = []
        try:
            workers.append(start_worker(env, logs[0], concurrency=100))
            workers.append(start_worker(env, logs[1], concurrency=100))
            batch_id = client.start_batch(
                PREDICATE,
                snapshots=str(tmp_path / "fleet" / "*"),
                budget=Budget(timeout_seconds=RUN_TIMEOUT_SECONDS),
                probe="off",
                profile=NO_CONFIRMER_PROFILE,
            )

            def killed_worker_mid_call() -> bool:  # some calls settled, a few of A's held now
                return spend.fleet_now()[0].calls >= 20 and _held_by(spend, logs[0]) >= 3

            assert wait_until(killed_worker_mid_call, timeout=120, interval=0.02), worker_log_tail(
                logs[0]
            )
            stop_process(workers[0], kill=True)  # SIGKILL mid-call
            assert workers[0].returncode == -9
            killed_at = time.monotonic()
            workers.append(start_worker(env, logs[2], concurrency=100))
            status = client.wait_batch(batch_id, timeout=240)
            # every lease has run out by now; release what no later call swept
            time.sleep(max(0.0, RUN_TIMEOUT_SECONDS + 3 - (time.monotonic() - killed_at)))
            spend.release_expired()
            reported = model.usage_reported
        finally:
            for worker in workers:
                stop_process(worker)

    assert status.done and status.total == RUNS and status.pending == 0
    results = list(client.batch_results(batch_id))
    stopped = completed = refused = 0
    redelivered = 0
    max_call = max(int(r["tokens"]) for r in _reservations(spend))  # the largest call's estimate
    for row in results:
        verdict = client.verdict(row.run_id)
        assert verdict is not None
        report = client.run_report(row.run_id)
        assert report is not None
        redelivered += report.attempts > 1
        if verdict.budget_exhausted == "spend_ceiling":
            stopped += 1
            assert verdict.verdict == VerdictKind.CANNOT_DETERMINE, "a stopped run is never true"
            assert "the fleet's token ceiling per UTC hour" in (verdict.reason or "")
            refused += _stopped_only_without_room(verdict.reason or "", max_call)
        else:
            assert verdict.verdict == VerdictKind.TRUE, (verdict.verdict, verdict.reason)
            completed += 1
    # 200 runs in flight at once: their first calls alone could spend the ceiling twice, so
    # most runs stop part way (how many complete depends on the timing)
    assert stopped > 0 and completed > 0 and stopped + completed == RUNS
    assert redelivered > 0, "the kill caught runs mid-way"

    records = _hour_records(spend)
    spent = sum(int(r.get("tokens", 0)) for r in records.values())
    for record in records.values():  # per period: a test crossing the hour sees two
        overshoot = int(record.get("tokens", 0)) - CEILING
        print(f"hour record: {record.get('tokens')} tokens of {CEILING}, overshoot {overshoot}")
        assert overshoot <= 0, "the scripted model keeps within each reservation: no overshoot"
        assert record.get("reserved_tokens") == "0", "nothing is left held"
    assert spend.in_flight() == 0
    # each refusal saw spend alone leave no room for its call, and spend only grows
    assert refused == 0 or spent > CEILING - max_call, "a call was refused with room left"

    # Nothing lost, nothing counted twice: every token the model reported is counted, except
    # that each killed call in flight is charged its whole reservation (once) instead.
    model_reported = sum(int(u["prompt_tokens"]) + int(u["completion_tokens"]) for u in reported)
    expired = [r for r in _reservations(spend) if r.get("state") == "expired"]
    charged_for_killed = sum(int(r["tokens"]) for r in expired)
    assert expired, "the killed worker had calls in flight"
    assert sum(int(r.get("expired", 0)) for r in records.values()) == len(expired)
    print(
        f"spent {spent}, model reported {model_reported}, {len(expired)} killed calls charged "
        f"{charged_for_killed}; {completed} runs completed, {stopped} stopped"
    )
    assert model_reported <= spent <= model_reported + charged_for_killed
