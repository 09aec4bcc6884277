"""Redis memory of a fleet that keeps re-running the same checks. Prints figures only.

    .venv/bin/python bench/bench_memory.py [--checks 4] [--targets 6] [--fires 30]
                                           [--history-limit 10] [--via schedule|batch]

A fleet of real processes on a private redis-server: one `assay worker` on the scripted model
(examples/scripts/demo.yaml, not an LLM) and, for ``--via schedule``, one `assay scheduler`.
The checks are ``--checks`` wordings of the demo check (each compiles a probe on its first
fire, then re-runs by it for 0 model tokens) and the example policy set
(``policy-set:baseline``: examples/policies, three policies, each recorded as its own check)
over ``--targets`` copies of the example snapshots prod-eu and staging-us (where the demo
check is decided; dev-ap asks the model every time and is left out). Each fire re-runs every
check on every target, at the scripted model's speed: ``--via schedule`` fires each check's
schedule once (``assay schedule run``: timers, fences and the scheduler's markers included),
``--via batch`` starts one batch per check (the batch's tally and result rows included).

After every fire the bench reads Redis's own figures: ``MEMORY USAGE`` of every key (what
the keys hold) and ``INFO memory`` ``used_memory`` (what the server holds, allocator
overhead included). Printed per fire: both totals, their growth since the fire before, and
that growth per run recorded (a set run's policies are runs of their own); then bytes per
(check, target) after the last fire and bytes per fire once the fires only repeat. The keys
are grouped by family, so what grows is named.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import yaml  # noqa: E402

from assay.client import Client  # noqa: E402
from assay.redis_process import RedisProcess  # noqa: E402
from assay.testing.scripted_model import ScriptedModel  # noqa: E402
from schemas.schedule import Schedule, ScheduleTargets  # noqa: E402
from schemas.settings import load_settings  # noqa: E402
from tests.fleet_support import (  # noqa: E402
    scripted_worker_env,
    start_worker,
    stop_process,
    wait_until,
    worker_log_tail,
)
from tests.scheduler_support import start_scheduler  # noqa: E402

DEMO_PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
DECIDED = ("prod-eu", "staging-us")  # the example clusters the demo check decides
POLICY_SET = "baseline"
PREFIX = "assay"


@dataclass
class Sample:
    fire: int
    runs: int  # runs recorded so far (policy runs of a set included)
    key_bytes: int  # sum of MEMORY USAGE over every key
    used_memory: int  # INFO memory used_memory
    families: Counter[str]


def make_targets(folder: Path, count: int) -> list[Path]:
    """``count`` copies of the decided example snapshots, in turn."""
    paths = []
    for index in range(count):
        source = ROOT / "examples" / "snapshots" / DECIDED[index % len(DECIDED)]
        path = folder / f"{DECIDED[index % len(DECIDED)]}-{index:03d}"
        shutil.copytree(source, path)
        paths.append(path)
    return paths


def predicates(count: int) -> list[str]:
    """``count`` wordings of the demo check (the demo script's pattern matches each)."""
    return [DEMO_PREDICATE, *(f"check {n}: {DEMO_PREDICATE}" for n in range(1, count))][:count]


def family(key: str) -> str:
    """A key's family: its prefix's words up to the first id (``assay:run``, ``assay:check``)."""
    if not key.startswith(f"{PREFIX}:"):
        return "(broker) " + key.split(":")[0].split(".")[0][:24]
    parts = key.split(":")
    head = ":".join(parts[:2])
    if parts[1] in {"check", "batch", "run", "probe"} and len(parts) > 3:
        return f"{head}:*:{parts[3]}"
    return head


def measure(client: Any, fire: int, runs: int) -> Sample:
    families: Counter[str] = Counter()
    total = 0
    for raw in client.scan_iter(count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        size = int(client.memory_usage(key, samples=0) or 0)
        families[family(key)] += size
        total += size
    used = int(client.info("memory")["used_memory"])
    return Sample(fire, runs, total, used, families)


def import_policy_set(settings: Any, client: Any) -> int:
    from workers.fleet.policy_store import PolicyStore, import_into
    from workers.policy_engine.policies.documents import read_files

    files = sorted((ROOT / "examples/policies").glob("*.yaml"))
    _, imported = import_into(
        PolicyStore.from_settings(settings, client), read_files(files), policy_set=POLICY_SET
    )
    return len(imported)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checks", type=int, default=4, help="wordings of the demo check")
    parser.add_argument("--targets", type=int, default=6)
    parser.add_argument("--fires", type=int, default=30)
    parser.add_argument("--history-limit", type=int, default=10)
    parser.add_argument("--via", choices=("schedule", "batch"), default="schedule")
    parser.add_argument(
        "--visibility-timeout",
        type=float,
        default=10.0,
        help="the broker's visibility timeout, s: a run id stays recorded for twice this after "
        "its run, even once its entry has left the history (default 10, so a bench whose "
        "fires come seconds apart passes that window after a few fires)",
    )
    parser.add_argument(
        "--settle",
        type=int,
        default=5,
        help="fires after the history bound before the flat part is measured (the run-id "
        "window's fires)",
    )
    parser.add_argument(
        "--report-ttl",
        type=int,
        default=None,
        help="ASSAY_REPORT_TTL_SECONDS (default: the setting's): how long a report that "
        "changed no verdict, and a finished batch none of whose runs changed one, is kept; "
        "short, it shows batches leaving once their window has passed",
    )
    parser.add_argument("--families", action="store_true", help="print growth per key family")
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "redis").mkdir()
        targets = make_targets(tmp / "snapshots", args.targets)
        redis_server = RedisProcess(data_dir=tmp / "redis").start()
        processes: list[subprocess.Popen[bytes]] = []
        log = tmp / "fleet.log"
        try:
            with ScriptedModel(
                yaml.safe_load((ROOT / "examples/scripts/demo.yaml").read_text())
            ) as model:
                run(args, tmp, targets, redis_server.url, model.url, processes, log)
        finally:
            for process in processes:
                stop_process(process)
            redis_server.stop()
    return 0


def run(
    args: argparse.Namespace,
    tmp: Path,
    targets: list[Path],
    redis_url: str,
    model_url: str,
    processes: list[subprocess.Popen[bytes]],
    log: Path,
) -> None:
    env = scripted_worker_env(
        redis_url,
        model_url,
        history_limit=str(args.history_limit),
        snapshot_roots=f'["{tmp}"]',
        min_interval_seconds="1",
        broker_visibility_timeout_seconds=str(args.visibility_timeout),
        **({"report_ttl_seconds": str(args.report_ttl)} if args.report_ttl else {}),
    )
    processes.append(start_worker(env, log, concurrency=16))
    settings = load_settings(
        redis_url=redis_url,
        history_limit=args.history_limit,
        snapshot_roots=[str(tmp)],
        **({"report_ttl_seconds": args.report_ttl} if args.report_ttl else {}),
    )
    with Client(settings) as fleet:
        redis = fleet.store.client
        policies = import_policy_set(settings, redis)
        checks = [*predicates(args.checks), f"policy-set:{POLICY_SET}"]
        runs_per_fire = len(targets) * (args.checks + 1 + policies)
        reruns_per_fire = len(targets) * (args.checks + 1)
        print(
            f"{args.checks} demo checks + policy-set:{POLICY_SET} ({policies} policies) on "
            f"{len(targets)} targets, {args.fires} fires via {args.via}, "
            f"history_limit={args.history_limit}: {reruns_per_fire} re-runs per fire (a set's "
            f"run on a target, its policies' runs included, is one re-run), {runs_per_fire} "
            "runs recorded"
        )
        fire_all = (
            scheduled_fires(fleet, settings, checks, tmp, env, processes, log)
            if args.via == "schedule"
            else batch_fires(fleet, checks, tmp)
        )
        pairs = len(targets) * (len(checks) + policies)
        samples = [measure(redis, 0, 0)]
        for fire in range(1, args.fires + 1):
            started_ms = time.time() * 1000
            fire_all()

            def recorded(since: float = started_ms) -> bool:
                return fire_recorded(redis, since, pairs)

            if not wait_until(recorded, 300, 0.05):
                raise SystemExit(f"fire {fire} was not recorded\n{worker_log_tail(log)}")
            samples.append(measure(redis, fire, fire * runs_per_fire))
            report_sample(samples[-2], samples[-1], reruns_per_fire, args.families)
        summarize(samples, args, reruns_per_fire, pairs)


def fire_recorded(redis: Any, started_ms: float, pairs: int) -> bool:
    """Every (check, target) has a verdict from this fire and no run is left unfinished."""
    checks = f"{PREFIX}:checks"
    return (
        int(redis.zcard(checks)) == pairs
        and not redis.zrangebyscore(checks, "-inf", f"({started_ms:.0f}", start=0, num=1)
        and int(redis.zcard(f"{PREFIX}:unfinished")) == 0
    )


def scheduled_fires(
    fleet: Client,
    settings: Any,
    checks: list[str],
    tmp: Path,
    env: dict[str, str],
    processes: list[subprocess.Popen[bytes]],
    log: Path,
) -> Any:
    from scheduler.schedules import ScheduleStore

    processes.append(start_scheduler(env, log))
    store = ScheduleStore(fleet.store.client, PREFIX, settings.min_interval_seconds)
    ids = []
    for index, text in enumerate(checks):
        schedule = Schedule(
            name=f"bench-{index}",
            predicate=text,
            targets=ScheduleTargets(snapshots=[str(tmp / "snapshots" / "*")]),
            interval_seconds=366 * 24 * 3600,  # fired by hand below, never by its interval
        )
        ids.append(store.create(schedule).id)

    def fire() -> None:
        for schedule_id in ids:
            store.run_now(schedule_id, datetime.now(UTC))

    return fire


def batch_fires(fleet: Client, checks: list[str], tmp: Path) -> Any:
    def fire() -> None:
        for text in checks:
            fleet.start_batch(text, snapshots=str(tmp / "snapshots" / "*"))

    return fire


def report_sample(before: Sample, after: Sample, reruns: int, families: bool) -> None:
    grown = after.key_bytes - before.key_bytes
    used = after.used_memory - before.used_memory
    print(
        f"  fire {after.fire:3d}: keys {after.key_bytes / 1000:9.1f} KB ({grown:+8d} B, "
        f"{grown / reruns:+7.0f} B/re-run); used_memory {after.used_memory / 1e6:7.2f} MB "
        f"({used:+8d} B, {used / reruns:+7.0f} B/re-run)"
    )
    if families:
        for name in sorted(set(before.families) | set(after.families)):
            delta = after.families[name] - before.families[name]
            if delta:
                print(f"      {name:32s} {delta:+8d} B")


def slope(samples: list[Sample], attribute: str = "key_bytes") -> float:
    """Bytes per fire over ``samples`` (least squares: a stream's nodes and a hash's table
    grow in steps, so two samples alone say little)."""
    xs = [float(sample.fire) for sample in samples]
    ys = [float(getattr(sample, attribute)) for sample in samples]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def summarize(samples: list[Sample], args: argparse.Namespace, reruns: int, pairs: int) -> None:
    """Bytes per (check, target) after the last fire; bytes per fire and per unchanged re-run
    while the histories fill; and past the bound, whether anything still grows."""
    last = samples[-1]
    print(
        f"\nafter {args.fires} fires: {last.key_bytes / pairs:,.0f} B of keys per (check, "
        f"target) ({pairs} pairs, history_limit={args.history_limit}), used_memory "
        f"{last.used_memory / 1e6:.2f} MB"
    )
    filling = samples[3 : args.history_limit + 1]  # fires 3..bound: probes compiled
    if len(filling) >= 3:
        per_fire = slope(filling)
        print(
            f"while the history fills (fires {filling[0].fire}-{filling[-1].fire}, least "
            f"squares): {per_fire:+,.0f} B per fire = {per_fire / reruns:+,.0f} B per unchanged "
            f"re-run, {args.via} bookkeeping included (used_memory: "
            f"{slope(filling, 'used_memory') / reruns:+,.0f} B)"
        )
    settled = samples[args.history_limit + args.settle :]
    if len(settled) >= 3 and len(samples) > 2:
        # From fire 2 (every probe compiled, its first re-run written) to the plateau, the
        # histories filled with history_limit - 2 runs of every check: that growth, steps of
        # streams' nodes and of hash tables included, is what an unchanged re-run costs.
        plateau = statistics.median(sample.key_bytes for sample in settled)
        per_rerun = (plateau - samples[2].key_bytes) / ((args.history_limit - 2) * reruns)
        print(
            f"per unchanged re-run, fire 2 to the plateau ({plateau / 1000:,.1f} KB): "
            f"{per_rerun:,.0f} B of keys (history entries, run-id records, {args.via} "
            "bookkeeping)"
        )
        per_fire = slope(settled)
        print(
            f"past the history bound (fires {settled[0].fire}-{settled[-1].fire}): "
            f"{per_fire:+,.0f} B per fire = {per_fire / reruns:+,.1f} B per re-run "
            f"(used_memory: {slope(settled, 'used_memory'):+,.0f} B per fire); keys between "
            f"{min(s.key_bytes for s in settled) / 1000:,.1f} and "
            f"{max(s.key_bytes for s in settled) / 1000:,.1f} KB"
        )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
