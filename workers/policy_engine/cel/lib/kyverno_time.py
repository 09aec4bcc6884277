"""Kyverno's ``time`` library: ``time.now()``, ``time.truncate(t, d)``, ``time.toCron(t)``, for
a Kyverno ValidatingPolicy.

* ``time.now()``: the check's clock (UTC) as the check runs, as Kyverno reads its own clock
  when it evaluates (a part of a policy that reads no object may be computed once a run:
  probes/run_constants.py). A verdict that reads it is the verdict a check at that moment
  gives: the same stored object may be judged otherwise at another time (an image's age, a
  maintenance window), which is what such a policy asks.
* ``time.truncate(t, d)``: ``t`` rounded down to a multiple of ``d`` counted from Go's zero
  time (0001-01-01T00:00:00Z, not the Unix epoch: a week truncates to a Monday), as Go's
  ``Time.Truncate``; ``d`` of zero or less gives ``t`` unchanged.
* ``time.toCron(t)``: ``"minute hour day month weekday"`` of ``t`` in UTC, weekday 0 for
  Sunday (``"30 15 2 1 4"`` for 2025-01-02T15:30:00Z).

Timestamps and durations reach these functions with microseconds (the runtime's Python
bindings keep no nanoseconds): a timestamp written with nanoseconds loses them in
``truncate``'s answer. Each answers only while an imported Kyverno ValidatingPolicy is run.
"""

from __future__ import annotations

import datetime

from workers.policy_engine.cel.lib.base import Overload
from workers.policy_engine.cel.lib.kyverno_resource import require_kyverno_policy

_GO_ZERO = datetime.datetime(1, 1, 1, tzinfo=datetime.UTC)


def _utc(value: datetime.datetime) -> datetime.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC)


def now() -> datetime.datetime:
    require_kyverno_policy("time.now")
    return datetime.datetime.now(datetime.UTC)


def truncate(value: datetime.datetime, step: datetime.timedelta) -> datetime.datetime:
    require_kyverno_policy("time.truncate")
    value = _utc(value)
    if step <= datetime.timedelta(0):
        return value
    since_zero = value - _GO_ZERO
    return value - since_zero % step


def to_cron(value: datetime.datetime) -> str:
    require_kyverno_policy("time.toCron")
    value = _utc(value)
    weekday = value.isoweekday() % 7  # Go: Sunday is 0
    return f"{value.minute} {value.hour} {value.day} {value.month} {weekday}"


OVERLOADS = [
    Overload("time.now", "time_now", (), "timestamp", now),
    Overload("time.truncate", "time_truncate", ("timestamp", "duration"), "timestamp",
             truncate),
    Overload("time.toCron", "time_to_cron", ("timestamp",), "string", to_cron),
]  # fmt: skip
