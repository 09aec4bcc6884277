"""Helpers for boundary tests: hostile ids and paths, Redis key dumps, pausing processes.

Shared by the id / snapshot-root / store-atomicity / scheduler-fencing tests and
meant for the reliability suite (tests/reliability/) too:

* ``hostile_ids()`` / ``valid_ids()``: hypothesis strategies for ids a caller may send;
* ``dump_keys(client, prefix)``: every key under a prefix with its type and
  content, to prove a failed write changed nothing ("half-stored records");
* ``seed_wrong_type(client, key, expected)``: put a value of another type at ``key``;
* ``paused(process)``: SIGSTOP a process this test started, SIGCONT it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

from schemas.ids import ID_PATTERN

_VALID_ID = re.compile(ID_PATTERN)

# Characters that break keys, paths, shells or terminals, mixed into otherwise
# plausible ids: the key separator first.
HOSTILE_ID_CHARACTERS = ":/ \t\n\r\x00*?[]{}$;|&'\"\\\u2028\u202e\uff1a"


def valid_ids() -> st.SearchStrategy[str]:
    """Ids inside the documented alphabet."""
    return st.from_regex(ID_PATTERN, fullmatch=True)


def hostile_ids() -> st.SearchStrategy[str]:
    """Strings that are NOT valid ids: separators, control and non-ASCII characters,
    empty, too long, or starting with a dot or dash."""
    with_bad_char = st.builds(
        lambda head, bad, tail: head + bad + tail,
        st.from_regex(r"[A-Za-z0-9]{1,10}", fullmatch=True),
        st.sampled_from(sorted(HOSTILE_ID_CHARACTERS)),
        st.text(max_size=10),
    )
    known = st.sampled_from(
        ["", "victim:history", "a:b", ":", "-lead", ".dot", "x" * 129, "../../etc", "a b"]
    )
    anything = st.text(max_size=140).filter(lambda s: not _VALID_ID.fullmatch(s))
    return st.one_of(known, with_bad_char, anything)


def dump_keys(client: Any, prefix: str) -> dict[str, tuple[str, Any]]:
    """Every key under ``prefix:`` with its type and full content (TTLs left out)."""
    out: dict[str, tuple[str, Any]] = {}
    for raw in client.scan_iter(match=f"{prefix}:*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        value: Any
        if kind == "string":
            value = client.get(key)
        elif kind == "hash":
            value = client.hgetall(key)
        elif kind == "list":
            value = client.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(client.smembers(key))
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            value = client.xrange(key)
        else:
            value = None
        out[key] = (kind, value)
    return out


WRONG_VALUES: dict[str, tuple[str, Any]] = {
    # expected type -> (a type that is not it, how to write one)
    "hash": ("string", lambda c, k: c.set(k, "not a hash")),
    "set": ("string", lambda c, k: c.set(k, "not a set")),
    "zset": ("list", lambda c, k: c.rpush(k, "not a zset")),
    "list": ("hash", lambda c, k: c.hset(k, "not", "a list")),
    "stream": ("string", lambda c, k: c.set(k, "not a stream")),
    "string": ("list", lambda c, k: c.rpush(k, "not a string")),
}


def seed_wrong_type(client: Any, key: str, expected: str) -> str:
    """Replace ``key`` by a value of another type than ``expected``; returns that type."""
    wrong_type, write = WRONG_VALUES[expected]
    client.delete(key)
    write(client, key)
    return wrong_type


@contextlib.contextmanager
def paused(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """SIGSTOP ``process`` (started by this test) for the block, SIGCONT it after."""
    os.kill(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
