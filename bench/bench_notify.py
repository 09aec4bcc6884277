"""Notifier benchmark: delivery throughput and latency, and the cost of the per-check gauges.

    .venv/bin/python bench/bench_notify.py [--changes 2000] [--checks 10000]

Starts a private redis-server and a local HTTP receiver that answers 200 at once.

1. Delivery: ``--changes`` verdict changes (over as many checks) are recorded
   through the store's record path while 1, then 2 real `assay notify` processes
   deliver them to one webhook sink. Printed: changes per second from the first
   record to the last delivery, latency (record -> receiver) p50 / p99, and
   duplicates (deliveries beyond one per idempotency key; the target is 0).
2. Gauges: ``--checks`` checks with a verdict each; printed is the time of one
   ``VerdictStore.check_gauges`` read plus rendering the exposition text, which
   is what every Prometheus scrape of the API costs.

Nothing is asserted: this prints.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class Sink:
    """Receives webhook POSTs and notes when each idempotency key arrived."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[str, float, str]] = []  # key, time, changed_at
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                changed = json.loads(body)["data"]["run_id"]
                with sink.lock:
                    sink.arrivals.append((self.headers["Idempotency-Key"], time.time(), changed))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def delivery(redis_url: str, replicas: int, changes: int, prefix: str) -> None:
    from schemas.settings import AssaySettings
    from schemas.verdict import VerdictKind
    from tests.alerting_support import notifier_env
    from tests.fleet_support import finished_report, snapshot_request
    from workers.fleet.notify_feed import SinkFeed
    from workers.fleet.redis_client import connect
    from workers.fleet.store import VerdictStore

    store = VerdictStore.from_settings(AssaySettings(key_prefix=prefix), client=connect(redis_url))
    sink = Sink()
    env = notifier_env(
        redis_url,
        {"ops": {"type": "webhook", "url": sink.url, "hmac_key": "bench"}},
        key_prefix=prefix,
        log_level="WARNING",
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "assay.cli", "notify"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(replicas)
    ]
    try:
        feed = SinkFeed(store, "ops", "bench")
        while not feed.status("webhook").started:
            time.sleep(0.05)
        time.sleep(1.0)  # every replica is reading
        paths = [f"examples/snapshots/bench-{i}" for i in range(changes)]
        requests = [snapshot_request(path=path) for path in paths]
        for request in requests:  # first verdicts: not changes
            store.record_verdict(finished_report(request, VerdictKind.TRUE))
        recorded: dict[str, float] = {}
        start = time.time()
        for path in paths:
            again = snapshot_request(path=path)
            store.record_verdict(finished_report(again, VerdictKind.FALSE))
            recorded[again.run_id] = time.time()
        deadline = time.time() + 600
        while len({a[0] for a in sink.arrivals}) < changes and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        with sink.lock:
            arrivals = list(sink.arrivals)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        sink.server.shutdown()
    last = max(a[1] for a in arrivals)
    latencies = sorted(a[1] - recorded[a[2]] for a in arrivals if a[2] in recorded)
    duplicates = sum(n - 1 for n in Counter(a[0] for a in arrivals).values())
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(
        f"  {replicas} replica(s): {changes / (last - start):7.0f} changes/s, "
        f"latency p50 {statistics.median(latencies) * 1000:6.1f} ms, p99 {p99 * 1000:7.1f} ms, "
        f"delivered {len({a[0] for a in arrivals})}/{changes}, duplicates {duplicates}"
    )


def gauges(redis_url: str, checks: int) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from schemas.settings import AssaySettings
    from schemas.verdict import VerdictKind
    from tests.fleet_support import finished_report, snapshot_request
    from workers.engine import metrics
    from workers.fleet.redis_client import connect
    from workers.fleet.store import VerdictStore

    store = VerdictStore.from_settings(
        AssaySettings(key_prefix="bench-gauges"), client=connect(redis_url)
    )
    kinds = [VerdictKind.TRUE, VerdictKind.FALSE, VerdictKind.CANNOT_DETERMINE]
    for index in range(checks):
        request = snapshot_request(path=f"examples/snapshots/g-{index}")
        store.record_verdict(finished_report(request, kinds[index % 3]))
    registry = CollectorRegistry()
    registry.register(metrics.CheckVerdictCollector(lambda: store.check_gauges(checks)))
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        text = generate_latest(registry)
        timings.append(time.perf_counter() - start)
    print(
        f"  {checks} checks: one scrape {statistics.median(timings) * 1000:.0f} ms "
        f"(median of 5), {len(text) / 1e6:.1f} MB of exposition text"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=2000)
    parser.add_argument("--checks", type=int, default=10_000)
    args = parser.parse_args()

    from assay.redis_process import RedisProcess

    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisProcess(data_dir=Path(tmp)).start()
        try:
            print(f"delivery of {args.changes} changes to one webhook sink:")
            for replicas in (1, 2):
                delivery(redis.url, replicas, args.changes, prefix=f"bench{replicas}")
            print("per-check gauges:")
            gauges(redis.url, args.checks)
        finally:
            redis.stop()


if __name__ == "__main__":
    main()
