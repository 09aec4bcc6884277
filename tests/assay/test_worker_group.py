"""`assay worker --processes N`: several real Celery worker processes under one command.

A real redis-server, the scripted model, and `assay worker` itself as a subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.client import Client
from assay.testing.scripted_model import ScriptedModel
from assay.worker_group import child_commands, node_name
from schemas.settings import load_settings
from tests.fleet_support import (
    NO_CONFIRMER_PROFILE,
    PREDICATE,
    ROOT,
    children_of,
    make_snapshots,
    scripted_worker_env,
    three_step_script,
    wait_until,
    worker_log_tail,
)
from workers.fleet.broker import configured_app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def scripted_model() -> Iterator[ScriptedModel]:
    with ScriptedModel(three_step_script()) as model:
        yield model


@pytest.fixture
def group(
    redis_url: str, scripted_model: ScriptedModel, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = tmp_path / "worker.log"
    env = scripted_worker_env(redis_url, scripted_model.url, log_level="WARNING")
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "assay.cli", "worker", "--processes", "2", "--concurrency",
             "4", "--loglevel", "WARNING"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    yield process, log
    leftovers = children_of(process.pid) if process.poll() is None else []
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
    for pid in leftovers:  # never leave a worker behind, even when a test failed
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_child_commands_give_each_process_its_own_node_name() -> None:
    commands = child_commands(3, concurrency=50, pool="threads", loglevel="INFO")
    names = [command[command.index("--hostname") + 1] for command in commands]
    assert names == ["assay-0@%h", "assay-1@%h", "assay-2@%h"]
    assert all(command[command.index("--processes") + 1] == "1" for command in commands)
    assert all(command[command.index("--concurrency") + 1] == "50" for command in commands)
    assert node_name(1, "eu@node-7") == "eu-1@node-7"


def test_two_processes_share_a_batch_and_stop_together_on_sigterm(
    group: tuple[subprocess.Popen[bytes], Path], redis_url: str, tmp_path: Path
) -> None:
    process, log = group
    make_snapshots(tmp_path / "targets", 12, bad_every=4)
    settings = load_settings(redis_url=redis_url)
    control = configured_app(settings)
    with Client(settings) as client:
        replies: list[dict[str, object]] = []

        def both_nodes_answer() -> bool:
            replies[:] = control.control.ping(timeout=1.0) or []
            return len(replies) == 2

        assert wait_until(both_nodes_answer, timeout=90, interval=0.5), worker_log_tail(log)
        names = sorted(name.split("@")[0] for reply in replies for name in reply)
        assert names == ["assay-0", "assay-1"]

        batch_id = client.start_batch(
            PREDICATE, snapshots=str(tmp_path / "targets" / "*"), profile=NO_CONFIRMER_PROFILE
        )
        status = client.wait_batch(batch_id, timeout=120, poll=0.2)
        assert (status.total, status.true, status.false) == (12, 9, 3), worker_log_tail(log)
    control.close()

    workers = children_of(process.pid)
    assert len(workers) == 2
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0, worker_log_tail(log)
    assert wait_until(lambda: not any(alive(pid) for pid in workers), timeout=10)


def test_one_process_dying_takes_the_group_down(
    group: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, log = group
    assert wait_until(lambda: len(children_of(process.pid)) == 2, timeout=60), worker_log_tail(log)
    first, second = children_of(process.pid)
    os.kill(first, signal.SIGKILL)
    # A supervisor (systemd, Kubernetes) must see the worker fail, not run on at half strength.
    assert process.wait(timeout=60) != 0
    assert wait_until(lambda: not alive(second), timeout=10)
