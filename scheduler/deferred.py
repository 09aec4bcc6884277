"""Evaluations that must not start yet, and runs waiting to be continued.

Two kinds of timer end here, both turned into one ``assay.evaluate`` message
when due:

* a **deferred evaluation** (``request.not_before`` in the future, from
  ``assay submit --at/--in`` or a predicate that opens with its own instant):
  :func:`defer_evaluation` stores the request and a ``defer:{run_id}`` timer;
* a **WAIT continuation** (a run parked by ``workers.fleet.checkpoints.park``): the
  ``wake:{run_id}`` timer names the checkpoint sequence to resume.

Key (``P`` = settings.key_prefix)::

    P:deferred:{run_id}   string  the EvaluationRequest JSON; TTL = until not_before + run_ttl
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from schemas.request import EvaluationRequest
from workers.fleet import checkpoints
from workers.fleet.store import VerdictStore
from workers.fleet.timers import TimerEntry, TimerStore, deferred_timer_id, epoch

if TYPE_CHECKING:
    from schemas.settings import AssaySettings


@dataclass(frozen=True)
class Enqueue:
    """One ``assay.evaluate`` message to send.

    ``fire_id`` is its dedup key (one "enqueued" marker per fire id);
    ``resume_sequence`` is set for a WAIT continuation (the checkpoint to resume);
    ``new_run`` says the store has not seen this run yet (a schedule fire), so
    it is registered as queued before it is sent; ``fence_token`` is the
    sending replica's fencing token for this fire (set right before the send),
    so a worker runs only one replica's copy.
    """

    fire_id: str
    request: EvaluationRequest
    resume_sequence: int | None = None
    new_run: bool = False
    fence_token: str | None = None


def deferred_key(key_prefix: str, run_id: str) -> str:
    return f"{key_prefix}:deferred:{run_id}"


def defer_evaluation(
    redis: Any, settings: AssaySettings, request: EvaluationRequest, now: datetime | None = None
) -> TimerEntry:
    """Hold ``request`` until its ``not_before`` and register the run as queued.

    The fleet's ``submit`` calls this instead of sending the task when
    ``not_before`` lies in the future. The run is visible (status ``queued``)
    from this moment, so ``assay verdict RUN_ID`` reports it pending.
    """
    return defer_evaluations(redis, settings, [request], now)[0]


def defer_evaluations(
    redis: Any,
    settings: AssaySettings,
    requests: Sequence[EvaluationRequest],
    now: datetime | None = None,
) -> list[TimerEntry]:
    """:func:`defer_evaluation` for many requests in three round trips (a dated batch's chunk).

    In the same order as for one: every held request is stored, then every
    run registered, then every timer set, so a timer never names a run whose
    request or registration is missing.
    """
    if any(request.not_before is None for request in requests):
        raise ValueError("a deferred evaluation needs not_before")
    if not requests:
        return []
    now = now or datetime.now(UTC)
    pipe = redis.pipeline(transaction=False)
    entries = []
    for request in requests:
        assert request.not_before is not None
        not_before = request.not_before.astimezone(UTC)
        ttl = int(max(0.0, (not_before - now).total_seconds())) + settings.run_ttl_seconds
        pipe.set(
            deferred_key(settings.key_prefix, request.run_id), request.model_dump_json(), ex=ttl
        )
        entries.append(
            TimerEntry(
                id=deferred_timer_id(request.run_id),
                kind="deferred",
                due=epoch(not_before),
                run_id=request.run_id,
            )
        )
    pipe.execute()
    _store(redis, settings).register_runs(requests)
    TimerStore(redis, settings.key_prefix).put_many(entries)
    return entries


def deferred_request(redis: Any, settings: AssaySettings, run_id: str) -> EvaluationRequest | None:
    """The request a deferred run is holding, so a reader can say when it is due."""
    body = redis.get(deferred_key(settings.key_prefix, run_id))
    return EvaluationRequest.model_validate_json(body) if body else None


def messages_for(
    redis: Any, settings: AssaySettings, entries: list[TimerEntry]
) -> list[list[Enqueue]]:
    """The message each due deferred or continuation timer sends (empty: nothing left).

    Deferred requests are read with one MGET for the whole claimed batch.
    """

    deferred_ids = [e.run_id for e in entries if e.kind == "deferred" and e.run_id]
    bodies = (
        redis.mget([deferred_key(settings.key_prefix, run_id) for run_id in deferred_ids])
        if deferred_ids
        else []
    )
    requests = dict(zip(deferred_ids, bodies, strict=True))
    out: list[list[Enqueue]] = []
    for entry in entries:
        if entry.run_id is None:
            out.append([])
        elif entry.kind == "deferred":
            body = requests.get(entry.run_id)
            request = EvaluationRequest.model_validate_json(body) if body else None
            out.append([Enqueue(request.run_id, request)] if request is not None else [])
        elif entry.kind == "continuation" and entry.sequence is not None:
            checkpoint = checkpoints.load_for_resume(redis, settings, entry.run_id, entry.sequence)
            if checkpoint is None:  # the run finished, or a later WAIT superseded this one
                out.append([])
            else:
                fire_id = f"{entry.run_id}.wake{entry.sequence}"
                out.append([Enqueue(fire_id, checkpoint.request, checkpoint.sequence)])
        else:
            out.append([])
    return out


def _store(redis: Any, settings: AssaySettings) -> Any:
    return VerdictStore.from_settings(settings, redis)
