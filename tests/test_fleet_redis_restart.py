"""Redis restarted in the middle of a batch (AOF on): nothing is lost, the batch completes.

The worker usually reconnects by itself. Sometimes it cannot: when the connection drops
while it holds prefetched messages, kombu's Redis transport tries to put them back over
the connection that just died, fails with an AttributeError and Celery stops the worker
as "unrecoverable" (seen on a loaded CI host). Deployments restart a worker that exits
(`restart: unless-stopped`, a Deployment's pods), so the test does what they do; what it
asserts is the fleet's promise: every run of the batch ends with one verdict.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from assay.client import Client, WaitTimeout
from assay.redis_process import RedisProcess
from assay.testing.scripted_model import ScriptedModel
from schemas.settings import load_settings
from tests.fleet_support import (
    PREDICATE,
    make_snapshots,
    scripted_worker_env,
    start_worker,
    stop_process,
    three_step_script,
    wait_until,
    worker_log_tail,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_batch_completes_across_a_redis_restart(tmp_path: Path) -> None:
    server = RedisProcess(data_dir=tmp_path / "redis", appendonly=True).start()
    make_snapshots(tmp_path / "fleet", 40, bad_every=4)
    log = tmp_path / "worker.log"
    worker = None
    restarts = 0
    try:
        with ScriptedModel(three_step_script(delay=0.2)) as model:
            env = scripted_worker_env(server.url, model.url, broker_visibility_timeout_seconds="10")
            worker = start_worker(env, log, concurrency=8)
            with Client(load_settings(redis_url=server.url)) as client:
                batch_id = client.start_batch(PREDICATE, snapshots=str(tmp_path / "fleet" / "*"))

                def some_finished() -> bool:
                    status = client.batch_status(batch_id)
                    return status is not None and 0 < status.pending <= 32

                assert wait_until(some_finished, timeout=90), worker_log_tail(log)
                server.restart()  # clean stop (AOF flushed) and start on the same port
                deadline = time.monotonic() + 150
                status = None
                while time.monotonic() < deadline:
                    if worker.poll() is not None:  # as a supervisor would: start it again
                        restarts += 1
                        worker = start_worker(env, log, concurrency=8)
                    try:
                        status = client.wait_batch(batch_id, timeout=5)
                        break
                    except WaitTimeout:
                        continue
                if status is None:
                    raise AssertionError(worker_log_tail(log))
                results = list(client.batch_results(batch_id))
    finally:
        if worker is not None:
            stop_process(worker)
        server.stop()

    assert worker.returncode in (0, -15), "the last worker stopped when asked"
    assert restarts <= 1, "one Redis restart stops a worker at most once"
    assert status.done and status.total == 40 and status.pending == 0
    assert (status.true, status.false) == (30, 10)
    assert len({r.run_id for r in results}) == 40 and all(r.verdict for r in results)
