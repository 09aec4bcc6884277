"""The broker: its names, its key layout and the Celery app's configuration, in one place.

Everything that must agree about where evaluations wait reads it here: the
producers (``Dispatcher``), the worker's app (``workers.fleet.celery_app``), the
lost-run sweeper (which looks inside kombu's Redis keys) and the queue-depth
gauge. The task name is a wire contract: messages already queued carry it, so it
never changes.

Why these Celery settings (see docs/fleet.md, "Crash safety"):

- Results are not kept by Celery (no result backend): verdicts go to the
  verdict store, which is idempotent per run id.
- ``task_acks_late`` + ``task_reject_on_worker_lost``: a message is removed
  only after its run finished, so a worker killed mid-run loses nothing. On
  Redis the broker hands an unacknowledged message out again after the
  visibility timeout, which must outlast the longest run; the restore sweep
  runs every few seconds so a short timeout (tests) takes effect quickly.
- Prefetch multiplier 1: a worker reserves no more runs than it has threads,
  so runs wait in the broker, where another worker can take them.
- Time limits are set per task when it is sent, from the run's own deadline
  (``Dispatcher``); the threads pool cannot interrupt a thread, so there
  the engine's deadline is the limit that bites and these are a backstop for
  the prefork pool.
- Task events only when ``ASSAY_TASK_EVENTS`` is on (for Flower and Celery
  exporters): each event is a Redis publish, several per evaluation, for
  nothing when no monitor listens.
- On Redis, the transport is ``workers.fleet.redis_transport``: kombu's own, except
  that a channel closed after the connection was lost leaves its prefetched
  messages reserved (the visibility timeout returns them) instead of restoring
  them, and reports an ack on it as a connection error; both otherwise raise
  AttributeError and stop the worker (that module's docstring tells the race).
  The app's connections (``FleetConnection``) keep the URL's scheme as their
  transport name and swap in that class, rather than naming the class in
  ``broker_transport``: see ``FleetConnection`` for why.
- The threads pool by default: an evaluation spends nearly all its time
  waiting on the model over HTTP, so threads in one process give the
  concurrency without a process per run (bench/bench_fleet.py measures it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from celery import Celery
from celery.app.amqp import AMQP
from kombu import Connection
from kombu.transport import get_transport_cls
from kombu.utils.url import url_to_parts

from schemas.settings import AssaySettings
from workers.fleet.redis_client import (
    BACKOFF_CAP_SECONDS,
    PROBE_SECONDS,
    RETRIES,
    SOCKET_TIMEOUT_SECONDS,
    FleetNotConfigured,
    is_unix_socket,
)

if TYPE_CHECKING:
    import redis

TASK_NAME = "assay.evaluate"

# kombu's Redis transport keeps one list per queue and priority step, and reserved
# (unacknowledged) messages in one hash; these are its defaults
# (kombu.transport.redis PRIORITY_STEPS, Channel.sep and the ``unacked_key`` option).
KOMBU_PRIORITY_STEPS = (0, 3, 6, 9)
KOMBU_PRIORITY_SEP = "\x06\x16"
KOMBU_UNACKED_KEY = "unacked"

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_SENTINEL_SCHEME = "sentinel://"
_SENTINEL_PORT = 26379  # kombu's SentinelTransport.default_port, for a sentinel URL without one
# One question to one sentinel (connect, or a reply): they answer at once when they are up.
SENTINEL_TIMEOUT_SECONDS = 3.0
# kombu's Redis transports with the restore-on-loss fix, by the transport name kombu reads
# off the URL's scheme (imported when a connection is first used, so sending a task does
# not pay for it before then).
_FLEET_TRANSPORTS = {
    "redis": "workers.fleet.redis_transport:Transport",
    "rediss": "workers.fleet.redis_transport:Transport",
    "sentinel": "workers.fleet.redis_transport:SentinelTransport",
}


def queue_name(settings: AssaySettings) -> str:
    """The broker queue evaluations wait in (on Redis: the list key of that name)."""
    return f"{settings.key_prefix}.evaluations"


def kombu_queue_keys(queue: str) -> list[str]:
    """The Redis lists that hold ``queue``'s waiting messages, one per priority step."""
    return [
        queue if step == 0 else f"{queue}{KOMBU_PRIORITY_SEP}{step}"
        for step in KOMBU_PRIORITY_STEPS
    ]


def broker_url(settings: AssaySettings) -> str:
    """The broker's URL: ``ASSAY_BROKER_URL``, else the Redis of the verdict store."""
    url = settings.broker_url or settings.redis_url
    if not url:
        raise FleetNotConfigured(
            "no broker is configured: set ASSAY_REDIS_URL (or ASSAY_BROKER_URL), "
            "or start local mode with `assay up`"
        )
    return url


