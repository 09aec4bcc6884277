"""Every thread of a threads-pool worker started when the worker is ready, not on its first burst.

Why: Celery's threads pool is a ``ThreadPoolExecutor``, which starts a thread
for each task that finds none idle, up to the concurrency. Starting a thread
waits until the new thread has run (``Thread.start``), and in a busy worker the
new thread must first win the GIL from the runs already going, so on a fresh
worker the consumer thread, which takes every message, stalls once per thread
while a burst's runs pile up behind it. bench_fleet (b), 200 runs at once on a
fresh worker of two processes: the last run started 0.49-0.51 s after the
batch, 0.26-0.30 s with the threads started beforehand, the same as a second
wave on a warm worker (0.73 of ideal against 0.79-0.83). A worker started by
an autoscaler meets exactly that burst. The cost is the idle threads (a stack's
few pages of memory each), as a prefork pool forks its processes up front.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import structlog

_log = structlog.get_logger(__name__)

START_TIMEOUT_SECONDS = 30.0


def start_pool_threads(pool: Any) -> int:
    """Start ``pool``'s threads now; how many there are (0: not a threads pool).

    Each thread is given one task that waits until all have started, so none is
    idle (an idle thread would be reused instead of a new one started). The
    caller is the consumer's thread at ``worker_ready``, before any message is
    handed out, so no run waits behind these tasks.
    """
    executor = getattr(pool, "executor", None)
    limit = getattr(pool, "limit", None)
    if executor is None or not isinstance(limit, int) or limit < 1:
        return 0  # prefork, solo: nothing to start
    everyone = threading.Barrier(limit + 1, timeout=START_TIMEOUT_SECONDS)
    for _ in range(limit):
        executor.submit(_meet, everyone)
    try:
        everyone.wait()
    except threading.BrokenBarrierError:
        _log.warning("pool_threads_not_started", threads=limit, timeout=START_TIMEOUT_SECONDS)
        return 0
    return limit


def _meet(everyone: threading.Barrier) -> None:
    # Broken: the starter gave up and said so; this thread stays in the pool all the same.
    with contextlib.suppress(threading.BrokenBarrierError):
        everyone.wait()
