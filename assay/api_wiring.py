"""What the API's handlers call: the verdict store, the fleet client, schedules, timers.

One ``Services`` per app, built from the settings on first use, so the app
(and ``assay/openapi.json``) can be made without a Redis. The API's Redis
client gives up after a few quick retries, unlike the workers' patient one: a
person waiting on an HTTP answer is better served by a fast 503 than by a
30-second hang. It is opened with ``fail_fast``: while Redis (or a separate Redis
broker) has not answered yet, each request checks with one quick PING and a dead
Redis is ``RedisUnreachable``, a 503 ``redis_unavailable`` (``assay.api_errors``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from assay.api_errors import ApiError
from assay.api_models import (
    ApplyBody,
    ApplyOutcome,
    BatchSubmission,
    EvaluationSubmission,
    RunView,
    ScheduleCreate,
    ScheduleUpdate,
    ScheduleView,
    contract_target,
)
from assay.spend_view import (
    batch_with_spend,
    current_rows,
    schedule_today,
    schedules_today,
    spend_report,
)
from assay.submission import EmptyBatch, latest_batch_ids, submit_batch, submit_request
from scheduler.schedules import ScheduleConflict, ScheduleNotFound, ScheduleStore
from schemas.fleet import SubmitReceipt
from schemas.request import EvaluationRequest, SnapshotTarget, Target
from schemas.schedule import Schedule
from workers.engine import metrics
from workers.engine.snapshot_roots import SnapshotOutsideRoots, SnapshotRoots
from workers.fleet.broker import (
    broker_redis,
    broker_url,
    is_redis_broker,
    is_sentinel_broker,
    queue_name,
)
from workers.fleet.dispatch import Dispatcher
from workers.fleet.queue_depth import QueueDepthCollector
from workers.fleet.redis_client import connect
from workers.fleet.report_codec import UnreadableReport
from workers.fleet.spend import SpendStore
from workers.fleet.store import ReportExpired, VerdictStore
from workers.fleet.targets import TargetGlobError, context_targets
from workers.fleet.timers import TimerStore

if TYPE_CHECKING:
    import redis

    from assay.apply import ApplyContext
    from assay.manifests import ManifestProblem
    from schemas.fleet import BatchStatus
    from schemas.settings import AssaySettings
    from schemas.spend import ScopeSpend, SpendReport

API_REDIS_TIMEOUT_SECONDS = 5.0
API_REDIS_RETRIES = 3
API_REDIS_BACKOFF_CAP_SECONDS = 0.5


def apply_problems_error(problems: list[ManifestProblem]) -> ApiError:
    """The answer to documents that cannot be applied, every problem in ``details``:

    * 422 ``invalid_documents`` when any document breaks its own rules (the published
      schema's: a request the schema calls valid never gets it, but for an interval under
      a server's floor set above the default one);
    * else 409 ``documents_conflict`` when any problem is a conflict (two documents of one
      name, an object of another source, a check id taken, a model no worker can run now);
    * else 404 ``named_not_found``: what the documents name is not here (a snapshot folder
      outside the roots, a policy not stored, a model no provider routes, a sink).

    Each detail is ``{file, line, field, msg}``, with ``code`` for a problem of the server's
    state (the code the other operations answer it with)."""
    from assay.manifests import STATE_ANSWERS

    details: list[dict[str, Any]] = []
    for p in problems:
        detail: dict[str, Any] = {
            "file": p.file,
            "line": p.line,
            "field": p.field,
            "msg": p.message,
        }
        if p.answer:
            detail["code"] = p.answer
        details.append(detail)
    judged = [p for p in problems if not p.answer]
    conflicts = [p for p in problems if p.answer and STATE_ANSWERS[p.answer] == 409]
    status, code = (
        (422, "invalid_documents")
        if judged
        else (409, "documents_conflict")
        if conflicts
        else (404, "named_not_found")
    )
    first = (judged or conflicts or problems)[0]
    more = len(problems) - 1
    also = f" (and {more} more problem{'s' if more != 1 else ''} in details)" if more else ""
    return ApiError(
        status,
        code,
        f"{first}{also}; nothing was applied: fix the documents and send them again.",
        details=details,
    )


def api_redis(url: str, *, fail_fast: bool = False) -> redis.Redis:
    """A decoded-string client that fails within seconds when Redis is away.

    ``fail_fast`` checks that Redis answers before the client is made (a request);
    the scrape collectors' clients are made with the app, when Redis may not be up yet.
    """

    return connect(
        url,
        retries=API_REDIS_RETRIES,
        timeout_seconds=API_REDIS_TIMEOUT_SECONDS,
        backoff_cap_seconds=API_REDIS_BACKOFF_CAP_SECONDS,
        keepalive=False,
        fail_fast=fail_fast,
    )


def api_broker_redis(settings: AssaySettings) -> redis.Redis | None:
    """A client on the Redis holding the broker's queue, with the API's patience; None on a
    broker that is not Redis. On a Sentinel broker it reaches the master the sentinels name
    now, as the lost-run sweeper does (``broker_redis``), so it follows a failover."""
    if is_redis_broker(settings):
        return api_redis(broker_url(settings))
    if is_sentinel_broker(settings):
        return broker_redis(
            settings,
            retries=API_REDIS_RETRIES,
            timeout_seconds=API_REDIS_TIMEOUT_SECONDS,
            backoff_cap_seconds=API_REDIS_BACKOFF_CAP_SECONDS,
        )
    return None


def _not_configured() -> ApiError:
    return ApiError(
        503,
        "not_configured",
        "No Redis is configured for the API; set ASSAY_REDIS_URL and restart it.",
    )


class Services:
    """The fleet and scheduler modules, opened lazily for one app."""

    def __init__(self, settings: AssaySettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._redis: redis.Redis | None = None
        self._store: VerdictStore | None = None
        self._schedules: ScheduleStore | None = None
        self._spend: SpendStore | None = None
        self._dispatcher: Dispatcher | None = None

    # --- connections ----------------------------------------------------------------------------
    @property
    def redis(self) -> redis.Redis:
        if self.settings.redis_url is None:
            raise _not_configured()
        with self._lock:
            if self._redis is None:
                self._redis = api_redis(self.settings.redis_url, fail_fast=True)
            return self._redis

    @property
    def store(self) -> VerdictStore:
        client = self.redis
        with self._lock:
            if self._store is None:
                self._store = VerdictStore.from_settings(self.settings, client)
            return self._store

    @property
    def spend(self) -> SpendStore:
        client = self.redis
        with self._lock:
            if self._spend is None:
                self._spend = SpendStore.from_settings(self.settings, client)
            return self._spend

    # --- snapshot roots -------------------------------------------------------------------
    def confined_target(self, target: Target) -> Target:
        """A snapshot target resolved inside the API's snapshot roots (404 otherwise).

        Other targets pass as the contract's models. The resolved path is what is
        queued, so the worker reads the folder that was checked.
        """
        if not isinstance(target, SnapshotTarget):
            return contract_target(target)
        from pydantic import ValidationError

        try:
            folder = SnapshotRoots.for_api(self.settings).confine(target.path)
            return SnapshotTarget(path=str(folder))
        except SnapshotOutsideRoots as exc:
            raise _outside_roots(exc) from None
        except ValidationError as exc:  # the resolved path is longer than a path may be
            raise _validation_error(exc) from None

    def confined_snapshots(self, patterns: list[str]) -> list[str]:
        """Schedule snapshot folders or globs, absolute and inside the roots (404 otherwise)."""

        roots = SnapshotRoots.for_api(self.settings)
        try:
            return [roots.confine_pattern(pattern) for pattern in patterns]
        except SnapshotOutsideRoots as exc:
            raise _outside_roots(exc) from None

    # --- evaluations ---------------------------------------------------------------------
    def build_request(self, body: EvaluationSubmission) -> EvaluationRequest:
        """The contract request for ``body``; its validation errors become a 422."""
        from pydantic import ValidationError

        fields = body.model_dump(exclude_none=True)
        fields["target"] = self.confined_target(body.target)
        try:
            request = EvaluationRequest.model_validate(fields)
        except ValidationError as exc:
            raise _validation_error(exc) from None
        self.refuse_unroutable_model(request.model)
        return request

    def refuse_unroutable_model(self, model: str | None) -> None:
        """404 ``unroutable_model`` for a model no worker could route, 409 ``model_key_missing``
        for one whose provider no live worker has a key for (``assay.model_check``), before
        any write.

        The first unusual name imports litellm in this process (once); the usual ones
        (``openai/...``, ``gpt-4o-mini``) are answered without it.
        """
        from assay.model_check import API_REASON, fleet_model_refusal

        refusal = fleet_model_refusal(model, None, redis=self.redis, settings=self.settings)
        if refusal is None:
            return
        unroutable = refusal.kind == "unroutable"
        reason = API_REASON.format(model=model) if unroutable else refusal.message
        detail = {"loc": ["body", "model"], "msg": reason, "type": refusal.code}
        message = f"model: {reason}; fix the request and send it again."
        # Not a malformed request: whether a name routes (the installed litellm) and whether
        # a live worker holds its key is the server's state, which no schema can state.
        raise ApiError(404 if unroutable else 409, refusal.code, message, details=[detail])

    @property
    def dispatcher(self) -> Dispatcher:
        store = self.store
        with self._lock:
            if self._dispatcher is None:
                self._dispatcher = Dispatcher.from_settings(self.settings, store, fail_fast=True)
            return self._dispatcher

    def submit(self, request: EvaluationRequest) -> SubmitReceipt:
        """Queue ``request`` through the fleet's one submit path (``assay.submission``).

        A run id that is already known queues nothing new: resubmitting after a
        lost response is safe. A predicate opening with a future instant waits for it.
        """
        return submit_request(
            request,
            store=self.store,
            redis=self.redis,
            settings=self.settings,
            dispatcher=lambda: self.dispatcher,
        )

    def run_view(self, run_id: str) -> RunView | None:
        """The run, or None for an unknown id; a 410 ``report_expired`` (one sentence) for a
        run whose report is no longer kept (docs/fleet.md, Retention and sizing)."""
        store = self.store
        state = store.run_state(run_id)
        if state is None:
            return None
        try:
            report, problem = store.run_report(run_id), None
            verdict = store.run_verdict(run_id)
        except ReportExpired as exc:  # not a fault: kept as long as it was meant to be
            raise ApiError(410, "report_expired", str(exc)) from None
        except UnreadableReport as exc:  # the verdict is kept apart from the report: show it
            report, problem = None, str(exc)
            verdict = store.run_verdict(run_id)
        return RunView.of(state, report, verdict, report_error=problem)

    def start_batch(self, body: BatchSubmission) -> BatchStatus:
        """Fan out over the body's targets (or the contexts its glob matches) and seal.

        Each run goes through the one submit path (``assay.submission``), so a
        predicate opening with a future instant waits for it, as one check does.
        """
        from pydantic import ValidationError

        self.refuse_unroutable_model(body.model)
        targets = self._batch_targets(body)
        shared = body.model_dump(
            exclude={"text", "targets", "context_glob", "spend"}, exclude_none=True
        )
        try:
            batch_id, _runs = submit_batch(
                targets,
                text=body.text,
                store=self.store,
                redis=self.redis,
                settings=self.settings,
                dispatcher=lambda: self.dispatcher,
                spend=body.spend,
                **shared,
            )
        except ValidationError as exc:
            raise _validation_error(exc) from None
        except EmptyBatch:
            raise ApiError(
                404,
                "batch_empty",
                "context_glob: the pattern matched no context of the server's kubeconfig; "
                "check the pattern.",
            ) from None
        status = self.batch_status(batch_id)
        if status is None:  # only if Redis lost the record between two calls
            raise ApiError(503, "redis_unavailable", "The batch record vanished; try again.")
        return status

    def batch_status(self, batch_id: str) -> BatchStatus | None:
        """The batch's tally, with what its runs spent and its ceilings."""
        status = self.store.batch(batch_id)
        return None if status is None else batch_with_spend(status, self.spend, self.settings)

    def spend_report(self, days: int, schedule: str | None = None) -> SpendReport:
        return spend_report(
            self.spend, self.settings, self.schedules.all(), days, schedule_ref=schedule
        )

    def _batch_targets(self, body: BatchSubmission) -> list[Target]:
        limit = self.settings.api_max_batch_targets
        if body.context_glob is None:
            targets = [self.confined_target(target) for target in body.targets or []]
        else:
            try:
                targets = list(context_targets(body.context_glob, self.settings.kubeconfig))
            except TargetGlobError as exc:
                raise ApiError(
                    409,
                    "context_glob_failed",
                    f"context_glob: {exc}; the API reads the server's kubeconfig.",
                ) from None
        if len(targets) > limit:
            raise ApiError(
                422,
                "batch_too_large",
                f"A batch may name at most {limit} targets, this one names {len(targets)}; "
                "split it into smaller batches.",
            )
        return targets

    # --- schedules -----------------------------------------------------------------------
    @property
    def schedules(self) -> ScheduleStore:
        client = self.redis
        with self._lock:
            if self._schedules is None:
                self._schedules = ScheduleStore(
                    client, self.settings.key_prefix, self.settings.min_interval_seconds
                )
            return self._schedules

    def _view(self, schedule: Schedule, spend_today: ScopeSpend | None = None) -> ScheduleView:
        stored = schedule.model_dump(exclude={"next_fire_at", "spend_today"})
        return ScheduleView(
            **stored,
            next_fire_at=self.schedules.next_fire_at(schedule),
            spend_today=spend_today or schedule_today(schedule, self.spend, self.settings),
        )

    def _refuse_short_interval(self, schedule: Schedule) -> None:
        try:
            schedule.check_interval_floor(self.settings.min_interval_seconds)
        except ValueError as exc:
            raise ApiError(422, "interval_too_short", f"{exc}.") from None

    def _refuse_taken_name(self, name: str, own_id: str | None = None) -> None:
        try:
            holder = self.schedules.resolve(name)
        except ScheduleNotFound:
            return
        if holder != own_id:
            raise ApiError(
                409,
                "schedule_name_taken",
                f"A schedule named {name!r} already exists; pick another name or change that one.",
            )

    def create_schedule(self, body: ScheduleCreate) -> ScheduleView:
        from pydantic import ValidationError

        fields = body.model_dump(exclude_none=True)
        fields["profile"] = body.profile or self.settings.unattended_profile()
        fields["targets"]["snapshots"] = self.confined_snapshots(body.targets.snapshots)
        try:
            schedule = Schedule.model_validate(fields)
        except ValidationError as exc:
            raise _validation_error(exc) from None
        self._refuse_short_interval(schedule)
        self.refuse_unroutable_model(schedule.model)
        self._refuse_taken_name(schedule.name)
        try:
            created = self.schedules.create(schedule)
        except ScheduleConflict as exc:  # lost a race for the name
            raise ApiError(409, "schedule_name_taken", f"{exc}.") from None
        return self._view(created)

    def list_schedules(self) -> list[ScheduleView]:
        schedules = self.schedules.all()
        days = schedules_today(schedules, self.spend, self.settings)
        return [self._view(s, day) for s, day in zip(schedules, days, strict=True)]

    def get_schedule(self, schedule_id: str) -> ScheduleView | None:
        try:
            return self._view(self.schedules.get(schedule_id))
        except ScheduleNotFound:
            return None

    def update_schedule(self, current: Schedule, body: ScheduleUpdate) -> ScheduleView:
        """Apply the fields the caller sent; the merged schedule must pass the contract."""
        from pydantic import ValidationError

        changes = body.model_dump(exclude_unset=True)
        if body.targets is not None:  # a null is refused: sent means not None
            changes["targets"]["snapshots"] = self.confined_snapshots(body.targets.snapshots)
        if changes.get("cron") is not None and "interval_seconds" not in changes:
            changes["interval_seconds"] = None
        if changes.get("interval_seconds") is not None and "cron" not in changes:
            changes["cron"] = None
        if not changes:
            return self._view(current)
        merged = {
            **current.model_dump(exclude={"last_fire", "next_fire_at", "spend_today"}),
            **changes,
        }
        try:
            candidate = Schedule.with_changes(merged, changes)
        except ValidationError as exc:
            raise _validation_error(exc) from None
        self._refuse_short_interval(candidate)
        if "model" in changes:
            self.refuse_unroutable_model(candidate.model)
        if candidate.name != current.name:
            self._refuse_taken_name(candidate.name, own_id=current.id)
        try:
            updated = self.schedules.update(current.id, **changes)
        except ScheduleNotFound:
            raise _schedule_not_found(current.id) from None
        except ScheduleConflict as exc:
            raise ApiError(409, "schedule_conflict", f"{exc}.") from None
        return self._view(updated)

    def set_schedule_enabled(self, schedule_id: str, *, enabled: bool) -> ScheduleView:
        try:
            if enabled:
                schedule = self.schedules.resume(schedule_id)
            else:
                schedule = self.schedules.pause(schedule_id)
        except ScheduleNotFound:
            raise _schedule_not_found(schedule_id) from None
        return self._view(schedule)

    def delete_schedule(self, schedule_id: str) -> bool:
        try:
            self.schedules.remove(schedule_id)
        except ScheduleNotFound:
            return False
        return True

    # --- declarative checks and schedules (assay apply) --------------------------------
    def apply_context(self) -> ApplyContext:
        """What applying needs, from the API's side: its snapshot roots, its Redis."""
        from assay.apply import ApplyContext, fleet_model_refusal
        from assay.submission import submit_requests
        from workers.fleet.check_definitions import CheckDefinitionStore
        from workers.fleet.policy_store import PolicyStore
        from workers.fleet.targets import snapshot_targets

        roots = SnapshotRoots.for_api(self.settings)

        def confine(pattern: str) -> str:
            confined = roots.confine_pattern(pattern)
            if next(iter(snapshot_targets(confined, roots)), None) is None:
                raise ValueError(f"{pattern!r} matches no snapshot folder under the API's roots")
            return confined

        return ApplyContext(
            settings=self.settings,
            schedules=self.schedules,
            checks=CheckDefinitionStore(self.redis, self.settings.key_prefix),
            confine_snapshot=confine,
            model_problem=lambda model: fleet_model_refusal(
                model, redis=self.redis, settings=self.settings
            ),
            submit=lambda requests: submit_requests(
                requests,
                store=self.store,
                redis=self.redis,
                settings=self.settings,
                dispatcher=lambda: self.dispatcher,
            ),
            policies=PolicyStore.from_settings(self.settings, self.redis),
            read_policy_files=False,
        )

    def apply(self, body: ApplyBody) -> ApplyOutcome:
        """``assay apply`` over HTTP, nothing applied when any document cannot be: 422
        ``invalid_documents`` when one breaks the documents' own rules, else 409
        ``documents_conflict`` when any problem is a conflict, else 404 ``named_not_found``
        (``apply_problems_error``)."""
        from assay.apply import ApplyFailed, apply
        from assay.manifests import ManifestErrors, load_objects

        found: list[ManifestProblem] = []  # a name given twice: planned still, to say all
        try:
            loaded = load_objects(list(body.documents))
        except ManifestErrors as exc:
            if exc.loaded is None:
                raise apply_problems_error(exc.problems) from None
            found, loaded = exc.problems, exc.loaded
        try:
            result = apply(
                loaded,
                self.apply_context(),
                source=body.source,
                prune=body.prune,
                dry_run=body.dry_run or bool(found),
            )
        except ManifestErrors as exc:
            raise apply_problems_error(found + exc.problems) from None
        except ApplyFailed as exc:
            raise ApiError(409, "apply_conflict", f"{exc}.") from None
        if found:
            raise apply_problems_error(found)
        return ApplyOutcome.model_validate(result.as_json())

    def documents(self, kind: str, source: str | None) -> list[dict[str, Any]]:
        from assay.apply import stored_documents
        from workers.fleet.check_definitions import CheckDefinitionStore

        if kind == "schedules":
            return stored_documents(self.schedules, None, source=source)
        checks = CheckDefinitionStore(self.redis, self.settings.key_prefix)
        return stored_documents(None, checks, source=source)

    def close(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.close()
        if self._redis is not None:
            self._redis.close()


def _schedule_not_found(schedule_id: str) -> ApiError:
    return ApiError(
        404, "schedule_not_found", f"No schedule {schedule_id!r}; list them at /v1/schedules."
    )


def _outside_roots(exc: Exception) -> ApiError:
    """404: which folders a server serves is its setting, not a rule a schema can state."""
    return ApiError(404, "snapshot_outside_roots", f"{str(exc)[:1].upper()}{str(exc)[1:]}.")


def _validation_error(exc: Any) -> ApiError:
    details = [
        {
            "loc": [str(p) for p in e.get("loc", ())],
            "msg": str(e.get("msg", "")).removeprefix("Value error, "),
            "type": str(e.get("type", "")),
        }
        for e in exc.errors()
    ]
    first = details[0]["msg"] if details else "invalid input"
    return ApiError(
        422, "validation_error", f"{first}; fix the request and send it again.", details=details
    )


def register_scrape_collectors(settings: AssaySettings) -> None:
    """Queue depth (broker lists), scheduler timers and per-check verdicts, read per scrape."""
    if settings.redis_url is None:
        return
    broker = api_broker_redis(settings)
    if broker is not None:
        metrics.register_collector(
            "queue_depth",
            QueueDepthCollector(lambda: broker, queues=[queue_name(settings)]),
        )
    timers_client = api_redis(settings.redis_url)

    def read_timer_counts() -> tuple[int, int]:
        return TimerStore(timers_client, settings.key_prefix).counts()

    metrics.register_collector("timers", metrics.TimerCollector(read_timer_counts))

    checks_store = VerdictStore.from_settings(settings, timers_client)
    metrics.register_collector(
        "check_verdicts",
        metrics.CheckVerdictCollector(
            lambda: checks_store.check_gauges(settings.metrics_max_checks)
        ),
    )
    spend_store = SpendStore.from_settings(settings, timers_client)
    schedule_store = ScheduleStore(
        timers_client, settings.key_prefix, settings.min_interval_seconds
    )

    def read_spend_rows() -> list[Any]:
        batch_ids = latest_batch_ids(timers_client, settings.key_prefix)
        return current_rows(spend_store, settings, schedule_store.all(), batch_ids)

    metrics.register_collector("spend", metrics.SpendCollector(read_spend_rows))
