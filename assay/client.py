"""``assay.Client``: the fleet from Python — submit, wait, read verdicts, run batches.

    from assay import Client

    with Client() as fleet:                      # ASSAY_REDIS_URL, or a running `assay up`
        receipt = fleet.submit("every Deployment in prod has 2 ready replicas",
                               snapshot="examples/snapshots/prod-eu")
        verdict = fleet.wait(receipt.run_id, timeout=300)
        print(verdict.verdict, verdict.explanation)

        batch_id = fleet.start_batch("no pod runs as root", snapshots="examples/snapshots/*")
        fleet.wait_batch(batch_id)
        for row in fleet.batch_results(batch_id):  # read page by page
            print(row.target, row.verdict)

The client talks to the verdict store and the broker directly (no HTTP), so
it needs the same Redis the workers use. Everything it returns is a contract
model from ``schemas``.

A person (or a program acting for one) is waiting on it, so the first call that
needs Redis checks that Redis answers at all and raises ``RedisUnreachable``
(a ``ConnectionError``; one sentence naming the URL and what to do) within
seconds when it does not, instead of waiting out the workers' half minute of
retries. Once connected it rides out a blip like the workers do. A broker that
fails while a submit or a batch queues its runs raises ``RunsNotSent`` (a kombu
``OperationalError``): the runs are registered, and its message says when the
fleet sends those the broker did not get.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from assay.local_mode import require_redis_url
from assay.submission import pending_run_for_check, submit_batch, submit_request
from scheduler.deferred import deferred_request
from scheduler.when import parse_duration
from schemas.fleet import (
    BatchResult,
    BatchStatus,
    CheckSummary,
    RunProgress,
    SubmitReceipt,
    VerdictChange,
)
from schemas.ids import check_id as valid_id
from schemas.report import RunReport
from schemas.request import (
    EvaluationRequest,
    SnapshotTarget,
    Target,
    make_target,
    target_names,
)
from schemas.settings import load_settings
from schemas.spend import ScopeSpend, SpendReport
from schemas.verdict import Verdict
from workers.engine.snapshot_roots import SnapshotRoots
from workers.fleet.dispatch import Dispatcher, RunsNotSent
from workers.fleet.redis_client import RedisUnreachable, connect
from workers.fleet.spend import SpendStore
from workers.fleet.store import VerdictStore
from workers.fleet.targets import context_targets, snapshot_targets

if TYPE_CHECKING:
    from schemas.settings import AssaySettings

POLL_SECONDS = 0.2


class WaitTimeout(TimeoutError):
    """The run or batch did not finish within the time the caller allowed."""


class UnroutableModel(ValueError):
    """No worker could send a call to the model named: nothing was queued or stored.

    The same check as the CLI's and the API's (``assay.model_check``): unchecked, a
    typo in ``model=`` queues runs that each end ``cannot_determine``.
    """


def _since(value: datetime | timedelta | str) -> datetime:
    """An instant from an instant, an age (timedelta) or an age text like ``"1h"``."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        value = timedelta(seconds=parse_duration(value))
    return datetime.now(UTC) - value


def checks_on_target(
    store: VerdictStore,
    *,
    verdict: Any = None,
    target: str | None = None,
    changed_since: datetime | None = None,
    limit: int = 1000,
) -> list[CheckSummary]:
    """``store.checks`` with a bare target name resolved by :func:`target_names`."""
    names: list[str | None] = [None] if target is None else list(target_names(target))
    rows: list[CheckSummary] = []
    for name in names:
        rows = store.checks(verdict=verdict, target=name, changed_since=changed_since, limit=limit)
        if rows:
            break
    return rows


