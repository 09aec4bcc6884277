"""The one way an evaluation request enters the fleet, for the CLI, the client and the API.

Before this module each front door queued requests its own way, so a
predicate that opens with a date was deferred from the CLI and the API but not
from ``Client.submit``, and only the API noticed a resubmitted run id. Every
path now calls :func:`submit_request` (or, for a batch's chunk,
:func:`submit_requests`), whose one decision (:func:`decide`) goes in this order:

1. **Duplicate run**: a run id the store already knows queues nothing new; the
   receipt describes the known run (resubmitting after a lost answer is safe).
2. **Date in the text**: with no ``not_before`` of its own, a predicate that
   opens with a future instant ("on 2027-01-01, ...") waits for that instant.
3. **Deferral**: a future ``not_before`` goes to the scheduler's timers;
   anything else is dispatched now.

The receipt always carries the batch id and, for a deferred run, when it is due.

A batch (:func:`submit_batch`) makes the same decision (:func:`decide`) for
every target, so a dated predicate fanned out over many targets waits for its
instant exactly as one check does; the batch record says when its runs are
due. Only the round trips are shared: a batch submits its targets in chunks
(:func:`submit_requests`), each chunk with one run-id lookup, one
registration of its queued runs and one broker producer for their tasks,
registering every run before any of its tasks is sent.
"""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING, Any

import structlog

from scheduler.deferred import defer_evaluations
from scheduler.when import deferral_for
from schemas.fleet import RunProgress, SubmitReceipt
from schemas.request import EvaluationRequest, Target
from schemas.spend import SpendCeiling
from workers.fleet.dispatch import NOT_RESENT, RunsNotSent, resend_clause
from workers.fleet.redis_client import probe
from workers.fleet.spend import SpendStore
from workers.fleet.store import BatchClosed, StoreConflict

if TYPE_CHECKING:
    from schemas.settings import AssaySettings
    from workers.fleet.dispatch import Dispatcher
    from workers.fleet.store import VerdictStore

_log = structlog.get_logger(__name__)


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
    (receipt,) = submit_requests(
        [request], store=store, redis=redis, settings=settings, dispatcher=dispatcher, now=now
    )
    return receipt


def submit_requests(
    requests: Sequence[EvaluationRequest],
    *,
    store: VerdictStore,
    redis: Any,
    settings: AssaySettings,
    dispatcher: Callable[[], Dispatcher],
    now: datetime | None = None,
) -> list[SubmitReceipt]:
    """:func:`submit_request` for each of ``requests`` (one receipt each, in order).

    The decision is made per request, in :func:`decide`; what costs round
    trips is shared: one lookup of all the run ids; for the runs queued now,
    one registration and one broker publish batch (``Dispatcher.submit_many``);
    for the runs held, one pipelined step per key family
    (``scheduler.deferred.defer_evaluations``). A run id repeated within
    ``requests`` is decided once; the repeats answer its receipt, as a
    resubmission would.
    """
    instant = now or datetime.now(UTC)
    receipts: dict[str, SubmitReceipt] = {}
    decided: set[str] = set()
    queue_now: list[EvaluationRequest] = []
    hold: list[EvaluationRequest] = []
    for request, known in zip(
        requests, store.run_states([r.run_id for r in requests]), strict=True
    ):
        if request.run_id in decided:
            continue
        decided.add(request.run_id)
        decision = decide(request, known, instant)
        if decision.receipt is not None:
            receipts[request.run_id] = decision.receipt
        elif decision.hold:
            hold.append(decision.request)
        else:
            queue_now.append(decision.request)
    for receipt in _hold(hold, redis, settings, instant):
        receipts[receipt.run_id] = receipt
    if queue_now:
        for receipt in dispatcher().submit_many(queue_now):
            receipts[receipt.run_id] = receipt
    return [receipts[request.run_id] for request in requests]


@dataclass(frozen=True)
class Decision:
    """What becomes of one request: answer ``receipt`` (a known run), else hold or queue it."""

    request: EvaluationRequest
    receipt: SubmitReceipt | None = None
    hold: bool = False


