"""The fleet's Redis transport: a channel closed after the connection was lost keeps its
reserved messages instead of stopping the worker, and a clean close still puts them back.

Real redis-server (the test's own); the channel is the project's Celery app's, so the
transport under test is the one ``workers.fleet.broker`` registers. The race itself
(a worker stopped by a Redis restart) is driven end to end in
tests/fleet/test_fleet_redis_restart.py; here its end state is set up directly: the
transport detached from its connection, as ``kombu.Connection.collect()`` leaves it.

The app names its broker by the URL's own scheme (``redis``, ``rediss``, ``sentinel``)
while its connections use the project's transport classes: the worker banner and
``as_uri()`` show ``redis://...`` (password masked), not the transport's import path,
and ``rediss://`` gets kombu's TLS as it would with kombu's own transport.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection, Exchange, Producer, Queue
from pydantic import ValidationError

from schemas.settings import load_settings
from tests.fleet_support import start_worker, stop_process, wait_until, worker_env, worker_log_tail
from workers.fleet import redis_transport
from workers.fleet.broker import KOMBU_UNACKED_KEY, configured_app

QUEUE = Queue("restore-test", Exchange("restore-test", type="direct"), routing_key="restore-test")


@pytest.fixture
def connection(redis_url: str) -> Iterator[Connection]:
    app = configured_app(load_settings(redis_url=redis_url))
    with app.connection_for_write() as conn:
        with conn.channel() as channel:
            Producer(channel).publish(
                {"run": 1}, exchange=QUEUE.exchange, routing_key="restore-test", declare=[QUEUE]
            )
        yield conn


def reserve_one(conn: Connection) -> tuple[Any, Any]:
    """Take the message as a worker does: delivered, unacknowledged, held in ``unacked``."""
    channel = conn.default_channel
    message = channel.basic_get("restore-test", no_ack=False)
    assert message is not None
    return channel, message


def counts(redis_url: str) -> tuple[int, int]:
    client = redis.Redis.from_url(redis_url)
    try:
        return client.llen("restore-test"), client.hlen(KOMBU_UNACKED_KEY)
    finally:
        client.close()


def test_closing_after_a_lost_connection_keeps_the_message_reserved(
    redis_url: str, connection: Connection
) -> None:
    channel, message = reserve_one(connection)
    assert counts(redis_url) == (0, 1)
    connection_errors = connection.connection_errors
    connection.transport.client = None  # what collect() leaves after a connection loss

    channel.close()  # kombu's own transport raises AttributeError here: the worker stops
    # The run it was evaluating finishes and Celery acks it: a connection error, which
    # Celery logs and survives (an AttributeError here stopped the worker too).
    message.ack_log_error(logging.getLogger("test"), connection_errors)

    assert counts(redis_url) == (0, 1), "not restored, not lost: still reserved in Redis"
    # once its visibility timeout has passed, any worker's sweep hands it out again
    with Connection(redis_url, transport_options={"visibility_timeout": 0}) as other:
        other.default_channel.qos.restore_visible()
    assert counts(redis_url) == (1, 0)


def test_a_clean_close_still_puts_the_message_back_at_once(
    redis_url: str, connection: Connection
) -> None:
    channel, _ = reserve_one(connection)
    channel.close()
    assert counts(redis_url) == (1, 0)


def test_acks_from_many_threads_share_one_client_and_all_land(redis_url: str) -> None:
    """Acks reuse one redis client per pool (not one per ack), from any thread, and it is
    rebuilt with the pool after kombu drops the pool (as on a lost connection)."""
    import threading

    app = configured_app(load_settings(redis_url=redis_url))
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        producer = Producer(channel)
        for n in range(40):
            producer.publish(
                {"run": n}, exchange=QUEUE.exchange, routing_key="restore-test", declare=[QUEUE]
            )
        messages = [channel.basic_get("restore-test", no_ack=False) for _ in range(40)]
        assert counts(redis_url) == (0, 40)
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second

        threads = [
            threading.Thread(target=lambda batch=messages[i::8]: [m.ack() for m in batch])
            for i in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert counts(redis_url) == (0, 0), "every ack removed its message from unacked"

        with channel.conn_or_acquire() as before:
            pass
        channel._disconnect_pools()
        with channel.conn_or_acquire() as after:
            assert after is not before
            assert after.connection_pool is channel.pool
            assert after.ping()


def broker_app(broker_url: str) -> Celery:
    """The fleet's app for a broker it is never asked to reach (the store URL is unused)."""
    settings = load_settings(
        redis_url="redis://127.0.0.1:1/0", broker_url=broker_url, broker_sentinel_master="m"
    )
    return configured_app(settings)


