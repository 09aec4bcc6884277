"""When a schedule fires: next instants for cron-in-a-zone and intervals, and misfires.

Every instant leaving this module is an aware UTC ``datetime``; cron
expressions are read in the schedule's IANA zone (croniter + zoneinfo).

Daylight-saving time follows croniter and classic (Vixie) cron:

* **Spring forward** (a wall-clock time that does not exist that day): the fire
  happens once, at the first instant after the gap. A ``30 2 * * *`` job in
  America/New_York fires at 03:00 EDT on the day clocks jump from 02:00 to
  03:00, and at 02:30 again the next day.
* **Fall back** (a wall-clock time that happens twice): a job with a specific
  hour fires once, on the first occurrence (``30 1 * * *`` fires at 01:30 EDT,
  not again at 01:30 EST), as Vixie cron does for fixed-time jobs. A job whose
  hour field is ``*`` (``*/30 * * * *``) fires in both passes, because it is
  about elapsed time: every real half hour still gets its fire.

Intervals ignore zones entirely: fires are ``anchor + k * interval`` in real
time, so DST never stretches or shrinks them.

Misfires (the scheduler was down, or a timer was claimed late) are decided by
:func:`plan_fire`: a fire claimed within ``grace`` of its due instant is on
time; older ones are missed, and the schedule's policy says whether the latest
missed instant still fires once (``run_once``) or not at all (``skip``).
Either way the schedule continues with its next future instant.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from schemas.schedule import Schedule

# Counting missed instants walks the calendar; past this many we report "at least".
MAX_COUNTED_MISSES = 10_000


def next_fire(schedule: Schedule, after: datetime) -> datetime:
    """The first fire instant strictly after ``after`` (UTC)."""
    after = _as_utc(after)
    if schedule.interval_seconds is not None:
        return _interval_next(_as_utc(schedule.created_at), schedule.interval_seconds, after)
    assert schedule.cron is not None  # the model guarantees one cadence
    return _cron_next(schedule.cron, ZoneInfo(schedule.timezone), after)


def fires_between(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Fire instants in ``[start, end]``, at most ``MAX_COUNTED_MISSES`` of them."""
    start, end = _as_utc(start), _as_utc(end)
    instants: list[datetime] = []
    current = next_fire(schedule, start - timedelta(microseconds=1))
    while current <= end and len(instants) < MAX_COUNTED_MISSES:
        instants.append(current)
        current = next_fire(schedule, current)
    return instants


def latest_fire_at_or_before(schedule: Schedule, moment: datetime) -> datetime | None:
    """The last fire instant not after ``moment``, or None before the first one."""
    moment = _as_utc(moment)
    if schedule.interval_seconds is not None:
        anchor = _as_utc(schedule.created_at)
        if moment < anchor:
            return None
        steps = math.floor((moment - anchor).total_seconds() / schedule.interval_seconds)
        return anchor + timedelta(seconds=steps * schedule.interval_seconds)
    assert schedule.cron is not None
    zone = ZoneInfo(schedule.timezone)
    iterator = croniter(schedule.cron, moment.astimezone(zone) + timedelta(microseconds=1))
    for _ in range(4):  # at most one repeated fall-back instant to step over
        candidate = iterator.get_prev(datetime)
        if _skips_repeat(schedule.cron) and _is_second_occurrence(candidate, zone):
            continue
        return _as_utc(candidate)
    return None


def jitter_offset(schedule: Schedule, scheduled_at: datetime) -> float:
    """A delay in ``[0, jitter_seconds)`` that every replica computes the same way.

    Derived from the schedule id and the instant, so the spread is stable across
    replicas and restarts, and different schedules land at different offsets.
    """
    if schedule.jitter_seconds <= 0:
        return 0.0
    digest = hashlib.sha256(f"{schedule.id}|{_as_utc(scheduled_at).isoformat()}".encode())
    fraction = int.from_bytes(digest.digest()[:8], "big") / 2**64
    return fraction * schedule.jitter_seconds


def due_at(schedule: Schedule, scheduled_at: datetime) -> datetime:
    """When the timer for ``scheduled_at`` is due: the instant plus its jitter."""
    return _as_utc(scheduled_at) + timedelta(seconds=jitter_offset(schedule, scheduled_at))


@dataclass(frozen=True)
class FireDecision:
    """What to do with a claimed schedule timer.

    ``fire_at`` is the instant to evaluate (None = nothing to fire now);
    ``missed`` counts instants that did not get a fire of their own;
    ``next_at`` is the next instant to put a timer on.
    """

    fire_at: datetime | None
    missed: int
    next_at: datetime


def plan_fire(
    schedule: Schedule, scheduled_at: datetime, now: datetime, grace_seconds: float
) -> FireDecision:
    """Decide a claimed fire of ``scheduled_at`` at ``now``, applying the misfire policy.

    All instants from ``scheduled_at`` up to ``now`` are considered. The latest
    one fires if it is on time (within ``grace_seconds`` of its due instant);
    the older ones are missed. When even the latest is late, ``run_once`` still
    fires it once (standing for all of them) and ``skip`` fires nothing.
    """
    scheduled_at, now = _as_utc(scheduled_at), _as_utc(now)
    pending = fires_between(schedule, scheduled_at, now)
    if not pending:  # claimed early (clock skew between replicas): fire the instant itself
        return FireDecision(scheduled_at, 0, next_fire(schedule, scheduled_at))
    latest = pending[-1]
    if len(pending) == MAX_COUNTED_MISSES:
        latest = latest_fire_at_or_before(schedule, now) or latest
    next_at = next_fire(schedule, max(latest, now))
    on_time = (now - due_at(schedule, latest)).total_seconds() <= grace_seconds
    if on_time:
        return FireDecision(latest, len(pending) - 1, next_at)
    if schedule.misfire == "run_once":
        return FireDecision(latest, len(pending) - 1, next_at)
    return FireDecision(None, len(pending), next_at)


def _interval_next(anchor: datetime, interval: float, after: datetime) -> datetime:
    if after < anchor:
        return anchor
    steps = math.floor((after - anchor).total_seconds() / interval) + 1
    candidate = anchor + timedelta(seconds=steps * interval)
    while candidate <= after:  # float rounding on very long runs
        steps += 1
        candidate = anchor + timedelta(seconds=steps * interval)
    return candidate


def _cron_next(expr: str, zone: ZoneInfo, after: datetime) -> datetime:
    iterator = croniter(expr, after.astimezone(zone))
    skip_repeat = _skips_repeat(expr)
    while True:
        candidate = iterator.get_next(datetime)
        if _as_utc(candidate) <= after:
            continue
        if skip_repeat and _is_second_occurrence(candidate, zone):
            continue
        return _as_utc(candidate)


def _skips_repeat(expr: str) -> bool:
    """Fixed-hour jobs fire once on a fall-back day; ``*``-hour jobs fire in both passes."""
    fields = expr.split()
    if expr.startswith("@"):
        return expr not in ("@hourly",)
    return len(fields) >= 2 and fields[1] != "*"


def _is_second_occurrence(moment: datetime, zone: ZoneInfo) -> bool:
    """True for the second pass of a wall-clock time that happens twice (fall back)."""
    wall = moment.astimezone(zone).replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return first != second and _as_utc(moment) == second


def _as_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("instants must carry a time zone")
    return moment.astimezone(UTC)
