"""What a batch fan-out costs the client per target (prints figures).

``Client.start_batch`` over N snapshot folders against a private
redis-server, no workers: client CPU (process time) per target and wall
seconds from the call until every run is registered and its message queued.
The first batch of each size warms the client (connections, scripts loaded);
the figures are the median of ``--repeat`` batches after it. "dated" rows fan
out a predicate opening with a future instant (every run held by the
scheduler's timers instead of queued).

Run: ``.venv/bin/python bench/bench_fanout.py [--sizes 200 2000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from assay.client import Client
from assay.redis_process import RedisProcess
from schemas.settings import load_settings
from tests.fleet_support import PREDICATE, make_snapshots

DATED = "on 2099-01-01T00:00:00Z, " + PREDICATE


def one_batch(client: Client, pattern: str, text: str) -> tuple[float, float]:
    """(client CPU seconds, wall seconds) of one fan-out."""
    cpu, wall = time.process_time(), time.perf_counter()
    client.start_batch(text, snapshots=pattern)
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        os.environ["ASSAY_SNAPSHOT_ROOTS"] = f'["{root}"]'
        server = RedisProcess(data_dir=root / "redis").start()
        try:
            settings = load_settings(redis_url=server.url)
            print(f"{'predicate':>9} {'targets':>7} {'CPU ms/target':>14} {'wall s':>8}")
            with Client(settings) as client:
                for label, text in (("plain", PREDICATE), ("dated", DATED)):
                    for size in options.sizes:
                        make_snapshots(root / f"n{size}", size)
                        pattern = str(root / f"n{size}" / "*")
                        one_batch(client, pattern, text)  # warm-up
                        runs = [one_batch(client, pattern, text) for _ in range(options.repeat)]
                        cpu = statistics.median(c for c, _ in runs)
                        wall = statistics.median(w for _, w in runs)
                        print(f"{label:>9} {size:>7} {cpu * 1000 / size:14.2f} {wall:8.2f}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
