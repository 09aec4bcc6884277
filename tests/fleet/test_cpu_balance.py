"""``worker_cpu_affinity=adaptive`` (an option; the default is ``off``): held to the least
crowded CPU, and moved off one that others crowd.

The arithmetic is tested on made-up ``/proc/stat`` figures; the behaviour in child
processes (a pinned test runner would slow every later test) against real
crowding: a busy loop held to the worker's CPU, and two busy workers that chose
the same CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from assay.testing.scripted_model import ScriptedModel
from tests.fleet.test_cpu_affinity import ALLOWED, start_worker, stop, thread_cpus
from tests.fleet_support import (
    NO_CONFIRMER_PROFILE,
    PREDICATE,
    ROOT,
    make_snapshots,
    three_step_script,
    worker_log_tail,
)
from workers.fleet.cpu_balance import (
    CpuSample,
    better_cpu,
    crowding,
    first_cpu,
    read_proc_stat,
    take_sample,
)

two_cpus = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two CPUs this process may use")

# --- the arithmetic ------------------------------------------------------------------------------

PROC_STAT = """cpu  900 0 300 5000 40 0 10 5 0 0
cpu0 400 10 100 2000 20 0 5 5 7 0
cpu1 500 0 200 3000 20 0 5 0 0 0
intr 1 2 3
ctxt 99
"""


def test_busy_time_is_read_per_cpu_without_idle_iowait_or_guest_twice() -> None:
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    busy = read_proc_stat(PROC_STAT)
    assert set(busy) == {0, 1}  # the machine-wide "cpu" line and the rest are not CPUs
    # user nice system irq softirq steal; idle and iowait are not busy, guest is inside user
    assert busy[0] == pytest.approx((400 + 10 + 100 + 0 + 5 + 5) * tick)
    assert busy[1] == pytest.approx((500 + 200 + 5) * tick)


def sample(when: float, own: float, **busy: float) -> CpuSample:
    return CpuSample(when, {int(name[3:]): seconds for name, seconds in busy.items()}, own)


def test_crowding_is_what_others_ran_so_the_process_does_not_flee_its_own_load() -> None:
    before = sample(0.0, own=10.0, cpu0=100.0, cpu1=50.0)
    after = sample(2.0, own=11.8, cpu0=102.0, cpu1=50.4)
    shares = crowding(before, after, held=0)
    assert shares[0] == pytest.approx(0.1)  # 2.0 s busy, 1.8 s of it this process's
    assert shares[1] == pytest.approx(0.2)
    # not yet held anywhere: every CPU's whole busy time counts
    assert crowding(before, after, held=None)[0] == pytest.approx(1.0)


def test_crowding_stays_within_one_core_whatever_the_tick_rounding() -> None:
    before = sample(0.0, own=0.0, cpu0=0.0, cpu1=0.0)
    after = sample(1.0, own=1.05, cpu0=1.0, cpu1=1.2)
    assert crowding(before, after, held=0) == {0: 0.0, 1: 1.0}


def test_the_first_cpu_is_the_idlest_and_the_group_index_spreads_ties() -> None:
    idle = {0: 0.0, 1: 0.05, 2: 0.02, 3: 0.9}
    assert [first_cpu(idle, {0, 1, 2, 3}, index) for index in range(4)] == [0, 1, 2, 0]
    crowded_first = {0: 0.8, 1: 0.3, 2: 0.75}
    assert [first_cpu(crowded_first, {0, 1, 2}, index) for index in range(3)] == [1, 1, 1]


def test_a_process_moves_only_for_a_quarter_core_less_crowding() -> None:
    allowed = {0, 1, 2}
    assert better_cpu({0: 0.9, 1: 0.5, 2: 0.1}, held=0, allowed=allowed) == 2
    assert better_cpu({0: 0.3, 1: 0.1, 2: 0.2}, held=0, allowed=allowed) is None
    assert better_cpu({0: 0.1, 1: 0.0, 2: 0.0}, held=0, allowed=allowed) is None
    assert better_cpu({0: 1.0}, held=0, allowed={0}) is None  # nowhere else to go
    assert better_cpu({0: 1.0, 1: 0.0}, held=0, allowed={0}) is None  # 1 is not ours


@pytest.mark.parametrize(
    "proc_stat",
    [None, "cpu  1 2 3\nintr 5\n", "cpu0 1 2 x 4\n"],
    ids=["hidden", "no-cpu-lines", "garbled"],
)
def test_where_proc_stat_cannot_be_read_the_process_is_left_to_the_kernel(
    monkeypatch: pytest.MonkeyPatch, proc_stat: str | None
) -> None:
    import workers.fleet.cpu_balance as balance

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if proc_stat is None:
            raise PermissionError("/proc/stat: hidden by the sandbox")
        return proc_stat

    monkeypatch.setattr(balance.Path, "read_text", read_text)
    monkeypatch.setattr(balance, "hold_threads", lambda *a: pytest.fail("held blind"))
    assert balance.hold_adaptively(0, {0, 1}) is None


# --- real processes ------------------------------------------------------------------------------

CHILD = """
import json, os, sys, threading
import workers.fleet.cpu_balance as balance
from workers.fleet.cpu_affinity import hold_worker_process
balance.CHECK_SECONDS = 0.3
if sys.argv[3] == "first":  # as when every process looked at an idle machine at one instant
    balance.first_cpu = lambda shares, allowed, index: min(allowed)