def decide(request: EvaluationRequest, known: RunProgress | None, now: datetime) -> Decision:
    """The one decision, for a single submit and for every target of a batch.

    ``known`` is the store's state of the request's run id (None: a new run).
    """
    if known is not None:
        receipt = SubmitReceipt(
            run_id=known.run_id,
            check_id=known.check_id,
            target=known.target,
            batch_id=known.batch_id,
            not_before=known.wake_at,
        )
        return Decision(request, receipt=receipt)
    request = with_text_deferral(request)
    return Decision(request, hold=request.not_before is not None and request.not_before > now)


def _hold(
    requests: Sequence[EvaluationRequest], redis: Any, settings: AssaySettings, now: datetime
) -> list[SubmitReceipt]:
    """Hand ``requests`` to the scheduler's timers until their ``not_before``."""
    if not requests:
        return []
    defer_evaluations(redis, settings, requests)
    pipe = redis.pipeline(transaction=False)
    receipts = []
    for request in requests:
        assert request.not_before is not None
        due_in = (request.not_before - now).total_seconds()
        pipe.set(
            pending_check_key(settings.key_prefix, request.check_id),
            request.run_id,
            ex=int(due_in) + settings.run_ttl_seconds,
        )
        receipts.append(SubmitReceipt.of(request, not_before=request.not_before))
    pipe.execute()
    return receipts


class EmptyBatch(ValueError):
    """The target glob matched nothing."""


def new_batch_id() -> str:
    return f"batch-{uuid.uuid4().hex[:16]}"


FANOUT_CHUNK = 200  # targets per round trip: enough to amortise it, small enough to stream


