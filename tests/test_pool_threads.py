"""A threads-pool worker starts all its threads when it is ready, before its first burst.

A fresh worker that started them one per task stalled its consumer once per new
thread, and a burst's runs started late (workers/fleet/pool_threads.py).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fleet_support import (
    start_worker,
    stop_process,
    wait_until,
    worker_env,
    worker_log_tail,
)
from workers.fleet.pool_threads import start_pool_threads


@dataclass
class FakeThreadsPool:
    """What start_pool_threads reads of Celery's threads pool: its executor and limit."""

    executor: ThreadPoolExecutor
    limit: int


def test_every_thread_of_the_pool_is_running_before_any_task() -> None:
    executor = ThreadPoolExecutor(max_workers=12)
    try:
        assert start_pool_threads(FakeThreadsPool(executor, 12)) == 12
        prefix = executor._thread_name_prefix
        assert sum(t.name.startswith(prefix) for t in threading.enumerate()) == 12
        # and they are idle: twelve tasks now run at once without a thirteenth thread
        gate = threading.Barrier(13, timeout=10)
        for _ in range(12):
            executor.submit(gate.wait)
        gate.wait()
    finally:
        executor.shutdown()


def test_pools_without_threads_to_start_are_left_alone() -> None:
    assert start_pool_threads(None) == 0
    assert start_pool_threads(object()) == 0  # prefork and solo have no executor


def test_a_pool_whose_threads_do_not_start_in_time_does_not_stop_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import workers.fleet.pool_threads as pool_threads

    monkeypatch.setattr(pool_threads, "START_TIMEOUT_SECONDS", 0.5)
    executor = ThreadPoolExecutor(max_workers=1)  # too few threads for the limit claimed
    try:
        started = time.monotonic()
        assert start_pool_threads(FakeThreadsPool(executor, 3)) == 0
        assert time.monotonic() - started < 5
    finally:
        executor.shutdown()


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_real_worker_has_its_pool_threads_before_its_first_task(
    redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(worker_env(redis_url), log, concurrency=24)
    try:
        assert wait_until(lambda: " ready." in log.read_text(), timeout=90), worker_log_tail(log)
        threads = len(list(Path(f"/proc/{worker.pid}/task").iterdir()))
        assert threads > 24, (threads, worker_log_tail(log))  # no task was ever sent
    finally:
        stop_process(worker)
