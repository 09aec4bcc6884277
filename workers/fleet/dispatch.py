"""Sending evaluations to the fleet: register the run in the store, then queue its task.

The client, the API, batch fan-out and the scheduler all enqueue through
:class:`Dispatcher`, so every queued run is known to the store before a worker
can see it (a batch's tally counts it as pending first), and every task
carries time limits derived from the run's own deadline.

Sending is at-least-once: a run sent twice is evaluated at most twice and
recorded once (the store's first-verdict-wins rule). The scheduler adds a
``fence`` ({fire, token}) to what it sends, and a worker runs only the first
token it sees for a fire (``VerdictStore.claim_fence``), so two replicas'
copies of one fire run once.
"""

from __future__ import annotations

from celery import Celery

from schemas.budget import PROFILES
from schemas.fleet import SubmitReceipt
from schemas.request import EvaluationRequest
from schemas.settings import AssaySettings
from workers.fleet.broker import TASK_NAME, configured_app, queue_name
from workers.fleet.store import VerdictStore

TIME_LIMIT_GRACE_SECONDS = 30.0  # soft limit = deadline + grace; hard = soft + grace


def run_deadline_seconds(request: EvaluationRequest, settings: AssaySettings) -> float:
    """The wall-clock budget of a run: request value, then settings, then profile default."""
    profile_default = PROFILES[request.profile].budget.timeout_seconds or 300.0
    return float(request.budget.timeout_seconds or settings.timeout_seconds or profile_default)


def time_limits_for(request: EvaluationRequest, settings: AssaySettings) -> tuple[float, float]:
    """(soft, hard) Celery time limits for one run, derived from its deadline."""
    soft = run_deadline_seconds(request, settings) + TIME_LIMIT_GRACE_SECONDS
    return soft, soft + TIME_LIMIT_GRACE_SECONDS


class Dispatcher:
    """Queues evaluation requests on the fleet's broker."""

    def __init__(self, app: Celery, store: VerdictStore, settings: AssaySettings) -> None:
        self.app = app
        self.store = store
        self.settings = settings
        self._queue = queue_name(settings)

    @classmethod
    def from_settings(cls, settings: AssaySettings, store: VerdictStore) -> Dispatcher:
        return cls(configured_app(settings), store, settings)

    def submit(
        self, request: EvaluationRequest, fence: dict[str, str] | None = None
    ) -> SubmitReceipt:
        """Register ``request`` as queued (once) and send its task."""
        self.store.register_run(request)
        self.send(request, fence=fence)
        return SubmitReceipt(
            run_id=request.run_id,
            check_id=request.check_id,
            target=request.target.name,
            batch_id=request.batch_id,
        )

    def send(
        self,
        request: EvaluationRequest,
        resume_sequence: int | None = None,
        fence: dict[str, str] | None = None,
    ) -> None:
        """Send the task only (a continuation of a run the store already knows).

        ``resume_sequence`` names the checkpoint a WAIT continuation resumes
        (the scheduler sets it; see workers/fleet/checkpoints.py); ``fence`` is the
        scheduler replica's ``{"fire": ..., "token": ...}`` for this send.
        """
        soft, hard = time_limits_for(request, self.settings)
        extra: dict[str, object] = {}
        if resume_sequence is not None:
            extra["resume_sequence"] = resume_sequence
        if fence is not None:
            extra["fence"] = fence
        self.app.send_task(
            TASK_NAME,
            args=[request.model_dump(mode="json")],
            kwargs=extra,
            task_id=request.run_id,
            queue=self._queue,
            soft_time_limit=soft,
            time_limit=hard,
        )

    def close(self) -> None:
        self.app.close()