def _chunks(items: Iterable[Target], size: int) -> Iterator[list[Target]]:
    """``items`` in lists of at most ``size``, read lazily (a huge glob is never listed whole)."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


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
    chunk_size: int = FANOUT_CHUNK,
    spend: SpendCeiling | None = None,
    **request_fields: Any,
) -> tuple[str, int]:
    """Fan ``text`` out: one run per target through :func:`submit_requests`; (batch id, runs).

    A batch is a record in the store (its live tally) plus one ordinary run per
    target, tagged with the batch id. Targets are read from the iterator
    ``chunk_size`` at a time (a big glob is never listed whole), and each chunk
    is submitted in a few round trips rather than a few per target; then the
    batch is sealed so the tally knows its total. ``request_fields`` are the other
    ``EvaluationRequest`` fields every run shares (kind, profile, budget, model,
    api_base, toolsets, probe). The first chunk's requests are validated before
    the batch record exists, so a bad field creates nothing. ``spend`` is the batch's own
    ceiling over all its runs (workers/fleet/spend.py), stored with the batch record, before
    any of its runs is sent; without one the fleet's default (``spend_batch_*``) applies.

    A fan-out that stops part way never leaves its batch open: on any exception
    (the broker, the target listing, Ctrl-C) the batch is sealed as incomplete
    with the runs registered so far, and the exception carries a note saying so.
    A submitter killed outright runs no code: it holds a lease on the batch
    (:class:`FanoutLease`) and a reader that finds the lease lapsed closes the
    batch as incomplete (``VerdictStore.batch``).
    """
    batch_id = batch_id or new_batch_id()
    request_fields.setdefault("profile", settings.unattended_profile())
    fanout = _Fanout(store, redis, settings, batch_id, now, spend)
    chunks = _chunks(targets, chunk_size)
    try:
        for chunk in chunks:
            requests = [
                EvaluationRequest.model_validate(
                    {**request_fields, "text": text, "target": target, "batch_id": batch_id}
                )
                for target in chunk
            ]
            fanout.open(requests[0].kind, text)
            try:
                receipts = submit_requests(
                    requests,
                    store=store,
                    redis=redis,
                    settings=settings,
                    dispatcher=dispatcher,
                    now=now,
                )
            except RunsNotSent as exc:
                registered = fanout.runs + len(requests)
                if next(chunks, None) is None:
                    closed, abandoned = fanout.seal_after_broker_failure(), False
                else:
                    closed, abandoned = False, fanout.stop("the broker failed")
                raise _batch_not_sent(
                    exc, batch_id, registered, settings, closed=closed, abandoned=abandoned
                ) from exc
            fanout.chunk_done(receipts)
    except BaseException as exc:
        fanout.stopped_by(exc)
        raise
    finally:
        fanout.release()
    if fanout.runs == 0:
        raise EmptyBatch("the target pattern matched nothing: check the glob and try again")
    fanout.seal()
    return batch_id, fanout.runs


class FanoutLease:
    """A fan-out's lease on its batch: a daemon thread renews it until :meth:`stop`.

    The thread is the heartbeat of the lease, as :class:`workers.fleet.probe_store.CompileClaim`
    is for a compile claim: the lease outlives ``seconds`` only while the submitting process
    is alive to renew it (every fifth of a lease), so a submitter killed mid fan-out
    (SIGKILL, OOM) leaves a batch whose lease lapses, and the first reader after that closes
    it as incomplete. Renewal stops for good when the lease is no longer this fan-out's
    (the batch was sealed, or closed after the lease lapsed).
    """

    RENEWALS_PER_LEASE = 5

    def __init__(self, store: VerdictStore, batch_id: str, seconds: float) -> None:
        self.store = store
        self.batch_id = batch_id
        self.seconds = seconds
        self.token = secrets.token_hex(8)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="assay-fanout-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _beat(self) -> None:
        while not self._stopped.wait(self.seconds / self.RENEWALS_PER_LEASE):
            try:
                if not self.store.renew_fanout(self.batch_id, self.token, self.seconds):
                    return
            except Exception as exc:  # the next beat tries again; a lease covers a few misses
                _log.warning("batch_lease_renewal_failed", batch_id=self.batch_id, error=repr(exc))


class _Fanout:
    """One batch's fan-out: its record, its lease, its count, and how it ends."""

    def __init__(
        self,
        store: VerdictStore,
        redis: Any,
        settings: AssaySettings,
        batch_id: str,
        now: datetime | None,
        spend: SpendCeiling | None = None,
    ) -> None:
        self.spend = spend
        self.store = store
        self.redis = redis
        self.settings = settings
        self.batch_id = batch_id
        self.now = now
        self.runs = 0  # targets submitted (registered, and sent or held)
        self.lease: FanoutLease | None = None
        self.created = False
        self.ended = False  # sealed, or closed as incomplete (or tried to)
        self.due_noted = False

    def open(self, kind: str, text: str) -> None:
        """Create the batch record on the first chunk, with the fan-out's lease."""
        if self.created:
            return
        lease = FanoutLease(self.store, self.batch_id, self.settings.batch_fanout_lease_seconds)
        made = self.store.create_batch(
            self.batch_id,
            kind=kind,
            text=text,
            lease_token=lease.token,
            lease_seconds=lease.seconds,
        )
        self.created = True
        if made:  # a batch id given again: the batch exists and has no lease of ours
            self.lease = lease
            lease.start()
            if self.spend is not None:
                SpendStore.from_settings(self.settings, self.redis).set_batch_ceiling(
                    self.batch_id, self.spend
                )
        note_batch(self.redis, self.settings.key_prefix, self.batch_id, self.now)

    def chunk_done(self, receipts: Sequence[SubmitReceipt]) -> None:
        due = next((r.not_before for r in receipts if r.not_before is not None), None)
        if due is not None and not self.due_noted:
            self.store.note_batch_due(self.batch_id, due)
            self.due_noted = True
        self.runs += len(receipts)

    def seal(self) -> None:
        self.ended = True
        self.store.seal_batch(self.batch_id)

    def seal_after_broker_failure(self) -> bool:
        """Seal a batch whose every target is registered, though the broker failed: its runs
        are sent late (lost-run sweeper) but counted, so the batch still finishes."""
        self.ended = True
        return _store_write(self.settings, lambda: self.store.seal_batch(self.batch_id))

    def stop(self, reason: str) -> bool:
        """Close the batch as incomplete: the targets after the runs registered so far were
        not submitted. False when the store could not be reached (then its lease lapses)."""
        self.ended = True
        return _store_write(self.settings, lambda: self.store.abandon_batch(self.batch_id, reason))

    def stopped_by(self, exc: BaseException) -> None:
        """The fan-out ends with ``exc``: close the batch as incomplete, and say so on ``exc``."""
        if not self.created or self.ended or isinstance(exc, BatchClosed):
            return
        if isinstance(exc, KeyboardInterrupt):
            reason = "its submitter was interrupted"
        else:
            reason = f"the fan-out failed: {type(exc).__name__}"
        closed = self.stop(reason)
        outcome = (
            "it is closed as incomplete: it finishes once they have run, and never counts as "
            "all true"
            if closed
            else "it shows as incomplete once its fan-out's lease lapses "
            f"({self.settings.batch_fanout_lease_seconds:g} s)"
        )
        exc.add_note(
            f"batch {self.batch_id} stopped mid fan-out: its first {self.runs} runs are "
            f"submitted and the targets after them were not; {outcome}: start a new batch "
            "for the rest"
        )

    def release(self) -> None:
        if self.lease is not None:
            self.lease.stop()


