"""One way to open a Redis connection for assay's own keys (store, limiter, scheduler).

A worker must ride out a Redis blip (a restart, a failover, a dropped
connection) without losing a verdict, so every client made here checks idle
connections before use and retries a command that failed on a connection or
timeout error, with exponential backoff and jitter, for about half a minute.
Only idempotent steps go through it: the store's Lua scripts are written so a
retried call changes nothing twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

# Backoff 0.05 s doubling to 2 s with jitter: 20 retries cover ~30 s of outage.
RETRIES = 20
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 2.0
HEALTH_CHECK_INTERVAL_SECONDS = 15
SOCKET_TIMEOUT_SECONDS = 10.0


def connect(
    url: str,
    *,
    retries: int = RETRIES,
    timeout_seconds: float = SOCKET_TIMEOUT_SECONDS,
    backoff_cap_seconds: float = BACKOFF_CAP_SECONDS,
    keepalive: bool = True,
) -> redis.Redis:
    """A decoded-string client for ``url`` that retries connection and timeout errors.

    The defaults are the workers' patient ones; a caller that must answer a
    person quickly (the HTTP API) passes fewer retries and shorter timeouts.
    """
    import redis as redis_lib
    from redis.backoff import EqualJitterBackoff
    from redis.exceptions import ConnectionError, TimeoutError
    from redis.retry import Retry

    return redis_lib.Redis.from_url(
        url,
        decode_responses=True,
        health_check_interval=HEALTH_CHECK_INTERVAL_SECONDS,
        socket_timeout=timeout_seconds,
        socket_connect_timeout=timeout_seconds,
        socket_keepalive=keepalive,
        retry=Retry(
            EqualJitterBackoff(cap=backoff_cap_seconds, base=BACKOFF_BASE_SECONDS),
            retries,
        ),
        retry_on_error=[ConnectionError, TimeoutError],
    )
