"""The Celery app, configured in one place from ``AssaySettings``.

``celery -A workers.celery_app worker`` and ``assay worker`` both use the
``app`` attribute of this module, built on first access from the settings.
Clients that only send tasks build their own with ``create_app(settings,
with_tasks=False)``, which does not import the engine.

Why these settings (see docs/fleet.md, "Crash safety"):

- Results are not kept by Celery (no result backend): verdicts go to the
  verdict store, which is idempotent per run id.
- ``task_acks_late`` + ``task_reject_on_worker_lost``: a message is removed
  only after its run finished, so a worker killed mid-run loses nothing. On
  Redis the broker hands an unacknowledged message out again after the
  visibility timeout, which must outlast the longest run; the restore sweep
  runs every few seconds so a short timeout (tests) takes effect quickly.
- Prefetch multiplier 1: a worker reserves no more runs than it has threads,
  so runs wait in the broker, where another worker can take them.
- Time limits are set per task when it is sent, from the run's own deadline
  (``time_limits_for``); the threads pool cannot interrupt a thread, so there
  the engine's deadline is the limit that bites and these are a backstop for
  the prefork pool.
- Task events only when ``ASSAY_TASK_EVENTS`` is on (for Flower and Celery
  exporters): each event is a Redis publish, several per evaluation, for
  nothing when no monitor listens.
- The threads pool by default: an evaluation spends nearly all its time
  waiting on the model over HTTP, so threads in one process give the
  concurrency without a process per run (bench/bench_fleet.py measures it).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from schemas.budget import PROFILES
from schemas.request import EvaluationRequest

if TYPE_CHECKING:
    from celery import Celery

    from schemas.settings import AssaySettings

TASK_NAME = "assay.evaluate"
TIME_LIMIT_GRACE_SECONDS = 30.0  # soft limit = deadline + grace; hard = soft + grace


class FleetNotConfigured(RuntimeError):
    """No broker or Redis URL: the fleet cannot start."""


def queue_name(settings: AssaySettings) -> str:
    """The broker queue evaluations wait in (on Redis: the list key of that name)."""
    return f"{settings.key_prefix}.evaluations"


def broker_url(settings: AssaySettings) -> str:
    url = settings.broker_url or settings.redis_url
    if not url:
        raise FleetNotConfigured(
            "no broker is configured: set ASSAY_REDIS_URL (or ASSAY_BROKER_URL), "
            "or start local mode with `assay up`"
        )
    return url


def run_deadline_seconds(request: EvaluationRequest, settings: AssaySettings) -> float:
    """The wall-clock budget of a run: request value, then settings, then profile default."""
    profile_default = PROFILES[request.profile].budget.timeout_seconds or 300.0
    return float(request.budget.timeout_seconds or settings.timeout_seconds or profile_default)


def time_limits_for(request: EvaluationRequest, settings: AssaySettings) -> tuple[float, float]:
    """(soft, hard) Celery time limits for one run, derived from its deadline."""
    soft = run_deadline_seconds(request, settings) + TIME_LIMIT_GRACE_SECONDS
    return soft, soft + TIME_LIMIT_GRACE_SECONDS


def _transport_options(settings: AssaySettings) -> dict[str, Any]:
    visibility = settings.broker_visibility_timeout_seconds
    return {
        "visibility_timeout": visibility,
        # Sweep for abandoned messages about six times per visibility timeout (1-10 s).
        "unacked_restore_interval": max(1, min(10, int(visibility / 6))),
        "unacked_restore_throttle": 1,
        # kombu holds a Redis lock while it restores; a worker SIGKILLed inside that window
        # leaves the lock behind until it expires (kombu's default: 300 s), and no worker can
        # restore abandoned messages meanwhile. Tie the expiry to the visibility timeout.
        "unacked_mutex_expire": max(5, min(300, int(visibility / 4))),
        "socket_timeout": 30,
        "socket_connect_timeout": 10,
        "socket_keepalive": True,
        "health_check_interval": 15,
    }


def create_app(settings: AssaySettings | None = None, *, with_tasks: bool = True) -> Celery:
    """A Celery app for these settings; ``with_tasks`` registers the evaluation task."""
    from celery import Celery

    from schemas.settings import load_settings

    settings = settings or load_settings()
    app = Celery("assay", broker=broker_url(settings), set_as_current=False)
    queue = queue_name(settings)
    app.conf.update(
        task_default_queue=queue,
        task_serializer="json",
        accept_content=["json"],
        result_backend=None,
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        worker_pool=settings.worker_pool,
        worker_concurrency=settings.worker_concurrency,
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,  # structlog writes its own lines to stderr
        broker_transport_options=_transport_options(settings),
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        task_publish_retry=True,
        task_publish_retry_policy={
            "max_retries": 20,
            "interval_start": 0.1,
            "interval_step": 0.5,
            "interval_max": 2.0,
        },
    )
    app.assay_settings = settings
    if with_tasks:
        from workers.tasks import register_tasks

        register_tasks(app, settings)
    return app


_app: Celery | None = None
_app_lock = threading.Lock()


def get_app() -> Celery:
    """The process-wide worker app, built from ``load_settings()`` on first use."""
    global _app
    with _app_lock:
        if _app is None:
            _app = create_app()
        return _app


def __getattr__(name: str) -> Any:
    # `celery -A workers.celery_app` looks up `app`; building it lazily keeps
    # `import workers.celery_app` cheap and free of settings errors.
    if name in ("app", "celery"):
        return get_app()
    raise AttributeError(name)