def _store_write(settings: AssaySettings, write: Callable[[], object]) -> bool:
    """``write`` to the store after a failure, False when that cannot be done now.

    When the fleet's Redis is the broker, it is likely away too: one quick PING decides,
    rather than the store's half minute of retries before the same answer.
    """
    import redis as redis_lib

    if settings.redis_url is not None and probe(settings.redis_url) is not None:
        return False
    try:
        write()
    except (redis_lib.exceptions.RedisError, StoreConflict) as exc:
        _log.warning("batch_close_failed", error=repr(exc))
        return False
    return True


def fanout_notes(exc: BaseException) -> str:
    """What :func:`submit_batch` noted on ``exc`` about its batch ('' when nothing)."""
    notes = [note for note in getattr(exc, "__notes__", ()) if "mid fan-out" in note]
    return "; ".join(notes)


def _batch_not_sent(
    error: RunsNotSent,
    batch_id: str,
    registered: int,
    settings: AssaySettings,
    *,
    closed: bool,
    abandoned: bool,
) -> RunsNotSent:
    """What becomes of a batch whose chunk the broker failed, in the words of its caller.

    ``closed``: every target was registered and the batch is sealed; ``abandoned``: the
    later targets were not submitted and the batch is closed as incomplete (neither: the
    store is away too, and the batch shows as incomplete once its fan-out's lease lapses).
    """
    resend = resend_clause(settings)
    again = "start the batch again once the broker is back"
    if closed:
        runs = f"its {registered} runs are registered"
        if resend is None:
            outcome = f"{runs}, but {NOT_RESENT}: {again}"
        else:
            outcome = (
                f"{runs}, so nothing is lost: {resend}, and the batch finishes once they "
                f"have run; not to wait, {again}"
            )
    else:
        runs = f"its first {registered} runs are registered"
        closing = (
            "is closed as incomplete"
            if abandoned
            else "shows as incomplete once its fan-out's lease lapses "
            f"({settings.batch_fanout_lease_seconds:g} s)"
        )
        rest = (
            f"the targets after them were not submitted, so the batch {closing} (it finishes "
            "with those runs, and never counts as all true)"
        )
        if resend is None:
            outcome = f"{runs}, but {NOT_RESENT} and {rest}: {again}"
        else:
            outcome = f"{runs} and will run: {resend}; but {rest}: {again}"
    return RunsNotSent(
        error.run_ids, f"batch {batch_id}", outcome, broker=error.broker, problem=error.problem
    )


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


def latest_batch_ids(redis: Any, key_prefix: str) -> list[str]:
    """The newest batches started (at most 100), newest first."""
    return [str(batch_id) for batch_id in redis.zrevrange(batches_key(key_prefix), 0, -1)]
