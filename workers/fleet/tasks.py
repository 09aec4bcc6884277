"""The Celery task ``assay.evaluate``: one delivery of one run, end to end. Kept thin.

A delivery (:func:`handle_delivery`, a plain function testable without a broker):

1. validates the request (a JSON dict, so any producer can send one);
2. for a message a scheduler replica sent, claims its fence: only the first
   fencing token seen for a fire runs it, so a copy sent by a replica that was
   paused past its hold is dropped (``superseded``);
3. resumes from a checkpoint when it is a scheduler continuation, ignoring a
   stale or duplicated one;
4. counts the delivery in the store, which refuses a run that already has a
   verdict (a redelivered or duplicated message does nothing);
5. gives up with ``cannot_determine`` once a run was delivered more than
   ``settings.max_deliveries`` times: a request that kills its worker every
   time (crash, OOM) ends with the reason instead of looping;
6. runs the engine, then parks the run (a long WAIT) or records its verdict.

Redis and broker errors are retried in place (the redis client's own retry,
then tenacity); if Redis stays away the message is requeued with
``Reject(requeue=True)``, or, when even that fails, left unacknowledged for
the broker to hand out again: a delivery never drops a run silently.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import redis.exceptions
import structlog
from celery import Celery, signals
from celery.exceptions import Reject
from kombu.exceptions import OperationalError
from pydantic import ValidationError
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

from schemas.budget import resolve_budget
from schemas.report import RunReport, RunState
from schemas.request import EvaluationRequest
from schemas.settings import AssaySettings
from schemas.verdict import Verdict, VerdictKind
from workers.engine.logs import bind_run
from workers.engine.metrics import observe_verdict
from workers.engine.tracing import evaluation_span
from workers.fleet.broker import TASK_NAME
from workers.fleet.checkpoints import load_for_resume, park
from workers.fleet.runtime import RuntimeHolder, WorkerRuntime, worker_started
from workers.fleet.store import StoreConflict

_log = structlog.get_logger("assay.tasks")

STORE_RETRY_SECONDS = 60.0  # on top of the redis client's own ~30 s of retries


def _infrastructure_errors() -> tuple[type[BaseException], ...]:
    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OperationalError)


def _retrying(func: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a store step, retrying Redis connection errors for up to a minute.

    The first attempt is a plain call: it nearly always succeeds, and setting up
    tenacity's loop cost more CPU than the store step itself (issue 15).
    """
    try:
        return func(*args, **kwargs)
    except _infrastructure_errors():
        pass
    retrying = Retrying(
        retry=retry_if_exception_type(_infrastructure_errors()),
        stop=stop_after_delay(STORE_RETRY_SECONDS),
        wait=wait_exponential(multiplier=0.2, max=5.0) + wait_random(0, 1.0),
        reraise=True,
    )
    return retrying(func, *args, **kwargs)


def give_up_report(
    request: EvaluationRequest, settings: AssaySettings, reason: str, attempts: int
) -> RunReport:
    """A ``cannot_determine`` report for a run the fleet stopped trying to evaluate."""
    now = datetime.now(UTC)
    model = request.model or settings.model or "(none)"
    verdict = Verdict.of_request(
        request,
        VerdictKind.CANNOT_DETERMINE,
        "The fleet gave up on this run, so nothing was concluded.",
        reason=reason,
        model=model,
        started_at=request.submitted_at,
        finished_at=now,
    )
    return RunReport.finished(
        request,
        verdict,
        budget=resolve_budget(request.profile, request.budget),
        model=model,
        attempts=attempts,
    )


def _fence_parts(fence: Any) -> tuple[str, str] | None:
    """(fire id, token) of a well-formed fence, else None."""
    if not isinstance(fence, dict):
        return None
    fire, token = fence.get("fire"), fence.get("token")
    if not (isinstance(fire, str) and isinstance(token, str) and fire and token):
        return None
    if len(fire) > 300 or len(token) > 100:
        return None
    return fire, token