stop = threading.Event()
threading.Thread(target=stop.wait).start()  # a thread already running, like the announcer
cpu = hold_worker_process("adaptive", "threads", int(sys.argv[1]))
threading.Thread(target=stop.wait).start()  # a thread started later, like Celery's pool
def spin():
    while not stop.is_set():
        sum(range(1000))
if sys.argv[2] == "busy":
    threading.Thread(target=spin).start()
print(json.dumps({"cpu": cpu}), flush=True)
sys.stdin.read()
stop.set()
"""

HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


class Child:
    def __init__(self, index: int, busy: bool, start_on_first_cpu: bool = False) -> None:
        start = "first" if start_on_first_cpu else "idlest"
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(index), "busy" if busy else "idle", start],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.cpu = -1

    def held(self) -> Child:
        """Wait for it to say where it is held."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        while not line.startswith('{"cpu"'):  # the worker's own log lines come first
            assert line, "the child ended before it said where it is held"
            line = self.process.stdout.readline()
        self.cpu = json.loads(line)["cpu"]
        return self

    def cpus(self) -> set[str]:
        """The CPU lists its threads may run on (one list when the process is held)."""
        return set(thread_cpus(self.process.pid).values())

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.close()


@pytest.fixture
def hogs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for hog in started:
        hog.kill()
        hog.wait()


def moves_within(seconds: float, held: int, condition: Callable[[], bool]) -> bool:
    """``condition`` comes true within ``seconds``; if it does not because the machine's other
    CPUs were crowded by work outside this test (a loaded CI host), there is nowhere better
    to move, and staying is right: the test is skipped, saying so."""
    before = take_sample()
    if within(seconds, condition):
        return True
    shares = crowding(before, take_sample(), None)
    elsewhere = {cpu: share for cpu, share in shares.items() if cpu in ALLOWED and cpu != held}
    if elsewhere and min(elsewhere.values()) >= 0.5:
        pytest.skip(f"no CPU to move to: the others were busy outside this test ({elsewhere})")
    return False


