"""Scheduler benchmark: 10,000 deferred evaluations due within 60 s, two replicas.

    .venv/bin/python bench/bench_scheduler.py [--count 10000] [--window 60]

Starts a private redis-server and two real scheduler replica processes (the
production ``run_replica`` loop and ``Dispatcher``, i.e. real Celery messages
on the Redis broker), then defers ``--count`` evaluations with ``not_before``
spread evenly over ``--window`` seconds. Nobody consumes the broker queue, so
every message stays there to be counted. Each replica also notes, right after
a message is on the broker, when it sent it: lateness = sent - due.

Two phases, each with fresh replicas and key prefix:
1. both replicas run through the window;
2. one replica is SIGKILLed halfway through the window.

Printed per phase: lateness p50 / p99 / max, messages, duplicates (messages
beyond one per run id) and misses (run ids with no message). Targets: p99
under 1 s, zero duplicates, zero misses. Nothing is asserted: this prints.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SENT_LOG = "bench:sent"  # list of [fire_id, sent_at] written by the replicas


def replica_main() -> None:
    """One replica process: the production loop with a sender that also notes send times."""
    from scheduler.deferred import Enqueue
    from scheduler.service import FleetSender, run_replica, stop_on_signals
    from schemas.settings import load_settings
    from workers.fleet.redis_client import connect

    settings = load_settings()

    class TimedSender(FleetSender):
        def __init__(self) -> None:
            super().__init__(settings)
            self.log = connect(settings.redis_url or "")

        def send(self, message: Enqueue) -> None:
            super().send(message)
            self.log.rpush(
                f"{settings.key_prefix}:{SENT_LOG}", json.dumps([message.fire_id, time.time()])
            )

    stop = threading.Event()
    stop_on_signals(stop)
    run_replica(settings, stop, sender=TimedSender())


def start_replica(
    redis_url: str, prefix: str, log_dir: Path, index: int
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env.update(
        ASSAY_REDIS_URL=redis_url,
        ASSAY_KEY_PREFIX=prefix,
        ASSAY_LOG_FORMAT="json",
        ASSAY_LOG_LEVEL="WARNING",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PYTHONPATH=str(ROOT),
    )
    log = (log_dir / f"{prefix}-replica-{index}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, __file__, "--replica"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run_phase(
    redis_url: str, log_dir: Path, prefix: str, count: int, window: float, kill: bool
) -> dict[str, Any]:
    from scheduler.deferred import defer_evaluation
    from schemas.request import EvaluationRequest, SnapshotTarget
    from schemas.settings import load_settings
    from workers.fleet.broker import queue_name
    from workers.fleet.redis_client import connect
    from workers.fleet.timers import TimerStore

    settings = load_settings(redis_url=redis_url, key_prefix=prefix)
    client = connect(redis_url)
    replicas = [start_replica(redis_url, prefix, log_dir, i) for i in range(2)]
    try:
        lead = 8.0 + count / 1500  # time to write the timers before the first is due
        start = datetime.now(UTC) + timedelta(seconds=lead)
        due: dict[str, float] = {}
        target = SnapshotTarget(path=str(ROOT / "examples" / "snapshots" / "prod-eu"))
        for index in range(count):
            not_before = start + timedelta(seconds=window * index / count)
            request = EvaluationRequest(
                text=f"bench predicate {index}",
                target=target,
                run_id=f"{prefix}-{index:05d}",
                not_before=not_before,
            )
            defer_evaluation(client, settings, request)
            due[request.run_id] = not_before.timestamp()
        written_at = datetime.now(UTC)
        if written_at > start:
            print(
                f"  warning: writing timers took past the first due instant ({written_at - start})"
            )
        killed = None
        if kill:
            time.sleep(max(0.0, (start - datetime.now(UTC)).total_seconds() + window / 2))
            replicas[0].send_signal(signal.SIGKILL)
            replicas[0].wait(timeout=10)
            killed = "replica 0 SIGKILLed at mid-window"
        settle = start + timedelta(seconds=window + settings.scheduler_lease_seconds + 10)
        timers = TimerStore(client, prefix)
        while datetime.now(UTC) < settle:
            if timers.counts() == (0, 0) and datetime.now(UTC) > start + timedelta(seconds=window):
                break
            time.sleep(0.5)
        sent_log = [json.loads(row) for row in client.lrange(f"{prefix}:{SENT_LOG}", 0, -1)]
        queue = queue_name(settings)
        task_ids = [json.loads(raw)["headers"]["id"] for raw in client.lrange(queue, 0, -1)]
    finally:
        for replica in replicas:
            stop(replica)
    first_sent: dict[str, float] = {}
    for fire_id, sent_at in sent_log:
        first_sent.setdefault(fire_id, sent_at)
    lateness = [first_sent[run_id] - due[run_id] for run_id in due if run_id in first_sent]
    counts = Counter(task_ids)
    return {
        "phase": "one replica killed" if kill else "two replicas",
        "note": killed,
        "timers": count,
        "messages": len(task_ids),
        "duplicates": sum(n - 1 for n in counts.values() if n > 1),
        "misses": sum(1 for run_id in due if run_id not in counts),
        "p50": statistics.median(lateness) if lateness else float("nan"),
        "p99": percentile(lateness, 0.99) if lateness else float("nan"),
        "max": max(lateness) if lateness else float("nan"),
        "early": sum(1 for value in lateness if value < 0),
        "over_1s": sum(1 for value in lateness if value > 1.0),
        "lease": settings.scheduler_lease_seconds,
        "tick": settings.scheduler_tick_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--replica", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replica:
        replica_main()
        return
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from assay.redis_process import RedisProcess

    with tempfile.TemporaryDirectory(prefix="assay-bench-sched-") as tmp:
        server = RedisProcess(data_dir=Path(tmp) / "redis", appendonly=False).start()
        try:
            results = [
                run_phase(server.url, Path(tmp), prefix, args.count, args.window, kill)
                for prefix, kill in (("b1", False), ("b2", True))
            ]
        finally:
            server.stop()
    print(
        f"scheduler bench: {args.count} deferred evaluations due within {args.window:g} s, "
        "2 replicas, real Celery messages on a Redis broker"
    )
    print(
        f"{'phase':<22}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>10}{'messages':>10}"
        f"{'dups':>6}{'misses':>8}{'early':>7}{'late>1s':>9}"
    )
    for r in results:
        p50, p99, worst = (r[key] * 1000 for key in ("p50", "p99", "max"))
        print(
            f"{r['phase']:<22}{p50:>9.1f}{p99:>9.1f}{worst:>10.1f}"
            f"{r['messages']:>10}{r['duplicates']:>6}{r['misses']:>8}{r['early']:>7}{r['over_1s']:>9}"
        )
    print(
        f"(lease {results[0]['lease']:g} s, tick {results[0]['tick']:g} s; "
        "targets: p99 < 1000 ms, 0 duplicates, 0 misses)"
    )


if __name__ == "__main__":
    main()