def handle_delivery(
    payload: dict[str, Any],
    runtime: WorkerRuntime,
    resume_sequence: int | None = None,
    fence: dict[str, Any] | None = None,
) -> str:
    """Process one delivery; returns what happened (for logs and tests)."""
    try:
        request = EvaluationRequest.model_validate(payload)
    except ValidationError as exc:
        _log.error("request_rejected", error=str(exc).splitlines()[0], payload_keys=list(payload))
        return "rejected"
    log = bind_run(
        _log, run_id=request.run_id, check_id=request.check_id, batch_id=request.batch_id
    )
    settings, store = runtime.settings, runtime.store

    if fence is not None:
        parts = _fence_parts(fence)
        if parts is None:
            log.error("request_rejected", error="the message's fence is malformed")
            return "rejected"
        if not _retrying(store.claim_fence, request.run_id, *parts):
            log.info("delivery_superseded", fire=parts[0])
            return "superseded"

    state: RunState | None = None
    if resume_sequence is not None:
        checkpoint = _retrying(
            load_for_resume, runtime.redis, settings, request.run_id, resume_sequence
        )
        if checkpoint is None:
            log.info("continuation_stale", sequence=resume_sequence)
            return "stale"
        state = RunState.model_validate(checkpoint.state)

    delivery = _retrying(store.begin_delivery, request)
    if delivery is None:
        log.info("run_already_recorded")
        return "duplicate"
    if delivery > settings.max_deliveries:
        reason = (
            f"the run was delivered {delivery} times and its worker stopped before finishing "
            f"each of the {delivery - 1} earlier times (a crash or kill); giving up after "
            f"max_deliveries={settings.max_deliveries}"
        )
        log.error("run_given_up", deliveries=delivery)
        return _finish(runtime, give_up_report(request, settings, reason, delivery), log)

    from workers.fleet.policy_rerun import evaluate_policy_request, is_policy_request
    from workers.fleet.probe_rerun import evaluate_check

    log.info("run_started", delivery=delivery, resumed=state is not None)
    children: list[RunReport] = []
    try:
        with evaluation_span(request):
            deps = runtime.engine_deps(allow_defer=True)
            if is_policy_request(request):  # an imported policy or set: probes only
                outcome = evaluate_policy_request(request, deps, runtime.policies)
                report, children = outcome.report, outcome.children
            else:  # probe when it can (workers/policy_engine/probes)
                report = evaluate_check(request, deps, runtime.probes, state=state)
    except Exception as exc:  # the engine never raises; a time limit or a bug still must not
        reason = f"the worker stopped the run: {type(exc).__name__}: {exc}"
        report = give_up_report(request, settings, reason, delivery)
    report = report.model_copy(update={"attempts": delivery})
    for child in children:  # a set's policies first: each is a run of its own check
        _finish(
            runtime,
            child,
            log.bind(run_id=child.run_id, check_id=child.check_id),
            part_of=request.run_id,
        )

    if report.status == "waiting" and report.checkpoint is not None:
        parked = _retrying(park, runtime.redis, settings, store, report, report.checkpoint)
        log.info("run_parked", wake_at=str(report.wake_at), recorded_before=parked is None)
        return "parked"
    if report.verdict is None:  # a waiting report without a checkpoint cannot resume
        reason = "the engine returned no verdict and no checkpoint to resume from"
        report = give_up_report(request, settings, reason, delivery)
    return _finish(runtime, report, log)


def _finish(runtime: WorkerRuntime, report: RunReport, log: Any, part_of: str | None = None) -> str:
    """Record ``report``; ``part_of``: the set run it is one policy's run of."""
    try:
        written = _retrying(runtime.store.record_verdict, report, part_of=part_of)
    except StoreConflict as exc:  # nothing was written; the run stays unfinished, visibly
        log.error("run_not_recorded", error=str(exc))
        return "store_conflict"
    if not written:
        log.info("run_already_recorded")
        return "duplicate"
    assert report.verdict is not None  # its checkpoint, if it parked, went with the verdict
    observe_verdict(report.verdict)
    log.info("run_recorded", verdict=report.verdict.verdict.value)
    return "recorded"


def register_tasks(app: Celery, settings: AssaySettings) -> None:
    """Define ``assay.evaluate`` on ``app`` and the worker's start-up hook."""
    holder = RuntimeHolder(settings)
    infra_errors = _infrastructure_errors()

    @app.task(
        name=TASK_NAME,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
    )
    def evaluate(
        request: dict[str, Any],
        resume_sequence: int | None = None,
        fence: dict[str, Any] | None = None,
    ) -> str:
        try:
            return handle_delivery(request, holder.get(), resume_sequence, fence)
        except infra_errors as exc:
            _log.warning("infrastructure_error_requeue", error=str(exc))
            raise Reject(str(exc), requeue=True) from exc

    def on_ready(**_: Any) -> None:
        worker_started(settings, holder.get(), app)

    def on_shutdown(**_: Any) -> None:
        runtime = holder.built()
        if runtime is not None:  # settlements still queued go out before the process ends
            runtime.spend.flush()

    signals.worker_ready.connect(on_ready, weak=False, dispatch_uid=f"assay-ready-{id(app)}")
    signals.worker_shutdown.connect(
        on_shutdown, weak=False, dispatch_uid=f"assay-shutdown-{id(app)}"
    )
