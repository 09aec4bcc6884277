"""``worker_cpu_affinity``: a threads-pool worker process held to one CPU, or not (``off``, the
default; ``adaptive`` is in test_cpu_balance.py).

The pinning itself runs in child processes (a pinned test runner would slow
every later test): a small Python child for the function, real `assay worker`
processes for the command.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from assay.testing.scripted_model import ScriptedModel
from schemas.cpu_list import AffinityError, parse_cpu_list
from schemas.settings import load_settings
from tests.fleet_support import (
    NO_CONFIRMER_PROFILE,
    PREDICATE,
    ROOT,
    children_of,
    make_snapshots,
    scripted_worker_env,
    three_step_script,
    worker_log_tail,
)
from workers.fleet.cpu_affinity import cpu_for_process

ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
linux_only = pytest.mark.skipif(not ALLOWED, reason="CPU affinity is Linux-only")


def thread_cpus(pid: int) -> dict[str, str]:
    """Each thread of ``pid`` and the CPUs it may run on (Linux list syntax)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        for line in status.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                found[task.name] = line.split(":", 1)[1].strip()
    return found


# --- the setting --------------------------------------------------------------------------------


def test_cpu_lists_read_as_linux_writes_them() -> None:
    assert parse_cpu_list("0-3,8") == [0, 1, 2, 3, 8]
    assert parse_cpu_list("5, 2,5,1-2") == [5, 2, 1]  # the order written, each CPU once


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("fast", "'fast' is not a CPU number"),
        ("3-1", "runs backwards"),
        ("1,,2", "'' is not a CPU number"),
        ("0-100000", "no machine has CPU 100000"),
        ("-1", "is not a CPU number"),
    ],
)
def test_a_bad_value_is_refused_when_the_settings_load(value: str, said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        load_settings(worker_cpu_affinity=value)


def test_the_setting_comes_from_the_environment_and_defaults_to_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().worker_cpu_affinity == "off"
    monkeypatch.setenv("ASSAY_WORKER_CPU_AFFINITY", " Auto ")
    assert load_settings().worker_cpu_affinity == "auto"
    monkeypatch.setenv("ASSAY_WORKER_CPU_AFFINITY", "OFF")
    assert load_settings().worker_cpu_affinity == "off"


def test_each_process_of_a_group_gets_the_next_cpu_it_may_use() -> None:
    assert [cpu_for_process("auto", i, {5, 2}) for i in range(3)] == [2, 5, 2]
    assert [cpu_for_process("5,2", i, {2, 5, 7}) for i in range(3)] == [5, 2, 5]
    assert cpu_for_process("off", 3, {0}) is None
    assert cpu_for_process("adaptive", 3, {0}) is None  # it looks at the machine instead


def test_a_listed_cpu_the_process_may_not_use_is_an_error_naming_it() -> None:
    with pytest.raises(AffinityError, match=r"CPU\(s\) \[9\].*may use 0,1"):
        cpu_for_process("1,9", 0, {0, 1})


# --- the function, in a child process ------------------------------------------------------------

CHILD = """
import json, os, sys, threading, time
from workers.fleet.cpu_affinity import hold_worker_process
stop = threading.Event()
before = threading.Thread(target=stop.wait)  # a thread already running, like the announcer
before.start()
cpu = hold_worker_process(sys.argv[1], sys.argv[2], int(sys.argv[3]))
after = threading.Thread(target=stop.wait)  # a thread started later, like Celery's pool
after.start()
masks = sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")})
stop.set()
print(json.dumps({"cpu": cpu, "masks": masks}))
"""


def hold_in_child(setting: str, pool: str, index: int) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, setting, pool, str(index)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@linux_only
def test_auto_holds_every_thread_old_and_new_to_one_cpu() -> None:
    index = 1
    expected = ALLOWED[index % len(ALLOWED)]
    result = hold_in_child("auto", "threads", index)
    assert result == {"cpu": expected, "masks": [[expected]]}


@linux_only
def test_off_and_the_prefork_pool_leave_the_process_where_it_was() -> None:
    for setting, pool in (("off", "threads"), ("auto", "prefork"), ("adaptive", "prefork")):
        result = hold_in_child(setting, pool, 0)
        assert result == {"cpu": None, "masks": [ALLOWED]}, (setting, pool)


# --- `assay worker`, real processes --------------------------------------------------------------


@pytest.fixture(scope="module")
def scripted_model() -> Iterator[ScriptedModel]:
    with ScriptedModel(three_step_script()) as model:
        yield model


def start_worker(redis_url: str, model_url: str, log: Path, *flags: str) -> subprocess.Popen[bytes]:
    env = scripted_worker_env(redis_url, model_url, log_level="WARNING")
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "assay.cli", "worker", "--concurrency", "4",
             "--loglevel", "WARNING", *flags],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.mark.integration
@pytest.mark.timeout(240)
@pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two CPUs this process may use")
def test_a_two_process_worker_runs_each_process_on_its_own_cpu_and_still_decides(
    redis_url: str, tmp_path: Path
) -> None:

    log = tmp_path / "worker.log"
    # A model slow enough that runs overlap: each process's 4 slots fill, so both take runs
    # and both start their pool's threads (a zero-latency model let one process take nearly
    # all of them, one thread after another, and the thread count below was luck).
    with ScriptedModel(three_step_script(delay=0.1)) as slow_model:
        process = start_worker(
            redis_url, slow_model.url, log, "--processes", "2", "--cpu-affinity", "auto"
        )
        try:
            _decide_and_check_the_cpus(redis_url, process, log, tmp_path)
        finally:
            stop(process)


def _decide_and_check_the_cpus(
    redis_url: str, process: subprocess.Popen[bytes], log: Path, tmp_path: Path
) -> None:
    from assay.client import Client

    make_snapshots(tmp_path / "targets", 16, bad_every=4)
    with Client(load_settings(redis_url=redis_url)) as client:
        batch_id = client.start_batch(
            PREDICATE, snapshots=str(tmp_path / "targets" / "*"), profile=NO_CONFIRMER_PROFILE
        )
        status = client.wait_batch(batch_id, timeout=120, poll=0.2)
    assert (status.total, status.true, status.false) == (16, 12, 4), worker_log_tail(log)
    workers = children_of(process.pid)
    assert len(workers) == 2
    held = [set(thread_cpus(pid).values()) for pid in workers]
    # every thread of a process (Celery's pool included) on one CPU, a different one each
    assert sorted(held, key=sorted) == [{str(ALLOWED[0])}, {str(ALLOWED[1])}], held
    assert all(len(thread_cpus(pid)) > 4 for pid in workers)  # the pool's threads counted


@linux_only
@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_cpu_the_worker_may_not_use_stops_it_at_start_with_a_usage_error(
    redis_url: str, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    unusable = max(ALLOWED or [0]) + 1
    log = tmp_path / "worker.log"
    process = start_worker(redis_url, scripted_model.url, log, "--cpu-affinity", str(unusable))
    try:
        assert process.wait(timeout=90) == 64, worker_log_tail(log)
    finally:
        stop(process)
    assert f"CPU(s) [{unusable}]" in log.read_text()
