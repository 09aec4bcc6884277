"""Kyverno's time library (``time.now()``, ``time.truncate(t, d)``, ``time.toCron(t)``): the
check's clock, Go's ``Time.Truncate`` (counted from Go's zero time) and a cron line of the
UTC time; only inside a Kyverno ValidatingPolicy."""

from __future__ import annotations

import datetime

import pytest

from tests.policy_engine.cel.lib.kyverno_support import in_kyverno_policy
from tests.policy_engine.cel.lib.support import fails, holds, value

TRUNCATED = [
    ("2024-06-30T22:59:59Z", "15m", "2024-06-30T22:45:00Z"),
    ("2024-06-30T22:59:59.999Z", "1s", "2024-06-30T22:59:59Z"),
    ("2024-06-30T22:59:59Z", "24h", "2024-06-30T00:00:00Z"),
    # a week counts from Go's zero time (a Monday), not from the Unix epoch (a Thursday)
    ("2024-07-04T12:00:00Z", "168h", "2024-07-01T00:00:00Z"),
    # a duration of zero or less leaves the timestamp as it is
    ("2024-06-30T22:59:59Z", "0s", "2024-06-30T22:59:59Z"),
    ("2024-06-30T22:59:59Z", "-1h", "2024-06-30T22:59:59Z"),
]
CRON = [
    ("2024-06-30T22:05:00Z", "5 22 30 6 0"),  # a Sunday is 0
    ("2024-12-31T00:00:00Z", "0 0 31 12 2"),
    ("2024-03-01T01:30:00+02:00", "30 23 29 2 4"),  # in UTC: the day before
]


@pytest.mark.parametrize(("at", "step", "expected"), TRUNCATED)
def test_truncate_rounds_down_as_go_does(at: str, step: str, expected: str) -> None:
    with in_kyverno_policy():
        holds(f"time.truncate(timestamp('{at}'), duration('{step}')) == timestamp('{expected}')")


@pytest.mark.parametrize(("at", "expected"), CRON)
def test_to_cron_writes_minute_hour_day_month_weekday(at: str, expected: str) -> None:
    with in_kyverno_policy():
        assert value(f"time.toCron(timestamp('{at}'))") == expected


def test_now_is_the_check_s_clock() -> None:
    before = datetime.datetime.now(datetime.UTC)
    with in_kyverno_policy():
        now = value("time.now()")
        holds("time.now() - duration('3h') < time.now()")
    after = datetime.datetime.now(datetime.UTC)
    assert before <= now <= after


def test_only_timestamps_and_durations_are_taken() -> None:
    with in_kyverno_policy():
        fails("time.toCron('2024-01-01T00:00:00Z') == ''", match="no matching overload")
        fails("time.truncate(timestamp('2024-01-01T00:00:00Z'), 60) == time.now()",
              match="no matching overload")  # fmt: skip


def test_outside_a_kyverno_policy_a_call_gives_no_value() -> None:
    fails("time.now() > timestamp('2020-01-01T00:00:00Z')", match="Kyverno's library")
    fails("time.toCron(timestamp('2020-01-01T00:00:00Z')) != ''", match="Kyverno's library")
