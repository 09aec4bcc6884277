"""A fleet-wide limit on model calls: requests and tokens per minute, per model, in Redis.

Fifty workers sharing one provider key must not each believe they own its
rate limit, so every model call first asks this limiter, which keeps one
shared state per model in Redis. The algorithm is GCRA (the generic cell rate
algorithm): per limit, one number, the "theoretical arrival time" of the next
unit of capacity. A call costs 1 request and N tokens; it may go when both
limits have room (a full minute's allowance may be used in a burst), and both
are charged in the same Lua script (``ratelimit_acquire.lua``), so limits never
drift apart and two workers can never both take the last slot. The time it is
given is Redis's clock (``RedisClock``), so workers with skewed clocks still agree.

Waiting counts against the run's deadline: when the wait would end past it,
:meth:`FleetRateLimiter.acquire` raises :class:`RateLimitTimeout` at once
instead of sleeping into a certain budget failure.

Keys (``P`` = settings.key_prefix)::

    P:ratelimit:{model}:rpm   string  theoretical arrival time (seconds, Redis clock)
    P:ratelimit:{model}:tpm   string  same, for tokens
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from workers.fleet.lua_scripts import RedisClock, lua_source

if TYPE_CHECKING:
    import redis

    from schemas.settings import AssaySettings

WINDOW_SECONDS = 60.0
MAX_SLEEP_SECONDS = 1.0  # re-ask at least this often: other workers may free nothing, or time moved


class RateLimitTimeout(TimeoutError):
    """The fleet's model rate limit would keep this call waiting past the run's deadline."""


class FleetRateLimiter:
    """Requests/min and tokens/min per model, shared by every worker on one Redis.

    Implements the engine's rate-limiter protocol: ``acquire(model, tokens,
    deadline)`` with ``deadline`` a ``time.monotonic()`` instant.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str,
        rpm: int | None,
        tpm: int | None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prefix = prefix
        self.rpm = rpm or 0
        self.tpm = tpm or 0
        self._sleep = sleep
        self._clock = clock
        self._redis_clock = RedisClock(client)
        self._acquire_script = client.register_script(lua_source("ratelimit_acquire"))

    @classmethod
    def from_settings(cls, settings: AssaySettings, client: redis.Redis) -> FleetRateLimiter | None:
        """The limiter the settings ask for, or None when neither limit is set."""
        if not settings.llm_rpm and not settings.llm_tpm:
            return None
        return cls(client, prefix=settings.key_prefix, rpm=settings.llm_rpm, tpm=settings.llm_tpm)

    def try_acquire(self, model: str, tokens: int) -> float:
        """Charge one call of ``tokens`` if it fits now (returns 0), else the seconds to wait."""
        keys = [f"{self.prefix}:ratelimit:{model}:rpm", f"{self.prefix}:ratelimit:{model}:tpm"]
        answer = self._acquire_script(
            keys=keys,
            args=[
                self.rpm,
                self.tpm,
                max(0, int(tokens)),
                WINDOW_SECONDS,
                f"{self._redis_clock.now_us() / 1_000_000:.6f}",
            ],
        )
        return float(answer)

    def acquire(self, model: str, tokens: int, deadline: float) -> None:
        """Block until the call fits both limits; RateLimitTimeout if that is past ``deadline``."""
        while True:
            wait = self.try_acquire(model, tokens)
            if wait <= 0:
                return
            if self._clock() + wait >= deadline:
                raise RateLimitTimeout(
                    f"the fleet's rate limit for {model} needs {wait:.1f}s more than the run "
                    "has left; raise ASSAY_LLM_RPM / ASSAY_LLM_TPM or the run's timeout"
                )
            self._sleep(min(wait, MAX_SLEEP_SECONDS))
