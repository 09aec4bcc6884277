"""What a worker process holds for all its runs: settings, store, limiter, model client.

Built once per process on first use (threads share it: the redis client's
connection pool and the litellm client are thread-safe), plus the start-up
checks a worker makes when it comes up.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    import redis

    from schemas.settings import AssaySettings
    from workers.engine import EngineDeps
    from workers.ratelimit import FleetRateLimiter
    from workers.store import VerdictStore

_log = structlog.get_logger(__name__)


@dataclass
class WorkerRuntime:
    settings: AssaySettings
    redis: redis.Redis
    store: VerdictStore
    limiter: FleetRateLimiter | None
    llm: Any

    @classmethod
    def build(cls, settings: AssaySettings) -> WorkerRuntime:
        from workers.llm import LiteLLMClient
        from workers.ratelimit import FleetRateLimiter
        from workers.redis_client import connect
        from workers.store import VerdictStore

        if not settings.redis_url:
            raise RuntimeError(
                "the worker has no verdict store: set ASSAY_REDIS_URL (the broker alone is not "
                "enough) and start it again"
            )
        client = connect(settings.redis_url)
        store = VerdictStore(
            client,
            prefix=settings.key_prefix,
            history_limit=settings.history_limit,
            run_ttl_seconds=settings.run_ttl_seconds,
            compress_reports=settings.report_compression,
        )
        return cls(
            settings=settings,
            redis=client,
            store=store,
            limiter=FleetRateLimiter.from_settings(settings, client),
            llm=LiteLLMClient(settings),
        )

    def engine_deps(self, *, allow_defer: bool = True) -> EngineDeps:
        from workers.engine import EngineDeps

        return EngineDeps(
            settings=self.settings,
            llm=self.llm,
            rate_limiter=self.limiter,
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


def worker_started(settings: AssaySettings, runtime: WorkerRuntime, app: Any) -> None:
    """Start-up checks and services of a worker process (called when Celery is ready)."""
    from workers.logs import configure_logging

    configure_logging(settings)
    try:
        runtime.store.check_persistence()
    except Exception as exc:  # a worker still starts; the store warns again on use
        _log.warning("redis_check_failed", error=str(exc))
    longest = max(settings.timeout_seconds or 0.0, *_profile_deadlines())
    if (
        _broker_has_visibility_timeout(settings)
        and longest >= settings.broker_visibility_timeout_seconds
    ):
        _log.warning(
            "visibility_timeout_short",
            visibility_timeout=settings.broker_visibility_timeout_seconds,
            longest_deadline=longest,
            message="a run outliving the broker's visibility timeout is handed to a second "
            "worker; raise ASSAY_BROKER_VISIBILITY_TIMEOUT_SECONDS above the longest deadline",
        )
    if settings.metrics_port:
        from workers.metrics import start_metrics_server

        start_metrics_server(settings.metrics_port)
    from workers.tracing import configure_tracing

    configure_tracing(settings)
    from workers.dispatch import Dispatcher
    from workers.recovery import start_sweeper

    start_sweeper(settings, runtime.store, Dispatcher(app, runtime.store, settings))
    from workers.llm import load_litellm

    load_litellm()  # import it now, not inside the first run's deadline


def _profile_deadlines() -> list[float]:
    from schemas.budget import PROFILES

    return [p.budget.timeout_seconds or 0.0 for p in PROFILES.values()]


def _broker_has_visibility_timeout(settings: AssaySettings) -> bool:
    url = settings.broker_url or settings.redis_url or ""
    return url.startswith(("redis://", "rediss://", "unix://", "sentinel://"))
