"""Fleet throughput with real Celery workers on a private Redis. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_fleet.py [--evals 300] [--concurrent 200] [--skip-pools]

(a) Zero model latency, 3-step evaluations (think, get, done) on one threads
    worker: evaluations/s, next to an empty Celery task's throughput on the
    same Redis in the same run, and their ratio. Also the worker's CPU per
    evaluation, which is what bounds (b) on a small machine.
(b) 500 ms per model call, 3 calls per evaluation, N concurrent evaluations
    on one worker (threads pool, concurrency N): evaluations/s as a fraction
    of the ideal N / 1.5 s (target >= 0.85), the ceiling the worker's CPU per
    evaluation allows one process, and the same at a small N where CPU is not
    the limit (so the overlap of waits itself is measured).
(c) The pool choice: (b) again with the prefork pool at 2x the core count,
    which is what a process-per-run pool affords on this machine.

The scripted model (not an LLM) runs in its own process, so it does not take
the worker's GIL. Every process started here is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import yaml  # noqa: E402

from assay.redis_process import RedisProcess, free_port  # noqa: E402
from tests.fleet_support import (  # noqa: E402
    make_snapshots,
    scripted_worker_env,
    stop_process,
    three_step_script,
    worker_env,
)

PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
NOOP_TASK = "bench.noop"
NOOP_COUNTER = "bench:noop:done"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- the empty task's worker (this file run with --noop-worker) ---------------------------------


def noop_worker_main(concurrency: int) -> None:
    """A worker with the fleet's exact Celery configuration and one task that only counts."""
    from schemas.settings import load_settings
    from workers.celery_app import create_app
    from workers.redis_client import connect

    settings = load_settings()
    app = create_app(settings, with_tasks=False)
    counter = connect(settings.redis_url or "")

    @app.task(name=NOOP_TASK, ignore_result=True)
    def noop() -> None:
        counter.incr(NOOP_COUNTER)

    app.worker_main(["worker", "--pool=threads", f"--concurrency={concurrency}", "-l", "WARNING"])


# --- helpers ------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def start_model(script: dict[str, object], folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    path = folder / f"script-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(script))
    port = free_port()
    process = spawn(
        [sys.executable, "-m", "assay.testing.scripted_model", "--script", str(path),
         "--port", str(port)],
        dict(os.environ),
        folder / "model.log",
    )  # fmt: skip
    time.sleep(1.0)
    return process, f"http://127.0.0.1:{port}/v1"


def eval_worker(
    redis_url: str, model_url: str, pool: str, concurrency: int, log: Path
) -> subprocess.Popen[bytes]:
    env = scripted_worker_env(redis_url, model_url, log_level="WARNING")
    return spawn(
        [str(Path(sys.executable).parent / "celery"), "-A", "workers.celery_app", "worker",
         f"--pool={pool}", f"--concurrency={concurrency}", "-l", "WARNING",
         "--without-gossip", "--without-mingle"],
        env,
        log,
    )  # fmt: skip


def run_batch(client: object, pattern: str, timeout: float = 600) -> float:
    """Start a batch over ``pattern`` and return the seconds until its last verdict."""
    started = time.perf_counter()
    batch_id = client.start_batch(PREDICATE, snapshots=pattern)  # type: ignore[attr-defined]
    status = client.wait_batch(batch_id, timeout=timeout, poll=0.05)  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - started
    if status.true + status.false != status.total:
        print(f"  warning: {status.cannot_determine} run(s) ended cannot_determine")
    return elapsed


def warm_up(client: object, folder: Path) -> None:
    """One evaluation first, so imports and connections are not in the timings."""
    run_batch(client, str(folder / "*"), timeout=120)


# --- the measurements ----------------------------------------------------------------------------


def empty_task_rate(redis_url: str, folder: Path, tasks: int, concurrency: int) -> float:
    import redis

    from schemas.settings import load_settings
    from workers.celery_app import create_app

    raw = redis.Redis.from_url(redis_url)
    env = worker_env(redis_url)
    worker = spawn(
        [sys.executable, __file__, "--noop-worker", str(concurrency)], env, folder / "noop.log"
    )
    app = create_app(load_settings(redis_url=redis_url), with_tasks=False)
    try:
        raw.delete(NOOP_COUNTER)
        app.send_task(NOOP_TASK)
        while int(raw.get(NOOP_COUNTER) or 0) < 1:
            time.sleep(0.05)
        raw.delete(NOOP_COUNTER)
        started = time.perf_counter()
        for _ in range(tasks):
            app.send_task(NOOP_TASK)
        while int(raw.get(NOOP_COUNTER) or 0) < tasks:
            time.sleep(0.01)
        return tasks / (time.perf_counter() - started)
    finally:
        app.close()
        stop_process(worker)


