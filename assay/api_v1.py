"""The ``/v1`` routes: thin handlers over the verdict store, the fleet client and schedules.

Each handler checks the caller's scope (``ReadAccess`` / ``WriteAccess``), turns
the body into the ``schemas`` contract model (so the contract's rules apply
here too), calls the module that owns the data, and maps "not found" and
contract violations to the stable error codes of ``assay.api_errors``.
Handlers are plain ``def``: FastAPI runs them in its thread pool, so the
blocking Redis calls never stall the event loop.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

import structlog
from fastapi import APIRouter, Path, Query, Request, Response

from assay.api_auth import ReadAccess, WriteAccess
from assay.api_errors import ApiError
from assay.api_json import StrictJsonRoute
from assay.api_models import (
    BATCH_OPERATIONS,
    CHECK_OPERATIONS,
    DOCUMENT_WRITE_ERRORS,
    EXPIRED,
    KEY_MISSING,
    NOT_FOUND,
    OUTSIDE_ROOTS,
    READ_ERRORS,
    RFC3339,
    RUN_OPERATIONS,
    SCHEDULE_OPERATIONS,
    UNROUTABLE,
    WRITE_ERRORS,
    ApplyBody,
    ApplyOutcome,
    BatchResults,
    BatchSubmission,
    ChangeList,
    CheckList,
    DocumentList,
    ErrorBody,
    EvaluationSubmission,
    RunView,
    ScheduleCreate,
    ScheduleList,
    ScheduleUpdate,
    ScheduleView,
    VerdictHistory,
    links_to,
    state_refusals,
)
from assay.api_wiring import Services
from schemas import ids
from schemas.fleet import BatchStatus, SubmitReceipt
from schemas.spend import SpendReport
from schemas.verdict import Verdict, VerdictKind

_log = structlog.get_logger("assay.api")

router = APIRouter(prefix="/v1", route_class=StrictJsonRoute)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

RunId = Annotated[ids.RunId, Path(description="A run id.")]
CheckId = Annotated[ids.CheckId, Path(description="A check id.")]
BatchId = Annotated[ids.BatchId, Path(description="A batch id.")]
ScheduleId = Annotated[ids.ScheduleId, Path(description="A schedule id.")]


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def note_ids(request: Request, **ids: str | None) -> None:
    """Put run / check / batch / schedule ids on this request's log line."""
    present = {k: v for k, v in ids.items() if v}
    structlog.contextvars.bind_contextvars(**present)
    log_ids = request.scope.setdefault("state", {}).setdefault("log_ids", {})
    log_ids.update(present)


# An instant or an age, as the CLI's --changed-since takes them, published exactly as the
# server reads them: an RFC 3339 date-time (what JSON Schema's ``date-time`` means), or an age
# of one or more NUMBER UNIT parts (w d h m s, either case) or bare seconds, back from now.
AGE_PATTERN = r"^(([0-9]+(\.[0-9]+)?[wdhmsWDHMS])+|[0-9]+(\.[0-9]+)?)$"
_AGE_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([wdhms]?)")
_AGE_UNIT_SECONDS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "": 1}
INSTANT_OR_AGE_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "format": "date-time"},
        {"type": "string", "pattern": AGE_PATTERN, "maxLength": 64},
    ]
}


def _instant_or_age(text: str, name: str) -> datetime:
    """The instant ``text`` names (``INSTANT_OR_AGE_SCHEMA``), at the earliest 1970 and in UTC."""
    now = datetime.now(UTC)
    if len(text) <= 64 and re.fullmatch(AGE_PATTERN, text):
        seconds = sum(
            float(number) * _AGE_UNIT_SECONDS[unit]
            for number, unit in _AGE_PART.findall(text.lower())
        )
        return max(now - timedelta(seconds=min(seconds, (now - _EPOCH).total_seconds())), _EPOCH)
    if RFC3339.fullmatch(text):
        try:
            moment = datetime.fromisoformat(text.upper())
        except ValueError:
            pass  # a day or an hour out of range: refused below
        else:
            try:
                return max(moment.astimezone(UTC), _EPOCH)
            except OverflowError:  # past year 9999 in UTC: after every change
                return datetime.max.replace(tzinfo=UTC)
    raise ApiError(
        422,
        "validation_error",
        f"{name} must be an instant with a time zone like 2026-01-01T00:00:00Z, or an age "
        f"like 1h or 1h30m, not {text[:64]!r}; fix it and ask again.",
    )


