"""Durable timers in Redis: one sorted set of due instants, claimed with a lease.

Every kind of "later" in assay is a timer here: a schedule's next fire, a
deferred evaluation (``not_before``), and a WAIT continuation. This module is
the only code that touches the timer keys:

``{prefix}:timers:due``       sorted set, member = timer id, score = due instant (epoch s)
``{prefix}:timers:inflight``  sorted set, member = timer id, score = lease expiry (epoch s)
``{prefix}:timers:entries``   hash, timer id -> :class:`TimerEntry` JSON
``{prefix}:enqueued:{fire}``  marker per enqueued evaluation: "sent", or
                              ``{owner}|{hold until}|{fencing token}`` while a claimer sends it;
                              dropped when its timer is acknowledged

Atomic steps are Lua scripts beside this module (``timer_*.lua``, one per
transition, each after the checks of ``key_checks.lua`` and the entry reader of
``timer_entry.lua``), so a timer is always
in exactly one of ``due`` / ``inflight``, never popped and lost:

* ``claim`` moves due entries to ``inflight`` with a lease instead of popping
  them: a replica that dies between claim and enqueue loses nothing.
* ``ack`` removes a finished timer from ``inflight`` and, for a schedule,
  puts the next fire in its place in the same step. If the entry was replaced
  while in flight (the schedule changed, a run parked again) the replacement
  wins.
* ``requeue`` moves entries whose lease expired back to ``due`` at their
  original instant, where any replica re-claims them.

Sending is fenced: ``begin_enqueue`` gives each fire a fresh fencing token with
the marker, ``confirm_enqueue`` checks right before the send that the marker
still names this claimer and token (a replica paused past its hold has lost it
to another and sends nothing), and the message carries the token so a worker
runs only the first token it sees for a fire (``VerdictStore.claim_fence``).

Every script checks the types of the keys it touches, and decodes what it
reads, before its first write, so it never stops halfway.

Timer ids are deterministic (``sched:{schedule id}``, ``defer:{run id}``,
``wake:{run id}``), so one schedule can never hold two pending fires and
adding a timer twice is harmless.

Waits are deliberately not Celery ETA/countdown tasks: on a Redis broker an ETA
task is delivered at once and held in a worker's memory until due, occupying a
prefetch slot, lost from the queue's point of view, and redelivered to another
worker when the visibility timeout passes, so a long wait would be duplicated
or lost to a restart. A timer here costs one sorted-set entry and nothing else.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from workers.fleet.lua_scripts import checked_script, lua_source

TimerKind = Literal["schedule_fire", "deferred", "continuation"]

SENT = "sent"
SENT_MARKER_TTL_SECONDS = 7 * 24 * 3600


def _timer_script(name: str) -> str:
    """A timer script after the checks it runs before its first write (``key_checks.lua``)
    and the reading of a timer entry (``timer_entry.lua``)."""
    return checked_script("timer_entry") + lua_source(name)


def schedule_timer_id(schedule_id: str) -> str:
    return f"sched:{schedule_id}"


def run_now_timer_id(schedule_id: str, at: datetime) -> str:
    return f"now:{schedule_id}:{int(at.timestamp() * 1000)}"


def deferred_timer_id(run_id: str) -> str:
    return f"defer:{run_id}"


def continuation_timer_id(run_id: str) -> str:
    return f"wake:{run_id}"


def epoch(moment: datetime) -> float:
    if moment.tzinfo is None:
        raise ValueError("instants must carry a time zone")
    return round(moment.timestamp(), 3)


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class TimerEntry(BaseModel):
    """What a timer means. ``token`` changes whenever the timer is (re)written."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: TimerKind
    due: float = Field(description="Due instant, epoch seconds (the sorted-set score).")
    token: str = Field(default_factory=lambda: uuid.uuid4().hex)
    schedule_id: str | None = None
    revision: int | None = Field(default=None, description="Schedule revision it was made for.")
    scheduled_at: datetime | None = Field(default=None, description="The schedule instant.")
    one_off: bool = Field(default=False, description="run-now: fires once, no successor.")
    run_id: str | None = None
    sequence: int | None = Field(default=None, description="Checkpoint number (continuations).")

    @property
    def due_at(self) -> datetime:
        return from_epoch(self.due)


@dataclass(frozen=True)
class ClaimedTimer:
    """A timer this replica holds until its lease expires; ``entry`` None = vanished."""

    id: str
    entry: TimerEntry | None


@dataclass(frozen=True)
class EnqueueClaim:
    """Outcome of asking to enqueue one evaluation of a fire.

    ``token`` (when ``acquired``) is this claimer's fencing token for the fire:
    confirm it right before sending, and send it with the message.
    """

    state: Literal["acquired", "sent", "held"]
    retry_after_seconds: float = 0.0
    token: str = ""


