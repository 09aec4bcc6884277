"""One way to open a Redis connection for assay's own keys (store, limiter, scheduler).

A worker must ride out a Redis blip (a restart, a failover, a dropped
connection) without losing a verdict, so every client made here checks idle
connections before use and retries a command that failed on a connection or
timeout error, with exponential backoff and jitter, for about half a minute.
Only idempotent steps go through it: the store's Lua scripts are written so a
retried call changes nothing twice.

That patience is wrong for a caller a person is waiting on (the CLI, ``assay.Client``,
the HTTP API): against a Redis that is not there at all it would sit out the whole
half minute before saying so. Those callers ask for ``connect(url, fail_fast=True)``:
one quick PING (:func:`require_reachable`, about two seconds at most) first, and
:class:`RedisUnreachable`, naming the URL and what to do, when it gets no answer.
Once Redis has answered, the client they get rides out blips like every other.

The connections are redis-py's own; with ``hiredis`` installed (a dependency) redis-py
packs commands and parses replies in C.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from workers.engine.shown_urls import shown_url

if TYPE_CHECKING:
    import redis

# Backoff 0.05 s doubling to 2 s with jitter: 20 retries cover ~30 s of outage.
RETRIES = 20
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 2.0
HEALTH_CHECK_INTERVAL_SECONDS = 15
SOCKET_TIMEOUT_SECONDS = 10.0
# A person is waiting: one connection attempt, no retry, answers "is Redis there?".
PROBE_SECONDS = 2.0
# A loop that tries again on its own (the scheduler's round, a worker's presence): a
# command fails within about a second against a Redis that is gone, so the loop notices
# and says so (``RedisOutage``) instead of sitting out half a minute of retries.
LOOP_RETRIES = 2
LOOP_TIMEOUT_SECONDS = 2.0
LOOP_BACKOFF_CAP_SECONDS = 0.25
FLEET_REDIS = ("the fleet's Redis", "start a fleet with `assay up` or fix ASSAY_REDIS_URL")
FLEET_BROKER = ("the fleet's broker", "start it or fix ASSAY_BROKER_URL")


class FleetNotConfigured(RuntimeError):
    """No broker or Redis URL: the fleet cannot start (exported by workers.fleet.broker too)."""


class RedisUnreachable(ConnectionError):
    """Redis did not answer one quick PING: the one-sentence reason says where and what to do.

    A builtin ``ConnectionError`` (not redis-py's), so this module and its callers can
    name it without importing redis.
    """

    def __init__(self, url: str, problem: str, role: tuple[str, str] = FLEET_REDIS) -> None:
        self.url = url
        self.problem = problem
        what, remedy = role
        super().__init__(f"cannot reach {what} at {shown_url(url)} ({problem}); {remedy}")


def probe(url: str, timeout: float = PROBE_SECONDS) -> str | None:
    """None when Redis at ``url`` answers PING within ``timeout``, else why not (one line)."""
    import redis as redis_lib
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis_lib.Redis.from_url(
        url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        client.ping()
    except redis_lib.exceptions.RedisError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    finally:
        client.close()
    return None


def require_reachable(
    url: str, timeout: float = PROBE_SECONDS, role: tuple[str, str] = FLEET_REDIS
) -> None:
    """Raise :class:`RedisUnreachable` at once when Redis at ``url`` does not answer PING.

    ``role`` is (what it is, what to do): ``FLEET_REDIS`` or ``FLEET_BROKER``.
    """
    problem = probe(url, timeout)
    if problem is not None:
        raise RedisUnreachable(url, problem, role)


def connect(
    url: str,
    *,
    retries: int = RETRIES,
    timeout_seconds: float = SOCKET_TIMEOUT_SECONDS,
    backoff_cap_seconds: float = BACKOFF_CAP_SECONDS,
    keepalive: bool = True,
    fail_fast: bool = False,
) -> redis.Redis:
    """A decoded-string client for ``url`` that retries connection and timeout errors.

    The defaults are the workers' patient ones; a caller that must answer a
    person quickly (the HTTP API) passes fewer retries and shorter timeouts.
    ``fail_fast`` checks first that Redis answers at all (:func:`require_reachable`),
    so a Redis that is down when the caller starts is :class:`RedisUnreachable`
    within seconds rather than half a minute of retries.
    """
    if fail_fast:
        require_reachable(url)
    import redis as redis_lib

    options = _riding_out_blips(
        retries, timeout_seconds, backoff_cap_seconds, keepalive and not is_unix_socket(url)
    )
    return redis_lib.Redis.from_url(url, **options)


UNIX_SCHEME = "unix://"


def is_unix_socket(url: str) -> bool:
    """A Redis reached over a unix socket (``unix:///run/redis.sock?db=0``, redis-py's spelling).

    Why it matters: TCP keepalive is an option of TCP connections only, and redis-py's
    unix-socket connection refuses it (a ``TypeError`` on the first command).
    """
    return url.startswith(UNIX_SCHEME)


def connect_for_loop(url: str, *, fail_fast: bool = False) -> redis.Redis:
    """:func:`connect` for a loop that tries again on its own: little patience per command
    (``LOOP_*``), so a Redis that is gone fails the round within about a second."""
    return connect(
        url,
        retries=LOOP_RETRIES,
        timeout_seconds=LOOP_TIMEOUT_SECONDS,
        backoff_cap_seconds=LOOP_BACKOFF_CAP_SECONDS,
        fail_fast=fail_fast,
    )


def lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` says Redis could not be reached (not a bad reply or a bug)."""
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return isinstance(exc, RedisConnectionError | RedisTimeoutError | ConnectionError)


class RedisOutage:
    """Says when Redis stops answering a loop: at once, then every ``every`` seconds while
    it stays away, and once when it answers again, so a log shows the outage as it
    happens rather than one line per failed command or none for half a minute.

    ``failed(exc)`` after a round that could not reach Redis, ``answered()`` after one
    that did; ``down`` says whether the last round failed.
    """

    def __init__(
        self, log: Any, url: str, every: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.log = log
        self.url = shown_url(url)
        self.every = every
        self.clock = clock
        self.since: float | None = None
        self._said_at = 0.0

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> None:
        now = self.clock()
        if self.since is None:
            self.since = self._said_at = now
        elif now - self._said_at < self.every:
            return
        else:
            self._said_at = now
        self.log.warning(
            "redis_unreachable",
            redis=self.url,
            error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            down_seconds=round(now - self.since, 1),
            detail=f"trying again; said again every {self.every:g}s until it answers",
        )

    def answered(self) -> None:
        if self.since is None:
            return
        self.log.info(
            "redis_reachable_again",
            redis=self.url,
            down_seconds=round(self.clock() - self.since, 1),
        )
        self.since = None


def connect_sentinel_master(
    sentinels: Sequence[tuple[str, int]],
    master_name: str,
    *,
    sentinel_options: Mapping[str, Any] | None = None,
    username: str | None = None,
    password: str | None = None,
    db: int = 0,
    ssl: Mapping[str, Any] | None = None,
    retries: int = RETRIES,
    timeout_seconds: float = SOCKET_TIMEOUT_SECONDS,
    backoff_cap_seconds: float = BACKOFF_CAP_SECONDS,
) -> redis.Redis:
    """A client like :func:`connect`'s to whichever server ``sentinels`` call ``master_name``.

    The address is asked of the sentinels each time a connection is opened, and a
    connection that failed is retried (reopened) like any other, so after a failover
    the client's commands reach the new master. ``sentinel_options`` are the redis-py
    options of the connections to the sentinels themselves (their own password, their
    timeouts: ``workers.fleet.broker.sentinel_connection_options``), as kombu's
    ``sentinel_kwargs``; without them the sentinels are asked without a password with
    this client's timeouts. The sentinels are asked without TLS, the master with the
    ``ssl_*`` options of redis-py's connections in ``ssl``, as kombu's Sentinel
    transport does.
    """
    from redis.sentinel import Sentinel

    options = _riding_out_blips(retries, timeout_seconds, backoff_cap_seconds, keepalive=True)
    sentinel = Sentinel(
        list(sentinels),
        sentinel_kwargs=dict(sentinel_options)
        if sentinel_options is not None
        else {
            "socket_timeout": options["socket_timeout"],
            "socket_connect_timeout": options["socket_connect_timeout"],
        },
    )
    tls = {"ssl": True, **ssl} if ssl else {}
    return sentinel.master_for(
        master_name, username=username, password=password, db=db, **options, **tls
    )


def _riding_out_blips(
    retries: int, timeout_seconds: float, backoff_cap_seconds: float, keepalive: bool
) -> dict[str, Any]:
    """redis-py client options: decoded replies, checked idle connections, retried errors."""
    from redis.backoff import EqualJitterBackoff
    from redis.exceptions import ConnectionError, TimeoutError
    from redis.retry import Retry

    tcp = {"socket_keepalive": True} if keepalive else {}
    return {
        "decode_responses": True,
        "health_check_interval": HEALTH_CHECK_INTERVAL_SECONDS,
        "socket_timeout": timeout_seconds,
        "socket_connect_timeout": timeout_seconds,
        **tcp,
        "retry": Retry(
            EqualJitterBackoff(cap=backoff_cap_seconds, base=BACKOFF_BASE_SECONDS), retries
        ),
        "retry_on_error": [ConnectionError, TimeoutError],
    }


# redis-py's hints cannot know that ``connect`` decodes replies, so they say ``bytes | str``;
# these turn a reply into the text it is (decoding bytes from a raw client too) and
# refuse anything else, instead of casting it away.
def text(value: object) -> str:
    """One reply value as text."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    raise TypeError(f"expected a Redis string reply, got {type(value).__name__}")


def texts(values: Iterable[object] | None) -> list[str]:
    """A list or set reply as a list of text."""
    return [text(value) for value in values or ()]


def text_fields(fields: Mapping[Any, Any] | None) -> dict[str, str]:
    """A hash (or stream entry) reply as a text dict; an absent one is empty."""
    return {text(key): text(value) for key, value in (fields or {}).items()}


def stream_entries(reply: object) -> list[tuple[str, dict[str, str]]]:
    """An XRANGE / XREVRANGE reply: (entry id, fields) pairs, in the reply's order.

    A deleted entry a consumer group still lists has no fields: it comes back empty.
    """
    if not reply:
        return []
    if not isinstance(reply, list):
        raise TypeError(f"expected a Redis stream reply, got {type(reply).__name__}")
    return [(text(entry_id), text_fields(fields)) for entry_id, fields in reply]


def group_entries(reply: object) -> list[tuple[str, dict[str, str]]]:
    """An XREAD / XREADGROUP reply (a list of [stream, entries]) as one list of entries."""
    if not reply:
        return []
    if not isinstance(reply, list):
        raise TypeError(f"expected a Redis XREADGROUP reply, got {type(reply).__name__}")
    return [entry for _, entries in reply for entry in stream_entries(entries)]
