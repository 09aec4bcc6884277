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

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog
from celery import Celery
from kombu.exceptions import BatchPublishError, OperationalError

from schemas.budget import PROFILES
from schemas.fleet import SubmitReceipt
from schemas.request import EvaluationRequest
from schemas.schedule import format_duration
from schemas.settings import AssaySettings
from workers.fleet.broker import (
    TASK_NAME,
    broker_url,
    configured_app,
    has_visibility_timeout,
    is_redis_url,
    is_sentinel_broker,
    queue_name,
    require_broker_reachable,
)
from workers.fleet.redis_client import FLEET_BROKER, require_reachable, shown_url
from workers.fleet.store import VerdictStore

if TYPE_CHECKING:
    from kombu import Producer

_log = structlog.get_logger(__name__)

TIME_LIMIT_GRACE_SECONDS = 30.0  # soft limit = deadline + grace; hard = soft + grace


def run_deadline_seconds(request: EvaluationRequest, settings: AssaySettings) -> float:
    """The wall-clock budget of a run: request value, then settings, then profile default."""
    profile_default = PROFILES[request.profile].budget.timeout_seconds or 300.0
    return float(request.budget.timeout_seconds or settings.timeout_seconds or profile_default)


def time_limits_for(request: EvaluationRequest, settings: AssaySettings) -> tuple[float, float]:
    """(soft, hard) Celery time limits for one run, derived from its deadline."""
    soft = run_deadline_seconds(request, settings) + TIME_LIMIT_GRACE_SECONDS
    return soft, soft + TIME_LIMIT_GRACE_SECONDS


class RunsNotSent(OperationalError):
    """The broker failed a submit, fallback included: the runs are registered, not all sent.

    Still kombu's ``OperationalError`` (what a submit raised before), so a caller that
    caught that catches this. What it adds is what becomes of the runs, for the person
    who submitted them: ``str(error)`` names the broker and its error (the CLI, the
    Python client); :attr:`public_message` does not (the API answers with it, and
    does not tell callers where the broker lives).
    """

    def __init__(
        self, run_ids: Sequence[str], subject: str, outcome: str, *, broker: str, problem: str
    ) -> None:
        self.run_ids = tuple(run_ids)
        self.subject = subject
        self.outcome = outcome
        self.broker = broker
        self.problem = problem
        super().__init__(
            f"the fleet's broker at {broker} failed while queueing {subject} ({problem}); {outcome}"
        )

    @property
    def public_message(self) -> str:
        return f"The broker failed while queueing {self.subject}; {self.outcome}."


def resend_clause(settings: AssaySettings) -> str | None:
    """When the fleet sends a registered run whose message the broker never got, in words.

    None on a broker the lost-run sweeper does not watch (workers/fleet/recovery.py):
    there such a run is never sent.
    """
    if not has_visibility_timeout(settings):
        return None
    wait = format_duration(round(settings.broker_visibility_timeout_seconds))
    return (
        "the fleet's workers send again a run whose message did not reach the broker once it "
        f"has waited {wait} (ASSAY_BROKER_VISIBILITY_TIMEOUT_SECONDS)"
    )


NOT_RESENT = "this broker's lost messages are not sent again"

# redis-py names each sentinel that failed a master lookup by its client's repr: three
# nested reprs and every connection option, some 900 characters a sentinel.
_SENTINEL_REPR = re.compile(r"<redis\.client\.Redis\(.*?\bhost=([^,]+),port=(\d+),.*?\)>\)>\)>")


def compact_problem(problem: str) -> str:
    """A broker error for a person: a sentinel named ``sentinel HOST:PORT``, not its repr."""
    return _SENTINEL_REPR.sub(r"sentinel \1:\2", problem)


