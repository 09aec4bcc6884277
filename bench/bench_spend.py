"""Spend guard benchmark: what a reservation adds to each model call, and the overshoot.

    .venv/bin/python bench/bench_spend.py [--calls 5000] [--threads 32]

Starts a private redis-server (nothing else on the machine is touched) and drives the
worker's own guard (``FleetSpendGuard`` over ``SpendStore``'s Lua scripts), as the engine
does around every model call: reserve before, settle after. Each call is charged to four
ceilings, the most a call meets: the fleet's hour and day, its schedule's day, its batch.

1. Latency: what the guard adds to a model call's path (reserve, one round trip, plus
   handing the settlement to the settler thread), from one thread (an idle worker) and
   from ``--threads`` threads at once (a busy one): p50, p99, mean. Also, per call in all:
   the process's CPU (the settler's pipelined settles included) and Redis's time in the
   two scripts. Target: under 0.5 ms per model call.
2. Overshoot: ``--threads`` threads (calls in flight at once) race for a 1,000,000-token
   fleet ceiling, each call reserving 8,000 tokens, once with a provider whose usage stays
   within the reservation and once with one that reports 2,000 tokens more than reserved
   (a provider ignoring ``max_tokens``). Printed: tokens spent, the overshoot, and the
   documented bound (calls in flight x overrun per call; docs/fleet.md, "Spend guard").

Nothing is asserted: this prints.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schemas.request import EvaluationRequest
    from workers.fleet.spend_reservations import FleetSpendGuard

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CEILING = 1_000_000
RESERVED = 8_000
OVERRUN = 2_000


def _request(index: int) -> EvaluationRequest:
    from schemas.request import EvaluationRequest, SnapshotTarget

    return EvaluationRequest(
        text="every Deployment in namespace prod has at least 2 ready replicas",
        target=SnapshotTarget(path="examples/snapshots/prod-eu"),
        schedule_id="sch-bench",
        scheduled_at=datetime.now(UTC),
        batch_id=f"batch-bench-{index % 4}",
    )


def _pairs(
    guard: FleetSpendGuard, calls: int, index: int, timings: list[float], call_seconds: float
) -> None:
    """``calls`` model calls' worth of guard work, each call itself taking ``call_seconds``."""
    request = _request(index)
    deadline = time.monotonic() + 3600
    for _ in range(calls):
        started = time.perf_counter()
        ticket = guard.reserve(request, 5_000, 0.0006, deadline)
        guard.settle(ticket, 900, 0.0001)
        timings.append(time.perf_counter() - started)
        time.sleep(call_seconds)  # the model call itself


def latency(redis_url: str, calls: int, threads: int) -> None:
    from schemas.settings import load_settings
    from workers.fleet.redis_client import connect
    from workers.fleet.spend_reservations import FleetSpendGuard

    settings = load_settings(
        redis_url=redis_url,
        key_prefix="bench-latency",
        spend_fleet_tokens_per_hour=10**12,
        spend_fleet_cost_usd_per_day=1e6,
        spend_schedule_tokens_per_day=10**12,
        spend_batch_tokens=10**12,
    )
    client = connect(redis_url)
    guard = FleetSpendGuard.from_settings(settings, client)
    _pairs(guard, 200, 0, [], 0.0)  # warm up: scripts loaded, connections open
    guard.flush()
    # One thread back to back; then a busy worker: every thread's model call takes 50 ms
    # (real ones take seconds), so the guard's path runs beside 31 others in flight.
    for label, count, call_seconds in (("1 thread", 1, 0.0), (f"{threads} threads", threads, 0.05)):
        timings: list[float] = []
        workers = [
            threading.Thread(target=_pairs, args=(guard, calls // count, i, timings, call_seconds))
            for i in range(count)
        ]
        client.config_resetstat()
        cpu = time.process_time()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        guard.flush()
        cpu = time.process_time() - cpu
        redis_us = client.info("commandstats")["cmdstat_evalsha"]["usec"]
        timings.sort()
        ms = [t * 1000 for t in timings]
        print(
            f"on the call's path, 4 ceilings, {label:>10}: p50 {statistics.median(ms):.3f} ms  "
            f"p99 {ms[int(len(ms) * 0.99) - 1]:.3f} ms  mean {statistics.fmean(ms):.3f} ms; "
            f"per call in all: {cpu / len(ms) * 1000:.3f} ms CPU here, "
            f"{redis_us / len(ms) / 1000:.3f} ms in Redis ({len(ms)} calls)"
        )


def overshoot(redis_url: str, threads: int, overrun: int) -> tuple[int, int]:
    """(tokens spent, calls made) when ``threads`` calls at a time race for the ceiling."""
    from workers.fleet.redis_client import connect
    from workers.fleet.spend import Scope, SpendStore

    prefix = f"bench-overshoot-{overrun}"
    scopes = [Scope("fleet-hour", default_tokens=CEILING, ttl_seconds=3600)]
    barrier = threading.Barrier(threads)
    made: list[int] = []

    def caller(index: int) -> None:
        spend = SpendStore(connect(redis_url), prefix)
        calls = 0
        for call in range(10_000):
            rid = f"{index}-{call}"
            while (answer := spend.reserve(rid, RESERVED, -1, 60_000, scopes)).status == "wait":
                time.sleep(0.0005)
            if answer.status == "refused":
                break
            if call == 0:
                barrier.wait(30)  # every thread's first call in flight at once
            used = RESERVED + overrun if overrun else RESERVED // 2
            spend.settle(rid, used, -1)
            calls += 1
        made.append(calls)

    workers = [threading.Thread(target=caller, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    spend = SpendStore(connect(redis_url), prefix)
    return spend.fleet_now()[0].tokens, sum(made)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000, help="model calls per latency phase")
    parser.add_argument("--threads", type=int, default=32, help="calls in flight at once")
    args = parser.parse_args()

    import os

    from assay.redis_process import RedisProcess

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as folder:
        server = RedisProcess(data_dir=Path(folder)).start()
        try:
            latency(server.url, args.calls, args.threads)
            for overrun in (0, OVERRUN):
                spent, calls = overshoot(server.url, args.threads, overrun)
                provider = (
                    "usage within its reservation"
                    if not overrun
                    else f"usage {overrun:,} over its reservation"
                )
                bound = args.threads * overrun
                print(
                    f"overshoot, {args.threads} calls in flight, {provider}: {spent:,} of "
                    f"{CEILING:,} tokens over {calls} calls, overshoot "
                    f"{max(0, spent - CEILING):,} (bound {bound:,})"
                )
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