def kombu_url(url: str) -> str:
    """``url`` as kombu reads it: a unix-socket Redis URL in redis-py's spelling
    (``unix://[:PASSWORD@]/PATH?db=N``, what ``ASSAY_REDIS_URL`` takes) becomes kombu's
    own (``redis+socket://[:PASSWORD@]/PATH?virtual_host=N``); kombu has no ``unix``
    transport. Any other URL is kombu's already."""
    if not is_unix_socket(url):
        return url
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    database = f"?{urlencode({'virtual_host': query['db']})}" if "db" in query else ""
    return f"redis+socket://{parts.netloc}{parts.path}{database}"  # urlunsplit drops the //


def is_redis_url(url: str) -> bool:
    """A Redis URL this process can connect to directly (not Sentinel)."""
    return url.startswith(_REDIS_SCHEMES)


def is_redis_broker(settings: AssaySettings) -> bool:
    """A Redis broker this process can read with a plain URL (the depth gauge)."""
    return is_redis_url(settings.broker_url or settings.redis_url or "")


def has_visibility_timeout(settings: AssaySettings) -> bool:
    """Redis-family brokers (Sentinel too): they hand an unacknowledged message out again,
    and can lose one outright, so the lost-run sweeper watches them (``broker_redis``)."""
    url = settings.broker_url or settings.redis_url or ""
    return url.startswith((*_REDIS_SCHEMES, _SENTINEL_SCHEME))


def broker_redis(
    settings: AssaySettings,
    *,
    retries: int = RETRIES,
    timeout_seconds: float = SOCKET_TIMEOUT_SECONDS,
    backoff_cap_seconds: float = BACKOFF_CAP_SECONDS,
) -> redis.Redis:
    """A redis-py client on the Redis that holds the broker's keys (the lost-run sweeper,
    the queue-depth gauge); the defaults are a worker's patience, as for ``connect``.

    For a Sentinel broker that is the master the sentinels name now (asked again on
    every new connection, so a failover is followed), reached as kombu's Sentinel
    transport reaches it: the URL is read by kombu itself (``FleetConnection``: every
    ``;``-separated sentinel, the password, the database, the ``ssl_*`` query), the
    master is ``broker_sentinel_master``, and the sentinels are asked with their own
    credentials (``broker_sentinel_password``, ``broker_sentinel_username``).
    """
    from workers.fleet.redis_client import connect, connect_sentinel_master

    patience: dict[str, Any] = {
        "retries": retries,
        "timeout_seconds": timeout_seconds,
        "backoff_cap_seconds": backoff_cap_seconds,
    }
    url = broker_url(settings)
    if not url.startswith(_SENTINEL_SCHEME):
        return connect(url, **patience)
    broker = sentinel_broker(settings)
    return connect_sentinel_master(
        broker.sentinels,
        broker.master_name,
        sentinel_options=sentinel_connection_options(settings),
        **broker.master_options,
        **patience,
    )


@dataclass(frozen=True)
class SentinelBroker:
    """A ``sentinel://`` broker URL as kombu reads it, with the master's name."""

    sentinels: list[tuple[str, int]]
    master_name: str
    master_options: dict[str, Any]  # username, password, db, ssl: for the master itself


def sentinel_broker(settings: AssaySettings) -> SentinelBroker:
    """The sentinels, the master's name and the master's credentials of a Sentinel broker."""
    url = broker_url(settings)
    master = settings.broker_sentinel_master
    if not master:  # the settings refuse a Sentinel broker without one
        raise FleetNotConfigured("a Sentinel broker needs ASSAY_BROKER_SENTINEL_MASTER")
    parsed = FleetConnection(url)
    sentinels = [
        (parts.hostname or "127.0.0.1", parts.port or _SENTINEL_PORT)
        for parts in map(url_to_parts, parsed.alt or [url])
        if parts.scheme == "sentinel"
    ]
    return SentinelBroker(
        sentinels,
        master,
        {
            "username": parsed.userid,
            "password": parsed.password,
            "db": _database_number(parsed.virtual_host),
            "ssl": parsed.ssl if isinstance(parsed.ssl, dict) else None,
        },
    )


def is_sentinel_broker(settings: AssaySettings) -> bool:
    """The broker is reached through Redis Sentinel (``sentinel://``)."""
    return (settings.broker_url or settings.redis_url or "").startswith(_SENTINEL_SCHEME)


