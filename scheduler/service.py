"""A scheduler replica: turn due timers into queued evaluations, safely, with company.

Each tick a replica

1. re-queues timers whose claimer's lease ran out (a replica died mid-fire),
2. every few seconds reconciles schedules into timers (a missing or stale
   timer gets the schedule's next fire),
3. claims due timers atomically (each is held by one replica under a lease),
4. sends one ``assay.evaluate`` message per evaluation the timer stands for,
   each guarded by an "enqueued" marker so a timer claimed twice is sent once:
   right before each send the replica confirms the marker is still its own
   (fencing token), and the message carries that token,
5. acknowledges the timer, putting a schedule's next fire in its place.

A schedule fire whose UTC day has reached the schedule's spend ceiling
(workers/fleet/spend.py) sends nothing: its instants are counted as skipped
(``assay spend``, ``assay schedule show``, the API, ``assay_schedule_fires_skipped_total``)
and the schedule carries on with its next instant, which fires again once the
day rolls over (or the ceiling is raised).

Any number of replicas may run against one Redis with no leader: the claim
script hands each due timer to exactly one of them, the lease returns it to
the pool if that replica dies, and a replica that was paused past its hold
(GC, SIGSTOP) finds on waking that its marker belongs to another replica and
sends nothing more. The one message it may already have had on its way is
dropped by the worker, which runs only the first fencing token it sees for a
fire (``VerdictStore.claim_fence``); the verdict store's first-verdict-wins
rule stays as the last line.

The clock is injected (``clock`` returns epoch seconds), so tests drive DST
transitions and outages without waiting; production uses ``time.time``.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

import structlog

from scheduler import deferred
from scheduler.cron import FireDecision, fires_between, next_fire, plan_fire
from scheduler.deferred import Enqueue
from scheduler.fires import TargetResolutionError, build_requests, resolve_targets
from scheduler.schedules import ScheduleStore
from schemas.schedule import Schedule, ScheduleFire
from schemas.settings import AssaySettings
from workers.engine.metrics import (
    TimerCollector,
    observe_lateness,
    observe_schedule_skips,
    register_collector,
    start_metrics_server,
)
from workers.fleet.dispatch import Dispatcher
from workers.fleet.redis_client import RedisOutage, connect_for_loop, lost_connection
from workers.fleet.spend import SpendStore, schedule_ceiling, utc_day
from workers.fleet.store import VerdictStore
from workers.fleet.timers import ClaimedTimer, EnqueueClaim, TimerEntry, TimerStore, from_epoch

_log = structlog.get_logger(__name__)

CLAIM_BATCH = 200
RECONCILE_EVERY_SECONDS = 10.0
SEND_RETRY_SECONDS = 2.0
OUTAGE_RETRY_SECONDS = 1.0  # Redis away: a round every second until it answers


@dataclass(frozen=True)
class FirePlan:
    """What one claimed timer does: its messages, its successor, the fire to record."""

    entry: TimerEntry
    messages: list[Enqueue]
    successor: TimerEntry | None = None
    fire: ScheduleFire | None = None


class Sender(Protocol):
    """Puts one evaluation on the fleet's queue (the fleet's Dispatcher in production)."""

    def send(self, message: Enqueue) -> None: ...


@dataclass
class ReplicaStats:
    """Counters for one replica's lifetime (logged at exit, read by tests)."""

    claimed: int = 0
    sent: int = 0
    already_sent: int = 0
    fires: int = 0
    missed_instants: int = 0
    requeued: int = 0
    send_failures: int = 0
    superseded: int = 0  # timers another replica took over while this one held them
    skipped_for_spend: int = 0  # schedule instants not fired: their day's ceiling is reached
    lateness: list[float] = field(default_factory=list)
    failing: str | None = None  # why the last round failed (Redis away); None once one works


