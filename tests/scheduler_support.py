"""Helpers for the scheduler's process tests: replica processes, the broker queue, and the
"paused replica" scenario (also meant for the reliability suite's duplicate count)."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.fleet_support import ROOT


def start_scheduler(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """A real `assay scheduler` replica process, logging to ``log_path``."""
    log = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "assay.cli", "scheduler"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def queued_messages(client: Any, queue: str) -> list[dict[str, Any]]:
    """The ``assay.evaluate`` messages waiting on a Redis broker queue nobody consumes.

    Each is ``{"task_id", "request", "kwargs"}`` decoded from kombu's envelope.
    """
    out = []
    for raw in client.lrange(queue, 0, -1):
        envelope = json.loads(raw)
        args, kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        out.append({"task_id": envelope["headers"]["id"], "request": args[0], "kwargs": kwargs})
    return out


def duplicates(task_ids: list[str]) -> int:
    return sum(count - 1 for count in Counter(task_ids).values() if count > 1)


@dataclass
class PauseOutcome:
    """What a run of :func:`pause_replica_scenario` observed."""

    runs: int
    sent_before_pause: int  # fires the paused replica had marked sent when it stopped
    executions: dict[str, int]  # run id -> deliveries a worker began (begin_delivery count)
    deliveries: Counter[str]  # run id -> broker messages a worker received
    superseded: int  # deliveries the worker dropped as sent by a replica that lost its claim

    @property
    def duplicated_executions(self) -> int:
        return sum(n - 1 for n in self.executions.values() if n > 1)

    @property
    def duplicated_deliveries(self) -> int:
        return sum(n - 1 for n in self.deliveries.values() if n > 1)


def pause_replica_scenario(
    redis_url: str,
    folder: Path,
    *,
    runs: int = 60,
    model_delay: float = 1.5,
    pause_after_sent: int = 0,
) -> PauseOutcome:
    """Real replicas, a real worker: SIGSTOP the replica that is sending, past its lease.

    ``runs`` deferred evaluations fall due together. Replica A claims them; the
    moment its enqueue markers appear (it is about to send), or once it has
    sent ``pause_after_sent`` of them (it is then mid-way), it is SIGSTOPped.
    Replica B takes the timers over once A's lease and holds have passed and
    sends them; while the worker is still busy with B's copies (the scripted
    model answers slowly), A is resumed with SIGCONT and carries on. Every
    process here is started and stopped by this function.
    """
    import redis as redis_lib

    from assay.testing.scripted_model import ScriptedModel
    from scheduler.deferred import defer_evaluation
    from schemas.request import EvaluationRequest, SnapshotTarget
    from schemas.settings import load_settings
    from tests.fleet_support import (
        make_snapshots,
        scripted_worker_env,
        start_worker,
        stop_process,
        three_step_script,
        wait_until,
        worker_env,
        worker_log_tail,
    )

    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    settings = load_settings(redis_url=redis_url, min_interval_seconds=1)
    (snapshot,) = make_snapshots(folder / "snaps", 1)
    scheduler_env = worker_env(
        redis_url,
        scheduler_tick_seconds="0.05",
        scheduler_lease_seconds="2",
        log_format="json",
    )
    processes: list[subprocess.Popen[bytes]] = []
    worker_log = folder / "worker.log"
    with ScriptedModel(three_step_script(delay=model_delay)) as model:
        try:
            worker = start_worker(scripted_worker_env(redis_url, model.url), worker_log, runs + 4)
            processes.append(worker)
            first = start_scheduler(scheduler_env, folder / "replica-a.log")
            processes.append(first)
            assert wait_until(
                lambda: "scheduler replica started" in (folder / "replica-a.log").read_text(),
                timeout=30,
            ), worker_log_tail(folder / "replica-a.log")
            run_ids = [f"pause-{i:03d}" for i in range(runs)]
            due = datetime.now(UTC) + timedelta(seconds=1.5)
            for run_id in run_ids:
                defer_evaluation(
                    client,
                    settings,
                    EvaluationRequest(
                        text="every Deployment in namespace prod has at least 2 ready replicas",
                        target=SnapshotTarget(path=str(snapshot)),
                        run_id=run_id,
                        not_before=due,
                    ),
                )
            markers = [f"{settings.key_prefix}:enqueued:{run_id}" for run_id in run_ids]
            timers = [f"defer:{run_id}" for run_id in run_ids]

            def sent_and_held() -> tuple[int, int]:
                """Fires sent (marked, or acknowledged: their timer and marker are gone), and
                fires a replica is sending (its marker names it)."""
                pipe = client.pipeline(transaction=False)
                pipe.mget(markers)
                pipe.hmget(f"{settings.key_prefix}:timers:entries", timers)
                values, entries = pipe.execute()
                sent = sum(
                    v == "sent" or (v is None and e is None)
                    for v, e in zip(values, entries, strict=True)
                )
                return sent, sum(v not in ("sent", None) for v in values)

            def about_to_send() -> bool:
                sent, held = sent_and_held()
                if not pause_after_sent:
                    return held > 0 or sent > 0
                return sent >= pause_after_sent

            assert wait_until(about_to_send, timeout=30, interval=0.0002)
            os.kill(first.pid, signal.SIGSTOP)
            sent_before = sent_and_held()[0]
            second = start_scheduler(scheduler_env, folder / "replica-b.log")
            processes.append(second)
            # B has sent them all: each marker says so, or is gone with B's acknowledgement
            assert wait_until(
                lambda: all(value in ("sent", None) for value in client.mget(markers)),
                timeout=60,
                interval=0.02,
            ), worker_log_tail(folder / "replica-b.log")
            os.kill(first.pid, signal.SIGCONT)

            def recorded() -> bool:
                keys = [f"{settings.key_prefix}:run:{run_id}" for run_id in run_ids]
                pipe = client.pipeline(transaction=False)
                for key in keys:
                    pipe.hexists(key, "verdict")
                return all(pipe.execute())

            assert wait_until(recorded, timeout=120, interval=0.2), worker_log_tail(worker_log)
            time.sleep(max(2.0, 3 * model_delay))  # late copies reach the worker and settle
        finally:
            for process in processes:
                if process.poll() is None:
                    os.kill(process.pid, signal.SIGCONT)
                stop_process(process)
    executions = {
        run_id: int(client.hget(f"{settings.key_prefix}:run:{run_id}", "attempts") or 0)
        for run_id in run_ids
    }
    log = worker_log.read_text(errors="replace")
    deliveries = Counter(
        task_id
        for task_id in re.findall(r"Task assay\.evaluate\[([^\]]+)\] received", log)
        if task_id in executions
    )
    superseded = log.count("delivery_superseded")
    client.close()
    return PauseOutcome(runs, sent_before, executions, deliveries, superseded)


@dataclass
class CopiesOutcome:
    """What :func:`two_copies_scenario` observed for its one run."""

    outcomes: list[str]  # what each delivery came to: "recorded", "superseded", ...
    executions: int  # deliveries a worker began (the run's ``attempts``)
    model_requests: int  # model calls made for the run (3 per execution of the script)


def two_copies_scenario(redis_url: str, folder: Path, prefix: str = "fence") -> CopiesOutcome:
    """Two copies of one deferred fire, with different fencing tokens, delivered at once.

    A stalled replica's late copy and the survivor's copy reach two worker threads together
    (in process: the real delivery handler, the real store, the scripted model over HTTP),
    the moment no replica-side check can help any more: only the worker's fence decides.
    """
    import threading

    import redis as redis_lib

    from assay.testing.scripted_model import ScriptedModel
    from scheduler.deferred import defer_evaluation
    from schemas.request import EvaluationRequest, SnapshotTarget
    from schemas.settings import load_settings
    from tests.fleet_support import PREDICATE, make_snapshots, three_step_script
    from workers.fleet.runtime import WorkerRuntime
    from workers.fleet.tasks import handle_delivery

    (snapshot,) = make_snapshots(folder / "snaps", 1)
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    with ScriptedModel(three_step_script(delay=0.5)) as model:
        settings = load_settings(
            redis_url=redis_url,
            key_prefix=prefix,
            model="openai/scripted",
            api_base=model.url,
            api_key="scripted",
        )
        request = EvaluationRequest(
            text=PREDICATE,
            target=SnapshotTarget(path=str(snapshot)),
            run_id="twice-1",
            not_before=datetime.now(UTC) + timedelta(seconds=1),
        )
        defer_evaluation(client, settings, request)
        runtime = WorkerRuntime.build(settings)
        payload = request.model_dump(mode="json")
        outcomes: list[str] = []
        copies = [
            threading.Thread(
                target=lambda token=token: outcomes.append(
                    handle_delivery(
                        payload, runtime, fence={"fire": request.run_id, "token": token}
                    )
                )
            )
            for token in ("from-replica-b", "from-replica-a")
        ]
        for copy in copies:
            copy.start()
        for copy in copies:
            copy.join(timeout=60)
        executions = int(client.hget(f"{prefix}:run:{request.run_id}", "attempts") or 0)
        requests = len(model.requests_for(request.run_id))
    client.close()
    return CopiesOutcome(sorted(outcomes), executions, requests)
