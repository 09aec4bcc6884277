"""``worker_cpu_affinity=adaptive``: one CPU per worker process, the least crowded.

Why a process may be held to one CPU at all, and when it helps, is in
cpu_affinity.py: a threads-pool worker runs Python on one core at a time, and
spread over several it pays for every GIL hand-over twice. Why this one suits
shared cores where ``auto`` does not:
``auto`` takes the operator's word that the CPUs are the fleet's own and never
looks again, so on shared cores every worker would queue on "the first CPU".
``adaptive`` looks. At start it takes the CPU the rest of the machine uses least
(a tenth of a second of ``/proc/stat``; the process's index in its group breaks
ties, so the processes of one ``assay worker --processes N`` start apart), and
every few seconds a daemon thread compares what *others* ran on that CPU with
the other CPUs this process may use. When another is idler by a quarter of a
core, every thread of the process moves there. Two workers that picked the same
CPU therefore part within seconds, and a CPU that something else (a batch job,
another pod, Redis) starts to fill is left. The kernel does the same for
processes it may spread; a held process has to do it itself. A process whose
CPUs someone else changes (``taskset -p``, a cpuset that shrank) is theirs: the
thread stops watching.

"Others" is the CPU's busy time (``/proc/stat``: user, nice, system, irq,
softirq, steal) less this process's own CPU time, which all runs on the held CPU.
``/proc/stat`` counts the whole machine even inside a container, which is what
crowding is about. Each check costs two small reads of ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

_log = structlog.get_logger(__name__)

FIRST_LOOK_SECONDS = 0.1  # how long the start-up choice watches the CPUs
CHECK_SECONDS = 3.0  # between checks, plus up to half as much again at random
TIE = 0.1  # CPUs this close (in cores) to the idlest count as equally idle at start
MARGIN = 0.25  # move only to a CPU at least this much (in cores) less crowded
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (guest is in user)
_TICK = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


@dataclass(frozen=True)
class CpuSample:
    """What the machine's CPUs and this process had run, in seconds, at ``when``."""

    when: float  # time.monotonic()
    busy: dict[int, float]  # CPU -> seconds busy since boot, every process together
    own: float  # this process's CPU seconds, every thread together


def read_proc_stat(text: str) -> dict[int, float]:
    """Seconds each CPU has been busy, from ``/proc/stat``'s ``cpuN`` lines."""
    busy: dict[int, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or not name[3:].isdigit():
            continue
        fields = rest.split()
        busy[int(name[3:])] = sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields)) * _TICK
    return busy


def take_sample() -> CpuSample:
    times = os.times()
    text = Path("/proc/stat").read_text()
    return CpuSample(time.monotonic(), read_proc_stat(text), times.user + times.system)


def crowding(before: CpuSample, after: CpuSample, held: int | None) -> dict[int, float]:
    """Cores' worth of CPU that processes other than this one used on each CPU.

    ``held``: the CPU this process ran on between the samples (its own time is
    taken off that one), or None before it is held anywhere.
    """
    span = max(after.when - before.when, 1e-3)
    shares: dict[int, float] = {}
    for cpu, busy in after.busy.items():
        used = busy - before.busy.get(cpu, busy)
        if cpu == held:
            used -= after.own - before.own
        shares[cpu] = min(max(used / span, 0.0), 1.0)
    return shares


def first_cpu(shares: dict[int, float], allowed: Iterable[int], index: int) -> int:
    """The idlest CPU of ``allowed``; among the near-idlest, process ``index``'s turn.

    Processes of one group start together and see the same idle machine: taking
    the ``index``-th of the tied CPUs puts them on different ones.
    """
    ordered = sorted(allowed)
    if not ordered:
        raise ValueError("no CPU to choose from")
    least = min(shares.get(cpu, 0.0) for cpu in ordered)
    tied = [cpu for cpu in ordered if shares.get(cpu, 0.0) <= least + TIE]
    return tied[index % len(tied)]


