"""How fast the front doors start: the CLI's cold starts and a worker's (prints figures only).

* ``assay check --scripted examples/scripts/demo.yaml --snapshot examples/snapshots/prod-eu
  "..."``: a whole check on the bundled scripted model, wall time of the command
  (target 1.5 s; issue 32);
* ``assay probe test``: a stored probe run against the same snapshot (target 1 s);
* ``assay --help`` (target 0.3 s) and a usage error (exit 64): start-up alone;
* a worker ready to take a task: ``assay worker --scripted`` started with one run already
  queued, from the process's start to that run's start in it (target 3 s);
* fleet commands against an unreachable Redis: exit 69 in about two seconds, not the
  patient client's half minute.

Each figure is the median of ``--repeat`` (5) runs, with the slowest beside it. Every
process is started afresh, as a user's shell starts it. The machine's load average is
printed first: on a shared host other processes take CPU from these figures.

Run: ``.venv/bin/python bench/bench_front_door.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.redis_process import RedisProcess, free_port  # noqa: E402

PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
SNAPSHOT = ROOT / "examples" / "snapshots" / "prod-eu"
SCRIPT = ROOT / "examples" / "scripts" / "demo.yaml"
PROBE_CHECK = "bench-front-door"

UNREACHABLE = (["checks"], ["verdict", "some-check"], ["batch", "status"], ["schedule", "list"])


def environment(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.update({f"ASSAY_{key.upper()}": value for key, value in settings.items()})
    return env


def timed(args: list[str], env: dict[str, str]) -> tuple[int, float]:
    """(exit code, wall seconds) of ``assay ARGS`` in a fresh process."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "assay.cli", *args], env=env, cwd=ROOT,
        capture_output=True, timeout=300,
    )  # fmt: skip
    return done.returncode, time.perf_counter() - started


def report(label: str, runs: list[tuple[int, float]], target: float | None = None) -> None:
    codes = ",".join(str(code) for code in sorted({code for code, _ in runs}))
    seconds = [elapsed for _, elapsed in runs]
    median = statistics.median(seconds)
    goal = (
        ""
        if target is None
        else f"  target <= {target:g} s: {'met' if median <= target else 'NOT met'}"
    )
    print(f"  {label:44s} {codes:>5s} {median:9.2f} {max(seconds):7.2f}{goal}")


def store_probe(redis_url: str) -> None:
    """A probe for PROBE_CHECK, as a fleet run that compiled it would have stored it."""
    from schemas.probe import ProbeRecord, ProposedProbe
    from schemas.settings import load_settings
    from schemas.verdict import VerdictKind
    from workers.fleet.probe_store import ProbeStore
    from workers.fleet.redis_client import connect

    probe = ProposedProbe.model_validate(
        {
            "lookups": [{"tool": "get", "args": {"kind": "Deployment", "namespace": "prod"}}],
            "expression": "object.status.readyReplicas >= 2",
            "scope": "each_object",
        }
    )
    now = datetime.now(UTC)
    record = ProbeRecord(
        check_id=PROBE_CHECK, version=1, probe=probe, compiled_by_run="bench",
        compiled_at=now, compiled_verdict=VerdictKind.TRUE, last_validated_at=now,
    )  # fmt: skip
    settings = load_settings(redis_url=redis_url)
    ProbeStore(connect(redis_url), prefix=settings.key_prefix).put(record)


def worker_ready_seconds(redis_url: str, folder: Path) -> float:
    """From ``assay worker``'s start to the start of a run that was queued before it."""
    from assay.client import Client
    from schemas.settings import load_settings

    settings = load_settings(redis_url=redis_url, snapshot_roots=[str(ROOT)])
    with Client(settings) as client:
        receipt = client.submit(PREDICATE, snapshot=str(SNAPSHOT), profile="fast")
        env = environment(redis_url=redis_url, snapshot_roots=str(ROOT), log_level="WARNING")
        started = time.time()
        with (folder / "worker.log").open("ab") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "assay.cli", "worker", "--scripted", str(SCRIPT),
                 "--concurrency", "4"],
                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            verdict = client.wait(receipt.run_id, timeout=120)
        finally:
            worker.terminate()
            worker.wait(timeout=60)
    return verdict.started_at.timestamp() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    repeat = options.repeat
    load = os.getloadavg()
    print(f"bench_front_door: {os.cpu_count()} CPU core(s); median and slowest of {repeat} "
          f"fresh processes")  # fmt: skip
    print(f"  load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          "(other processes on the machine take CPU from these figures)")  # fmt: skip
    print(f"  {'command':44s} {'exit':>5s} {'median s':>9s} {'max s':>7s}")
    folder = Path(tempfile.mkdtemp(prefix="assay-bench-front-door-"))
    server = RedisProcess(data_dir=folder / "redis").start()
    try:
        check = ["check", "--scripted", str(SCRIPT), "--snapshot", str(SNAPSHOT), PREDICATE]
        quiet = environment(snapshot_roots=str(ROOT))
        report("assay check --scripted ... prod-eu", runs(repeat, lambda: timed(check, quiet)), 1.5)
        store_probe(server.url)
        probe = ["probe", "test", PROBE_CHECK, "--snapshot", str(SNAPSHOT)]
        fleet = environment(redis_url=server.url, snapshot_roots=str(ROOT))
        report("assay probe test", runs(repeat, lambda: timed(probe, fleet)), 1.0)
        report("assay --help", runs(repeat, lambda: timed(["--help"], quiet)), 0.3)
        report("assay no-such-command (usage error)",
               runs(repeat, lambda: timed(["no-such-command"], quiet)))  # fmt: skip
        ready = [(0, worker_ready_seconds(server.url, folder)) for _ in range(repeat)]
        report("assay worker: ready to take a task", ready, 3.0)
        dead = environment(redis_url=f"redis://127.0.0.1:{free_port()}/0")  # nothing listens
        for args in UNREACHABLE:
            report(f"assay {' '.join(args)} (Redis unreachable)",
                   runs(repeat, lambda args=args: timed(args, dead)))  # type: ignore[misc]  # fmt: skip
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def runs(repeat: int, one: Callable[[], tuple[int, float]]) -> list[tuple[int, float]]:
    return [one() for _ in range(repeat)]


if __name__ == "__main__":
    main()