def within(seconds: float, condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@two_cpus
def test_adaptive_holds_every_thread_old_and_new_to_one_cpu(children: list[Child]) -> None:
    child = Child(0, busy=False).held()
    children.append(child)
    assert child.cpu in ALLOWED
    assert child.cpus() == {str(child.cpu)}  # the balance thread included


@two_cpus
def test_a_worker_leaves_a_cpu_something_else_fills(
    children: list[Child], hogs: list[subprocess.Popen[bytes]]
) -> None:
    child = Child(0, busy=False).held()
    children.append(child)
    hogs.append(subprocess.Popen([sys.executable, "-c", HOG, str(child.cpu)]))

    def held_elsewhere() -> bool:  # every thread together on one other CPU (a move done)
        return child.cpus() in [{str(cpu)} for cpu in ALLOWED if cpu != child.cpu]

    assert moves_within(15, child.cpu, held_elsewhere), child.cpus()
    (now,) = child.cpus()
    assert int(now) in ALLOWED


@two_cpus
def test_two_busy_workers_that_chose_the_same_cpu_part(children: list[Child]) -> None:
    # Two separate `assay worker` commands, both process 0 of their group. Started
    # apart, the second sees the first busy (importing, at least) and takes another
    # CPU; started at one instant on an idle machine, both take the first, as here.
    # Busy, each then crowds the other.
    first = Child(0, busy=True, start_on_first_cpu=True).held()
    second = Child(0, busy=True, start_on_first_cpu=True).held()
    children.extend([first, second])
    assert first.cpu == second.cpu

    def parted_and_held() -> bool:  # each held whole to one CPU, not the same one
        a, b = first.cpus(), second.cpus()
        return len(a) == 1 and len(b) == 1 and a != b

    assert moves_within(20, first.cpu, parted_and_held), (
        first.cpus(),
        second.cpus(),
    )
    parted = (first.cpus(), second.cpus())
    time.sleep(2)  # and they stay apart: the one that moved has nothing to flee
    assert (first.cpus(), second.cpus()) == parted
    assert all(len(cpus) == 1 for cpus in parted)


@two_cpus
def test_a_process_whose_cpus_someone_else_changed_is_left_to_them(
    children: list[Child], hogs: list[subprocess.Popen[bytes]]
) -> None:
    child = Child(0, busy=False).held()
    children.append(child)
    everything = set(ALLOWED)
    for thread in thread_cpus(child.process.pid):
        os.sched_setaffinity(int(thread), everything)  # what `taskset -a -p` does
    hogs.append(subprocess.Popen([sys.executable, "-c", HOG, str(child.cpu)]))
    time.sleep(2)  # six checks: none pins it again, crowded or not
    assert child.cpus() == set(thread_cpus(os.getpid()).values())  # this runner's whole set


# --- `assay worker --cpu-affinity adaptive` ------------------------------------------------


@two_cpus
@pytest.mark.integration
@pytest.mark.timeout(240)
def test_assay_worker_asked_to_adapt_is_held_to_one_cpu_and_still_decides(
    redis_url: str, tmp_path: Path
) -> None:
    from assay.client import Client
    from schemas.settings import load_settings

    log = tmp_path / "worker.log"
    make_snapshots(tmp_path / "targets", 8, bad_every=4)
    with ScriptedModel(three_step_script(delay=0.05)) as model:
        worker = start_worker(redis_url, model.url, log, "--cpu-affinity", "adaptive")
        try:
            with Client(load_settings(redis_url=redis_url)) as client:
                batch_id = client.start_batch(
                    PREDICATE,
                    snapshots=str(tmp_path / "targets" / "*"),
                    profile=NO_CONFIRMER_PROFILE,
                )
                status = client.wait_batch(batch_id, timeout=120, poll=0.2)
            assert (status.total, status.true, status.false) == (8, 6, 2), worker_log_tail(log)
            threads = thread_cpus(worker.pid)
            assert len(threads) > 4  # Celery's pool, the balance thread, the announcer
            (cpus,) = set(threads.values())  # every one of them on the same CPUs ...
            assert cpus.isdigit() and int(cpus) in ALLOWED, cpus  # ... which are one CPU
        finally:
            stop(worker)
