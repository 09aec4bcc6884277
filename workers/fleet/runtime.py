"""What a worker process holds for all its runs: settings, store, limiter, spend guard, model
client.

Built once per process on first use (threads share it: the redis client's
connection pool and the litellm client are thread-safe), plus the start-up
checks a worker makes when it comes up.
"""

from __future__ import annotations

import gc
import sys
import threading
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from schemas.budget import PROFILES
from schemas.settings import AssaySettings
from workers.engine.engine import EngineDeps
from workers.engine.llm import LiteLLMClient, load_litellm, needs_litellm
from workers.engine.logs import configure_logging
from workers.engine.metrics import start_metrics_server
from workers.engine.tracing import configure_tracing
from workers.fleet.broker import has_visibility_timeout
from workers.fleet.dispatch import Dispatcher
from workers.fleet.policy_store import PolicyStore
from workers.fleet.probe_store import ProbeStore
from workers.fleet.ratelimit import FleetRateLimiter
from workers.fleet.recovery import start_sweeper
from workers.fleet.spend_reservations import FleetSpendGuard
from workers.fleet.store import VerdictStore

_log = structlog.get_logger(__name__)


@dataclass
class WorkerRuntime:
    settings: AssaySettings
    redis: redis.Redis
    store: VerdictStore
    limiter: FleetRateLimiter | None
    spend: FleetSpendGuard  # every model call is reserved and settled (docs/fleet.md)
    llm: Any
    probes: ProbeStore  # one per process: building it registers its Lua scripts (SHA-1 each)
    policies: PolicyStore  # imported policies and sets (policy:NAME / policy-set:NAME checks)

    @classmethod
    def build(cls, settings: AssaySettings) -> WorkerRuntime:
        if not settings.redis_url:
            raise RuntimeError(
                "the worker has no verdict store: set ASSAY_REDIS_URL (the broker alone is not "
                "enough) and start it again"
            )
        store = VerdictStore.from_settings(settings)
        client = store.client
        return cls(
            settings=settings,
            redis=client,
            store=store,
            limiter=FleetRateLimiter.from_settings(settings, client),
            spend=FleetSpendGuard.from_settings(settings, client),
            llm=LiteLLMClient(settings),
            probes=ProbeStore.beside(store, settings),
            policies=PolicyStore.from_settings(settings, client),
        )

    def engine_deps(self, *, allow_defer: bool = True) -> EngineDeps:
        return EngineDeps(
            settings=self.settings,
            llm=self.llm,
            rate_limiter=self.limiter,
            spend_guard=self.spend,
            allow_defer=allow_defer,
        )


class RuntimeHolder:
    """Builds the runtime on first use, once, even with many threads asking."""

    def __init__(self, settings: AssaySettings) -> None:
        self.settings = settings
        self._runtime: WorkerRuntime | None = None
        self._lock = threading.Lock()

    def get(self) -> WorkerRuntime:
        with self._lock:
            if self._runtime is None:
                self._runtime = WorkerRuntime.build(self.settings)
            return self._runtime

    def built(self) -> WorkerRuntime | None:
        """The runtime if it was built (nothing is built for asking)."""
        return self._runtime


def worker_started(settings: AssaySettings, runtime: WorkerRuntime, app: Any) -> None:
    """Start-up checks and services of a worker process (called when Celery is ready)."""
    configure_logging(settings)
    try:
        runtime.store.check_persistence()
    except Exception as exc:  # a worker still starts; the store warns again on use
        _log.warning("redis_check_failed", error=str(exc))
    longest = max(settings.timeout_seconds or 0.0, *_profile_deadlines())
    if has_visibility_timeout(settings) and longest >= settings.broker_visibility_timeout_seconds:
        _log.warning(
            "visibility_timeout_short",
            visibility_timeout=settings.broker_visibility_timeout_seconds,
            longest_deadline=longest,
            message="a run outliving the broker's visibility timeout is handed to a second "
            "worker; raise ASSAY_BROKER_VISIBILITY_TIMEOUT_SECONDS above the longest deadline",
        )
    if settings.metrics_port:
        start_metrics_server(settings.metrics_port)
    configure_tracing(settings)
    start_sweeper(settings, runtime.store, Dispatcher(app, runtime.store, settings))
    if settings.model and needs_litellm(settings.model, settings.api_base, settings.llm_fast_path):
        load_litellm()  # import it now, not inside the first run's deadline
    tune_interpreter()


# Young-generation threshold: CPython's default (700) starts a collection every few
# hundred allocations, i.e. many times per evaluation; the runs' garbage is mostly
# freed by reference counting anyway.
GC_YOUNG_THRESHOLD = 20_000

# How long a thread may hold the GIL before CPython asks it to hand over (default 5 ms).
# A worker's threads nearly always hand it over sooner, at their next socket call; the
# forced hand-overs only add context switches between busy run threads. With 64 runs at
# zero model latency, 20 ms gave 7.7 ms of worker CPU per evaluation against 8.4 ms and
# 9% more evaluations/s (three runs each, alternated); the 200-run wave at 500 ms per
# call, where the consumer thread's intake matters, was unchanged (issue 15).
SWITCH_INTERVAL_SECONDS = 0.02


def tune_interpreter() -> None:
    """The interpreter settings a serving worker runs with (GC and GIL hand-over)."""
    freeze_startup_heap()
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)


def freeze_startup_heap() -> None:
    """Take what start-up built out of the garbage collector's sight; collect less often.

    Why: py-spy on a busy worker (issue 15) found about a third of its GIL time in
    CPython's cyclic garbage collector. Each older-generation collection walks
    every tracked object in the process, and the imports alone leave hundreds of
    thousands (pydantic models; litellm's price tables, when the worker's model
    needs litellm) that live as long as the process. ``gc.freeze()`` moves
    everything alive now into a permanent generation that collections skip (what
    CPython's documentation suggests for long-lived servers); garbage the runs make
    is still collected, reference cycles included, only in larger batches.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def _profile_deadlines() -> list[float]:
    return [p.budget.timeout_seconds or 0.0 for p in PROFILES.values()]
