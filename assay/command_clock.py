"""When this command started: a run's time budget covers the whole command, start-up included.

``assay check --timeout N`` must end within N seconds of the process's start, as
``timeout(1)`` would (imports and reading the snapshot count). When assay is the process
(the ``assay`` script, ``python -m assay.cli``), the command started when the process did
(Linux ``/proc``; elsewhere when :func:`begin` was called); when ``assay.cli.main`` is
called from other Python code (tests, a script), it started with that call, and nothing
may end the caller's process (:func:`owns_process`).
"""

from __future__ import annotations

import os
import time

_started = time.monotonic()
_owns_process = False


def begin(*, owns_process: bool) -> None:
    """Mark the command's start; ``owns_process``: assay is this process's own command."""
    global _started, _owns_process
    _owns_process = owns_process
    _started = time.monotonic() - (_process_age() if owns_process else 0.0)


def elapsed() -> float:
    """Seconds since the command started."""
    return max(0.0, time.monotonic() - _started)


def started() -> float:
    """The command's start, as a ``time.monotonic()`` instant."""
    return _started


def owns_process() -> bool:
    """Whether assay may end this process when the command's time is up."""
    return _owns_process


def _process_age() -> float:
    """How long this process has run (Linux ``/proc``); 0 where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22
        with open("/proc/uptime", encoding="ascii") as uptime:
            now = float(uptime.read().split()[0])
        return max(0.0, now - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0
