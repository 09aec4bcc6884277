"""Instructions per 3-step evaluation, counted by callgrind: the task body, and a whole worker
against an empty Celery task. Prints figures only.

    .venv/bin/python bench/bench_body_instructions.py [--evals 50] [--ablate store-scrub,...]
                                                      [--worker] [--worker-evals 200]

Why this bench exists beside bench_fleet: rates and CPU seconds move with whatever else
the host runs (on the same 2-core machine, bench_fleet's empty Celery task measured
1,600-2,040 tasks/s one day and 800-1,200 another), so a change worth 5% of an
evaluation's CPU disappears in the noise of its figures. ``valgrind --tool=callgrind``
counts instructions instead: the same code, inputs and environment give the same count
to about 0.3%, whatever else the machine is doing.

What is counted: ``workers.fleet.tasks.handle_delivery`` (what a worker's thread runs for
one message: request, delivery count, engine, tools, model calls, token estimates, scrubs,
the verdict's store write), on one thread, in this process, with callgrind's
instrumentation switched on only around the evaluations; the scripted model and a
private redis-server run in their own processes and are not counted. What is not: the
kernel's side of system calls, waiting, Celery's consumer and pool (the same for any
task), and cache misses: instructions are a proxy for CPU time, not CPU time.

``--ablate``: switch a part off to see what it costs (store-scrub, engine-scrub, record,
tokens, same-snapshot: every run on one snapshot folder, so the parse is cached).

``--keep DIR``: copy the body's callgrind file into DIR, to read with
``callgrind_annotate --inclusive=yes``.

``--worker``: a real ``assay worker`` (threads, 64) and bench_fleet's empty-task worker,
each under callgrind, counted over a wave (evaluations at zero model latency; empty
tasks that only count themselves): instructions per evaluation and per empty task, and
their ratio, which is bench_fleet (a)'s ratio with the time taken out. It leaves out the
kernel (system calls, switches between threads), which costs an empty task relatively
more than an evaluation: on the machine whose bench_fleet (a) measured 0.22-0.25 held to
one CPU, this ratio was 0.172 for the same code (issue 15, stop 24).

Needs valgrind (``apt-get install valgrind``); prints why and exits 0 without it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

ABLATIONS = ("store-scrub", "engine-scrub", "record", "tokens", "same-snapshot")


def _ablate(parts: list[str]) -> None:
    import workers.engine.engine as engine
    import workers.engine.prompt_tally as prompt_tally
    import workers.fleet.store as store

    for part in parts:
        if part == "store-scrub":
            store.scrubbed_report = lambda report: report
        elif part == "engine-scrub":
            from workers.engine.toolsets.redaction import Scrubbed

            engine.scrubbed = lambda report, **_: Scrubbed(report, {})
        elif part == "record":
            store.VerdictStore.record_verdict = lambda self, report, **_: True  # type: ignore[method-assign]
        elif part == "tokens":
            prompt_tally.PromptTally.estimate = lambda *_: 100  # type: ignore[method-assign]


def child(evals: int, control: Path, ablate: list[str]) -> None:
    """Under callgrind: set up, warm up, then run ``evals`` deliveries between two signals."""
    from assay.redis_process import RedisProcess
    from bench.bench_fleet import start_model
    from schemas.settings import load_settings
    from tests.fleet_support import PREDICATE, make_snapshots, snapshot_request, three_step_script
    from workers.engine.logs import configure_logging
    from workers.fleet.runtime import WorkerRuntime, tune_interpreter
    from workers.fleet.tasks import handle_delivery

    folder = Path(tempfile.mkdtemp(prefix="assay-bench-body-"))
    server = RedisProcess(data_dir=folder / "redis").start()
    model, model_url = start_model(three_step_script(), folder)
    try:
        settings = load_settings(
            redis_url=server.url, model="openai/scripted", api_base=model_url,
            api_key="scripted-no-key", snapshot_roots=[folder], log_level="WARNING",
        )  # fmt: skip
        configure_logging(settings)  # as the worker does: WARNING, so run logs are filtered out
        runtime = WorkerRuntime.build(settings)
        tune_interpreter()
        _ablate(ablate)

        def payloads(label: str, count: int) -> list[dict[str, Any]]:
            folders = make_snapshots(folder / label, count)
            if "same-snapshot" in ablate:
                folders = [folders[0]] * count
            found = []
            for path in folders:
                request = snapshot_request(text=PREDICATE, path=str(path), probe="off")
                runtime.store.register_run(request)
                found.append(request.model_dump(mode="json"))
            return found

        for payload in payloads("warm", 30):
            handle_delivery(payload, runtime)
        measured = payloads("measured", evals)
        (control / "ready").write_text(str(os.getpid()))
        while not (control / "go").exists():
            time.sleep(0.02)
        for payload in measured:
            handle_delivery(payload, runtime)
        (control / "done").write_text("")
        while not (control / "stop").exists():
            time.sleep(0.02)
    finally:
        model.terminate()
        server.stop()


def count(evals: int, ablate: list[str], keep: Path | None = None) -> float:
    """Instructions per evaluation, one callgrind run (its file copied into ``keep``)."""
    control = Path(tempfile.mkdtemp(prefix="assay-bench-body-ctl-"))
    out = control / "callgrind.out"
    argv = [
        *_callgrind(out), sys.executable, __file__, "--child", str(control),
        "--evals", str(evals), "--ablate", ",".join(ablate),
    ]  # fmt: skip
    with (control / "log").open("wb") as log:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def wait_for(name: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not (control / name).exists():
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise SystemExit(f"the callgrind run failed; its log: {control / 'log'}")
            time.sleep(0.2)

    try:
        wait_for("ready", 900)
        pid = (control / "ready").read_text()
        _instrument(int(pid), True)
        (control / "go").write_text("")
        wait_for("done", 900)
        _instrument(int(pid), False)
        (control / "stop").write_text("")
        process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    total = _total(out)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(out, keep / "body.callgrind")
    shutil.rmtree(control, ignore_errors=True)
    return total / evals


def _callgrind(out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]


def _instrument(pid: int, on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(pid)],
        check=True,
        capture_output=True,
    )


def _total(out: Path) -> int:
    summary = subprocess.run(
        ["callgrind_annotate", str(out)], check=True, capture_output=True, text=True
    ).stdout
    match = re.search(r"^\s*([\d,]+)\s.*PROGRAM TOTALS", summary, re.MULTILINE)
    if match is None:
        raise SystemExit(f"callgrind_annotate printed no total for {out}")
    return int(match.group(1).replace(",", ""))


def worker_counts(evals: int, tasks: int) -> tuple[float, float]:
    """(instructions per evaluation in a real worker, per empty task in the empty-task worker)."""
    import signal

    import redis

    import bench.bench_fleet as fleet
    from assay.client import Client
    from assay.redis_process import RedisProcess
    from schemas.settings import load_settings
    from tests.fleet_support import make_snapshots, stop_process, three_step_script
    from workers.fleet.broker import configured_app

    folder = Path(tempfile.mkdtemp(prefix="assay-bench-worker-"))
    server = RedisProcess(data_dir=folder / "redis").start()
    try:
        make_snapshots(folder / "warm", 20)
        make_snapshots(folder / "targets", evals)
        model, model_url = fleet.start_model(three_step_script(), folder)
        out = folder / "evaluations.callgrind"
        worker = fleet.eval_worker(
            server.url, model_url, "threads", 64, 1, folder / "worker.log", _callgrind(out)
        )
        try:
            settings = load_settings(redis_url=server.url, snapshot_roots=[folder])
            with Client(settings) as client:
                fleet.run_batch(client, str(folder / "warm" / "*"), timeout=1800)
                _instrument(worker.pid, True)
                fleet.run_batch(client, str(folder / "targets" / "*"), timeout=1800)
                _instrument(worker.pid, False)
        finally:
            worker.send_signal(signal.SIGTERM)  # callgrind writes its file as the worker exits
            worker.wait(timeout=600)
            stop_process(model)
        per_evaluation = _total(out) / evals

        out = folder / "empty.callgrind"
        env = fleet.worker_env(server.url, worker_cpu_affinity="off")
        empty = fleet.spawn(
            [*_callgrind(out), sys.executable, fleet.__file__, "--noop-worker", "64"],
            env, folder / "empty.log",
        )  # fmt: skip
        counter = redis.Redis.from_url(server.url)
        app = configured_app(load_settings(redis_url=server.url))

        def wave(count: int) -> None:
            counter.delete(fleet.NOOP_COUNTER)
            for _ in range(count):
                app.send_task(fleet.NOOP_TASK)
            while int(counter.get(fleet.NOOP_COUNTER) or 0) < count:
                time.sleep(0.05)

        try:
            wave(20)
            _instrument(empty.pid, True)
            wave(tasks)
            _instrument(empty.pid, False)
        finally:
            app.close()
            empty.send_signal(signal.SIGTERM)
            empty.wait(timeout=600)
        return per_evaluation, _total(out) / tasks
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--evals", type=int, default=50)
    parser.add_argument("--ablate", default="", help=f"comma-separated: {', '.join(ABLATIONS)}")
    parser.add_argument("--worker", action="store_true", help="also a whole worker vs empty task")
    parser.add_argument("--worker-evals", type=int, default=200)
    parser.add_argument(
        "--keep", type=Path, help="copy the body's callgrind file here (for callgrind_annotate)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ablate = [part for part in args.ablate.split(",") if part]
    unknown = set(ablate) - set(ABLATIONS)
    if unknown:
        parser.error(f"unknown --ablate part(s): {', '.join(sorted(unknown))}")
    if args.child:
        child(args.evals, Path(args.child), ablate)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("bench_body_instructions: valgrind is not installed; nothing measured")
        return
    print(f"bench_body_instructions: {args.evals} evaluations (3 steps, scripted model, not an "
          "LLM) through handle_delivery on one thread, under callgrind")  # fmt: skip
    base = count(args.evals, [], args.keep)
    print(f"  task body:                {base / 1e6:6.2f} M instructions per evaluation")
    for part in ablate:
        without = count(args.evals, [part])
        print(f"  of which {part + ':':17s}{(base - without) / 1e6:6.2f} M "
              f"({(base - without) / base:.0%})")  # fmt: skip
    if args.worker:
        tasks = 5 * args.worker_evals
        evaluation, empty = worker_counts(args.worker_evals, tasks)
        print(f"\nwhole worker (threads, 64), {args.worker_evals} evaluations and {tasks} empty "
              "tasks at zero model latency, under callgrind")  # fmt: skip
        print(f"  per evaluation:           {evaluation / 1e6:6.2f} M instructions")
        print(f"  per empty Celery task:    {empty / 1e6:6.2f} M instructions")
        print(f"  ratio:                    {empty / evaluation:6.3f} (bench_fleet (a)'s, in "
              "instructions: the kernel's share left out)")  # fmt: skip


if __name__ == "__main__":
    main()
