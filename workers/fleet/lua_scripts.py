"""The fleet's Lua scripts, kept as ``.lua`` files beside the modules that run them.

A script there names every key it touches in ``KEYS`` and takes the time from its caller in
``ARGV``, so it can be read, linted and tested as Lua, and a reader sees the whole step in one
file. Each is read once per process, by name, and registered by the module that owns its keys.
Where the fleet must agree on one clock (leases, rate limits), the caller passes Redis's own,
as a :class:`RedisClock` keeps it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

_FOLDER = Path(__file__).parent


@cache
def lua_source(name: str, folder: Path = _FOLDER) -> str:
    """The text of ``{name}.lua`` in ``folder``: beside this module unless a module elsewhere
    (the scheduler's) names its own folder."""
    return (folder / f"{name}.lua").read_text(encoding="utf-8")


def checked_script(name: str, folder: Path = _FOLDER) -> str:
    """``{name}.lua`` after the key checks it runs before its first write (``key_checks.lua``,
    shared by the store's, the timers' and the schedules' scripts): Redis does not roll a
    failed script back, so a key of the wrong type is found before anything is written."""
    return lua_source("key_checks") + lua_source(name, folder)


class RedisClock:
    """Redis's clock, read in this process without a round trip per reading.

    Every worker passes the same clock to the scripts (leases, UTC periods, rate-limit
    windows), so workers whose own clocks are skewed still agree. Asking Redis (``TIME``)
    before every script would double the round trips of a model call's path; instead the
    offset between Redis's clock and this process's monotonic clock is measured once every
    ``refresh_seconds`` (off by at most half a round trip, plus the drift between two
    crystals over that time: well under a millisecond) and added to the monotonic clock,
    which no wall-clock step moves.
    """

    def __init__(
        self,
        client: Any,
        refresh_seconds: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._refresh_seconds = refresh_seconds
        self._monotonic = monotonic
        self._offset_us: int | None = None
        self._measured_at = 0.0
        self._lock = threading.Lock()

    def now_us(self) -> int:
        """Redis's clock now, epoch microseconds."""
        now = self._monotonic()
        offset = self._offset_us
        if offset is None or now - self._measured_at >= self._refresh_seconds:
            offset = self._measure()
        return int(self._monotonic() * 1_000_000) + offset

    def now_ms(self) -> int:
        return self.now_us() // 1000

    def _measure(self) -> int:
        with self._lock:
            before = self._monotonic()
            seconds, micros = self._client.time()
            redis_us = int(seconds) * 1_000_000 + int(micros)
            after = self._monotonic()
            offset = redis_us - int((before + after) / 2 * 1_000_000)
            self._offset_us, self._measured_at = offset, after
            return offset