def better_cpu(shares: dict[int, float], held: int, allowed: Iterable[int]) -> int | None:
    """A CPU of ``allowed`` worth moving to from ``held``, or None to stay."""
    here = shares.get(held, 0.0)
    others = [cpu for cpu in sorted(allowed) if cpu != held]
    if not others:
        return None
    best = min(others, key=lambda cpu: shares.get(cpu, 0.0))
    return best if here - shares.get(best, 0.0) >= MARGIN else None


def thread_ids() -> list[int]:
    """This process's threads, as ``sched_setaffinity`` takes them."""
    try:
        return [int(entry.name) for entry in Path("/proc/self/task").iterdir()]
    except OSError:  # no /proc: the calling thread, which every later thread inherits from
        return [0]


def hold_threads(cpu: int) -> None:
    """Every thread of this process onto ``cpu``, including threads started meanwhile.

    A thread inherits the CPUs of the thread that starts it, so one started by a
    thread not yet moved would keep the old ones: look again until a look finds
    no thread it has not moved (three looks at most; a stray thread costs speed,
    nothing else).
    """
    done: set[int] = set()
    for _ in range(3):
        pending = [thread for thread in thread_ids() if thread not in done]
        if not pending:
            return
        for thread in pending:
            with contextlib.suppress(ProcessLookupError):  # the thread ended meanwhile
                os.sched_setaffinity(thread, {cpu})  # Linux: a thread id sets that thread only
            done.add(thread)


class CpuBalancer:
    """The daemon thread that moves a held process off a CPU others crowd."""

    def __init__(self, cpu: int, allowed: set[int]) -> None:
        self.cpu = cpu
        self._allowed = frozenset(allowed)

    def start(self) -> None:
        """Watch for as long as the process lives (a daemon thread: it never holds up exit)."""
        threading.Thread(target=self._run, name="assay-cpu-balance", daemon=True).start()

    def _run(self) -> None:
        baseline = take_sample()
        while True:
            time.sleep(CHECK_SECONDS * (1 + random.random() / 2))
            if os.sched_getaffinity(0) != {self.cpu}:
                # taskset, a cpuset that shrank: whoever moved it decides now, not this thread
                _log.info("cpu_affinity_balance_stopped", cpu=self.cpu, reason="changed outside")
                return
            try:
                now = take_sample()
            except (OSError, ValueError, IndexError) as exc:
                _log.warning("cpu_affinity_balance_stopped", cpu=self.cpu, error=str(exc))
                return
            shares = crowding(baseline, now, self.cpu)
            baseline = now
            target = better_cpu(shares, self.cpu, self._allowed)
            if target is None:
                continue
            try:
                hold_threads(target)
            except OSError as exc:  # the CPUs this process may use changed under it
                _log.warning("cpu_affinity_balance_stopped", cpu=self.cpu, error=str(exc))
                return
            _log.info(
                "cpu_affinity_moved",
                cpu=target,
                left=self.cpu,
                others_there=round(shares.get(target, 0.0), 2),
                others_here=round(shares.get(self.cpu, 0.0), 2),
            )
            self.cpu = target
            baseline = take_sample()  # the window before the move mixed two CPUs


def hold_adaptively(index: int, allowed: set[int]) -> int | None:
    """Hold this process to the CPU others use least, and keep watching it; that CPU.

    None where ``/proc/stat`` cannot be read or makes no sense (some sandboxes
    hide or fake it): a hold chosen blind could be the crowded CPU, and nothing
    could tell, so the process is left to the kernel.
    """
    try:
        before = take_sample()
        time.sleep(FIRST_LOOK_SECONDS)
        shares = crowding(before, take_sample(), None)
    except (OSError, ValueError, IndexError) as exc:
        _log.info("cpu_affinity_unheld", reason=f"/proc/stat is not readable here: {exc}")
        return None
    if not allowed <= shares.keys():
        _log.info("cpu_affinity_unheld", reason="/proc/stat does not list this process's CPUs")
        return None
    cpu = first_cpu(shares, allowed, index)
    hold_threads(cpu)
    CpuBalancer(cpu, allowed).start()
    return cpu
