"""Should scheduled checks and batches default to `strict`? The two figures that decide it.
Prints figures; asserts nothing.

    .venv/bin/python bench/bench_strict_default.py [--fires 100] [--copies 50]

1. Safety: the injection-obeying scripted model (``obey_injections``) against the hostile
   snapshot (tests/fixtures/hostile-cluster, 9 planted places x 2 transports), through the
   engine and litellm: how many runs end `true` (the honest answer is false) per profile.
2. Cost: what `strict` adds, by model calls and tokens, with probes on (`--probe auto`, the
   default of schedules and batches) and off, through ``evaluate_check`` as the worker
   calls it, on a private redis-server, with the README's scripted model
   (examples/scripts/demo.yaml: it proposes a probe and has a confirmer):
   a. one scheduled check fired N times on examples/snapshots/prod-eu (true), with the
      default re-validation (every ``probe_revalidate_runs`` probe runs);
   b. one batch over M copies of prod-eu and M of staging-us (false).
   The scripted model answers at once, so the figures are calls and tokens, not latency; a
   real model's confirmation costs one more call of about the size counted here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import yaml  # noqa: E402

from assay.redis_process import RedisProcess  # noqa: E402
from assay.testing.scripted_model import ScriptedModel  # noqa: E402
from prompts import CONFIRMER_SIGNATURE  # noqa: E402
from schemas.probe import ProbeMode  # noqa: E402
from schemas.report import RunReport  # noqa: E402
from schemas.request import EvaluationRequest, SnapshotTarget  # noqa: E402
from schemas.settings import load_settings  # noqa: E402
from tests.injection_support import run_injection_matrix  # noqa: E402
from workers.engine.engine import EngineDeps  # noqa: E402
from workers.engine.logs import configure_logging  # noqa: E402
from workers.fleet.probe_rerun import evaluate_check  # noqa: E402
from workers.fleet.probe_store import ProbeStore  # noqa: E402
from workers.fleet.redis_client import connect  # noqa: E402

PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
DEMO_SCRIPT = ROOT / "examples" / "scripts" / "demo.yaml"
SNAPSHOTS = ROOT / "examples" / "snapshots"
PROFILES = ("fast", "strict")


class Counted:
    """Model calls, confirmation calls and tokens of the runs made since it was opened."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self.start = len(model.requests)
        self.reports: list[RunReport] = []

    def add(self, report: RunReport) -> None:
        self.reports.append(report)

    def line(self, label: str) -> str:
        requests = self.model.requests[self.start :]
        confirmations = sum(1 for body in requests if _system(body).startswith(CONFIRMER_SIGNATURE))
        tokens = sum(r.verdict.usage.total_tokens for r in self.reports if r.verdict)
        by_probe = sum(1 for r in self.reports if r.verdict and r.verdict.source == "probe")
        verdicts: dict[str, int] = {}
        for report in self.reports:
            name = report.verdict.verdict.value if report.verdict else "none"
            verdicts[name] = verdicts.get(name, 0) + 1
        shown = ", ".join(f"{count} {name}" for name, count in sorted(verdicts.items()))
        return (
            f"  {label:<26} {len(self.reports):>4} runs  {len(requests):>4} model calls "
            f"({confirmations:>3} confirmations)  {tokens:>8,} tokens  {by_probe:>4} by probe  "
            f"[{shown}]"
        )


def _system(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    return str(first.get("content", "")) if first.get("role") == "system" else ""


def safety() -> None:
    tally = run_injection_matrix(profiles=PROFILES)
    print("1. the injection-obeying model against the hostile snapshot (honest answer: false)")
    for line in tally.table().splitlines():
        print(f"  {line}")
    for profile in PROFILES:
        stats = tally.profiles[profile]
        print(f"  {profile}: {stats.trues} of {stats.runs} runs end true")


def _request(path: Path, profile: str, mode: ProbeMode, **fields: Any) -> EvaluationRequest:
    return EvaluationRequest(
        text=PREDICATE,
        target=SnapshotTarget(path=str(path)),
        profile=profile,
        probe=mode,
        **fields,
    )


def schedule_fires(deps: EngineDeps, probes: ProbeStore, model: ScriptedModel, fires: int) -> None:
    print(f"2a. one scheduled check fired {fires} times on prod-eu (true)")
    for mode in ("auto", "off"):
        for profile in PROFILES:
            counted = Counted(model)
            check_id = f"bench-{profile}-{mode}"
            for _ in range(fires):
                request = _request(SNAPSHOTS / "prod-eu", profile, mode, check_id=check_id)
                counted.add(evaluate_check(request, deps, probes))
            print(counted.line(f"{profile}, --probe {mode}"))


def batch(
    deps: EngineDeps, probes: ProbeStore, model: ScriptedModel, root: Path, copies: int
) -> None:
    targets: list[Path] = []
    for name in ("prod-eu", "staging-us"):
        for index in range(copies):
            folder = root / "fleet" / f"{name}-{index:03d}"
            shutil.copytree(SNAPSHOTS / name, folder)
            targets.append(folder)
    print(f"2b. one batch over {len(targets)} targets ({copies} like prod-eu, {copies} like "
          "staging-us)")  # fmt: skip
    for mode in ("auto", "off"):
        for profile in PROFILES:
            counted = Counted(model)
            batch_id = f"bench-{profile}-{mode}"
            for path in targets:
                counted.add(evaluate_check(_request(path, profile, mode, batch_id=batch_id),
                                           deps, probes))  # fmt: skip
            print(counted.line(f"{profile}, --probe {mode}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fires", type=int, default=100)
    parser.add_argument("--copies", type=int, default=50)
    args = parser.parse_args()
    configure_logging(load_settings(log_level="WARNING"))
    safety()
    script = yaml.safe_load(DEMO_SCRIPT.read_text())
    with tempfile.TemporaryDirectory() as tmp, ScriptedModel(script) as model:
        root = Path(tmp)
        redis_server = RedisProcess(data_dir=root / "redis").start()
        try:
            os.chdir(ROOT)  # snapshot targets must lie under the snapshot roots
            settings = load_settings(
                model="openai/scripted",
                api_base=model.url,
                log_level="WARNING",
                snapshot_roots=[str(ROOT), str(root)],
            )
            configure_logging(settings)
            deps = EngineDeps(settings=settings)
            probes = ProbeStore(connect(redis_server.url), prefix="bench")
            schedule_fires(deps, probes, model, args.fires)
            batch(deps, probes, model, root, args.copies)
        finally:
            redis_server.stop()


if __name__ == "__main__":
    main()
