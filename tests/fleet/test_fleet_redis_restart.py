"""Redis restarted in the middle of a batch (AOF on), several times: the worker stays up
and nothing is lost.

Before ``workers.fleet.redis_transport``, about one Redis restart in three stopped
the worker: the connection dropped while it held prefetched messages, kombu tried
to put them back through a transport already detached from its connection, raised
AttributeError, and Celery stopped the worker as "unrecoverable" (that module's
docstring tells the race). Restarting Redis several times under one worker makes
that near-certain to show, so the test asserts what a deployment relies on: the
same worker process is still running after every restart, and every run of the
batch ends with one verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from assay.client import Client
from assay.redis_process import RedisProcess
from assay.testing.scripted_model import ScriptedModel
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

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RUNS = 60
RESTARTS = 4


def test_a_worker_survives_redis_restarts_and_the_batch_completes(tmp_path: Path) -> None:
    server = RedisProcess(data_dir=tmp_path / "redis", appendonly=True).start()
    make_snapshots(tmp_path / "fleet", RUNS, bad_every=4)
    log = tmp_path / "worker.log"
    worker = None
    try:
        with ScriptedModel(three_step_script(delay=0.2)) as model:
            env = scripted_worker_env(server.url, model.url, broker_visibility_timeout_seconds="10")
            worker = start_worker(env, log, concurrency=8)
            with Client(load_settings(redis_url=server.url)) as client:
                batch_id = client.start_batch(
                    PREDICATE,
                    snapshots=str(tmp_path / "fleet" / "*"),
                    profile=NO_CONFIRMER_PROFILE,
                )

                def finished_at_least(runs: int) -> Callable[[], bool]:
                    def check() -> bool:
                        status = client.batch_status(batch_id)
                        return status is not None and status.total - status.pending >= runs

                    return check

                for restart in range(RESTARTS):
                    # Restart while the worker holds prefetched runs: after a few more finish.
                    progress = finished_at_least((restart + 1) * RUNS // (RESTARTS + 2))
                    assert wait_until(progress, timeout=90), worker_log_tail(log)
                    server.restart()  # clean stop (AOF flushed) and start on the same port
                    time.sleep(3)  # the worker notices, reconnects (or, before the fix, stops)
                    assert worker.poll() is None, (
                        f"the worker stopped after Redis restart {restart + 1}:\n"
                        + worker_log_tail(log)
                    )
                status = client.wait_batch(batch_id, timeout=150)
                results = list(client.batch_results(batch_id))
                assert worker.poll() is None, worker_log_tail(log)
    finally:
        if worker is not None:
            stop_process(worker)
        server.stop()

    assert worker.returncode in (0, -15), "the worker stopped when asked, not before"
    assert "Unrecoverable error" not in log.read_text(errors="replace")
    assert status.done and status.total == RUNS and status.pending == 0
    assert (status.true, status.false) == (RUNS * 3 // 4, RUNS // 4)
    assert len({r.run_id for r in results}) == RUNS and all(r.verdict for r in results)