class Replica:
    """One scheduler replica; :meth:`tick` does one round, :meth:`run` loops."""

    def __init__(
        self,
        settings: AssaySettings,
        redis: Any,
        sender: Sender,
        *,
        clock: Callable[[], float] = time.time,
        replica_id: str | None = None,
        claim_batch: int = CLAIM_BATCH,
        keep_lateness: bool = False,
        stats: ReplicaStats | None = None,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.sender = sender
        self.clock = clock
        self.replica_id = (
            replica_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
        self.claim_batch = claim_batch
        self.keep_lateness = keep_lateness
        self.timers = TimerStore(redis, settings.key_prefix)
        self.schedules = ScheduleStore(redis, settings.key_prefix, settings.min_interval_seconds)
        self.spend = SpendStore.from_settings(settings, redis)
        self.stats = stats or ReplicaStats()
        self.hold_seconds = max(1.0, settings.scheduler_lease_seconds / 2)
        self._next_reconcile = 0.0
        self._log = _log.bind(replica=self.replica_id)
        self.outage = RedisOutage(
            self._log, settings.redis_url or "", settings.redis_outage_log_seconds
        )

    # --- the loop -----------------------------------------------------------------------
    def run(self, stop_event: threading.Event) -> None:
        """Tick until ``stop_event`` is set; a tick in progress always completes."""
        if not stop_event.is_set():  # stopped while starting: it never ran
            self._log.info("scheduler replica started", tick=self.settings.scheduler_tick_seconds)
        while not stop_event.is_set():
            try:
                handled = self.tick()
            except Exception as exc:  # Redis away or a blip: say so, back off, carry on
                if lost_connection(exc):
                    self.outage.failed(exc)
                else:
                    self._log.warning("scheduler tick failed", error=str(exc))
                self.stats.failing = str(exc) or type(exc).__name__
                handled = 0
            else:
                self.outage.answered()
                self.stats.failing = None
            if handled >= self.claim_batch:
                continue  # a backlog: claim again at once
            wait = self._sleep_seconds() if not self.outage.down else OUTAGE_RETRY_SECONDS
            stop_event.wait(wait)
        self._log.info(
            "scheduler replica stopped",
            claimed=self.stats.claimed,
            sent=self.stats.sent,
            already_sent=self.stats.already_sent,
        )

    def tick(self) -> int:
        """One round: requeue, reconcile when due, claim and handle. Returns timers claimed.

        Redis work is batched per claim: one MGET for deferred requests, one
        pipeline for the enqueue markers, then one pipeline per timer to mark
        its messages sent and acknowledge it.
        """
        now = self.clock()
        self.stats.requeued += self.timers.requeue_expired(now)
        if now >= self._next_reconcile:
            self.schedules.reconcile(from_epoch(now))
            self._next_reconcile = now + RECONCILE_EVERY_SECONDS
        claimed = self.timers.claim(now, self.settings.scheduler_lease_seconds, self.claim_batch)
        self.stats.claimed += len(claimed)
        self.handle(claimed)
        return len(claimed)

    def handle(self, claimed: list[ClaimedTimer]) -> None:
        """Send what the claimed timers stand for and acknowledge them."""
        plans = self._plan(claimed)
        claims = {m.fire_id: plan.entry for plan in plans for m in plan.messages}
        markers = self.timers.begin_enqueue_many(
            list(claims), self.replica_id, self.clock(), self.hold_seconds, claims
        )
        for plan in plans:
            try:
                self._execute(plan, markers)
            except Exception as exc:  # leave it in flight: the lease brings it back
                self._log.error("timer failed", timer=plan.entry.id, error=str(exc))

    def _sleep_seconds(self) -> float:
        tick = self.settings.scheduler_tick_seconds
        try:
            next_due = self.timers.next_due()
        except Exception:
            return tick
        if next_due is None:
            return tick
        return max(0.0, min(tick, next_due - self.clock()))

    # --- planning: what each claimed timer sends ------------------------------------------
    def _plan(self, claimed: list[ClaimedTimer]) -> list[FirePlan]:
        plans: list[FirePlan] = []
        waiting: list[TimerEntry] = []
        for timer in claimed:
            entry = timer.entry
            if entry is None:  # removed while being claimed
                self.timers.remove(timer.id)
            elif entry.kind == "schedule_fire":
                try:
                    plan = self._plan_schedule(entry)
                except Exception as exc:
                    self._log.error("schedule fire failed", timer=entry.id, error=str(exc))
                    continue
                if plan is not None:
                    plans.append(plan)
            else:
                waiting.append(entry)
        if waiting:
            for entry, messages in zip(
                waiting, deferred.messages_for(self.redis, self.settings, waiting), strict=True
            ):
                plans.append(FirePlan(entry, messages))
        return plans

    def _plan_schedule(self, entry: TimerEntry) -> FirePlan | None:
        """The messages of a schedule fire, or None when the timer was settled here."""
        schedule = self.schedules.find(entry.schedule_id or "")
        if schedule is None or entry.scheduled_at is None:
            self.timers.ack(entry)  # the schedule was removed: the timer goes with it
            return None
        now = from_epoch(self.clock())
        if entry.one_off:
            return self._fire_plan(schedule, entry, entry.scheduled_at, 0, successor=None)
        if not schedule.enabled:
            self.timers.ack(entry)
            return None
        if entry.revision != schedule.revision:  # changed meanwhile: re-time, fire nothing
            self.timers.ack(
                entry,
                self.schedules.timer_for(
                    schedule, next_fire(schedule, max(now, entry.scheduled_at))
                ),
            )
            return None
        grace = self.settings.scheduler_misfire_grace_seconds
        decision = plan_fire(schedule, entry.scheduled_at, now, grace)
        successor = self.schedules.timer_for(schedule, decision.next_at)
        skipped = self._skipped_for_spend(schedule, entry.scheduled_at, decision)
        if skipped:
            self.stats.missed_instants += max(0, decision.missed + 1 - skipped)
            self.timers.ack(entry, successor)
            return None
        self.stats.missed_instants += decision.missed
        if decision.missed:
            self._log.warning(
                "schedule missed fires",
                schedule=schedule.id,
                missed=decision.missed,
                policy=schedule.misfire,
                fired=decision.fire_at is not None,
            )
        if decision.fire_at is None:
            self.timers.ack(entry, successor)
            return None
        return self._fire_plan(schedule, entry, decision.fire_at, decision.missed, successor)

    def _skipped_for_spend(
        self, schedule: Schedule, scheduled_at: datetime, decision: FireDecision
    ) -> int:
        """How many instants this fire skips because the schedule's spend ceiling for the
        fire's UTC day is reached (0: it fires).

        The instants it stands for on that day are skipped and counted (a fire claimed late
        covers the ones before it); instants of earlier days stay missed.
        """
        ceiling = schedule_ceiling(schedule.spend, self.settings)
        if decision.fire_at is None or ceiling is None:
            return 0
        day = utc_day(decision.fire_at)
        covered = fires_between(schedule, scheduled_at, decision.fire_at)
        instants = max(1, sum(1 for instant in covered if utc_day(instant) == day))
        answer = self.spend.skip_if_reached(schedule.id, day, instants, ceiling)
        if answer is None:
            return 0
        self.stats.skipped_for_spend += instants
        observe_schedule_skips(schedule.id, instants)
        first_today = answer.skipped_today == instants
        (self._log.info if first_today else self._log.debug)(
            "schedule fires skipped until the next UTC day"
            if first_today
            else "schedule fire skipped",
            schedule=schedule.id,
            scheduled_at=decision.fire_at.isoformat(),
            skipped=instants,
            skipped_today=answer.skipped_today,
            reason=answer.reason,
        )
        return instants

    def _fire_plan(
        self,
        schedule: Schedule,
        entry: TimerEntry,
        scheduled_at: datetime,
        missed: int,
        successor: TimerEntry | None,
    ) -> FirePlan:
        try:
            targets = resolve_targets(schedule.targets, self.settings)
        except TargetResolutionError as exc:
            self._log.error("schedule targets unavailable", schedule=schedule.id, error=str(exc))
            targets = []
        if not targets:
            self._log.warning("schedule fire has no targets", schedule=schedule.id)
        requests = build_requests(schedule, scheduled_at, targets)
        fire = ScheduleFire(
            scheduled_at=scheduled_at,
            fired_at=from_epoch(self.clock()),
            missed=missed,
            runs={t.name: r.run_id for t, r in zip(targets, requests, strict=True)},
            checks={t.name: r.check_id for t, r in zip(targets, requests, strict=True)},
        )
        messages = [Enqueue(r.run_id, r, new_run=True) for r in requests]
        return FirePlan(entry, messages, successor, fire)

    # --- execution: send once, then settle ------------------------------------------------
    def _execute(self, plan: FirePlan, markers: dict[str, EnqueueClaim]) -> None:
        """Send each message not sent before, then mark it sent; ack the timer at the end.

        A message already marked sent (by anyone) is skipped; one that another
        live replica is sending right now makes this timer wait for that hold
        to end. Right before each send the marker is confirmed as still this
        replica's; if another replica has taken it over (this one was paused
        past its hold), nothing more is sent or acknowledged here: the timer is
        the other replica's now. Round trips per message stay at one besides
        the send: marking a message sent travels with the next message's
        confirmation, and the last one's with the ack.
        """
        entry = plan.entry
        pending: str | None = None  # sent, its "sent" mark not written yet
        for message in plan.messages:
            claim = markers.get(message.fire_id)
            if claim is None or claim.state == "sent":
                self.stats.already_sent += int(claim is not None)
                continue
            if claim.state == "held":
                self._mark_sent(pending)
                self._give_back(entry, claim.retry_after_seconds + 0.05)
                return
            confirmed = self.timers.confirm_enqueue(
                message.fire_id,
                self.replica_id,
                claim.token,
                self.clock(),
                self.hold_seconds,
                mark_sent=pending,
            )
            pending = None
            if not confirmed:
                self.stats.superseded += 1
                self._log.warning(
                    "timer taken over by another replica; sending nothing more",
                    timer=entry.id,
                    fire=message.fire_id,
                )
                return
            try:
                self.sender.send(replace(message, fence_token=claim.token))
            except Exception as exc:
                self.stats.send_failures += 1
                self.timers.abandon_enqueue(message.fire_id, self.replica_id)
                self._log.warning("enqueue failed", fire=message.fire_id, error=str(exc))
                self._give_back(entry, SEND_RETRY_SECONDS)
                return
            self.stats.sent += 1
            self._observe_lateness(entry)
            pending = message.fire_id
        self.timers.finish_and_ack(
            [pending] if pending else [],
            entry,
            plan.successor,
            settled=[message.fire_id for message in plan.messages],
        )
        if plan.fire is not None and entry.schedule_id is not None:
            self.stats.fires += 1
            self.schedules.record_fire(entry.schedule_id, plan.fire)
            self._log.info(
                "schedule fired",
                schedule=entry.schedule_id,
                scheduled_at=plan.fire.scheduled_at.isoformat(),
                targets=len(plan.messages),
            )

    def _mark_sent(self, fire_id: str | None) -> None:
        if fire_id is not None:
            self.timers.finish_enqueue(fire_id)

    def _give_back(self, entry: TimerEntry, delay: float) -> None:
        """Let the timer be claimed again after ``delay`` (messages sent so far are marked)."""
        self.timers.release(entry.id, self.clock() + delay)

    def _observe_lateness(self, entry: TimerEntry) -> None:
        lateness = self.clock() - entry.due
        if self.keep_lateness:
            self.stats.lateness.append(lateness)

        observe_lateness(lateness, kind=entry.kind)


class FleetSender:
    """Sends through the fleet's Dispatcher: registers a new run, then queues its task.

    The scheduler's own Celery app does not publish "task-sent" events: a
    replica sends in bursts (10,000 deferred runs due in a minute), the event
    would double its broker writes, and monitors still see every run through
    the workers' received / started / succeeded events.
    """

    def __init__(self, settings: AssaySettings, *, fail_fast: bool = False) -> None:
        self.store = VerdictStore.from_settings(settings)
        self.dispatcher = Dispatcher.from_settings(settings, self.store, fail_fast=fail_fast)
        self.dispatcher.app.conf.task_send_sent_event = False

    def send(self, message: Enqueue) -> None:
        fence = None
        if message.fence_token is not None:
            fence = {"fire": message.fire_id, "token": message.fence_token}
        if message.new_run:
            self.dispatcher.submit(message.request, fence=fence)  # registers, then sends
        else:  # deferred (registered when deferred) or a continuation (a waiting run)
            self.dispatcher.send(
                message.request, resume_sequence=message.resume_sequence, fence=fence
            )

    def close(self) -> None:
        self.dispatcher.close()


def run_replica(
    settings: AssaySettings,
    stop_event: threading.Event,
    *,
    sender: Sender | None = None,
    clock: Callable[[], float] = time.time,
    fail_fast: bool = False,
    stats: ReplicaStats | None = None,
) -> ReplicaStats:
    """Run one replica until ``stop_event`` is set (``assay scheduler``, ``assay up``).

    ``fail_fast`` (the command): a Redis or broker that does not answer at start raises
    ``RedisUnreachable`` within seconds, before the replica says it started. ``stats`` is
    the replica's to fill, for a caller that watches it (``stop_on_signals``)."""

    if not settings.redis_url:
        raise ValueError(
            "no Redis is configured: set ASSAY_REDIS_URL or start local mode with `assay up`"
        )
    # Little patience per command: the loop tries again every round, so a Redis that is
    # gone fails a round within about a second and the replica says so (RedisOutage).
    redis = connect_for_loop(settings.redis_url, fail_fast=fail_fast)
    own_sender = sender is None
    active_sender: Sender = sender or FleetSender(settings, fail_fast=fail_fast)
    replica = Replica(settings, redis, active_sender, clock=clock, stats=stats)
    register_collector("timers", TimerCollector(replica.timers.counts))
    if settings.metrics_port:
        start_metrics_server(settings.metrics_port)
    try:
        replica.run(stop_event)
    finally:
        if own_sender and isinstance(active_sender, FleetSender):
            active_sender.close()
        redis.close()
    return replica.stats


def stop_on_signals(stop_event: threading.Event, stats: ReplicaStats | None = None) -> None:
    """SIGTERM / SIGINT finish the current tick and stop the replica cleanly.

    A second signal, or one while the replica's last round failed (Redis away: a round
    in progress sits in Redis retries and holds nothing a lease does not return), stops
    it at once with ``KeyboardInterrupt``.
    """

    def _stop(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if stop_event.is_set() or (stats is not None and stats.failing is not None):
            _log.info("scheduler stopping now", signal=name)
            stop_event.set()
            raise KeyboardInterrupt
        _log.info(
            "scheduler stopping",
            signal=name,
            detail="the round in progress finishes; a second signal stops at once",
        )
        stop_event.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