def evaluation_rate(
    redis_url: str,
    folder: Path,
    *,
    evals: int,
    delay: float,
    pool: str,
    concurrency: int,
    label: str,
) -> tuple[float, float]:
    """(evaluations/s, worker CPU seconds per evaluation) for one worker configuration."""
    from assay.client import Client
    from schemas.settings import load_settings

    targets = folder / f"{label}-targets"
    make_snapshots(targets, evals)
    warm = folder / f"{label}-warm"
    make_snapshots(warm, 1)
    model, model_url = start_model(three_step_script(delay=delay), folder)
    worker = eval_worker(redis_url, model_url, pool, concurrency, folder / f"{label}.log")
    try:
        with Client(load_settings(redis_url=redis_url)) as client:
            warm_up(client, warm)
            cpu_before = cpu_seconds(worker.pid)
            elapsed = run_batch(client, str(targets / "*"))
            cpu = cpu_seconds(worker.pid) - cpu_before
        return evals / elapsed, cpu / evals
    finally:
        stop_process(worker)
        stop_process(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--evals", type=int, default=300, help="evaluations in (a)")
    parser.add_argument("--noop-tasks", type=int, default=3000, help="empty tasks in (a)")
    parser.add_argument("--concurrent", type=int, default=200, help="concurrent runs in (b)")
    parser.add_argument(
        "--concurrent-small", type=int, default=20, help="(b) again at a size the CPU keeps up with"
    )
    parser.add_argument("--skip-pools", action="store_true", help="skip (c)")
    parser.add_argument("--noop-worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.noop_worker:
        noop_worker_main(args.noop_worker)
        return

    cores = os.cpu_count() or 1
    folder = Path(tempfile.mkdtemp(prefix="assay-bench-fleet-"))
    server = RedisProcess(data_dir=folder / "redis").start()
    print(f"bench_fleet: {cores} CPU core(s), redis-server AOF on, scripted model (not an LLM)")
    try:
        print("\n(a) zero model latency, 3-step evaluations, one threads worker (concurrency 64)")
        noop = empty_task_rate(server.url, folder, args.noop_tasks, 64)
        rate, cpu = evaluation_rate(
            server.url, folder, evals=args.evals, delay=0.0, pool="threads", concurrency=64,
            label="a",
        )  # fmt: skip
        print(f"  empty Celery task:      {noop:8.1f} tasks/s")
        print(f"  3-step evaluation:      {rate:8.1f} evaluations/s")
        print(f"  ratio:                  {rate / noop:8.3f} (evaluation / empty task)")
        print(f"  worker CPU:             {cpu * 1000:8.1f} ms per evaluation")

        n = args.concurrent
        ideal = n / 1.5
        print(f"\n(b) 500 ms per model call, 3 calls, {n} concurrent on one threads worker")
        rate_b, cpu_b = evaluation_rate(
            server.url, folder, evals=n, delay=0.5, pool="threads", concurrency=n, label="b"
        )
        print(f"  throughput:             {rate_b:8.1f} evaluations/s (ideal {ideal:.1f})")
        print(f"  fraction of ideal:      {rate_b / ideal:8.3f} (target >= 0.85)")
        print(f"  worker CPU:             {cpu_b * 1000:8.1f} ms per evaluation")
        print(
            f"  CPU-bound ceiling:      {1.5 / max(n * cpu_b, 1.5):8.3f} of ideal for one "
            "process (its GIL runs one thread at a time)"
        )
        small = args.concurrent_small
        rate_s, _ = evaluation_rate(
            server.url, folder, evals=small, delay=0.5, pool="threads", concurrency=small,
            label="b-small",
        )  # fmt: skip
        print(
            f"  {small} concurrent:          {rate_s:8.1f} evaluations/s = "
            f"{rate_s / (small / 1.5):.3f} of ideal (CPU is not the limit at this size)"
        )

        if not args.skip_pools:
            procs = 2 * cores
            print(f"\n(c) the same {n} runs on the prefork pool with {procs} processes")
            rate_c, _ = evaluation_rate(
                server.url, folder, evals=n, delay=0.5, pool="prefork", concurrency=procs,
                label="c",
            )  # fmt: skip
            print(f"  prefork x{procs}:            {rate_c:8.1f} evaluations/s")
            print(f"  threads x{n}:            {rate_b:8.1f} evaluations/s "
                  f"({rate_b / rate_c:.1f}x prefork)")  # fmt: skip
    finally:
        server.stop()
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
