"""Real scheduler replica processes on a real redis-server and the real Celery broker.

- a schedule created, paused and resumed while a replica runs (no restart);
- deferred evaluations fire at their instant;
- two replicas, one SIGKILLed mid-window, with a real worker recording
  verdicts: no timer missed, no run recorded twice.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis as redis_lib

from assay.testing.scripted_model import ScriptedModel
from scheduler.deferred import defer_evaluation
from scheduler.schedules import ScheduleStore
from schemas.request import EvaluationRequest, SnapshotTarget
from schemas.schedule import Schedule, ScheduleTargets
from schemas.settings import AssaySettings, load_settings
from tests.fleet_support import (
    make_snapshots,
    scripted_worker_env,
    start_worker,
    stop_process,
    wait_until,
    worker_env,
    worker_log_tail,
)
from tests.scheduler_support import duplicates, queued_messages, start_scheduler
from workers.fleet.timers import TimerStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

QUEUE = "assay.evaluations"
FAST_SCHEDULER = {
    "scheduler_tick_seconds": "0.05",
    "scheduler_lease_seconds": "2",
    "min_interval_seconds": "1",
    "log_format": "json",
}


@pytest.fixture
def settings(redis_url: str) -> AssaySettings:
    return load_settings(redis_url=redis_url, min_interval_seconds=1, scheduler_lease_seconds=2)


@pytest.fixture
def client(redis_url: str) -> redis_lib.Redis:
    return redis_lib.Redis.from_url(redis_url, decode_responses=True)


@pytest.fixture
def replicas(redis_url: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for index, process in enumerate(started):
        stop_process(process)
        if process.returncode not in (0, -9, -15):
            print(worker_log_tail(tmp_path / f"scheduler-{index}.log"))


def spawn(replicas: list[subprocess.Popen[bytes]], redis_url: str, tmp_path: Path) -> None:
    env = worker_env(redis_url, **FAST_SCHEDULER)
    replicas.append(start_scheduler(env, tmp_path / f"scheduler-{len(replicas)}.log"))


def test_schedule_changes_reach_a_running_replica(
    settings: AssaySettings,
    client: redis_lib.Redis,
    redis_url: str,
    replicas: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    spawn(replicas, redis_url, tmp_path)
    schedules = ScheduleStore(client, settings.key_prefix, settings.min_interval_seconds)
    (folder,) = make_snapshots(tmp_path / "snaps", 1)
    schedules.create(
        Schedule(
            name="often",
            predicate="every Deployment is ready",
            targets=ScheduleTargets(snapshots=[str(folder)]),
            interval_seconds=1,
        )
    )
    assert wait_until(lambda: client.llen(QUEUE) >= 3, timeout=30)
    schedules.pause("often")
    time.sleep(0.5)
    paused_at = client.llen(QUEUE)
    time.sleep(2.5)
    assert client.llen(QUEUE) == paused_at, "a paused schedule fired"
    schedules.resume("often")
    assert wait_until(lambda: client.llen(QUEUE) >= paused_at + 2, timeout=30)
    schedules.remove("often")
    messages = queued_messages(client, QUEUE)
    run_ids = [m["task_id"] for m in messages]
    assert duplicates(run_ids) == 0
    assert {m["request"]["text"] for m in messages} == {"every Deployment is ready"}
    assert all(m["request"]["schedule_id"] for m in messages)


def test_deferred_evaluations_fire_at_their_instant(
    settings: AssaySettings,
    client: redis_lib.Redis,
    redis_url: str,
    replicas: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    spawn(replicas, redis_url, tmp_path)
    now = datetime.now(UTC)
    due = {f"later-{i}": now + timedelta(seconds=3 + i) for i in range(3)}
    for run_id, not_before in due.items():
        defer_evaluation(
            client,
            settings,
            EvaluationRequest(
                text="the rollout is complete",
                target=SnapshotTarget(path=str(tmp_path)),
                run_id=run_id,
                not_before=not_before,
            ),
        )
    first_seen: dict[str, datetime] = {}

    def all_seen() -> bool:
        for message in queued_messages(client, QUEUE):
            first_seen.setdefault(message["task_id"], datetime.now(UTC))
        return len(first_seen) == len(due)

    assert wait_until(all_seen, timeout=40, interval=0.02)
    for run_id, not_before in due.items():
        lateness = (first_seen[run_id] - not_before).total_seconds()
        assert -0.05 <= lateness < 1.5, (run_id, lateness)  # never early, promptly on time
    assert len(queued_messages(client, QUEUE)) == len(due)


@pytest.fixture(scope="module")
def done_model() -> Iterator[ScriptedModel]:
    script = {
        "scenarios": [
            {"turns": [{"action": {"action": "DONE", "verdict": "true", "explanation": "ok"}}]}
        ]
    }
    with ScriptedModel(script) as model:
        yield model


def test_two_replicas_one_killed_miss_nothing_and_double_nothing(
    settings: AssaySettings,
    client: redis_lib.Redis,
    redis_url: str,
    replicas: list[subprocess.Popen[bytes]],
    done_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    worker_log = tmp_path / "worker.log"
    worker = start_worker(scripted_worker_env(redis_url, done_model.url), worker_log, 16)
    try:
        spawn(replicas, redis_url, tmp_path)
        spawn(replicas, redis_url, tmp_path)
        time.sleep(2.0)  # both replicas up
        count, window = 150, 5.0
        start = datetime.now(UTC) + timedelta(seconds=1)
        # A snapshot with an object in it: an empty folder is refused before any model is asked.
        [cluster] = make_snapshots(tmp_path / "clusters", 1)
        requests = [
            EvaluationRequest(
                text=f"deferred predicate number {i}",
                target=SnapshotTarget(path=str(cluster)),
                run_id=f"kill-{i:03d}",
                not_before=start + timedelta(seconds=window * i / count),
            )
            for i in range(count)
        ]
        for request in requests:
            defer_evaluation(client, settings, request)
        time.sleep(1 + window / 2)
        replicas[0].send_signal(signal.SIGKILL)  # mid-window, possibly mid-claim
        replicas[0].wait(timeout=10)

        def all_recorded() -> bool:
            return all(client.hexists(f"assay:run:{r.run_id}", "verdict") for r in requests)

        assert wait_until(all_recorded, timeout=120, interval=0.5), worker_log_tail(worker_log)
        for request in requests:
            assert client.xlen(f"assay:check:{request.check_id}:history") == 1, request.run_id
        timers = TimerStore(client, settings.key_prefix)
        assert wait_until(lambda: timers.counts() == (0, 0), timeout=10)
        assert len(done_model.requests) >= count
    finally:
        stop_process(worker)


def test_sigterm_stops_a_replica_cleanly(
    redis_url: str, replicas: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    spawn(replicas, redis_url, tmp_path)
    log = tmp_path / "scheduler-0.log"
    assert wait_until(lambda: "scheduler replica started" in log.read_text(), timeout=30)
    replicas[0].send_signal(signal.SIGTERM)
    assert replicas[0].wait(timeout=10) == 0
    assert "scheduler replica stopped" in log.read_text()


def _events(log: Path) -> list[str]:
    """The ``event`` of each JSON log line, in order (other lines are skipped)."""
    import json

    events = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            events.append(str(json.loads(line).get("event")))
        except (ValueError, AttributeError):
            continue
    return events


def test_a_replica_with_no_redis_says_so_and_exits_69(tmp_path: Path) -> None:
    """Before: nothing said Redis was down, Ctrl-C took about 20 s (Redis retries), the
    replica logged "started" after "stopping", and the command exited 0."""
    from assay.redis_process import free_port

    env = worker_env(f"redis://:not-shown-pw@127.0.0.1:{free_port()}/0", **FAST_SCHEDULER)
    log = tmp_path / "scheduler.log"
    replica = start_scheduler(env, log)
    assert replica.wait(timeout=60) == 69
    text = log.read_text()
    assert "assay: error: cannot reach the fleet's Redis at redis://:***@127.0.0.1:" in text
    assert "not-shown-pw" not in text
    assert "scheduler replica started" not in _events(log)


def test_a_signal_while_rounds_fail_stops_the_replica_at_once() -> None:
    """While Redis is away the round in progress holds nothing a lease does not return:
    one Ctrl-C stops at once (the command then exits 69, saying Redis did not answer)."""
    import os
    import threading

    from scheduler.service import ReplicaStats, stop_on_signals

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    stop, stats = threading.Event(), ReplicaStats(failing="Connection refused")
    try:
        stop_on_signals(stop, stats)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # the handler runs here
        assert stop.is_set()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
