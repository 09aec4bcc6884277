"""Infrastructure faults with real processes: a worker SIGKILLed mid-batch and Redis restarted
under it, Redis down for the CLI, and a scheduler replica paused past its lease.

Counted: every run ends with exactly one verdict and one history entry (else half-stored), a
``true`` only with verified evidence, and after the pause no continuation executes twice. The
paused replica, resumed, almost never gets a copy to a worker (it checks its claim right before
each send), so the worker's own fence is counted by delivering two copies of a fire at once.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from assay.client import Client
from assay.redis_process import RedisProcess
from assay.testing.scripted_model import ScriptedModel
from schemas.budget import Budget
from schemas.settings import load_settings
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
from tests.injection_support import true_without_verified_evidence
from tests.reliability.cli_support import invoke, outcome
from tests.reliability.conftest import full_only
from tests.reliability.ledger import Ledger
from tests.scheduler_support import pause_replica_scenario, two_copies_scenario

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FAMILY = "infrastructure faults"
RUNS = 12  # every 4th snapshot is unready: 9 true, 3 false


def test_a_sigkilled_worker_and_a_redis_restart_lose_and_double_nothing(
    ledger: Ledger, tmp_path: Path
) -> None:
    server = RedisProcess(data_dir=tmp_path / "redis", appendonly=True).start()
    make_snapshots(tmp_path / "fleet", RUNS, bad_every=4)
    log = tmp_path / "worker.log"
    worker = None
    try:
        with ScriptedModel(three_step_script(delay=0.3)) as model:
            env = scripted_worker_env(
                server.url, model.url, broker_visibility_timeout_seconds="6", max_deliveries="10"
            )
            with Client(load_settings(redis_url=server.url)) as client:
                batch_id = client.start_batch(
                    PREDICATE,
                    snapshots=str(tmp_path / "fleet" / "*"),
                    budget=Budget(timeout_seconds=20),
                    profile=NO_CONFIRMER_PROFILE,
                )
                worker = start_worker(env, log, concurrency=4)
                assert wait_until(lambda: len(model.requests) > 4, timeout=60), worker_log_tail(log)
                stop_process(worker, kill=True)  # SIGKILL with runs in flight
                assert worker.returncode == -9
                server.restart()  # AOF flushed, same port
                worker = start_worker(env, log, concurrency=4)
                status = client.wait_batch(batch_id, timeout=150)
                rows = list(client.batch_results(batch_id))
                runs = []
                for row in rows:
                    verdict = client.verdict(row.run_id)
                    history = client.history(row.check_id, limit=10)
                    runs.append((row, verdict, [v.run_id for v in history]))
    finally:
        if worker is not None:
            stop_process(worker)
        server.stop()

    for row, verdict, history in runs:
        half = verdict is None or history != [row.run_id]
        unearned = verdict is not None and true_without_verified_evidence(verdict)
        ledger.case(
            FAMILY,
            verdict.verdict.value if verdict else "no verdict",
            half_stored=int(half),
            unverified_true=int(unearned),
        )
        assert not half and not unearned, (row, verdict, history)
    assert status.done and status.total == RUNS and len(runs) == RUNS
    # Fail-safe, not necessarily complete: a run caught by the restart may end cannot_determine,
    # but none of the 3 unready clusters may be called ready.
    assert status.true <= 9 and status.true + status.false + status.cannot_determine == RUNS


@full_only  # each command waits out the Redis client's retry window (~25 s)
def test_redis_down_is_a_clear_error_never_a_verdict(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = RedisProcess(data_dir=tmp_path / "redis").start()
    url = server.url
    server.stop()  # nothing listens there now
    monkeypatch.setenv("ASSAY_REDIS_URL", url)
    (snapshot,) = make_snapshots(tmp_path / "snaps", 1)
    for args in (  # each takes the Redis client's whole retry window (~25 s) to give up
        ("verdict", "some-check", "--json"),
        ("submit", "--snapshot", str(snapshot), "--wait", "--wait-timeout", "2", PREDICATE),
    ):
        started = time.monotonic()
        result = invoke(*args)
        ledger.case(FAMILY, outcome(result.code))
        assert result.code not in (0, 1), (args, result.code)
        assert result.stderr.strip() and "Traceback" not in result.stderr, result.stderr[-1500:]
        assert time.monotonic() - started < 60


def test_a_paused_scheduler_replica_never_duplicates_an_execution(
    ledger: Ledger, redis_url: str, tmp_path: Path
) -> None:
    outcome_ = pause_replica_scenario(redis_url, tmp_path, runs=12, model_delay=1.0)
    for run_id, executions in outcome_.executions.items():
        ledger.case(
            FAMILY,
            "executed once" if executions == 1 else f"executed {executions}x",
            duplicated_executions=max(0, executions - 1),
        )
        assert executions == 1, (run_id, outcome_.executions)
    assert outcome_.sent_before_pause < outcome_.runs, "the replica was not caught mid-send"


def test_two_copies_of_a_fire_delivered_at_once_execute_once(
    ledger: Ledger, redis_url: str, tmp_path: Path
) -> None:
    """A stalled replica's late copy and the survivor's reach two worker threads together."""
    copies = two_copies_scenario(redis_url, tmp_path, prefix="relfence")
    ledger.case(
        FAMILY,
        "executed once" if copies.executions == 1 else f"executed {copies.executions}x",
        duplicated_executions=max(0, copies.executions - 1),
    )
    assert copies.executions == 1 and copies.outcomes == ["recorded", "superseded"], copies