class TimerStore:
    """The timer keys of one Redis and one key prefix.

    Works with clients in bytes or text mode. ``now`` is always passed in, so
    tests and benchmarks drive a controllable clock and Redis' own clock is
    never consulted.
    """

    def __init__(self, redis: Any, key_prefix: str) -> None:
        self.redis = redis
        self.prefix = key_prefix
        self.due_key = f"{key_prefix}:timers:due"
        self.inflight_key = f"{key_prefix}:timers:inflight"
        self.entries_key = f"{key_prefix}:timers:entries"
        self._claim_script = redis.register_script(_timer_script("timer_claim"))
        self._ack_script = redis.register_script(_timer_script("timer_ack"))
        self._requeue_script = redis.register_script(_timer_script("timer_requeue"))
        self._release_script = redis.register_script(_timer_script("timer_release"))
        self._upsert_script = redis.register_script(_timer_script("timer_upsert"))
        self._remove_script = redis.register_script(_timer_script("timer_remove"))
        self._begin_enqueue_script = redis.register_script(lua_source("begin_enqueue"))
        self._confirm_enqueue_script = redis.register_script(lua_source("confirm_enqueue"))
        self._abandon_enqueue_script = redis.register_script(lua_source("abandon_enqueue"))

    # --- writing timers ----------------------------------------------------------------
    def put(self, entry: TimerEntry) -> None:
        """Add or replace a timer (a fresh token makes any in-flight copy yield to it)."""
        self.put_many([entry])

    def put_many(self, entries: Sequence[TimerEntry]) -> None:
        """:meth:`put` for many timers in one round trip (a dated batch's chunk).

        Each is its own atomic upsert; they travel in one pipeline, and the
        first failure raises once the pipeline has run.
        """
        if not entries:
            return
        pipe = self.redis.pipeline(transaction=False)
        for entry in entries:
            entry = entry.model_copy(update={"token": uuid.uuid4().hex})
            self._upsert_script(
                keys=[self.due_key, self.inflight_key, self.entries_key],
                args=[entry.id, entry.model_dump_json(), entry.due],
                client=pipe,
            )
        pipe.execute()

    def remove(self, timer_id: str) -> bool:
        removed = self._remove_script(
            keys=[self.due_key, self.inflight_key, self.entries_key], args=[timer_id]
        )
        return int(removed) > 0

    def get(self, timer_id: str) -> TimerEntry | None:
        body = self.redis.hget(self.entries_key, timer_id)
        return TimerEntry.model_validate_json(body) if body else None

    # --- the claim / ack / requeue cycle ----------------------------------------------
    def claim(self, now: float, lease_seconds: float, limit: int) -> list[ClaimedTimer]:
        """Move up to ``limit`` due timers to in-flight with a lease, and return them."""
        flat = self._claim_script(
            keys=[self.due_key, self.inflight_key, self.entries_key],
            args=[now, now + lease_seconds, limit],
        )
        claimed = []
        for index in range(0, len(flat), 2):
            timer_id = _text(flat[index])
            body = flat[index + 1]
            entry = TimerEntry.model_validate_json(body) if body else None
            claimed.append(ClaimedTimer(timer_id, entry))
        return claimed

    def ack(self, claimed: TimerEntry, successor: TimerEntry | None = None) -> int:
        """Finish a claimed timer; put ``successor`` (same id) in its place atomically.

        Returns 1 when done, 2 when the timer had been replaced meanwhile (the
        replacement is kept and the successor dropped), 0 when another replica
        had already finished or someone removed it.
        """
        return int(self._ack(claimed, successor))

    def _ack(self, claimed: TimerEntry, successor: TimerEntry | None, client: Any = None) -> Any:
        successor_json, successor_due = "", ""
        if successor is not None:
            if successor.id != claimed.id:
                raise ValueError("a successor takes the place of the timer it follows")
            successor = successor.model_copy(update={"token": uuid.uuid4().hex})
            successor_json, successor_due = successor.model_dump_json(), str(successor.due)
        return self._ack_script(
            keys=[self.inflight_key, self.entries_key, self.due_key],
            args=[claimed.id, claimed.token, successor_json, successor_due],
            client=client,
        )

    def release(self, timer_id: str, retry_at: float) -> bool:
        """Give a claimed timer back before its lease ends, due again at ``retry_at``."""
        released = self._release_script(
            keys=[self.inflight_key, self.due_key, self.entries_key], args=[timer_id, retry_at]
        )
        return int(released) == 1

    def requeue_expired(self, now: float, limit: int = 1000) -> int:
        """Put timers whose claimer's lease ran out back in ``due``; returns how many."""
        return int(
            self._requeue_script(
                keys=[self.inflight_key, self.due_key, self.entries_key], args=[now, limit]
            )
        )

    def next_due(self) -> float | None:
        first = self.redis.zrange(self.due_key, 0, 0, withscores=True)
        return float(first[0][1]) if first else None

    def counts(self) -> tuple[int, int]:
        """(due, in flight) — for status output and tests."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(self.due_key)
        pipe.zcard(self.inflight_key)
        due, inflight = pipe.execute()
        return int(due), int(inflight)

    # --- exactly-once enqueue markers -----------------------------------------------
    def begin_enqueue(
        self, fire_id: str, owner: str, now: float, hold_seconds: float
    ) -> EnqueueClaim:
        """Ask to enqueue evaluation ``fire_id`` at ``now``.

        ``acquired``: go ahead (the marker names ``owner`` and a fresh fencing
        token for ``hold_seconds``; confirm it with :meth:`confirm_enqueue` right
        before sending); ``sent``: it was enqueued already, skip it; ``held``:
        another claimer is enqueueing it right now, come back after
        ``retry_after_seconds``.
        """
        return self.begin_enqueue_many([fire_id], owner, now, hold_seconds)[fire_id]

    def begin_enqueue_many(
        self,
        fire_ids: list[str],
        owner: str,
        now: float,
        hold_seconds: float,
        claims: Mapping[str, TimerEntry] | None = None,
    ) -> dict[str, EnqueueClaim]:
        """:meth:`begin_enqueue` for many fires in one round trip.

        ``claims``: the claimed timer each fire belongs to. A fire whose timer is no longer in
        flight with the token it was claimed with reads as ``sent``: another claimer took the
        timer over while this one stalled and acknowledged it (dropping its markers), so
        nothing of it may be sent again.
        """
        if "|" in owner:
            raise ValueError("an owner id must not contain '|'")
        if not fire_ids:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for fire_id in fire_ids:
            claim = (claims or {}).get(fire_id)
            self._begin_enqueue_script(
                keys=[self._marker_key(fire_id), self.inflight_key, self.entries_key],
                args=[
                    owner,
                    now,
                    now + hold_seconds,
                    SENT_MARKER_TTL_SECONDS,
                    uuid.uuid4().hex,
                    claim.id if claim is not None else "",
                    claim.token if claim is not None else "",
                ],
                client=pipe,
            )
        out: dict[str, EnqueueClaim] = {}
        for fire_id, (state, detail) in zip(fire_ids, pipe.execute(), strict=True):
            state = _text(state)
            if state == "acquired":
                out[fire_id] = EnqueueClaim("acquired", token=_text(detail))
            elif state == SENT:
                out[fire_id] = EnqueueClaim("sent")
            else:
                out[fire_id] = EnqueueClaim("held", max(0.0, float(_text(detail))))
        return out

    def confirm_enqueue(
        self,
        fire_id: str,
        owner: str,
        token: str,
        now: float,
        hold_seconds: float,
        mark_sent: str | None = None,
    ) -> bool:
        """Right before sending: True if the marker still names ``owner`` and ``token``
        (it is held again for ``hold_seconds``), False if this claimer lost it.

        ``mark_sent``: a fire sent just before, marked ``sent`` in the same round trip.
        """
        pipe = self.redis.pipeline(transaction=False)
        if mark_sent is not None:
            pipe.set(self._marker_key(mark_sent), SENT, ex=SENT_MARKER_TTL_SECONDS)
        self._confirm_enqueue_script(
            keys=[self._marker_key(fire_id)],
            args=[owner, token, now + hold_seconds, SENT_MARKER_TTL_SECONDS],
            client=pipe,
        )
        return int(pipe.execute()[-1]) == 1

    def finish_and_ack(
        self,
        sent: list[str],
        claimed: TimerEntry,
        successor: TimerEntry | None = None,
        settled: Sequence[str] = (),
    ) -> int:
        """Mark ``sent`` fires enqueued and acknowledge ``claimed``, in one round trip; then
        drop the markers of ``settled`` (every fire of the timer): once it is acknowledged no
        claimer plans them again, and a claimer paused since its claim that sends one anyway
        is stopped by the worker's fence, or finds the run recorded. Dropping them keeps the
        markers to the fires in flight, not one per fire for a week."""
        pipe = self.redis.pipeline(transaction=False)
        for fire_id in sent:
            if fire_id not in settled:
                pipe.set(self._marker_key(fire_id), SENT, ex=SENT_MARKER_TTL_SECONDS)
        self._ack(claimed, successor, client=pipe)
        if settled:
            pipe.delete(*(self._marker_key(fire_id) for fire_id in settled))
        replies = pipe.execute()
        return int(replies[-2] if settled else replies[-1])

    def finish_enqueue(self, fire_id: str) -> None:
        self.redis.set(self._marker_key(fire_id), SENT, ex=SENT_MARKER_TTL_SECONDS)

    def abandon_enqueue(self, fire_id: str, owner: str) -> None:
        """Drop our marker after a failed send, so a retry may try again at once."""
        self._abandon_enqueue_script(keys=[self._marker_key(fire_id)], args=[owner])

    def was_enqueued(self, fire_id: str) -> bool:
        return _text(self.redis.get(self._marker_key(fire_id)) or b"") == SENT

    def _marker_key(self, fire_id: str) -> str:
        return f"{self.prefix}:enqueued:{fire_id}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