class Dispatcher:
    """Queues evaluation requests on the fleet's broker."""

    def __init__(self, app: Celery, store: VerdictStore, settings: AssaySettings) -> None:
        self.app = app
        self.store = store
        self.settings = settings
        self._queue = queue_name(settings)

    @classmethod
    def from_settings(
        cls, settings: AssaySettings, store: VerdictStore, *, fail_fast: bool = False
    ) -> Dispatcher:
        """The fleet's dispatcher. ``fail_fast`` is for callers a person waits on (CLI,
        ``assay.Client``, the API), like ``connect(url, fail_fast=True)`` for the store: a
        separate Redis broker that does not answer raises ``RedisUnreachable`` at once,
        instead of the first publish sitting out half a minute of retries; so does a
        Sentinel broker whose sentinels or master do not answer, or refuse the
        credentials (``require_broker_reachable``). Both before any run is registered."""
        if fail_fast:
            broker = broker_url(settings)
            if broker != settings.redis_url and is_redis_url(broker):
                require_reachable(broker, role=FLEET_BROKER)
            elif is_sentinel_broker(settings):
                require_broker_reachable(settings)
        return cls(configured_app(settings), store, settings)

    def submit(
        self, request: EvaluationRequest, fence: dict[str, str] | None = None
    ) -> SubmitReceipt:
        """Register ``request`` as queued (once) and send its task."""
        self.store.register_run(request)
        self.send(request, fence=fence)
        return SubmitReceipt.of(request)

    def submit_many(self, requests: Sequence[EvaluationRequest]) -> list[SubmitReceipt]:
        """:meth:`submit` for a batch's chunk: one store round trip, one broker round trip.

        Every run of the chunk is registered (``register_runs`` returns only
        once all are) before the first task is sent, so no worker ever receives
        a task for a run the store does not know. The tasks go out through one
        producer in a kombu publish batch (on Redis, one pipeline of LPUSHes;
        a transport without batches publishes each at once). kombu does not
        retry a batch (a pipeline that failed half-way has an uncertain
        outcome), so on failure the chunk is sent again message by message
        with Celery's publish retries: sending is at-least-once, as for one
        ``submit``. A failure beyond that leaves registered runs without a
        message; the lost-run sweeper sends those (workers/fleet/recovery.py), and
        the caller gets :class:`RunsNotSent`, which tells the person so.
        """
        if not requests:
            return []
        self.store.register_runs(requests)
        try:
            self._publish(requests)
        except OperationalError as exc:
            raise self._not_sent(requests, exc) from exc
        return [SubmitReceipt.of(request) for request in requests]

    def _publish(self, requests: Sequence[EvaluationRequest]) -> None:
        try:
            with self.app.producer_or_acquire() as producer, producer.batch(len(requests)):
                for request in requests:
                    self.send(request, producer=producer)
        except BatchPublishError as exc:
            _log.warning("batch_publish_failed", runs=len(requests), error=str(exc.__cause__))
            for request in requests:
                self.send(request)

    def _not_sent(
        self, requests: Sequence[EvaluationRequest], error: OperationalError
    ) -> RunsNotSent:
        one = len(requests) == 1
        subject = f"run {requests[0].run_id}" if one else f"{len(requests)} runs"
        registered = "it is registered" if one else "they are registered"
        resend = resend_clause(self.settings)
        if resend is None:
            outcome = f"{registered}, but {NOT_RESENT}: submit again once the broker is back"
        else:
            outcome = (
                f"{registered}, so nothing is lost: {resend}; not to wait, submit again "
                "as a new run once the broker is back"
            )
        return RunsNotSent(
            [request.run_id for request in requests],
            subject,
            outcome,
            broker=shown_url(broker_url(self.settings)),
            problem=compact_problem(str(error)) or type(error).__name__,
        )

    def send(
        self,
        request: EvaluationRequest,
        resume_sequence: int | None = None,
        fence: dict[str, str] | None = None,
        producer: Producer | None = None,
    ) -> None:
        """Send the task only (a continuation of a run the store already knows).

        ``resume_sequence`` names the checkpoint a WAIT continuation resumes
        (the scheduler sets it; see workers/fleet/checkpoints.py); ``fence`` is the
        scheduler replica's ``{"fire": ..., "token": ...}`` for this send;
        ``producer`` is one held for many sends (else one is taken from the
        app's pool per message). ``argsrepr`` names the run instead of letting
        Celery render the whole request for its events and logs, which cost
        as much CPU as publishing the message.
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
            producer=producer,
            argsrepr=f"[run {request.run_id} check {request.check_id}]",
        )

    def close(self) -> None:
        self.app.close()