# --- evaluations and runs -------------------------------------------------------------------------


@router.post(
    "/evaluations",
    status_code=202,
    response_model=SubmitReceipt,
    tags=["evaluations"],
    responses={
        **WRITE_ERRORS,
        **state_refusals(f"{OUTSIDE_ROOTS}, or {UNROUTABLE}", KEY_MISSING),
        202: {
            "links": {
                **links_to("run_id", "/run_id", *RUN_OPERATIONS)["links"],
                **links_to("check_id", "/check_id", *CHECK_OPERATIONS[:2])["links"],
            }
        },
    },
)
def submit_evaluation(
    body: EvaluationSubmission, request: Request, scope: WriteAccess
) -> SubmitReceipt:
    """Queue one evaluation; its verdict appears at /v1/runs/{run_id} and /v1/checks/{check_id}."""
    evaluation = _services(request).build_request(body)
    receipt = _services(request).submit(evaluation)
    note_ids(request, run_id=receipt.run_id, check_id=receipt.check_id)
    _log.info("evaluation_submitted", run_id=receipt.run_id, check_id=receipt.check_id)
    return receipt


@router.get(
    "/runs/{run_id}",
    response_model=RunView,
    tags=["evaluations"],
    responses={**READ_ERRORS, **NOT_FOUND, **EXPIRED},
)
def get_run(run_id: RunId, request: Request, scope: ReadAccess) -> RunView:
    """A run's status, and its verdict and step-by-step report once they exist."""
    note_ids(request, run_id=run_id)
    view = _services(request).run_view(run_id)
    if view is None:
        raise ApiError(
            404, "run_not_found", f"No run {run_id!r}; check the id (runs expire after their TTL)."
        )
    note_ids(request, check_id=view.check_id, batch_id=view.batch_id)
    return view


# --- checks -------------------------------------------------------------------------------------


