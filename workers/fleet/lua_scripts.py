"""The fleet's Lua scripts, kept as ``.lua`` files beside the modules that run them.

A script there names every key it touches in ``KEYS`` and takes the time from its caller in
``ARGV``, so it can be read, linted and tested as Lua, and a reader sees the whole step in one
file. Each is read once per process, by name, and registered by the module that owns its keys.
Where the fleet must agree on one clock (leases, rate limits), the caller reads Redis's own
with :func:`redis_now_us` and passes it in.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

_FOLDER = Path(__file__).parent


@cache
def lua_source(name: str) -> str:
    """The text of ``{name}.lua`` beside this module."""
    return (_FOLDER / f"{name}.lua").read_text(encoding="utf-8")


def redis_now_us(client: Any) -> int:
    """Redis's clock in epoch microseconds: the one clock every worker reads alike, so
    workers whose own clocks drift still agree on leases and rate-limit windows."""
    return time_reply_us(client.time())


def time_reply_us(reply: Any) -> int:
    """A TIME reply (seconds, microseconds), as when it is read in a pipeline, in epoch
    microseconds."""
    seconds, micros = reply
    return int(seconds) * 1_000_000 + int(micros)
