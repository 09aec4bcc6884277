"""Next-fire arithmetic: cron in several zones (DST included), intervals, misfires."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from scheduler.cron import due_at, fires_between, jitter_offset, next_fire, plan_fire
from schemas.schedule import Schedule, ScheduleTargets

NY = ZoneInfo("America/New_York")
TARGETS = ScheduleTargets(contexts=["prod"])


def cron(expr: str, zone: str = "UTC", **extra: object) -> Schedule:
    return Schedule(name="t", predicate="p", targets=TARGETS, cron=expr, timezone=zone, **extra)


def every(seconds: float, anchor: datetime, **extra: object) -> Schedule:
    return Schedule(
        name="t",
        predicate="p",
        targets=TARGETS,
        interval_seconds=seconds,
        created_at=anchor,
        **extra,
    )


def walk(schedule: Schedule, start: datetime, count: int) -> list[datetime]:
    out, current = [], start
    for _ in range(count):
        current = next_fire(schedule, current)
        out.append(current)
    return out


def local(moment: datetime, zone: ZoneInfo) -> str:
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z")


@pytest.mark.parametrize(
    ("zone", "expected_utc"),
    [
        ("UTC", "2026-06-15 09:00"),
        ("Europe/Paris", "2026-06-15 07:00"),  # CEST, UTC+2
        ("Asia/Kolkata", "2026-06-15 03:30"),  # UTC+5:30, no DST
        ("America/Los_Angeles", "2026-06-15 16:00"),  # PDT, UTC-7
        ("Australia/Sydney", "2026-06-15 23:00"),  # AEST in June, UTC+10 (fires 09:00 on the 16th)
    ],
)
def test_cron_reads_the_expression_in_its_zone(zone: str, expected_utc: str) -> None:
    schedule = cron("0 9 * * *", zone)
    fire = next_fire(schedule, datetime(2026, 6, 15, 0, 0, tzinfo=UTC))
    assert fire.tzinfo == UTC
    assert fire.strftime("%Y-%m-%d %H:%M") == expected_utc
    assert fire.astimezone(ZoneInfo(zone)).hour == 9


def test_spring_forward_fires_a_skipped_time_once_just_after_the_gap() -> None:
    # 2026-03-08 in New York: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist.
    fires = walk(cron("30 2 * * *", "America/New_York"), datetime(2026, 3, 6, 12, tzinfo=UTC), 3)
    assert [local(f, NY) for f in fires] == [
        "2026-03-07 02:30 EST",
        "2026-03-08 03:00 EDT",
        "2026-03-09 02:30 EDT",
    ]


def test_fall_back_fires_a_fixed_time_job_once() -> None:
    # 2026-11-01 in New York: 01:00-02:00 happens twice (EDT, then EST).
    fires = walk(cron("30 1 * * *", "America/New_York"), datetime(2026, 10, 30, 12, tzinfo=UTC), 3)
    assert [local(f, NY) for f in fires] == [
        "2026-10-31 01:30 EDT",
        "2026-11-01 01:30 EDT",
        "2026-11-02 01:30 EST",
    ]
    assert fires[2] - fires[1] == timedelta(hours=25)


def test_fall_back_keeps_every_real_half_hour_for_wildcard_hour_jobs() -> None:
    start = datetime(2026, 11, 1, 4, 50, tzinfo=UTC)  # 00:50 EDT
    fires = walk(cron("*/30 * * * *", "America/New_York"), start, 5)
    assert [local(f, NY) for f in fires] == [
        "2026-11-01 01:00 EDT",
        "2026-11-01 01:30 EDT",
        "2026-11-01 01:00 EST",
        "2026-11-01 01:30 EST",
        "2026-11-01 02:00 EST",
    ]
    gaps = {b - a for a, b in itertools.pairwise(fires)}
    assert gaps == {timedelta(minutes=30)}


def test_fall_back_starting_inside_the_repeated_hour() -> None:
    schedule = cron("30 1 * * *", "America/New_York")
    inside_second_pass = datetime(2026, 11, 1, 6, 10, tzinfo=UTC)  # 01:10 EST
    assert local(next_fire(schedule, inside_second_pass), NY) == "2026-11-02 01:30 EST"


def test_europe_and_half_hour_dst_zones() -> None:
    london = ZoneInfo("Europe/London")
    fires = walk(cron("30 1 * * *", "Europe/London"), datetime(2026, 3, 28, 12, tzinfo=UTC), 2)
    assert [local(f, london) for f in fires] == ["2026-03-29 02:00 BST", "2026-03-30 01:30 BST"]
    lord_howe = ZoneInfo("Australia/Lord_Howe")  # springs forward by 30 minutes
    fires = walk(cron("15 2 * * *", "Australia/Lord_Howe"), datetime(2026, 10, 3, 0, tzinfo=UTC), 2)
    assert [f.astimezone(lord_howe).strftime("%d %H:%M") for f in fires] == ["04 02:30", "05 02:15"]


def test_interval_is_real_time_across_dst() -> None:
    anchor = datetime(2026, 3, 8, 5, 0, tzinfo=UTC)  # 00:00 EST
    fires = walk(every(3600, anchor), anchor, 4)
    assert [f - anchor for f in fires] == [timedelta(hours=h) for h in (1, 2, 3, 4)]
    assert next_fire(every(3600, anchor), anchor - timedelta(days=1)) == anchor


def test_interval_grid_stays_anchored_after_a_long_time() -> None:
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    schedule = every(900, anchor)
    fire = next_fire(schedule, anchor + timedelta(days=200, seconds=1))
    assert (fire - anchor).total_seconds() % 900 == 0
    assert fire - (anchor + timedelta(days=200)) == timedelta(seconds=900)


def test_fires_between_counts_instants() -> None:
    schedule = cron("0 * * * *")
    start = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    assert len(fires_between(schedule, start, start + timedelta(hours=5))) == 6


def test_on_time_fire_is_fired() -> None:
    schedule = cron("0 * * * *")
    at = datetime(2026, 1, 1, 10, tzinfo=UTC)
    decision = plan_fire(schedule, at, at + timedelta(seconds=3), grace_seconds=60)
    assert decision.fire_at == at
    assert decision.missed == 0
    assert decision.next_at == at + timedelta(hours=1)


@pytest.mark.parametrize("policy", ["skip", "run_once"])
def test_outage_ending_just_after_an_instant(policy: str) -> None:
    schedule = cron("0 * * * *", misfire=policy)
    first_missed = datetime(2026, 1, 1, 5, tzinfo=UTC)
    now = datetime(2026, 1, 1, 10, 0, 20, tzinfo=UTC)  # 10:00 is within grace
    decision = plan_fire(schedule, first_missed, now, grace_seconds=60)
    assert decision.fire_at == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert decision.missed == 5
    assert decision.next_at == datetime(2026, 1, 1, 11, tzinfo=UTC)


def test_skip_after_outage_fires_nothing_until_the_next_future_instant() -> None:
    schedule = cron("0 * * * *", misfire="skip")
    decision = plan_fire(
        schedule,
        datetime(2026, 1, 1, 5, tzinfo=UTC),
        datetime(2026, 1, 1, 10, 30, tzinfo=UTC),
        grace_seconds=60,
    )
    assert decision.fire_at is None
    assert decision.missed == 6
    assert decision.next_at == datetime(2026, 1, 1, 11, tzinfo=UTC)


def test_run_once_after_outage_fires_once_for_all_missed() -> None:
    schedule = cron("0 * * * *", misfire="run_once")
    decision = plan_fire(
        schedule,
        datetime(2026, 1, 1, 5, tzinfo=UTC),
        datetime(2026, 1, 1, 10, 30, tzinfo=UTC),
        grace_seconds=60,
    )
    assert decision.fire_at == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert decision.missed == 5
    assert decision.next_at == datetime(2026, 1, 1, 11, tzinfo=UTC)


def test_jitter_is_bounded_and_the_same_for_every_replica() -> None:
    schedule = cron("0 * * * *", jitter_seconds=30)
    at = datetime(2026, 1, 1, 10, tzinfo=UTC)
    offsets = {jitter_offset(schedule, at + timedelta(hours=h)) for h in range(50)}
    assert all(0 <= o < 30 for o in offsets)
    assert len(offsets) > 40  # spread, not one constant
    assert jitter_offset(schedule, at) == jitter_offset(schedule.model_copy(), at)
    assert due_at(schedule, at) - at == timedelta(seconds=jitter_offset(schedule, at))
    assert jitter_offset(cron("0 * * * *"), at) == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression"),
        ({"cron": "* * * *"}, "five fields"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "0 * * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "0 * * * *", "interval_seconds": 60}, "exactly one"),
        ({}, "exactly one"),
    ],
)
def test_invalid_schedules_are_refused_with_a_clear_message(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        Schedule(name="t", predicate="p", targets=TARGETS, **fields)  # type: ignore[arg-type]


def test_targets_need_exactly_one_kind() -> None:
    with pytest.raises(ValidationError, match="exactly one kind"):
        ScheduleTargets(contexts=["a"], snapshots=["b"])
    with pytest.raises(ValidationError, match="exactly one kind"):
        ScheduleTargets()


def test_interval_floor() -> None:
    schedule = every(30, datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="under the minimum of 1m"):
        schedule.check_interval_floor(60)
    every(60, datetime(2026, 1, 1, tzinfo=UTC)).check_interval_floor(60)