@router.get(
    "/checks",
    response_model=CheckList,
    tags=["checks"],
    responses={**READ_ERRORS, 200: links_to("check_id", "/checks/0/check_id", *CHECK_OPERATIONS)},
)
def list_checks(
    request: Request,
    scope: ReadAccess,
    verdict: Annotated[
        VerdictKind | None, Query(description="Only checks whose latest verdict is this.")
    ] = None,
    target: Annotated[str | None, Query(min_length=1, max_length=300)] = None,
    changed_since: Annotated[
        str | None,
        Query(
            description="Only checks whose verdict changed at or after this instant "
            "(RFC 3339, e.g. 2026-01-01T00:00:00Z) or within this age (1h, 30m, 2d, 1h30m), "
            "as on the CLI.",
            json_schema_extra=INSTANT_OR_AGE_SCHEMA,
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> CheckList:
    """Checks with their latest verdict, newest first, filtered by verdict, target or change."""
    since = None if changed_since is None else _instant_or_age(changed_since, "changed_since")
    from assay.client import checks_on_target

    rows = checks_on_target(
        _services(request).store,
        verdict=verdict,
        target=target,
        changed_since=since,
        limit=limit,
    )
    return CheckList(checks=rows)


@router.get("/changes", response_model=ChangeList, tags=["checks"], responses=READ_ERRORS)
def list_changes(
    request: Request,
    scope: ReadAccess,
    since: Annotated[
        str,
        Query(
            description="Changes at or after this instant (RFC 3339, e.g. "
            "2026-01-01T00:00:00Z) or within this age (1h, 30m, 2d, 1h30m), as on the CLI.",
            json_schema_extra=INSTANT_OR_AGE_SCHEMA,
        ),
    ],
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> ChangeList:
    """Verdict changes (true -> false and so on), oldest first."""
    moment = _instant_or_age(since, "since")
    return ChangeList(changes=_services(request).store.changes(moment, limit=limit))


@router.get(
    "/checks/{check_id}",
    response_model=Verdict,
    tags=["checks"],
    responses={**READ_ERRORS, **NOT_FOUND},
)
def get_check(check_id: CheckId, request: Request, scope: ReadAccess) -> Verdict:
    """The check's latest verdict."""
    note_ids(request, check_id=check_id)
    verdict = _services(request).store.latest_verdict(check_id)
    if verdict is None:
        raise ApiError(
            404,
            "check_not_found",
            f"No verdict for check {check_id!r} yet; check the id or wait for its run.",
        )
    note_ids(request, run_id=verdict.run_id)
    return verdict


@router.get(
    "/checks/{check_id}/history",
    response_model=VerdictHistory,
    tags=["checks"],
    responses={**READ_ERRORS, **NOT_FOUND},
)
def get_check_history(
    check_id: CheckId,
    request: Request,
    scope: ReadAccess,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> VerdictHistory:
    """The check's verdicts, newest first."""
    note_ids(request, check_id=check_id)
    verdicts = _services(request).store.history(check_id, limit=limit)
    if not verdicts:
        raise ApiError(404, "check_not_found", f"No verdicts for check {check_id!r}; check the id.")
    return VerdictHistory(check_id=check_id, verdicts=verdicts)


# --- batches ------------------------------------------------------------------------------------


@router.post(
    "/batches",
    status_code=202,
    response_model=BatchStatus,
    tags=["batches"],
    responses={
        **WRITE_ERRORS,
        **state_refusals(
            f"{OUTSIDE_ROOTS}, {UNROUTABLE}, or a context_glob that matches no context of the "
            "server's kubeconfig (batch_empty)",
            f"{KEY_MISSING}, or the server's kubeconfig cannot be read (context_glob_failed)",
        ),
        202: links_to("batch_id", "/batch_id", *BATCH_OPERATIONS),
    },
)
def start_batch(body: BatchSubmission, request: Request, scope: WriteAccess) -> BatchStatus:
    """Fan one predicate out over the listed targets; read the tally at ``/v1/batches/{id}``."""
    status = _services(request).start_batch(body)
    note_ids(request, batch_id=status.batch_id)
    _log.info("batch_started", batch_id=status.batch_id, total=status.total)
    return status


@router.get(
    "/batches/{batch_id}",
    response_model=BatchStatus,
    tags=["batches"],
    responses={**READ_ERRORS, **NOT_FOUND},
)
def get_batch(batch_id: BatchId, request: Request, scope: ReadAccess) -> BatchStatus:
    """The batch's live tally (pending / true / false / poorly posed / cannot determine)."""
    note_ids(request, batch_id=batch_id)
    status = _services(request).batch_status(batch_id)
    if status is None:
        raise ApiError(
            404,
            "batch_not_found",
            f"No batch {batch_id!r}; check the id (batches expire after their TTL).",
        )
    return status


@router.get(
    "/batches/{batch_id}/results",
    response_model=BatchResults,
    tags=["batches"],
    responses={**READ_ERRORS, **NOT_FOUND},
)
def get_batch_results(
    batch_id: BatchId,
    request: Request,
    scope: ReadAccess,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> BatchResults:
    """One page of per-target results, in fan-out order; pending targets have no verdict yet."""
    note_ids(request, batch_id=batch_id)
    store = _services(request).store
    if store.batch(batch_id) is None:
        raise ApiError(404, "batch_not_found", f"No batch {batch_id!r}; check the id.")
    return BatchResults(batch_id=batch_id, results=store.batch_results(batch_id, offset, limit))


# --- schedules ----------------------------------------------------------------------------------


def _schedule_or_404(request: Request, schedule_id: str) -> ScheduleView:
    schedule = _services(request).get_schedule(schedule_id)
    if schedule is None:
        raise ApiError(
            404, "schedule_not_found", f"No schedule {schedule_id!r}; list them at /v1/schedules."
        )
    return schedule


@router.post(
    "/schedules",
    status_code=201,
    response_model=ScheduleView,
    tags=["schedules"],
    responses={
        **WRITE_ERRORS,
        **state_refusals(
            f"{OUTSIDE_ROOTS}, or {UNROUTABLE}",
            f"The name is taken (schedule_name_taken), or {KEY_MISSING[:1].lower()}"
            f"{KEY_MISSING[1:]}",
        ),
        201: links_to("schedule_id", "/id", *SCHEDULE_OPERATIONS),
    },
)
def create_schedule(body: ScheduleCreate, request: Request, scope: WriteAccess) -> ScheduleView:
    """Create a schedule; it fires from its next instant on, with no restart."""
    schedule = _services(request).create_schedule(body)
    note_ids(request, schedule_id=schedule.id)
    return schedule


@router.get(
    "/schedules",
    response_model=ScheduleList,
    tags=["schedules"],
    responses={
        **READ_ERRORS,
        200: links_to("schedule_id", "/schedules/0/id", *SCHEDULE_OPERATIONS),
    },
)
def list_schedules(request: Request, scope: ReadAccess) -> ScheduleList:
    """Every schedule, paused ones included."""
    return ScheduleList(schedules=_services(request).list_schedules())


@router.get(
    "/schedules/{schedule_id}",
    response_model=ScheduleView,
    tags=["schedules"],
    responses={**READ_ERRORS, **NOT_FOUND},
)
def get_schedule(schedule_id: ScheduleId, request: Request, scope: ReadAccess) -> ScheduleView:
    """One schedule, with its last fire."""
    note_ids(request, schedule_id=schedule_id)
    return _schedule_or_404(request, schedule_id)


@router.patch(
    "/schedules/{schedule_id}",
    response_model=ScheduleView,
    tags=["schedules"],
    responses={
        **WRITE_ERRORS,
        **state_refusals(
            f"no such schedule (schedule_not_found), {OUTSIDE_ROOTS}, or {UNROUTABLE}",
            "The new name is taken, a concurrent change (schedule_conflict), or "
            f"{KEY_MISSING[:1].lower()}{KEY_MISSING[1:]}",
        ),
    },
)
def update_schedule(
    schedule_id: ScheduleId, body: ScheduleUpdate, request: Request, scope: WriteAccess
) -> ScheduleView:
    """Change some fields of a schedule; the rest keep their value."""
    note_ids(request, schedule_id=schedule_id)
    current = _schedule_or_404(request, schedule_id)
    return _services(request).update_schedule(current, body)


@router.post(
    "/schedules/{schedule_id}/pause",
    response_model=ScheduleView,
    tags=["schedules"],
    responses={**WRITE_ERRORS, **NOT_FOUND},
)
def pause_schedule(schedule_id: ScheduleId, request: Request, scope: WriteAccess) -> ScheduleView:
    """Stop firing until resumed (pausing a paused schedule changes nothing)."""
    note_ids(request, schedule_id=schedule_id)
    _schedule_or_404(request, schedule_id)
    return _services(request).set_schedule_enabled(schedule_id, enabled=False)


@router.post(
    "/schedules/{schedule_id}/resume",
    response_model=ScheduleView,
    tags=["schedules"],
    responses={**WRITE_ERRORS, **NOT_FOUND},
)
def resume_schedule(schedule_id: ScheduleId, request: Request, scope: WriteAccess) -> ScheduleView:
    """Fire again from the next instant (missed instants follow the misfire policy)."""
    note_ids(request, schedule_id=schedule_id)
    _schedule_or_404(request, schedule_id)
    return _services(request).set_schedule_enabled(schedule_id, enabled=True)


@router.delete(
    "/schedules/{schedule_id}",
    status_code=204,
    response_class=Response,
    tags=["schedules"],
    responses={**WRITE_ERRORS, **NOT_FOUND},
)
def delete_schedule(schedule_id: ScheduleId, request: Request, scope: WriteAccess) -> Response:
    """Remove a schedule; runs it already queued still finish."""
    note_ids(request, schedule_id=schedule_id)
    if not _services(request).delete_schedule(schedule_id):
        raise ApiError(
            404, "schedule_not_found", f"No schedule {schedule_id!r}; list them at /v1/schedules."
        )
    return Response(status_code=204)


# --- declarative checks and schedules ----------------------------------------------------------


@router.post(
    "/apply",
    response_model=ApplyOutcome,
    tags=["apply"],
    responses={
        **DOCUMENT_WRITE_ERRORS,
        404: {
            "model": ErrorBody,
            "description": "named_not_found: what a document names is not here (a snapshot "
            "folder outside the API's roots or matching nothing, a policy or set not stored, a "
            "model no provider routes, a notify sink not configured, targets matching nothing); "
            "every problem in details, nothing applied.",
        },
        409: {
            "model": ErrorBody,
            "description": "documents_conflict: two documents of one kind and name, an object "
            "created by another source, a check id another check keeps, a model no live "
            "worker can run, the kubeconfig unreadable for a contextGlob (every problem in "
            "details, nothing applied; a conflict and a 404 problem together are a 409); "
            "apply_conflict: a write raced another.",
        },
        422: {
            "model": ErrorBody,
            "description": "invalid_documents: a document breaks its published rules (every "
            "problem in details as {file: documents[N], line, field, msg}, with the other "
            "problems found); nothing applied.",
        },
    },
)
def apply_documents(body: ApplyBody, request: Request, scope: WriteAccess) -> ApplyOutcome:
    """`assay apply`: create, change or (with prune) delete checks and schedules so they
    match the documents. Documents that cannot be applied are refused whole, every problem
    with its document and field, and nothing is applied: 422 when one breaks its own rules,
    else 409 when any problem is a conflict, else 404. dry_run answers what would change."""
    outcome = _services(request).apply(body)
    _log.info(
        "documents_applied",
        source=outcome.source,
        dry_run=outcome.dry_run,
        changed=outcome.changed,
    )
    return outcome


@router.get(
    "/documents/{kind}",
    response_model=DocumentList,
    tags=["apply"],
    responses=READ_ERRORS,
)
def get_documents(
    kind: Annotated[Literal["checks", "schedules"], Path(description="checks or schedules")],
    request: Request,
    scope: ReadAccess,
    source: Annotated[
        str | None, Query(max_length=63, description="Only objects created from this source.")
    ] = None,
) -> DocumentList:
    """Stored checks or schedules as the documents `/v1/apply` takes (applying them back
    changes nothing)."""
    return DocumentList(documents=_services(request).documents(kind, source))


# --- spend ----------------------------------------------------------------------------------------


@router.get("/spend", response_model=SpendReport, tags=["spend"], responses=READ_ERRORS)
def get_spend(
    request: Request,
    scope: ReadAccess,
    days: Annotated[int, Query(ge=1, le=400, description="UTC days to show, today included.")] = 7,
    schedule: Annotated[
        str | None,
        Query(min_length=1, max_length=128, description="Only this schedule (id or name)."),
    ] = None,
) -> SpendReport:
    """What the fleet, each schedule (per UTC day) and each batch spent, with the ceilings in
    force, what is left of them and the schedule fires they skipped; and the fleet's current
    hour and day."""
    if schedule is not None:
        note_ids(request, schedule_id=schedule)
    return _services(request).spend_report(days, schedule)
