"""The one way an evaluation request enters the fleet, for the CLI, the client and the API.

Before this module each front door queued requests its own way, so a
predicate that opens with a date was deferred from the CLI and the API but not
from ``Client.submit``, and only the API noticed a resubmitted run id. Every
path now calls :func:`submit_request`, in this order:

1. **Duplicate run**: a run id the store already knows queues nothing new; the
   receipt describes the known run (resubmitting after a lost answer is safe).
2. **Date in the text**: with no ``not_before`` of its own, a predicate that
   opens with a future instant ("on 2027-01-01, ...") waits for that instant.
3. **Deferral**: a future ``not_before`` goes to the scheduler's timers;
   anything else is dispatched now.

The receipt always carries the batch id and, for a deferred run, when it is due.

A batch (:func:`submit_batch`) is one :func:`submit_request` per target, so a
dated predicate fanned out over many targets waits for its instant exactly as
one check does; the batch record says when its runs are due.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from scheduler.deferred import defer_evaluation
from scheduler.when import deferral_for
from schemas.fleet import SubmitReceipt
from schemas.request import EvaluationRequest, Target

if TYPE_CHECKING:
    from schemas.settings import AssaySettings
    from workers.fleet.dispatch import Dispatcher
    from workers.fleet.store import VerdictStore


def pending_check_key(key_prefix: str, check_id: str) -> str:
    """The deferred run a check is waiting for, so `assay verdict CHECK_ID` can say when."""
    return f"{key_prefix}:check:{check_id}:deferred"


def pending_run_for_check(redis: Any, key_prefix: str, check_id: str) -> str | None:
    value = redis.get(pending_check_key(key_prefix, check_id))
    return str(value) if value else None


def with_text_deferral(request: EvaluationRequest) -> EvaluationRequest:
    """``request`` held until the instant its text opens with, when it names a future one."""
    if request.not_before is not None:
        return request
    instant = deferral_for(request.text)
    if instant is None:
        return request
    return request.model_copy(update={"not_before": instant})


def submit_request(
    request: EvaluationRequest,
    *,
    store: VerdictStore,
    redis: Any,
    settings: AssaySettings,
    dispatcher: Callable[[], Dispatcher],
    now: datetime | None = None,
) -> SubmitReceipt:
    """Queue ``request`` now, hold it until ``not_before``, or return the known run's receipt.

    ``dispatcher`` is called only when a task is sent, so a deferred or
    duplicate submit never opens a broker connection.
    """
    known = store.run_state(request.run_id)
    if known is not None:
        return SubmitReceipt(
            run_id=known.run_id,
            check_id=known.check_id,
            target=known.target,
            batch_id=known.batch_id,
            not_before=known.wake_at,
        )
    request = with_text_deferral(request)
    if request.not_before is not None and request.not_before > (now or datetime.now(UTC)):
        defer_evaluation(redis, settings, request)
        due_in = (request.not_before - (now or datetime.now(UTC))).total_seconds()
        redis.set(
            pending_check_key(settings.key_prefix, request.check_id),
            request.run_id,
            ex=int(due_in) + settings.run_ttl_seconds,
        )
        return SubmitReceipt(
            run_id=request.run_id,
            check_id=request.check_id,
            target=request.target.name,
            batch_id=request.batch_id,
            not_before=request.not_before,
        )
    return dispatcher().submit(request)


class EmptyBatch(ValueError):
    """The target glob matched nothing."""


def new_batch_id() -> str:
    return f"batch-{uuid.uuid4().hex[:16]}"


def submit_batch(
    targets: Iterable[Target],
    *,
    text: str,
    store: VerdictStore,
    redis: Any,
    settings: AssaySettings,
    dispatcher: Callable[[], Dispatcher],
    batch_id: str | None = None,
    now: datetime | None = None,
    **request_fields: Any,
) -> tuple[str, int]:
    """Fan ``text`` out: one run per target through :func:`submit_request`; (batch id, runs).

    A batch is a record in the store (its live tally) plus one ordinary run per
    target, tagged with the batch id. Targets are submitted as the iterator
    yields them (a big glob is never listed whole), then the batch is sealed so
    the tally knows its total, and noted as the newest batch. ``request_fields``
    are the other ``EvaluationRequest`` fields every run shares (kind, profile,
    budget, model, api_base, toolsets, probe). The request is validated on the
    first target, before the batch record exists, so a bad field creates nothing.
    """
    batch_id = batch_id or new_batch_id()
    runs = 0
    due_noted = False
    for target in targets:
        request = EvaluationRequest.model_validate(
            {**request_fields, "text": text, "target": target, "batch_id": batch_id}
        )
        if runs == 0:
            store.create_batch(batch_id, kind=request.kind, text=text)
        receipt = submit_request(
            request, store=store, redis=redis, settings=settings, dispatcher=dispatcher, now=now
        )
        if receipt.not_before is not None and not due_noted:
            store.note_batch_due(batch_id, receipt.not_before)
            due_noted = True
        runs += 1
    if runs == 0:
        raise EmptyBatch("the target pattern matched nothing: check the glob and try again")
    store.seal_batch(batch_id)
    note_batch(redis, settings.key_prefix, batch_id, now)
    return batch_id, runs


RECENT_BATCHES = 100


def batches_key(key_prefix: str) -> str:
    return f"{key_prefix}:batches:recent"


def note_batch(redis: Any, key_prefix: str, batch_id: str, now: datetime | None = None) -> None:
    """Remember ``batch_id`` as started now (the newest 100 are kept) for `batch status`."""
    key = batches_key(key_prefix)
    redis.zadd(key, {batch_id: (now or datetime.now(UTC)).timestamp()})
    redis.zremrangebyrank(key, 0, -RECENT_BATCHES - 1)


def latest_batch_id(redis: Any, key_prefix: str) -> str | None:
    newest = redis.zrevrange(batches_key(key_prefix), 0, 0)
    return str(newest[0]) if newest else None
