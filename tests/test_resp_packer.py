"""The store's one-pass command packer writes what redis-py's own Python packer writes
(workers/fleet/resp_packer.py, issue 15): the same buffers, the same errors, and a
real Redis reads every command it packs."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis._parsers.encoders import Encoder
from redis.connection import PythonRespSerializer
from redis.exceptions import DataError

from workers.fleet.redis_client import connect
from workers.fleet.resp_packer import RespPacker

CUTOFF = 6000  # redis-py's


def _pair(encoding: str = "utf-8", errors: str = "strict") -> tuple[Any, RespPacker]:
    encoder = Encoder(encoding, errors, decode_responses=True)
    theirs = PythonRespSerializer(CUTOFF, encoder.encode)
    return theirs, RespPacker(CUTOFF, encoder.encode, encoding, errors)


def _bytes(buffers: list[Any]) -> list[bytes]:
    return [bytes(buffer) for buffer in buffers]


_ARGUMENT = st.one_of(
    st.text(max_size=40),
    st.text(min_size=5990, max_size=6010),  # around the cutoff
    st.binary(max_size=40),
    st.binary(min_size=6001, max_size=9000),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=7000).map(memoryview),
    st.binary(max_size=50).map(bytearray),
)
_COMMAND_NAME = st.sampled_from(["EVALSHA", "CONFIG GET", "SET", b"HSET", b"CLIENT LIST", "  x  "])


@settings(max_examples=400, deadline=None)
@given(name=_COMMAND_NAME, arguments=st.lists(_ARGUMENT, max_size=40))
def test_every_command_packs_to_redis_pys_buffers(name: Any, arguments: list[Any]) -> None:
    theirs, ours = _pair()
    assert _bytes(ours.pack(name, *arguments)) == _bytes(theirs.pack(name, *arguments))


def test_a_large_argument_is_sent_as_it_is_not_copied() -> None:
    _, ours = _pair()
    report = b"r" * 100_000
    view = memoryview(b"m" * 10)
    buffers = ours.pack("EVALSHA", "sha", report, "small", view)
    assert any(buffer is report for buffer in buffers)
    assert any(buffer is view for buffer in buffers)


def test_the_connections_encoding_and_error_mode_are_kept() -> None:
    theirs, ours = _pair("latin-1", "replace")
    arguments = ("SET", "k", "caf\u00e9 \u2603")
    assert _bytes(ours.pack(*arguments)) == _bytes(theirs.pack(*arguments))
    assert b"caf\xe9 ?" in b"".join(ours.pack(*arguments))


@pytest.mark.parametrize("bad", [True, None, object(), 1.5j])
def test_what_redis_py_refuses_is_refused_the_same_way(bad: Any) -> None:
    theirs, ours = _pair()
    with pytest.raises(DataError) as expected:
        theirs.pack("SET", "k", bad)
    with pytest.raises(DataError) as got:
        ours.pack("SET", "k", bad)
    assert str(got.value) == str(expected.value)


def test_a_fleet_client_packs_with_it_and_redis_reads_every_command(redis_url: str) -> None:
    client = connect(redis_url, retries=0)
    try:
        connection = client.connection_pool.get_connection()
        try:
            assert isinstance(connection._command_packer, RespPacker)
        finally:
            client.connection_pool.release(connection)
        large = "\u00e9" * 20_000  # over the cutoff, and not ASCII
        values = {"small": "v", "large": large, "number": 42, "bytes": b"\x00\xff"}
        client.hset("assay-test:packed", mapping=values)
        assert redis.Redis.from_url(redis_url).hgetall("assay-test:packed") == {
            b"small": b"v",
            b"large": large.encode(),
            b"number": b"42",
            b"bytes": b"\x00\xff",
        }
        assert client.eval("return #ARGV", 0, *[str(i) for i in range(29)]) == 29
        with client.pipeline() as pipe:
            pipe.set("assay-test:a", large).get("assay-test:a")
            assert pipe.execute() == [True, large]
    finally:
        client.delete("assay-test:packed", "assay-test:a")
        client.close()