def require_broker_reachable(
    settings: AssaySettings, timeout_seconds: float = PROBE_SECONDS
) -> None:
    """Raise ``RedisUnreachable`` within seconds when a Sentinel broker cannot take a message.

    For callers a person waits on (``Dispatcher.from_settings(fail_fast=True)``), as
    ``require_reachable`` is for a Redis URL: one question to each sentinel in turn (no
    retries, ``timeout_seconds`` each) until one names the master, then one PING to that
    master. Otherwise the first publish would sit out kombu's connection and publish
    retries (half a minute against a closed port, minutes against a silent one). The
    message says which sentinel or master said what, and which setting to fix; it never
    repeats a password.
    """
    from workers.fleet.redis_client import RedisUnreachable

    found = _sentinel_problem(settings, timeout_seconds)
    if found is not None:
        problem, remedy = found
        raise RedisUnreachable(broker_url(settings), problem, ("the fleet's broker", remedy))


_FIX_URL = "start it or fix ASSAY_BROKER_URL"


def _sentinel_problem(settings: AssaySettings, timeout_seconds: float) -> tuple[str, str] | None:
    """None when a sentinel names a master that answers PING; else (what, what to do)."""
    import redis as redis_lib

    broker = sentinel_broker(settings)
    options = sentinel_connection_options(settings, timeout_seconds)
    problems: list[str] = []
    remedy = _FIX_URL
    address: tuple[str, int] | None = None
    for host, port in broker.sentinels:
        where = f"sentinel {host}:{port}"
        ask = redis_lib.Redis(host=host, port=port, **options)
        try:
            state = ask.sentinel_master(broker.master_name)
        except redis_lib.exceptions.AuthenticationError as exc:
            problems.append(_refused(where, exc, settings.broker_sentinel_password is not None))
            remedy = (
                "set ASSAY_BROKER_SENTINEL_PASSWORD (and ASSAY_BROKER_SENTINEL_USERNAME for an "
                "ACL user) to what the sentinels require, not the master's password"
            )
            continue
        except redis_lib.exceptions.ResponseError as exc:  # "No such master with that name"
            problems.append(f"{where}: {_first_line(exc)}")
            remedy = "fix ASSAY_BROKER_SENTINEL_MASTER to the name the sentinels monitor"
            continue
        except redis_lib.exceptions.RedisError as exc:
            problems.append(f"{where}: {_first_line(exc)}")
            continue
        finally:
            ask.close()
        if not isinstance(state, dict):  # redis-py parses SENTINEL MASTER into a dict
            problems.append(f"{where}: an unexpected reply to SENTINEL MASTER")
            continue
        named = f"master {broker.master_name!r} at {state['ip']}:{state['port']}"
        if not state.get("is_master") or state.get("is_sdown") or state.get("is_odown"):
            problems.append(f"{where} reports {named} down")
            continue
        address = (str(state["ip"]), int(state["port"]))
        break
    if address is None:
        return "; ".join(problems) or "no sentinel in the URL", remedy
    return _master_problem(broker, address, timeout_seconds)


def _master_problem(
    broker: SentinelBroker, address: tuple[str, int], timeout_seconds: float
) -> tuple[str, str] | None:
    import redis as redis_lib
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    options = dict(broker.master_options)
    ssl = options.pop("ssl", None)
    tls = {"ssl": True, **ssl} if ssl else {}
    client = redis_lib.Redis(
        host=address[0],
        port=address[1],
        socket_timeout=timeout_seconds,
        socket_connect_timeout=timeout_seconds,
        retry=Retry(NoBackoff(), 0),
        **options,
        **tls,
    )
    where = f"master {broker.master_name!r} at {address[0]}:{address[1]}, named by the sentinels,"
    try:
        client.ping()
    except redis_lib.exceptions.AuthenticationError as exc:
        return (
            _refused(where, exc, broker.master_options.get("password") is not None),
            "fix the master's password in ASSAY_BROKER_URL (sentinel://:PASSWORD@host:port)",
        )
    except redis_lib.exceptions.RedisError as exc:
        return f"{where} did not answer: {_first_line(exc)}", _FIX_URL
    finally:
        client.close()
    return None


def _refused(where: str, exc: Exception, had_password: bool) -> str:
    if had_password:  # WRONGPASS, or AUTH where no password is set: the server's words
        return f"{where} refused the password ({_first_line(exc)})"
    return f"{where} requires a password"  # NOAUTH, or redis-py's HELLO refused


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _database_number(virtual_host: str | None) -> int:
    """The Redis database a kombu virtual host names, as kombu's Redis channel reads it."""
    path = (virtual_host or "").removeprefix("/")
    return int(path) if path else 0


