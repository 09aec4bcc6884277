"""Parking a run whose WAIT is too long to sleep through, and picking it up again.

A planner may WAIT for minutes or days ("within 10 minutes the rollout is
complete"). Holding a worker thread that long would starve the fleet, and a
Celery ETA would sit in worker memory (see ``workers/fleet/timers.py``), so the
worker instead:

1. :func:`park` stores the engine's serialized run state (conversation so far,
   budget spent, iterations) and the request under the run id, marks the run
   ``waiting`` in the verdict store, and adds a continuation timer at
   ``wake_at``; then the task finishes and the worker is free.
2. When the timer is due a scheduler replica enqueues ``assay.evaluate`` again
   with ``resume_sequence`` set (``Dispatcher.send(request, resume_sequence)``).
3. The task calls :func:`load`, checks the sequence still matches (a stale or
   duplicated continuation is ignored), and passes the state back into the
   engine, which resumes the same run id with the remaining budget.

Key (``P`` = settings.key_prefix)::

    P:checkpoint:{run_id}   hash  request (JSON), state (JSON), sequence, wake_at   TTL

``sequence`` counts the parks of a run, so the second WAIT of a run gets a
fresh continuation and the first one's late duplicate cannot resume it twice.

This module adds the continuation timer through ``workers.fleet.timers`` (the one
owner of the timer keys; it imports nothing else of ours), which is the only
place the workers package reaches into the scheduler package.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from schemas.report import RunReport
from schemas.request import EvaluationRequest
from workers.engine.toolsets.redaction import PATTERNS, scrubbed
from workers.fleet.lua_scripts import lua_source
from workers.fleet.timers import TimerEntry, TimerStore, continuation_timer_id, epoch

if TYPE_CHECKING:
    from schemas.settings import AssaySettings
    from workers.fleet.store import VerdictStore


@dataclass(frozen=True)
class Checkpoint:
    """A parked run: what to resume, from which state, and which park this is."""

    run_id: str
    sequence: int
    request: EvaluationRequest
    state: dict[str, Any]
    wake_at: datetime


def checkpoint_key(key_prefix: str, run_id: str) -> str:
    return f"{key_prefix}:checkpoint:{run_id}"


def park(
    redis: Any,
    settings: AssaySettings,
    store: VerdictStore,
    report: RunReport,
    state: BaseModel | dict[str, Any],
    now: datetime | None = None,
) -> Checkpoint | None:
    """Park a run the engine returned as ``waiting``; None if it already has a verdict.

    The checkpoint is written before the run is marked waiting and before the
    timer exists, so whichever step a crash interrupts, the task is redelivered
    (acks_late) and parks again; the run never points at a missing state.
    """
    if report.status != "waiting" or report.wake_at is None:
        raise ValueError(f"run {report.run_id} is not waiting; only a waiting run is parked")
    now = now or datetime.now(UTC)
    wake_at = report.wake_at.astimezone(UTC)
    # the conversation so far: tool output is already scrubbed; this catches the model's echoes
    state_json = (
        scrubbed(state).model.model_dump_json()
        if isinstance(state, BaseModel)
        else _json(PATTERNS.scrubbed_copy(state))
    )
    ttl = int(max(0.0, (wake_at - now).total_seconds())) + settings.run_ttl_seconds
    sequence = int(
        redis.register_script(lua_source("checkpoint_park"))(
            keys=[checkpoint_key(settings.key_prefix, report.run_id)],
            args=[report.request.model_dump_json(), state_json, wake_at.isoformat(), ttl],
        )
    )
    if not store.mark_waiting(report):
        discard(redis, settings, report.run_id)
        return None
    TimerStore(redis, settings.key_prefix).put(
        TimerEntry(
            id=continuation_timer_id(report.run_id),
            kind="continuation",
            due=epoch(wake_at),
            run_id=report.run_id,
            sequence=sequence,
        )
    )
    return Checkpoint(report.run_id, sequence, report.request, _parse(state_json), wake_at)


def load(redis: Any, settings: AssaySettings, run_id: str) -> Checkpoint | None:
    """The parked state of ``run_id``, or None when there is none (finished or expired)."""
    row = redis.hgetall(checkpoint_key(settings.key_prefix, run_id))
    if not row:
        return None
    row = {_text(k): _text(v) for k, v in row.items()}
    if "state" not in row or "request" not in row:
        return None
    return Checkpoint(
        run_id=run_id,
        sequence=int(row.get("sequence", 0)),
        request=EvaluationRequest.model_validate_json(row["request"]),
        state=_parse(row["state"]),
        wake_at=datetime.fromisoformat(row["wake_at"]),
    )


def load_for_resume(
    redis: Any, settings: AssaySettings, run_id: str, sequence: int
) -> Checkpoint | None:
    """The checkpoint a continuation message names, or None when that message is stale."""
    checkpoint = load(redis, settings, run_id)
    if checkpoint is None or checkpoint.sequence != sequence:
        return None
    return checkpoint


def discard(redis: Any, settings: AssaySettings, run_id: str) -> None:
    """Forget a run's checkpoint once its verdict is recorded."""
    redis.delete(checkpoint_key(settings.key_prefix, run_id))


def _json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value, default=str)


def _parse(text: str) -> dict[str, Any]:
    import json

    parsed = json.loads(text)
    if not isinstance(parsed, dict):
        raise ValueError("a checkpoint state must be a JSON object")
    return parsed


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
