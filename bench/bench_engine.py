"""Engine overhead and CLI start-up time. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_engine.py [--runs N]

1. A 3-step evaluation (get, describe, done) of the example snapshot prod-eu
   against the scripted model with zero model latency: wall time, time inside
   model calls (litellm + HTTP + the scripted server), time inside tools, and
   the rest, which is the engine's own overhead per step (target < 10 ms/step).
2. `assay --help` wall time, median of several runs (target < 0.5 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from assay.testing.scripted_model import ScriptedModel  # noqa: E402
from schemas.request import EvaluationRequest, SnapshotTarget  # noqa: E402
from schemas.settings import load_settings  # noqa: E402
from workers.engine.engine import EngineDeps, evaluate  # noqa: E402
from workers.engine.logs import configure_logging  # noqa: E402

SNAPSHOT = ROOT / "examples" / "snapshots" / "prod-eu"
SCRIPT = {
    "scenarios": [
        {
            "turns": [
                {"action": {"action": "COMMAND", "tool": "get",
                            "arguments": {"kind": "Deployment", "namespace": "prod"}}},
                {"action": {"action": "COMMAND", "tool": "describe",
                            "arguments": {"kind": "Deployment", "name": "api",
                                          "namespace": "prod"}}},
                {"action": {"action": "DONE", "verdict": "true", "explanation": "all ready",
                            "evidence": [{"step": 0, "excerpt": "api     3/3"}]}},
            ]
        }
    ]
}  # fmt: skip


def bench_engine(runs: int) -> None:
    with ScriptedModel(SCRIPT) as model:
        settings = load_settings(model="openai/scripted", api_base=model.url, log_level="WARNING")
        configure_logging(settings)
        deps = EngineDeps(settings=settings)
        samples = []
        for index in range(runs + 1):
            request = EvaluationRequest(
                text="every Deployment in namespace prod has at least 2 ready replicas",
                target=SnapshotTarget(path=str(SNAPSHOT)),
            )
            began = time.perf_counter()
            report = evaluate(request, deps)
            wall = time.perf_counter() - began
            assert report.verdict is not None and report.verdict.verdict == "true", report
            model_s = sum(step.usage.latency_seconds for step in report.steps)
            tool_s = sum(step.tool_latency_seconds for step in report.steps)
            if index > 0:  # the first run pays litellm's import and warm-up
                samples.append((wall, model_s, tool_s, len(report.steps)))
    walls = [s[0] for s in samples]
    overhead = [(s[0] - s[1] - s[2]) / s[3] for s in samples]
    model_per_step = [s[1] / s[3] for s in samples]
    tools = [s[2] for s in samples]
    print(f"engine: {runs} warm runs of a 3-step evaluation on {SNAPSHOT.name}, zero model latency")
    print(f"  evaluation wall time     median {statistics.median(walls) * 1000:8.1f} ms")
    print(f"  model calls per step     median {statistics.median(model_per_step) * 1000:8.1f} ms"
          "  (litellm + HTTP + scripted server)")  # fmt: skip
    print(f"  tools per run            median {statistics.median(tools) * 1000:8.1f} ms")
    print(f"  engine overhead per step median {statistics.median(overhead) * 1000:8.2f} ms"
          f"  max {max(overhead) * 1000:.2f} ms  (target < 10 ms)")  # fmt: skip


def bench_help(runs: int) -> None:
    assay = Path(sys.executable).parent / "assay"
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([str(assay), "--help"], capture_output=True, check=True)
        times.append(time.perf_counter() - began)
    print(f"cli: `assay --help` median {statistics.median(times):.3f} s over {runs} runs"
          f"  (min {min(times):.3f} s, target < 0.5 s)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--help-runs", type=int, default=7)
    args = parser.parse_args()
    bench_engine(args.runs)
    bench_help(args.help_runs)


if __name__ == "__main__":
    main()
