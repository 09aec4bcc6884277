"""What a worker asks of Redis per evaluation, and (fallback) where its task body's CPU goes.

Used by bench_fleet. The component table (``COMPONENTS``, file-path needles) is
shared with bench/pyspy_profile.py, which samples the real worker and is what
bench_fleet prints when py-spy is installed (the ``bench`` extra). Without
py-spy the breakdown is taken in-process here: the worker's own task body
(``workers.fleet.tasks.handle_delivery``: store, engine, tools, model calls)
runs on a few threads, each under its own cProfile, against the same private
Redis and a scripted model in its own process. Celery's share is what the real
worker measured minus this; the garbage collector is invisible to cProfile.

Attribution: a function's own time goes to the component of the file it is in;
a C built-in's own time (``json.dumps``, a socket read) goes to the component of
whoever called it, shared by call count. cProfile inflates call-heavy Python, so
the table gives shares; bench_fleet scales them to the worker's measured CPU.

Redis: every request the worker's client sends is counted on the connection
(``send_packed_command`` is one round trip, a pipeline or a script included;
``pack_command`` calls are the commands in it).
"""

from __future__ import annotations

import cProfile
import pstats
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    (
        "Celery, kombu (consumer, thread pool, broker)",
        (
            "site-packages/celery/", "site-packages/kombu/", "site-packages/vine/",
            "site-packages/billiard/", "site-packages/amqp/",
        ),
    ),
    ("model call: litellm", ("site-packages/litellm/",)),
    ("model call: OpenAI SDK", ("site-packages/openai/",)),
    (
        "model call: HTTP (urllib3, httpx for litellm, ssl, socket)",
        (
            "site-packages/urllib3/", "/http/client.py", "/email/", "site-packages/httpx/",
            "site-packages/httpcore/", "site-packages/h11/", "/ssl.py", "/socket.py",
            "/selectors.py", "site-packages/anyio/",
        ),
    ),
    ("model call: assay adapter", ("workers/engine/llm.py", "workers/engine/openai_compat.py")),
    (
        "token estimates (size bound, tally; tiktoken on litellm's path)",
        (
            "site-packages/tiktoken",
            "workers/engine/prompt_tally.py",
            "workers/engine/token_ceiling.py",
        ),
    ),
    (
        "Redis client + store",
        (
            "site-packages/redis/", "workers/fleet/store.py", "workers/fleet/checkpoints.py",
            "workers/fleet/tasks.py", "workers/fleet/redis_client.py",
        ),
    ),
    ("pydantic (requests, reports, verdicts)", ("site-packages/pydantic",)),
    (
        "engine, conversation, evidence",
        (
            "workers/engine/engine.py", "workers/engine/conversation.py",
            "workers/engine/evidence.py",
            "workers/engine/confirmation.py", "workers/engine/fencing.py",
            "workers/engine/budget_meter.py", "schemas/", "prompts/",
        ),
    ),
    ("tools (snapshot backend, tables, compaction)", ("workers/engine/toolsets/",)),
    (
        "logging, metrics, tracing",
        (
            "site-packages/structlog", "/logging/", "workers/engine/metrics.py",
            "workers/engine/tracing.py", "workers/engine/logs.py",
            "site-packages/prometheus_client",
            "site-packages/opentelemetry",
        ),
    ),
    ("yaml", ("site-packages/yaml",)),
]  # fmt: skip
OTHER = "other (stdlib: threading, copy, re, uuid, datetime...)"

# pstats's table: (file, line, function) -> (primitive calls, calls, own s, cumulative s, callers),
# each caller -> (calls, primitive calls, own s, cumulative s) of its calls to the function.
FunctionKey = tuple[str, int, str]
CallerStats = dict[FunctionKey, tuple[int, int, float, float]]
FunctionStats = tuple[int, int, float, float, CallerStats]


def component_of(filename: str) -> str | None:
    """The component a source file belongs to; None for a C built-in (``~``)."""
    if filename == "~" or filename.startswith("<built-in"):
        return None
    for name, needles in COMPONENTS:
        if any(needle in filename for needle in needles):
            return name
    if filename.endswith(("json/__init__.py", "json/encoder.py", "json/decoder.py")):
        return "JSON encode/decode"
    return OTHER


def attribute(stats: pstats.Stats) -> dict[str, float]:
    """Seconds of own time per component (built-ins charged to their callers)."""
    totals: defaultdict[str, float] = defaultdict(float)
    # typeshed's Stats stub leaves out ``stats``, the table pstats itself fills and reads
    # (undocumented, but the only place with callers per function).
    table: dict[FunctionKey, FunctionStats] = stats.stats  # type: ignore[attr-defined]
    for func, (_cc, _nc, tottime, _ct, callers) in table.items():
        own = component_of(func[0])
        if own is not None:
            totals[own] += tottime
            continue
        name = func[2]
        if "json" in name or "_json" in name:
            totals["JSON encode/decode"] += tottime
            continue
        calls = sum(value[0] for value in callers.values()) or 1
        if not callers:
            totals[OTHER] += tottime
        for caller, value in callers.items():
            totals[component_of(caller[0]) or OTHER] += tottime * value[0] / calls
    return totals


