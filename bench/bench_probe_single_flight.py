"""Single-flight probe compilation: model runs in a batch whose targets all start together.
Prints figures; asserts nothing.

    .venv/bin/python bench/bench_probe_single_flight.py [--targets 32] [--workers 8] [--delay 0.3]

A batch of one predicate over N snapshot targets, every target submitted at once to a pool of
W threads (as a worker's threads take a batch's tasks), through ``evaluate_check``, on a private
redis-server, with the scripted model answering each turn after ``--delay`` seconds (a real
provider takes seconds). With ``probe_compile_wait_seconds=0`` (no single-flight) every thread
that starts before the first compile asks the model; with it, one run asks and the rest wait.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from assay.redis_process import RedisProcess
from assay.testing.scripted_model import ScriptedModel
from bench.bench_probes import SCRIPT, _run, make_targets
from schemas.settings import load_settings
from workers.engine.engine import EngineDeps
from workers.engine.logs import configure_logging
from workers.fleet.probe_store import ProbeStore
from workers.fleet.redis_client import connect


def _slowed(delay: float) -> dict[str, Any]:
    script = copy.deepcopy(SCRIPT)
    for turn in script["scenarios"][0]["turns"]:
        turn["delay"] = delay
    return script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=32)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ScriptedModel(_slowed(args.delay)) as model:
        root = Path(tmp)
        os.chdir(root)
        redis_server = RedisProcess(data_dir=root / "redis").start()
        try:
            settings = load_settings(
                model="openai/scripted", api_base=model.url, log_level="WARNING"
            )
            configure_logging(settings)
            deps = EngineDeps(settings=settings)
            targets = make_targets(root / "targets", args.targets)
            print(f"batch of {args.targets} targets, all started at once on {args.workers} "
                  f"threads, {args.delay:g} s per model turn")  # fmt: skip
            for wait in (0.0, 60.0):
                probes = ProbeStore(
                    connect(redis_server.url), prefix="bench", compile_lock_seconds=wait
                )
                batch = f"bench-{int(wait)}-{time.time_ns()}"
                calls_before = len(model.requests)
                began = time.perf_counter()
                with ThreadPoolExecutor(args.workers) as pool:
                    reports = list(
                        pool.map(
                            _run,
                            repeat(deps),
                            repeat(probes),
                            targets,
                            repeat("auto"),
                            repeat(batch),
                        )
                    )
                elapsed = time.perf_counter() - began
                asked = sum(1 for r in reports if r.verdict and r.verdict.source == "model")
                tokens = sum(r.verdict.usage.total_tokens for r in reports if r.verdict)
                compiled = sum(
                    1
                    for r in reports
                    if r.verdict and r.verdict.source == "model" and r.probe and r.probe.version
                )
                label = "off" if wait == 0 else f"{wait:g} s"
                print(f"  single-flight {label:>5}: {asked:>3} runs asked the model "
                      f"({len(model.requests) - calls_before} model calls, {tokens:,} tokens), "
                      f"{compiled} probe(s) compiled, {elapsed:5.2f} s wall")  # fmt: skip
        finally:
            redis_server.stop()


if __name__ == "__main__":
    main()
