"""Crash safety with real worker processes: SIGKILL mid-run loses nothing and doubles nothing,
and a request that kills its worker every time ends as cannot_determine after the cap."""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.client import Client, WaitTimeout
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

pytestmark = pytest.mark.integration

VISIBILITY_SECONDS = "12"  # a killed worker's runs come back after this long
# A batch's probe compilation is single-flight (workers/fleet/probe_rerun.py): a run killed
# while it holds the batch's claim stops renewing its lease, so its waiters take over within
# a lease (COMPILE_LEASE_SECONDS). A short wait also bounds how long a waiter stays behind a
# live holder that this test then kills; the test is about verdicts under kills.
COMPILE_WAIT_SECONDS = "5"
RUN_TIMEOUT_SECONDS = 10.0  # shorter than the visibility timeout, as in production


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    with Client(load_settings(redis_url=redis_url)) as fleet:
        yield fleet


@pytest.mark.timeout(420)
def test_twenty_sigkills_across_two_hundred_runs_leave_one_verdict_each(
    redis_url: str, client: Client, tmp_path: Path
) -> None:
    rng = random.Random(20)
    make_snapshots(tmp_path / "fleet", 200)
    log = tmp_path / "worker.log"
    with ScriptedModel(three_step_script(delay=0.25)) as model:
        env = scripted_worker_env(
            redis_url,
            model.url,
            max_deliveries="50",
            broker_visibility_timeout_seconds=VISIBILITY_SECONDS,
            probe_compile_wait_seconds=COMPILE_WAIT_SECONDS,
        )
        batch_id = client.start_batch(
            PREDICATE,
            snapshots=str(tmp_path / "fleet" / "*"),
            profile=NO_CONFIRMER_PROFILE,
            budget=Budget(timeout_seconds=RUN_TIMEOUT_SECONDS),
        )
        kills_mid_run = 0
        worker: subprocess.Popen[bytes] | None = None
        try:
            for _ in range(20):
                seen = len(model.requests)
                worker = start_worker(env, log, concurrency=16)
                # kill only once this worker has runs talking to the model
                assert wait_until(lambda s=seen: len(model.requests) > s + 3, timeout=60), (
                    worker_log_tail(log)
                )
                time.sleep(rng.uniform(0.1, 0.8))
                finished_before = client.batch_status(batch_id)
                stop_process(worker, kill=True)
                assert worker.returncode == -9
                assert finished_before is not None
                if finished_before.pending > 0:
                    kills_mid_run += 1
            worker = start_worker(env, log, concurrency=16)
            try:
                status = client.wait_batch(batch_id, timeout=120)
            except WaitTimeout:
                stuck = [
                    client.run_state(r.run_id)
                    for r in client.batch_results(batch_id)
                    if r.verdict is None
                ]
                raise AssertionError(f"runs never finished: {stuck}") from None
        finally:
            if worker is not None:
                stop_process(worker)

    assert kills_mid_run == 20
    assert status.done and status.total == 200 and status.pending == 0
    assert status.true + status.false + status.poorly_posed + status.cannot_determine == 200

    results = list(client.batch_results(batch_id))
    assert len({r.run_id for r in results}) == 200
    redeliveries = 0
    for row in results:
        verdict = client.verdict(row.run_id)
        assert verdict is not None and verdict.run_id == row.run_id
        history = client.history(row.check_id, limit=10)
        assert [v.run_id for v in history] == [row.run_id], "exactly one history entry per run"
        report = client.run_report(row.run_id)
        assert report is not None
        redeliveries += report.attempts - 1
    assert redeliveries >= 20, "every kill interrupted at least one started run"
    # the runs were killed, not broken: each ends with the model's answer
    assert status.true == 200, [r for r in results if r.verdict != VerdictKind.TRUE][:3]


@pytest.mark.timeout(180)
def test_a_request_that_kills_its_worker_every_time_ends_as_cannot_determine(
    redis_url: str, client: Client, tmp_path: Path
) -> None:
    (folder,) = make_snapshots(tmp_path / "snaps", 1)
    log = tmp_path / "worker.log"
    with ScriptedModel(three_step_script(hang_match="poison")) as model:
        env = scripted_worker_env(
            redis_url, model.url, max_deliveries="2", broker_visibility_timeout_seconds="4"
        )
        receipt = client.submit("poison: this predicate hangs its model", snapshot=str(folder))
        worker: subprocess.Popen[bytes] | None = None
        try:
            for delivery in (1, 2):
                worker = start_worker(env, log, concurrency=4)

                def running(n: int = delivery) -> bool:
                    state = client.run_state(receipt.run_id)
                    return state is not None and state.status == "running" and state.attempts == n

                assert wait_until(running, timeout=60), worker_log_tail(log)
                stop_process(worker, kill=True)  # the request "crashes" its worker
            worker = start_worker(env, log, concurrency=4)
            verdict = client.wait(receipt.run_id, timeout=60)
        finally:
            if worker is not None:
                stop_process(worker)

    assert verdict.verdict == VerdictKind.CANNOT_DETERMINE and verdict.exit_code == 3
    assert verdict.reason is not None and "max_deliveries=2" in verdict.reason
    report = client.run_report(receipt.run_id)
    assert report is not None and report.attempts == 3
    assert client.store.history_length(receipt.check_id) == 1
