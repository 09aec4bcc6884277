"""Which CPU a threads-pool worker process runs on (``worker_cpu_affinity``); by default, any.

Why a hold can help: a worker process runs Python on one core at a time (the GIL),
but the kernel spreads its threads over every core. Each time a thread waits on a
socket it releases the GIL, and a thread on another core takes it: a wake-up across
cores, the GIL's cache lines moving with it. That costs a worker that is busy with
CPU work (many runs at near-zero model latency); a worker waiting on a hosted model
spends little CPU either way, and on a shared host a held process cannot flee a
busy CPU as fast as the kernel would move it. So the default is ``off``, and
docs/fleet.md ("CPU affinity") has the measurements that say when a hold helps.

Values:
- ``off`` (the default): the kernel spreads the threads.
- ``adaptive`` (cpu_balance.py): the CPU others use least, left for an idler one
  when others crowd it. It needs nobody's word that the CPUs are the fleet's own.
- ``auto``: process ``i`` of ``assay worker --processes N`` on the ``i``-th CPU
  this process may use (``sched_getaffinity``), for good. Like nginx's
  ``worker_cpu_affinity auto``, only where that set is the fleet's own (a
  machine for the fleet, a Guaranteed pod under the static CPU manager); on
  shared cores every worker would pile onto the same first CPU.
- CPUs in Linux's list syntax (``0-3,8``), which process ``i`` uses in turn.

Only the threads pool (and solo, gevent, eventlet: one thread of Python in any
case) is held to one CPU: prefork's children would all inherit it, so prefork
is left alone (with a warning when the operator asked for a hold). Linux only
(``os.sched_setaffinity``); elsewhere the same.
"""

from __future__ import annotations

import os

import structlog

from schemas.cpu_list import ADAPTIVE, AUTO, OFF, AffinityError, parse_cpu_list
from workers.fleet.cpu_balance import hold_adaptively, hold_threads

_log = structlog.get_logger(__name__)

SINGLE_THREAD_OF_PYTHON_POOLS = frozenset({"threads", "solo", "gevent", "eventlet"})


def cpu_for_process(setting: str, index: int, allowed: set[int]) -> int | None:
    """The CPU process ``index`` of a worker group runs on; None for ``off`` and ``adaptive``
    (which chooses by looking at the machine, cpu_balance.py).

    ``allowed``: the CPUs this process may use. A listed CPU outside them is an
    error (the kernel would refuse it, or the operator meant another machine).
    """
    if setting in (OFF, ADAPTIVE):
        return None
    if setting == AUTO:
        choices = sorted(allowed)
    else:
        choices = parse_cpu_list(setting)
        outside = [cpu for cpu in choices if cpu not in allowed]
        if outside:
            raise AffinityError(
                f"worker_cpu_affinity {setting!r} names CPU(s) {outside} that this process "
                f"may not use (it may use {_as_list(allowed)}); list CPUs of that set or use auto"
            )
    if not choices:
        raise AffinityError("worker_cpu_affinity: this process may use no CPU at all")
    return choices[index % len(choices)]


def hold_worker_process(setting: str, pool: str, index: int = 0) -> int | None:
    """Hold this worker process (every thread it has, and those it starts) to its CPU.

    Returns the CPU, or None when nothing was done (``off``, a prefork pool, no
    support on this platform, a process that may use one CPU only). Called
    before Celery starts its threads; threads already running (the model
    announcer, a scripted model) are moved too.
    """
    if setting == OFF:
        return None
    if pool not in SINGLE_THREAD_OF_PYTHON_POOLS:
        _log.warning(
            "cpu_affinity_ignored",
            pool=pool,
            reason="prefork's child processes would all inherit one CPU; the kernel "
            "spreads them better, so worker_cpu_affinity applies to the threads pool only",
        )
        return None
    if not hasattr(os, "sched_setaffinity"):
        _log.warning("cpu_affinity_unsupported", reason="this platform cannot set CPU affinity")
        return None
    allowed = os.sched_getaffinity(0)
    if setting == ADAPTIVE:
        if len(allowed) < 2:
            return None  # held already, by whoever gave it one CPU
        cpu = hold_adaptively(index, allowed)
        if cpu is None:
            return None
    else:
        cpu = cpu_for_process(setting, index, allowed)
        assert cpu is not None
        hold_threads(cpu)
    _log.info("cpu_affinity", cpu=cpu, process_index=index, setting=setting)
    return cpu


def _as_list(cpus: set[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))