@dataclass
class Profiled:
    evaluations: int
    cpu_per_eval: float  # seconds, this process, no profiler
    shares: list[tuple[str, float]]  # component, fraction of profiled CPU
    commands_per_eval: float
    round_trips_per_eval: float


class _RedisCounter:
    """Counts commands and round trips of every redis-py connection in this process."""

    def __init__(self) -> None:
        import redis.client as client
        import redis.connection as connection

        self.commands = 0
        self.round_trips = 0
        self._lock = threading.Lock()
        self._saved = [
            (connection.Connection, "send_packed_command"),
            (client.Redis, "execute_command"),
            (client.Pipeline, "execute"),
        ]
        self._originals = [getattr(owner, name) for owner, name in self._saved]
        send, execute_command, execute = self._originals
        counter = self

        def counted_send(conn: Any, *args: Any, **kwargs: Any) -> Any:
            with counter._lock:
                counter.round_trips += 1
            return send(conn, *args, **kwargs)

        def counted_command(redis: Any, *args: Any, **kwargs: Any) -> Any:
            with counter._lock:
                counter.commands += 1
            return execute_command(redis, *args, **kwargs)

        def counted_pipeline(pipe: Any, *args: Any, **kwargs: Any) -> Any:
            with counter._lock:
                counter.commands += len(pipe.command_stack)
            return execute(pipe, *args, **kwargs)

        replacements = [counted_send, counted_command, counted_pipeline]
        for (owner, name), replacement in zip(self._saved, replacements, strict=True):
            setattr(owner, name, replacement)

    def close(self) -> None:
        for (owner, name), original in zip(self._saved, self._originals, strict=True):
            setattr(owner, name, original)


def profile_worker(
    redis_url: str,
    model_url: str,
    folder: Path,
    evaluations: int,
    threads: int = 8,
    cprofile: bool = True,
) -> Profiled:
    """Run ``evaluations`` through the task body on ``threads`` threads; count, and profile.

    ``cprofile=False`` skips the profiled pass (``shares`` is then empty): when
    py-spy samples the real worker, only the Redis counts are wanted from here.
    """
    from schemas.settings import load_settings
    from tests.fleet_support import PREDICATE, make_snapshots, snapshot_request
    from workers.fleet.runtime import WorkerRuntime
    from workers.fleet.tasks import handle_delivery

    settings = load_settings(
        redis_url=redis_url, model="openai/scripted", api_base=model_url,
        api_key="scripted-no-key", snapshot_roots=[folder], log_level="WARNING",
    )  # fmt: skip
    from workers.engine.logs import configure_logging

    configure_logging(settings)  # as the worker does: WARNING, so run logs are filtered out
    runtime = WorkerRuntime.build(settings)
    from workers.fleet.runtime import tune_interpreter

    tune_interpreter()  # as worker_started does (a scripted model's worker needs no litellm)

    def payloads(label: str, count: int) -> list[dict[str, Any]]:
        found = []
        for path in make_snapshots(folder / label, count):
            request = snapshot_request(text=PREDICATE, path=str(path), probe="off")
            runtime.store.register_run(request)
            found.append(request.model_dump(mode="json"))
        return found

    def run_all(items: list[dict[str, Any]], profilers: list[cProfile.Profile] | None) -> float:
        chunks = [items[i::threads] for i in range(threads)]

        def work(index: int) -> None:
            profiler = profilers[index] if profilers is not None else None
            if profiler is not None:
                profiler.enable()
            for payload in chunks[index]:
                handle_delivery(payload, runtime)
            if profiler is not None:
                profiler.disable()

        started = time.process_time()
        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return time.process_time() - started

    run_all(payloads("profile-warm", threads * 2), None)
    plain = payloads("profile-plain", evaluations)
    counter = _RedisCounter()
    try:
        cpu = run_all(plain, None)
        commands, round_trips = counter.commands, counter.round_trips
    finally:
        counter.close()
    shares: list[tuple[str, float]] = []
    if cprofile:
        profiled = payloads("profile-cprofile", evaluations)
        shares = cprofile_shares(lambda profilers: run_all(profiled, profilers), threads)
    return Profiled(
        evaluations=evaluations,
        cpu_per_eval=cpu / evaluations,
        shares=shares,
        commands_per_eval=commands / evaluations,
        round_trips_per_eval=round_trips / evaluations,
    )


def cprofile_shares(
    run: Callable[[list[cProfile.Profile]], object], threads: int
) -> list[tuple[str, float]]:
    """Shares of own time per component, largest first, over one ``run`` with a profiler a thread.

    CPU time of each thread, not wall time: waiting on a socket must not count.
    """
    profilers = [cProfile.Profile(time.thread_time) for _ in range(threads)]
    run(profilers)
    stats = pstats.Stats(profilers[0])
    for profiler in profilers[1:]:
        stats.add(profiler)
    totals = attribute(stats)
    whole = sum(totals.values()) or 1.0
    return sorted(((name, seconds / whole) for name, seconds in totals.items()),
                  key=lambda item: -item[1])  # fmt: skip
