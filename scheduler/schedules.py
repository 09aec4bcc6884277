"""Schedules in Redis: create, change, pause, resume, remove at runtime.

This is the only code that touches the schedule keys:

``{prefix}:schedules``       hash, schedule id -> :class:`~schemas.schedule.Schedule` JSON
``{prefix}:schedule-names``  hash, name -> schedule id (names are unique)
``{prefix}:schedule-fires``  hash, schedule id -> last :class:`~schemas.schedule.ScheduleFire`

The last fire lives apart from the schedule so a replica recording a fire can
never overwrite a change a person made at the same moment. Creating a schedule and
recording a fire are scripts beside this module (``schedule_create.lua``,
``schedule_record_fire.lua``, after ``key_checks.lua``).

Every change also rewrites the schedule's one timer (``sched:{id}``) through
:class:`~workers.fleet.timers.TimerStore`, so a running scheduler picks it up on
its next tick with no restart, and the schedule's spend ceiling where the workers
read it (:class:`~workers.fleet.spend.SpendStore`); the replicas' periodic
reconcile repairs both should anything ever leave them out of step.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from scheduler.cron import due_at, next_fire
from schemas.schedule import CHANGEABLE_FIELDS, Schedule, ScheduleFire
from workers.fleet.lua_scripts import checked_script
from workers.fleet.spend import SpendStore, utc_day
from workers.fleet.timers import (
    TimerEntry,
    TimerStore,
    epoch,
    run_now_timer_id,
    schedule_timer_id,
)

_FOLDER = Path(__file__).parent


def _schedule_script(name: str) -> str:
    """A schedule script (``{name}.lua`` beside this module) after the key checks every one
    of them runs first (``key_checks.lua``, shared with the store's and the timers')."""
    return checked_script(name, _FOLDER)


class ScheduleNotFound(LookupError):
    """No schedule with that id or name."""


class ScheduleConflict(ValueError):
    """The change would break a rule (a duplicate name, an invalid field)."""


def _now() -> datetime:
    return datetime.now(UTC)


class ScheduleStore:
    """Schedule CRUD for one Redis and key prefix, keeping each schedule's timer in step."""

    def __init__(self, redis: Any, key_prefix: str, min_interval_seconds: float) -> None:
        self.redis = redis
        self.min_interval_seconds = min_interval_seconds
        self.timers = TimerStore(redis, key_prefix)
        self.spend = SpendStore(redis, key_prefix)
        self.schedules_key = f"{key_prefix}:schedules"
        self.names_key = f"{key_prefix}:schedule-names"
        self.fires_key = f"{key_prefix}:schedule-fires"
        self._create_script = redis.register_script(_schedule_script("schedule_create"))
        self._record_fire_script = redis.register_script(_schedule_script("schedule_record_fire"))

    # --- reading ---------------------------------------------------------------------------
    def get(self, ref: str) -> Schedule:
        """The schedule with id or name ``ref``, with its last fire."""
        schedule_id = self.resolve(ref)
        body = self.redis.hget(self.schedules_key, schedule_id)
        if body is None:
            raise ScheduleNotFound(_not_found(ref))
        return self._with_last_fire(Schedule.from_stored(body))

    def find(self, schedule_id: str) -> Schedule | None:
        """The schedule by id, or None (the service's lookup; no name resolution)."""
        body = self.redis.hget(self.schedules_key, schedule_id)
        return Schedule.from_stored(body) if body is not None else None

    def resolve(self, ref: str) -> str:
        if self.redis.hexists(self.schedules_key, ref):
            return ref
        schedule_id = self.redis.hget(self.names_key, ref)
        if schedule_id is None:
            raise ScheduleNotFound(_not_found(ref))
        return _text(schedule_id)

    def all(self) -> list[Schedule]:
        bodies = self.redis.hgetall(self.schedules_key)
        fires = self.redis.hgetall(self.fires_key)
        out = []
        for schedule_id, body in bodies.items():
            schedule = Schedule.from_stored(body)
            fire = fires.get(schedule_id)
            if fire is not None:
                schedule.last_fire = ScheduleFire.model_validate_json(fire)
            out.append(schedule)
        return sorted(out, key=lambda s: s.name)

    def ids(self) -> list[str]:
        return [_text(key) for key in self.redis.hkeys(self.schedules_key)]

    def ids_starting_with(self, prefix: str, limit: int = 10) -> list[str]:
        """Up to ``limit`` schedule ids that begin with ``prefix``, sorted (an HSCAN with
        MATCH; the id alphabet holds no glob character): what an id cut short stands for."""
        found: set[str] = set()
        for key, _body in self.redis.hscan_iter(self.schedules_key, match=f"{prefix}*"):
            found.add(_text(key))
            if len(found) >= limit:
                break
        return sorted(found)

    def next_fire_at(self, schedule: Schedule) -> datetime | None:
        """When the schedule's timer is due (None while paused or not yet timed)."""
        entry = self.timers.get(schedule_timer_id(schedule.id))
        return entry.due_at if entry is not None else None

    # --- changing ------------------------------------------------------------------------
    def create(self, schedule: Schedule, now: datetime | None = None) -> Schedule:
        """Store a new schedule and its first timer; refuses a taken name or a short interval."""
        now = now or _now()
        self._check(schedule)
        schedule = schedule.model_copy(update={"created_at": now, "updated_at": now})
        created = self._create_script(
            keys=[self.schedules_key, self.names_key],
            args=[schedule.id, schedule.name, self._dump(schedule)],
        )
        if not int(created):
            raise ScheduleConflict(
                f"a schedule named {schedule.name!r} already exists; pick another name "
                "or change the existing one"
            )
        if schedule.spend is not None:
            self.spend.set_schedule_ceiling(schedule.id, schedule.spend)
        self.sync_timer(schedule, now)
        return schedule

    def update(self, ref: str, now: datetime | None = None, **changes: Any) -> Schedule:
        """Apply ``changes`` (fields of :data:`CHANGEABLE_FIELDS`) and re-time the schedule."""
        unknown = set(changes) - CHANGEABLE_FIELDS
        if unknown:
            raise ScheduleConflict(f"cannot change {', '.join(sorted(unknown))}")
        return self._change(ref, now, changes)

    def pause(self, ref: str, now: datetime | None = None) -> Schedule:
        """Stop firing; the timer is removed, nothing fires until resumed."""
        return self._change(ref, now, {"enabled": False})

    def resume(self, ref: str, now: datetime | None = None) -> Schedule:
        """Fire again from the next instant after now; paused instants are not made up."""
        return self._change(ref, now, {"enabled": True})

    def remove(self, ref: str) -> Schedule:
        schedule = self.get(ref)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(self.schedules_key, schedule.id)
        pipe.hdel(self.fires_key, schedule.id)
        pipe.hdel(self.names_key, schedule.name)
        pipe.execute()
        self.timers.remove(schedule_timer_id(schedule.id))
        self.spend.forget_schedule(schedule.id)
        return schedule

    def run_now(self, ref: str, now: datetime | None = None) -> TimerEntry:
        """A one-off fire at ``now`` (even while paused), picked up by the next tick."""
        now = now or _now()
        schedule = self.get(ref)
        entry = TimerEntry(
            id=run_now_timer_id(schedule.id, now),
            kind="schedule_fire",
            due=epoch(now),
            schedule_id=schedule.id,
            revision=schedule.revision,
            scheduled_at=now,
            one_off=True,
        )
        self.timers.put(entry)
        return entry

    def record_fire(self, schedule_id: str, fire: ScheduleFire) -> None:
        self._record_fire_script(
            keys=[self.schedules_key, self.fires_key],
            args=[schedule_id, fire.model_dump_json()],
        )

    # --- timers ------------------------------------------------------------------------
    def timer_for(self, schedule: Schedule, scheduled_at: datetime) -> TimerEntry:
        """The timer entry that fires ``schedule`` at ``scheduled_at`` (plus its jitter)."""
        return TimerEntry(
            id=schedule_timer_id(schedule.id),
            kind="schedule_fire",
            due=epoch(due_at(schedule, scheduled_at)),
            schedule_id=schedule.id,
            revision=schedule.revision,
            scheduled_at=scheduled_at,
        )

    def sync_timer(self, schedule: Schedule, now: datetime) -> None:
        """Make the schedule's timer match it: the next fire after ``now``, or none if paused."""
        timer_id = schedule_timer_id(schedule.id)
        if not schedule.enabled:
            self.timers.remove(timer_id)
            return
        self.timers.put(self.timer_for(schedule, next_fire(schedule, now)))

    def reconcile(self, now: datetime) -> int:
        """Give every enabled schedule whose timer is missing or stale a fresh one.

        A timer already in step is left alone (its instant may be in the past
        on purpose, waiting for a replica to apply the misfire policy). Three
        round trips read everything, however many schedules there are, and two
        more put the schedules' spend ceilings in step.
        Returns how many timers were written or removed.
        """
        ids = self.ids()
        if not ids:
            return 0
        # Timers first, schedules second: a change landing between the two reads
        # then looks stale and is re-timed from the newer schedule, never the older.
        entries = self.redis.hmget(self.timers.entries_key, [schedule_timer_id(i) for i in ids])
        bodies = self.redis.hmget(self.schedules_key, ids)
        fixed = 0
        ceilings: dict[str, Any] = {}
        for body, raw in zip(bodies, entries, strict=True):
            if body is None:  # removed meanwhile
                continue
            schedule = Schedule.from_stored(body)
            ceilings[schedule.id] = schedule.spend
            entry = TimerEntry.model_validate_json(raw) if raw else None
            if not schedule.enabled:
                if entry is not None:
                    self.timers.remove(schedule_timer_id(schedule.id))
                    fixed += 1
            elif entry is None or entry.revision != schedule.revision:
                self.sync_timer(schedule, now)
                fixed += 1
        self.spend.sync_schedule_ceilings(ceilings)
        return fixed

    # --- internals -------------------------------------------------------------------
    def _change(self, ref: str, now: datetime | None, changes: dict[str, Any]) -> Schedule:
        now = now or _now()
        schedule_id = self.resolve(ref)
        with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(self.schedules_key)
                    body = pipe.hget(self.schedules_key, schedule_id)
                    if body is None:
                        raise ScheduleNotFound(_not_found(ref))
                    old = Schedule.from_stored(body)
                    data = {
                        **old.model_dump(exclude={"last_fire"}),
                        **changes,
                        "revision": old.revision + 1,
                        "updated_at": now,
                    }
                    try:
                        new = Schedule.with_changes(data, changes)
                    except ValidationError as exc:
                        raise ScheduleConflict(_first_error(exc)) from None
                    self._check(new)
                    if new.name != old.name and pipe.hexists(self.names_key, new.name):
                        raise ScheduleConflict(f"a schedule named {new.name!r} already exists")
                    pipe.multi()
                    pipe.hset(self.schedules_key, schedule_id, self._dump(new))
                    if new.name != old.name:
                        pipe.hdel(self.names_key, old.name)
                        pipe.hset(self.names_key, new.name, schedule_id)
                    pipe.execute()
                    break
                except _watch_error():
                    continue
        if new.spend != old.spend:
            self.spend.set_schedule_ceiling(new.id, new.spend, reopen_day=utc_day(now))
        self.sync_timer(new, now)
        return self._with_last_fire(new)

    def _check(self, schedule: Schedule) -> None:
        try:
            schedule.check_interval_floor(self.min_interval_seconds)
        except ValueError as exc:
            raise ScheduleConflict(str(exc)) from None

    def _with_last_fire(self, schedule: Schedule) -> Schedule:
        fire = self.redis.hget(self.fires_key, schedule.id)
        if fire is not None:
            schedule.last_fire = ScheduleFire.model_validate_json(fire)
        return schedule

    @staticmethod
    def _dump(schedule: Schedule) -> str:
        return schedule.model_dump_json(exclude={"last_fire"})


def _watch_error() -> type[Exception]:
    from redis.exceptions import WatchError

    return WatchError


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    message = str(error.get("msg", "invalid value"))
    return message.removeprefix("Value error, ")


def _not_found(ref: str) -> str:
    return f"no schedule with id or name {ref!r}; `assay schedule list` shows them"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
