"""The fleet's Redis transport: a channel closed after the connection was lost keeps its
reserved messages instead of stopping the worker, and a clean close still puts them back.

Real redis-server (the test's own); the channel is the project's Celery app's, so the
transport under test is the one ``workers.fleet.broker`` registers. The race itself
(a worker stopped by a Redis restart) is driven end to end in
tests/test_fleet_redis_restart.py; here its end state is set up directly: the
transport detached from its connection, as ``kombu.Connection.collect()`` leaves it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Producer, Queue

from schemas.settings import load_settings
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