class FleetConnection(Connection):
    """A kombu connection whose Redis transports are the fleet's, under their usual names.

    Why not ``broker_transport="workers.fleet.redis_transport:Transport"``: kombu
    keeps that setting as the connection's transport name, so the worker banner and
    ``as_uri()`` printed ``workers.fleet.redis_transport:Transport://...``, and
    ``rediss://`` lost its TLS (kombu turns on TLS for a URL without ``ssl_*`` options
    only when the name is ``rediss``), connecting in plain text. Here the name stays
    the URL's scheme, so kombu renders and configures the connection as it would for
    its own transport; only the class that name stands for is the fleet's. Clones
    (connection pools, failover) are built from ``self.__class__``, so they keep it.
    """

    def get_transport_cls(self) -> Any:
        fleet = _FLEET_TRANSPORTS.get(self.transport_cls)
        return get_transport_cls(fleet) if fleet else super().get_transport_cls()


class FleetAMQP(AMQP):
    """Celery's broker plumbing, making its connections ``FleetConnection``s."""

    Connection = FleetConnection


def sentinel_connection_options(
    settings: AssaySettings, timeout_seconds: float = SENTINEL_TIMEOUT_SECONDS
) -> dict[str, Any]:
    """redis-py options for connections to the sentinels themselves (not to the master).

    Their own credentials (a sentinel's ``requirepass`` or ACL user is not the master's),
    short timeouts, and no retries of their own: a sentinel answers one small question
    at once or not at all, and whoever asked (kombu's connection retries, the sweeper's
    client) asks again, so a dead or silent sentinel costs seconds, not minutes
    (redis-py's default for these connections, without ``sentinel_kwargs``, is the
    master's 30-second socket timeout, retried three times inside each of three retries).
    """
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    options: dict[str, Any] = {
        "socket_timeout": timeout_seconds,
        "socket_connect_timeout": timeout_seconds,
        "socket_keepalive": True,
        "retry": Retry(NoBackoff(), 0),
    }
    if settings.broker_sentinel_password is not None:
        options["password"] = settings.broker_sentinel_password.get_secret_value()
        if settings.broker_sentinel_username:
            options["username"] = settings.broker_sentinel_username
    return options


def sentinel_options(
    settings: AssaySettings, timeout_seconds: float = SENTINEL_TIMEOUT_SECONDS
) -> dict[str, Any]:
    """The kombu transport options of a ``sentinel://`` connection: the master's name, and
    how to talk to the sentinels (``sentinel_kwargs``: :func:`sentinel_connection_options`)."""
    master = settings.broker_sentinel_master
    if not master:
        return {}
    return {
        "master_name": master,
        "sentinel_kwargs": sentinel_connection_options(settings, timeout_seconds),
    }


def _transport_options(settings: AssaySettings) -> dict[str, Any]:
    visibility = settings.broker_visibility_timeout_seconds
    return {
        **sentinel_options(settings),
        "visibility_timeout": visibility,
        # Sweep for abandoned messages about six times per visibility timeout (1-10 s).
        "unacked_restore_interval": max(1, min(10, int(visibility / 6))),
        "unacked_restore_throttle": 1,
        # kombu holds a Redis lock while it restores; a worker SIGKILLed inside that window
        # leaves the lock behind until it expires (kombu's default: 300 s), and no worker can
        # restore abandoned messages meanwhile. Tie the expiry to the visibility timeout.
        "unacked_mutex_expire": max(5, min(300, int(visibility / 4))),
        "socket_timeout": 30,
        "socket_connect_timeout": 10,
        "socket_keepalive": True,
        "health_check_interval": 15,
    }


def configured_app(settings: AssaySettings) -> Celery:
    """A Celery app for these settings, without tasks: enough to send evaluations.

    The worker's app (``workers.fleet.celery_app``) adds the evaluation task to it.
    """
    url = broker_url(settings)
    app = Celery("assay", broker=kombu_url(url), amqp=FleetAMQP, set_as_current=False)
    queue = queue_name(settings)
    app.conf.update(
        task_default_queue=queue,
        task_serializer="json",
        accept_content=["json"],
        result_backend=None,
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        worker_pool=settings.worker_pool,
        worker_concurrency=settings.worker_concurrency,
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,  # structlog writes its own lines to stderr
        broker_transport_options=_transport_options(settings),
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        task_publish_retry=True,
        task_publish_retry_policy={
            "max_retries": 20,
            "interval_start": 0.1,
            "interval_step": 0.5,
            "interval_max": 2.0,
        },
    )
    app.assay_settings = settings
    return app
