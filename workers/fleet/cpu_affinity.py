"""Which CPU a threads-pool worker process runs on (``worker_cpu_affinity``), opt-in.

Why: a worker process runs Python on one core at a time (the GIL), but the
kernel spreads its threads over every core. Each time a thread waits on a
socket it releases the GIL, and a thread on another core takes it: a wake-up
across cores, the GIL's cache lines moving with it. bench_fleet measured what
that costs a busy worker at zero model latency: the task body on 8 threads took
2.7 ms of CPU per evaluation spread over two cores against 1.5 ms on one, and a
worker held to one core finished about 75% more evaluations per second (issue 15).

Why opt-in, like nginx's ``worker_cpu_affinity``: a CPU is chosen from the set
this process may use (``sched_getaffinity``), and only the operator knows
whether that set is its own. On a machine or VM for the fleet, or a Kubernetes
pod with dedicated cores (the static CPU manager gives a Guaranteed pod with
whole CPUs a set of its own), ``auto`` puts each process of ``assay worker
--processes N`` on a different CPU of the set. On shared cores (most pods),
every worker choosing "the first CPU" would pile onto the same one.

Values: ``off`` (the default); ``auto``; or CPUs in Linux's list syntax
(``0-3,8``), which process ``i`` of the group uses in turn. Only the threads
pool (and solo, gevent, eventlet: one thread of Python in any case) is held to
one CPU: prefork's children would all inherit it, so prefork is left alone with
a warning. Linux only (``os.sched_setaffinity``); elsewhere a warning.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from schemas.cpu_list import AUTO, OFF, AffinityError, parse_cpu_list

_log = structlog.get_logger(__name__)

SINGLE_THREAD_OF_PYTHON_POOLS = frozenset({"threads", "solo", "gevent", "eventlet"})


def cpu_for_process(setting: str, index: int, allowed: set[int]) -> int | None:
    """The CPU process ``index`` of a worker group runs on; None for ``off``.

    ``allowed``: the CPUs this process may use. A listed CPU outside them is an
    error (the kernel would refuse it, or the operator meant another machine).
    """
    if setting == OFF:
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
    support on this platform). Called before Celery starts its threads; threads
    already running (the model announcer, a scripted model) are moved too.
    """
    if setting == OFF:
        return None
    if pool not in SINGLE_THREAD_OF_PYTHON_POOLS:
        _log.warning(
            "cpu_affinity_ignored",
            pool=pool,
            reason="prefork's child processes would all inherit one CPU; the kernel spreads "
            "them better, so worker_cpu_affinity applies to the threads pool only",
        )
        return None
    if not hasattr(os, "sched_setaffinity"):
        _log.warning("cpu_affinity_unsupported", reason="this platform cannot set CPU affinity")
        return None
    cpu = cpu_for_process(setting, index, os.sched_getaffinity(0))
    assert cpu is not None
    for thread in _thread_ids():
        try:
            os.sched_setaffinity(thread, {cpu})  # Linux: a thread id sets that thread only
        except ProcessLookupError:
            continue  # the thread ended meanwhile
    _log.info("cpu_affinity", cpu=cpu, process_index=index, setting=setting)
    return cpu


def _thread_ids() -> list[int]:
    try:
        return [int(entry.name) for entry in Path("/proc/self/task").iterdir()]
    except OSError:  # no /proc: the calling thread, which every later thread inherits from
        return [0]


def _as_list(cpus: set[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))
