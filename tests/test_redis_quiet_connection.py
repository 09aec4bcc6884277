"""The fleet's Redis connections keep redis-py's behaviour with fewer system calls
(workers/fleet/redis_client.py ``quiet_connection_class``, issue 15): a dropped or
out-of-step connection is replaced before a command is sent on it, a server that
stops answering is a timeout within the configured seconds, and pub/sub reads
with their own timeout still work.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis
import redis.exceptions

from tests.tcp_support import tcp_server
from workers.fleet.redis_client import connect, quiet_connection_class


def test_a_fleet_client_waits_in_the_kernel_not_in_poll(redis_url: str) -> None:
    client = connect(redis_url, timeout_seconds=2.5)
    try:
        assert client.ping()
        connection = client.connection_pool.get_connection()
        try:
            assert isinstance(connection, quiet_connection_class())
            sock = connection._sock
            assert sock is not None and sock.gettimeout() is None  # blocking for Python
            seconds, micros = struct.unpack(
                "ll", sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)
            )
            assert seconds + micros / 1e6 == pytest.approx(2.5, abs=0.01)
        finally:
            client.connection_pool.release(connection)
    finally:
        client.close()


def test_tls_and_unix_socket_urls_keep_redis_pys_own_connections() -> None:
    tls = connect("rediss://127.0.0.1:1/0")
    unix = connect("unix:///tmp/assay-no-such.sock")
    assert tls.connection_pool.connection_class is redis.SSLConnection
    assert unix.connection_pool.connection_class is redis.UnixDomainSocketConnection


def test_a_connection_the_server_closed_is_replaced_before_the_next_command(
    redis_url: str,
) -> None:
    """No retry involved (retries=0): the check before use finds the close."""
    client = connect(redis_url, retries=0)
    admin = redis.Redis.from_url(redis_url)
    try:
        client.set("k", "1")
        first_id = client.client_id()
        assert admin.client_kill_filter(_id=first_id) == 1
        time.sleep(0.1)
        assert client.get("k") == "1"
        assert client.client_id() != first_id
    finally:
        client.close()
        admin.close()


@contextmanager
def fake_redis(reply: Callable[[bytes], bytes | None]) -> Iterator[tuple[str, list[int]]]:
    """A TCP server speaking just enough RESP: ``reply(request)`` per read, None to hold.

    Yields its URL and a list with one entry per accepted connection.
    """

    def serve(conn: socket.socket, stop: threading.Event, tally: Callable[[], int]) -> None:
        while not stop.is_set():
            data = conn.recv(65536)
            if not data:
                return
            tally()
            answer = reply(data)
            if answer is None:
                stop.wait(10)
                return
            conn.sendall(answer)

    with tcp_server(serve) as (port, connections):
        yield f"redis://127.0.0.1:{port}/0", connections


def _commands(request: bytes) -> list[bytes]:
    """The command names in a RESP request (several when pipelined)."""
    lines = request.split(b"\r\n")
    names, index = [], 0
    while index < len(lines) and lines[index].startswith(b"*"):
        names.append(lines[index + 2].upper())
        index += 1 + 2 * int(lines[index][1:])
    return names


def _echo_twice(request: bytes) -> bytes:
    """The connection's hand-shake answered as Redis 7 does; each ECHO answered twice."""
    out = b""
    for name in _commands(request):
        if name == b"HELLO":
            out += b"%1\r\n$5\r\nproto\r\n:3\r\n"
        elif name == b"PING":
            out += b"+PONG\r\n"
        elif name == b"ECHO":
            out += b"$2\r\nhi\r\n" * 2  # one reply too many: the connection is out of step
        else:
            out += b"+OK\r\n"
    return out


def _stray_reply_story(client: redis.Redis) -> list[object]:
    first = client.echo("hi")
    time.sleep(0.05)  # the extra reply has arrived on the idle connection
    return [first, client.echo("hi"), client.ping()]


def test_stray_bytes_on_an_idle_connection_are_handled_as_redis_py_handles_them() -> None:
    """Whatever redis-py's pool does with a connection holding unread bytes (with RESP3
    it leaves them for push notifications), the quiet connection does the same."""
    stories = []
    for make in (
        lambda url: connect(url, retries=0),
        lambda url: redis.Redis.from_url(url, decode_responses=True),
    ):
        with fake_redis(_echo_twice) as (url, opened):
            client = make(url)
            try:
                stories.append((_stray_reply_story(client), len(opened)))
            finally:
                client.close()
    assert stories[0] == stories[1]


def test_a_server_that_stops_answering_is_a_timeout_within_the_configured_seconds() -> None:
    with fake_redis(lambda request: None) as (url, _):
        client = connect(url, retries=0, timeout_seconds=0.5)
        started = time.monotonic()
        try:
            with pytest.raises(redis.exceptions.TimeoutError):
                client.ping()
        finally:
            client.close()
    assert time.monotonic() - started < 3


def test_pub_sub_reads_with_their_own_timeout_and_the_pool_stays_usable(redis_url: str) -> None:
    client = connect(redis_url)
    try:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe("assay:test:channel")
        pubsub.get_message(timeout=1)  # the subscription's confirmation (ignored: None)
        started = time.monotonic()
        assert pubsub.get_message(timeout=0.3) is None
        assert 0.2 < time.monotonic() - started < 2
        client.publish("assay:test:channel", "hello")
        message = None
        deadline = time.monotonic() + 5
        while message is None and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.5)
        assert message is not None and message["data"] == "hello"
        pubsub.close()
        for index in range(5):  # connections that ran pub/sub go back to the pool and serve
            client.set(f"k{index}", index)
        assert client.mget([f"k{i}" for i in range(5)]) == ["0", "1", "2", "3", "4"]
    finally:
        client.close()