def test_a_sentinel_broker_without_its_master_name_is_refused_with_the_setting_to_set() -> None:
    """kombu would only fail on the first message sent, with its own option's name."""
    with pytest.raises(ValidationError, match="set ASSAY_BROKER_SENTINEL_MASTER"):
        load_settings(redis_url="redis://127.0.0.1:1/0", broker_url="sentinel://127.0.0.1:26379")


@pytest.mark.parametrize(
    ("url", "shown", "transport"),
    [
        (
            "redis://:s3cret@127.0.0.1:6399/0",
            "redis://:**@127.0.0.1:6399/0",
            redis_transport.Transport,
        ),
        (
            "rediss://:s3cret@127.0.0.1:6399/0",
            "rediss://:**@127.0.0.1:6399/0",
            redis_transport.Transport,
        ),
        (
            "sentinel://:s3cret@127.0.0.1:26379;sentinel://127.0.0.1:26380",
            "sentinel://:**@127.0.0.1:26379//",  # kombu's own rendering of a Sentinel URL
            redis_transport.SentinelTransport,
        ),
    ],
    ids=["redis", "rediss", "sentinel"],
)
def test_each_scheme_uses_the_fleet_transport_and_shows_its_own_url(
    url: str, shown: str, transport: type
) -> None:
    """Resolved without connecting: the class every connection of the app builds, and the
    URL Celery prints for it (the worker banner, "Connected to ...")."""
    app = broker_app(url)
    for conn in (app.connection(), app.connection_for_write(), app.connection_for_read()):
        assert type(conn.transport) is transport
        assert type(conn.clone().transport) is transport  # pools and failover clone it
        assert conn.as_uri() == shown
    assert app.connection().as_uri(include_password=True) == shown.replace("**", "s3cret")


def test_a_redis_broker_connects_through_the_fleet_channel(redis_url: str) -> None:
    app = configured_app(load_settings(redis_url=redis_url))
    with app.connection_for_write() as conn:
        assert isinstance(conn.default_channel, redis_transport.Channel)
        assert conn.as_uri().startswith("redis://")
        assert conn.as_uri() == Connection(redis_url).as_uri()  # as for kombu's own transport


def first_bytes_sent_to(url_for: Callable[[int], str]) -> bytes:
    """What a client of this app sends first to a server (which answers nothing)."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def accept_one() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            received.append(conn.recv(16))

    thread = threading.Thread(target=accept_one, daemon=True)
    thread.start()
    conn = broker_app(url_for(listener.getsockname()[1])).connection_for_write(
        transport_options={"socket_timeout": 1, "socket_connect_timeout": 1}
    )
    try:
        with pytest.raises(redis.exceptions.RedisError):  # the server never answers
            conn.connect()
    finally:
        conn.release()
        thread.join(timeout=10)
        listener.close()
    assert received, "the client never connected"
    return received[0]


def test_a_rediss_broker_speaks_tls() -> None:
    """kombu turns on TLS for the ``rediss`` scheme; the fleet's transport must not lose it."""
    hello = first_bytes_sent_to(lambda port: f"rediss://127.0.0.1:{port}/0")
    assert hello[:2] == b"\x16\x03", f"a TLS handshake, not {hello!r}"
    plain = first_bytes_sent_to(lambda port: f"redis://127.0.0.1:{port}/0")
    assert plain[:1] == b"*", f"a Redis command, not {plain!r}"


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_worker_banner_shows_the_redis_url(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(worker_env(redis_url), log, concurrency=1)
    try:
        assert wait_until(lambda: "[queues]" in worker_log_tail(log, 100_000), timeout=60), (
            worker_log_tail(log)
        )
    finally:
        stop_process(worker)
    # kombu's rendering of the URL, as for its own transport (it masks even no password)
    assert f".> transport:   {Connection(redis_url).as_uri()}\n" in log.read_text()
