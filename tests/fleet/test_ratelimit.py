"""The fleet-wide model rate limiter against a real redis-server."""

from __future__ import annotations

import threading
import time

import pytest

from workers.fleet.ratelimit import FleetRateLimiter, RateLimitTimeout
from workers.fleet.redis_client import connect

pytestmark = pytest.mark.integration


def test_requests_per_minute_are_shared_across_limiters(redis_url: str) -> None:
    # Two limiters = two workers on the same Redis: together they get 6 calls, not 12.
    first = FleetRateLimiter(connect(redis_url), prefix="rl", rpm=6, tpm=None)
    second = FleetRateLimiter(connect(redis_url), prefix="rl", rpm=6, tpm=None)
    granted = [first.try_acquire("m", 10) == 0 for _ in range(4)]
    granted += [second.try_acquire("m", 10) == 0 for _ in range(4)]
    assert granted.count(True) == 6
    wait = first.try_acquire("m", 10)
    assert 5 < wait <= 10.5, "the next slot opens one interval (60/6 s) later"
    assert second.try_acquire("other-model", 10) == 0, "limits are per model"


def test_tokens_per_minute_and_no_partial_charge(redis_url: str) -> None:
    limiter = FleetRateLimiter(connect(redis_url), prefix="rl2", rpm=100, tpm=1000)
    assert limiter.try_acquire("m", 700) == 0
    assert limiter.try_acquire("m", 400) > 0, "700 + 400 tokens exceed 1000/min"
    assert limiter.try_acquire("m", 300) == 0, "the refused call charged nothing"


def test_waiting_respects_the_deadline(redis_url: str) -> None:
    limiter = FleetRateLimiter(connect(redis_url), prefix="rl3", rpm=60, tpm=None)
    for _ in range(60):
        limiter.acquire("m", 1, deadline=time.monotonic() + 5)
    started = time.monotonic()
    limiter.acquire("m", 1, deadline=time.monotonic() + 5)  # one slot per second refills
    assert 0.5 < time.monotonic() - started < 2.5
    with pytest.raises(RateLimitTimeout):
        limiter.acquire("m", 1, deadline=time.monotonic() + 0.2)


def test_concurrent_callers_never_exceed_the_limit(redis_url: str) -> None:
    limiter = FleetRateLimiter(connect(redis_url), prefix="rl4", rpm=20, tpm=None)
    granted: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(5):
            ok = limiter.try_acquire("m", 1) == 0
            with lock:
                granted.append(ok)

    threads = [threading.Thread(target=worker) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert granted.count(True) == 20