class Client:
    """The fleet: a verdict store and a broker, found through the settings."""

    def __init__(
        self, settings: AssaySettings | None = None, *, redis_url: str | None = None
    ) -> None:
        settings = settings or load_settings()
        url = redis_url or require_redis_url(settings)
        self.settings = settings.model_copy(update={"redis_url": url})
        self._store: VerdictStore | None = None
        self._dispatcher: Dispatcher | None = None

    # --- plumbing -----------------------------------------------------------------------------
    @property
    def store(self) -> VerdictStore:
        """The verdict store; ``RedisUnreachable`` within seconds when Redis is not there."""
        if self._store is None:
            url = self.settings.redis_url
            assert url is not None  # set in __init__
            self._store = VerdictStore.from_settings(self.settings, connect(url, fail_fast=True))
        return self._store

    @property
    def spend(self) -> SpendStore:
        """The spend store (workers/fleet/spend.py), on the verdict store's connection."""
        return SpendStore.from_settings(self.settings, self.store.client)

    # --- spend ---------------------------------------------------------------------------------
    def fleet_spend_now(self) -> list[ScopeSpend]:
        """The fleet's current UTC hour and day, with its ceilings (ASSAY_SPEND_FLEET_*)."""
        from assay.spend_view import fleet_now

        return fleet_now(self.spend, self.settings)

    def spend_report(self, days: int = 7, schedule: str | None = None) -> SpendReport:
        """Spend by scope and UTC day, as `assay spend` prints it and `GET /v1/spend` answers."""
        from assay.spend_view import spend_report
        from scheduler.schedules import ScheduleStore

        schedules = ScheduleStore(
            self.store.client, self.settings.key_prefix, self.settings.min_interval_seconds
        ).all()
        return spend_report(self.spend, self.settings, schedules, days, schedule_ref=schedule)

    @property
    def dispatcher(self) -> Dispatcher:
        """The broker; a separate Redis broker that is not there is ``RedisUnreachable`` too."""
        if self._dispatcher is None:
            self._dispatcher = Dispatcher.from_settings(self.settings, self.store, fail_fast=True)
        return self._dispatcher

    def close(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.close()
        if self._store is not None:
            self._store.client.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- evaluations --------------------------------------------------------------------------
    def submit(
        self,
        text: str,
        *,
        snapshot: str | None = None,
        context: str | None = None,
        kubeconfig: str | None = None,
        target: Target | None = None,
        **fields: Any,
    ) -> SubmitReceipt:
        """Queue one evaluation; ``fields`` are other ``EvaluationRequest`` fields
        (kind, check_id, profile, budget, model, api_base, toolsets, run_id, not_before).

        A ``model`` no worker could route raises :class:`UnroutableModel` before anything
        is queued."""
        if target is None:
            target = make_target(snapshot=snapshot, context=context, kubeconfig=kubeconfig)
        clean = {k: v for k, v in fields.items() if v is not None}
        request = EvaluationRequest.model_validate({**clean, "text": text, "target": target})
        return self.submit_request(request)

    def submit_request(self, request: EvaluationRequest) -> SubmitReceipt:
        """Queue ``request`` through the fleet's one submit path (``assay.submission``).

        A run id the store knows queues nothing new; a predicate opening with a
        future instant, or a future ``not_before``, is held by the scheduler.
        A snapshot target must lie inside this client's snapshot roots
        (``SnapshotOutsideRoots`` otherwise) and is sent as its resolved path.
        """
        self._require_routable(request.model, request.api_base)
        return submit_request(
            self._confined(request),
            store=self.store,
            redis=self.store.client,
            settings=self.settings,
            dispatcher=lambda: self.dispatcher,
        )

    def _require_routable(self, model: str | None, api_base: str | None) -> None:
        from assay.model_check import fleet_model_problem

        problem = fleet_model_problem(
            model, api_base, redis=self.store.client, settings=self.settings
        )
        if problem is not None:
            raise UnroutableModel(problem)

    def _confined(self, request: EvaluationRequest) -> EvaluationRequest:
        if not isinstance(request.target, SnapshotTarget):
            return request

        resolved = SnapshotRoots.for_local(self.settings).confine(request.target.path)
        return request.model_copy(update={"target": SnapshotTarget(path=str(resolved))})

    def run_state(self, run_id: str) -> RunProgress | None:
        return self.store.run_state(valid_id(run_id, "run_id"))

    def due_at(self, run_id: str) -> datetime | None:
        """When a run that has not started is due: its deferral instant, or its WAIT's wake."""
        state = self.run_state(run_id)
        if state is not None and state.wake_at is not None:
            return state.wake_at
        request = deferred_request(self.store.client, self.settings, run_id)
        return request.not_before if request is not None else None

    def pending_run_of_check(self, check_id: str) -> RunProgress | None:
        """The deferred run a check without any verdict yet is waiting for, if any."""
        run_id = pending_run_for_check(
            self.store.client, self.settings.key_prefix, valid_id(check_id, "check_id")
        )
        return self.store.run_state(run_id) if run_id else None

    def wait(
        self, run_id: str, timeout: float | None = None, poll: float = POLL_SECONDS
    ) -> Verdict:
        """Block until the run has a verdict; WaitTimeout after ``timeout`` seconds."""
        valid_id(run_id, "run_id")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            verdict = self.store.run_verdict(run_id)
            if verdict is not None:
                return verdict
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"run {run_id} has no verdict after {timeout:g}s")
            time.sleep(poll)

    def verdict(self, run_or_check_id: str) -> Verdict | None:
        """The run's verdict (run id) or the check's latest verdict (check id); None if none."""
        valid_id(run_or_check_id, "run or check id")
        return self.store.run_verdict(run_or_check_id) or self.store.latest_verdict(run_or_check_id)

    def history(self, check_id: str, limit: int = 20) -> list[Verdict]:
        return self.store.history(valid_id(check_id, "check_id"), limit)

    def run_report(self, run_id: str) -> RunReport | None:
        """The run's report (None while it has none); a re-run that found what an earlier run
        found gives that one's report as its own (``repeat_of``). Raises
        ``workers.fleet.store.ReportExpired`` (one sentence) once it is no longer kept."""
        return self.store.run_report(valid_id(run_id, "run_id"))

    def checks(
        self,
        *,
        verdict: str | None = None,
        target: str | None = None,
        changed_since: datetime | timedelta | str | None = None,
        limit: int = 1000,
    ) -> list[CheckSummary]:
        since = _since(changed_since) if changed_since is not None else None
        return checks_on_target(
            self.store, verdict=verdict, target=target, changed_since=since, limit=limit
        )

    def changes(
        self, since: datetime | timedelta | str, limit: int = 10_000
    ) -> list[VerdictChange]:
        return self.store.changes(_since(since), limit)

    # --- batches ------------------------------------------------------------------------------
    def start_batch(
        self,
        text: str,
        *,
        snapshots: str | None = None,
        contexts: str | None = None,
        kubeconfig: str | None = None,
        batch_id: str | None = None,
        **fields: Any,
    ) -> str:
        """Fan ``text`` out over a snapshot glob or a context glob; returns the batch id.

        A snapshot glob must stay inside this client's snapshot roots
        (``SnapshotOutsideRoots`` otherwise); matches leading out of them are skipped.
        Every run goes through the one submit path, so a predicate opening with a
        future instant waits for it (``batch_status(...).not_before`` says when).
        A ``model`` no worker could route raises :class:`UnroutableModel` before the
        batch exists.
        """
        if (snapshots is None) == (contexts is None):
            raise ValueError("name exactly one of: a snapshots glob or a contexts glob")
        if batch_id is not None:
            valid_id(batch_id, "batch_id")
        self._require_routable(fields.get("model"), fields.get("api_base"))
        targets: Iterator[Target]
        if snapshots is not None:
            roots = SnapshotRoots.for_local(self.settings)
            roots.confine_pattern(snapshots)  # refuse before the batch exists
            targets = iter(snapshot_targets(snapshots, roots))
        else:
            assert contexts is not None
            targets = iter(context_targets(contexts, kubeconfig or self.settings.kubeconfig))
        clean = {k: v for k, v in fields.items() if v is not None}
        batch, _runs = submit_batch(
            targets,
            text=text,
            store=self.store,
            redis=self.store.client,
            settings=self.settings,
            dispatcher=lambda: self.dispatcher,
            batch_id=batch_id,
            **clean,
        )
        return batch

    def latest_batch_id(self) -> str | None:
        """The newest batch started on this fleet (through the CLI, a client or the API)."""
        from assay.submission import latest_batch_id

        return latest_batch_id(self.store.client, self.settings.key_prefix)

    def batch_status(self, batch_id: str) -> BatchStatus | None:
        """The batch's tally, with what its runs spent and its spend ceilings."""
        from assay.spend_view import batch_with_spend

        status = self.store.batch(valid_id(batch_id, "batch_id"))
        return None if status is None else batch_with_spend(status, self.spend, self.settings)

    def batch_results(self, batch_id: str, page_size: int = 200) -> Iterator[BatchResult]:
        return self.store.iter_batch_results(valid_id(batch_id, "batch_id"), page_size)

    def wait_batch(
        self,
        batch_id: str,
        timeout: float | None = None,
        on_progress: Callable[[BatchStatus], None] | None = None,
        poll: float = POLL_SECONDS,
    ) -> BatchStatus:
        """Block until every run of the batch has a verdict, calling ``on_progress`` each poll."""
        valid_id(batch_id, "batch_id")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.store.batch(batch_id)
            if status is None:
                raise KeyError(f"no batch {batch_id}")
            if on_progress is not None:
                on_progress(status)
            if status.done:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(
                    f"batch {batch_id} still has {status.pending} pending after {timeout:g}s"
                )
            time.sleep(poll)


__all__ = [
    "Client",
    "RedisUnreachable",
    "RunsNotSent",
    "UnroutableModel",
    "WaitTimeout",
    "make_target",
]
