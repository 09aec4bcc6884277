"""The spend guard's Redis step (workers/fleet/spend.py) against a real redis-server.

Two SpendStore objects on one Redis are two workers; ``now_ms`` is the scripts' clock
seam, so lease expiry and period rollovers need no sleeping.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime

import pytest

from schemas.request import SnapshotTarget
from schemas.settings import load_settings
from schemas.spend import SpendCeiling
from tests.boundary_support import dump_keys
from tests.fleet_support import snapshot_request
from workers.engine.spend_guard import SpendRefused
from workers.fleet.redis_client import connect
from workers.fleet.spend import SWEEP_PER_CALL, Scope, SpendStore
from workers.fleet.spend_reservations import FleetSpendGuard

pytestmark = pytest.mark.integration

T0 = int(datetime(2030, 1, 1, 10, 30, tzinfo=UTC).timestamp() * 1000)
HOUR = [Scope("fleet-hour", default_tokens=10_000, ttl_seconds=3600)]
LEASE = 60_000


def store(redis_url: str, prefix: str = "sp") -> SpendStore:
    return SpendStore(connect(redis_url), prefix)


def hour_record(spend: SpendStore, now_ms: int = T0) -> dict[str, str]:
    stamp = datetime.fromtimestamp(now_ms / 1000, UTC).strftime("%Y%m%d%H")
    return spend.client.hgetall(spend.key("fleet", "hour", stamp))


def test_two_workers_share_a_ceiling_and_wait_for_each_others_reservations(
    redis_url: str,
) -> None:
    first, second = store(redis_url), store(redis_url)
    assert first.reserve("a", 6_000, -1, LEASE, HOUR, T0).status == "ok"
    waiting = second.reserve("b", 5_000, -1, LEASE, HOUR, T0)
    assert waiting.status == "wait", "only a's reservation stands in the way: b waits, not refused"
    assert (waiting.spent, waiting.reserved, waiting.limit) == (0, 6_000, 10_000)
    assert first.settle("a", 1_000, -1, T0) == 1
    assert second.reserve("b", 5_000, -1, LEASE, HOUR, T0).status == "ok"
    record = hour_record(first)
    assert (record["tokens"], record["reserved_tokens"], record["calls"]) == ("1000", "5000", "2")


def test_a_call_spend_alone_cannot_fit_is_refused_and_holds_nothing(redis_url: str) -> None:
    spend = store(redis_url)
    assert spend.reserve("a", 9_500, -1, LEASE, HOUR, T0).status == "ok"
    spend.settle("a", 9_000, -1, T0)
    refused = spend.reserve("b", 2_000, -1, LEASE, HOUR, T0)
    assert refused.status == "refused"
    assert (refused.resource, refused.spent, refused.limit) == ("tokens", 9_000, 10_000)
    assert refused.ceiling == "fleet-hour::2030-01-01T10"
    record = hour_record(spend)
    assert (record["tokens"], record["reserved_tokens"], record["refused"]) == ("9000", "0", "1")
    assert spend.in_flight() == 0, "a refused call leaves no reservation behind"
    assert spend.reserve("c", 900, -1, LEASE, HOUR, T0).status == "ok", "a call that fits goes"


def test_settling_twice_counts_once(redis_url: str) -> None:
    spend = store(redis_url)
    spend.reserve("a", 4_000, -1, LEASE, HOUR, T0)
    assert spend.settle("a", 700, -1, T0) == 1
    assert spend.settle("a", 700, -1, T0) == 0, "a retried settle (lost reply) changes nothing"
    assert spend.settle("never-reserved", 700, -1, T0) == -1
    assert hour_record(spend)["tokens"] == "700"


def test_a_killed_workers_reservation_is_charged_once_when_its_lease_runs_out(
    redis_url: str,
) -> None:
    survivor, killed = store(redis_url), store(redis_url)
    assert killed.reserve("dead", 3_000, -1, 1_000, HOUR, T0).status == "ok"  # then SIGKILL
    assert survivor.reserve("a", 1_000, -1, LEASE, HOUR, T0 + 500).status == "ok"
    assert "tokens" not in hour_record(survivor), "within its lease it is only held"
    # The next call after the lease ends (any worker's) releases it: charged in full, once.
    assert survivor.reserve("b", 1_000, -1, LEASE, HOUR, T0 + 2_000).status == "ok"
    record = hour_record(survivor)
    assert (record["tokens"], record["reserved_tokens"], record["expired"]) == ("3000", "2000", "1")
    assert survivor.release_expired(T0 + 3_000) == 0, "it is never charged twice"
    assert hour_record(survivor)["tokens"] == "3000"
    # The worker was only slow: its late settle corrects the charge to what the call used.
    assert killed.settle("dead", 400, -1, T0 + 4_000) == 1
    assert killed.settle("dead", 400, -1, T0 + 4_000) == 0
    survivor.settle("a", 100, -1, T0 + 4_000)
    survivor.settle("b", 200, -1, T0 + 4_000)
    record = hour_record(survivor)
    assert (record["tokens"], record["reserved_tokens"]) == ("700", "0")
    assert survivor.in_flight() == 0


def test_a_reserve_decides_only_once_every_run_out_reservation_is_charged(
    redis_url: str,
) -> None:
    # More run-out reservations than one sweep releases: the reserve asks for sweeps until
    # none is left, so spend they used stops the call (it is not admitted on stale figures).
    killed, survivor = store(redis_url), store(redis_url)
    count = SWEEP_PER_CALL * 2 + 5
    for index in range(count):
        assert killed.reserve(f"dead{index}", 60, -1, 1_000, HOUR, T0).status == "ok"
    answer = survivor.reserve("late", 3_000, -1, LEASE, HOUR, T0 + 2_000)
    assert answer.status == "refused", "133 x 60 tokens charged leave no room for 3,000"
    record = hour_record(survivor)
    assert (record["expired"], record["tokens"]) == (str(count), str(count * 60))
    assert record["reserved_tokens"] == "0" and survivor.in_flight() == 0


def test_a_sweep_told_other_period_records_than_a_reservation_holds_charges_nothing(
    redis_url: str,
) -> None:
    # The sweep touches only keys it was given: when the caller's read of a reservation's
    # period records is not what the record names, it leaves the reservation alone.
    spend = store(redis_url)
    assert spend.reserve("dead", 3_000, -1, 1_000, HOUR, T0).status == "ok"
    before = dump_keys(spend.client, "sp")
    stale = spend._sweep_script(
        keys=[spend.inflight_key, spend.events_key, spend.key("res", "dead")],
        args=[T0 + 2_000, 100, 60, "dead", 0],
    )
    assert [int(part) for part in stale] == [0, 1]
    assert dump_keys(spend.client, "sp") == before
    assert spend.release_expired(T0 + 2_000) == 1
    assert hour_record(spend)["tokens"] == "3000"


def test_concurrent_calls_never_pass_the_ceiling_and_every_token_is_counted_once(
    redis_url: str,
) -> None:
    """16 threads (workers) racing for 50,000 tokens, each call using up to its estimate."""
    ceiling = 50_000
    scopes = [Scope("fleet-hour", default_tokens=ceiling, ttl_seconds=3600)]
    used: list[int] = []
    peak: list[int] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        spend = store(redis_url)
        rng = random.Random(index)
        for call in range(40):
            rid = f"w{index}-{call}"
            while (answer := spend.reserve(rid, 1_000, -1, LEASE, scopes, T0)).status == "wait":
                time.sleep(0.001)
            if answer.status == "refused":
                return
            record = hour_record(spend)
            actual = rng.randint(100, 1_000)
            with lock:
                peak.append(int(record.get("tokens", 0)) + int(record["reserved_tokens"]))
                used.append(actual)
            spend.settle(rid, actual, -1, T0)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    record = hour_record(store(redis_url))
    assert int(record["tokens"]) == sum(used), "nothing lost, nothing counted twice"
    assert record["reserved_tokens"] == "0"
    assert max(peak) <= ceiling, "spent + held never passed the ceiling"
    assert ceiling - 1_000 < int(record["tokens"]) <= ceiling, "stopped only once it was full"


def test_calls_that_overrun_their_estimate_overshoot_by_at_most_the_calls_in_flight(
    redis_url: str,
) -> None:
    """The documented bound: spend passes a ceiling only by what admitted calls use beyond
    their estimate, so by at most (calls in flight) x (the overrun per call)."""
    ceiling, estimate, overrun, workers = 20_000, 1_000, 300, 8
    scopes = [Scope("fleet-hour", default_tokens=ceiling, ttl_seconds=3600)]
    barrier = threading.Barrier(workers)

    def worker(index: int) -> None:
        spend = store(redis_url)
        for call in range(100):
            rid = f"o{index}-{call}"
            while (answer := spend.reserve(rid, estimate, -1, LEASE, scopes, T0)).status == (
                "wait"
            ):
                time.sleep(0.001)
            if answer.status == "refused":
                return
            if call == 0:
                barrier.wait(10)  # all eight in flight at once, as on a busy fleet
            spend.settle(rid, estimate + overrun, -1, T0)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    spent = int(hour_record(store(redis_url))["tokens"])
    overshoot = max(0, spent - ceiling)
    print(f"overshoot {overshoot} tokens with {workers} calls in flight overrunning {overrun}")
    assert overshoot <= workers * overrun


def test_threshold_events_come_once_each_per_period(redis_url: str) -> None:
    spend = store(redis_url)

    def day(name: str) -> list[Scope]:
        return [Scope("schedule", "sch-1", name, default_tokens=10_000)]

    for period in ("20300101", "20300102"):
        for call in range(3):  # 3,000, 6,000, then 9,000 spent: 80% is crossed once
            spend.reserve(f"{period}-{call}", 3_000, -1, LEASE, day(period), T0)
            spend.settle(f"{period}-{call}", 3_000, -1, T0)
        for call in range(3):  # every further call is refused: 100% once
            assert spend.reserve(f"{period}-x{call}", 3_000, -1, LEASE, day(period), T0).status == (
                "refused"
            )
    events = [(e.period, e.threshold, e.spent, e.limit) for e in spend.read_events()]
    assert events == [
        ("2030-01-01", 80, 9_000, 10_000),
        ("2030-01-01", 100, 9_000, 10_000),
        ("2030-01-02", 80, 9_000, 10_000),
        ("2030-01-02", 100, 9_000, 10_000),
    ]


def test_a_schedule_day_whose_ceiling_is_reached_skips_until_the_ceiling_changes(
    redis_url: str,
) -> None:
    spend = store(redis_url)
    ceiling = SpendCeiling(tokens=8_000)
    spend.set_schedule_ceiling("sch-2", ceiling)
    scopes = [Scope("schedule", "sch-2", "20300101")]  # its own ceiling, from the store
    assert spend.skip_if_reached("sch-2", "20300101", 1, ceiling) is None
    spend.reserve("a", 6_000, -1, LEASE, scopes, T0)
    spend.settle("a", 5_000, -1, T0)
    assert spend.reserve("b", 6_000, -1, LEASE, scopes, T0).status == "refused"
    skipped = spend.skip_if_reached("sch-2", "20300101", 3, ceiling)
    assert skipped is not None and skipped.skipped_today == 3
    assert "stopped a model call on 2030-01-01" in skipped.reason
    assert spend.skip_if_reached("sch-2", "20300102", 1, ceiling) is None, "a new UTC day"
    bigger = SpendCeiling(tokens=20_000)
    spend.set_schedule_ceiling("sch-2", bigger, reopen_day="20300101")
    assert spend.skip_if_reached("sch-2", "20300101", 1, bigger) is None
    assert spend.reserve("c", 6_000, -1, LEASE, scopes, T0).status == "ok"
    assert spend.schedule_day("sch-2", "20300101").skipped_fires == 3


def test_a_batch_has_its_own_ceiling_over_the_fleets_default(redis_url: str) -> None:
    spend = store(redis_url)
    spend.set_batch_ceiling("batch-own", SpendCeiling(tokens=2_000))
    own = [Scope("batch", "batch-own", default_tokens=50_000)]
    other = [Scope("batch", "batch-other", default_tokens=50_000)]
    assert spend.reserve("a", 3_000, -1, LEASE, own, T0).status == "refused"
    assert spend.reserve("b", 3_000, -1, LEASE, other, T0).status == "ok"


def test_a_schedule_runs_spend_counts_toward_the_day_it_fired_for(redis_url: str) -> None:
    settings = load_settings(redis_url=redis_url, key_prefix="sp3")
    guard = FleetSpendGuard.from_settings(settings, connect(redis_url))
    request = snapshot_request(
        schedule_id="sch-3", scheduled_at=datetime(2030, 1, 1, 23, 59, 59, tzinfo=UTC)
    )
    ticket = guard.reserve(request, 1_500, None, time.monotonic() + 30)
    guard.settle(ticket, 900, None)
    assert guard.flush()
    assert guard.store.schedule_day("sch-3", "20300101").tokens == 900


def test_the_fleet_hour_rolls_over(redis_url: str) -> None:
    spend = store(redis_url)
    end_of_hour = int(datetime(2030, 1, 1, 10, 59, 59, 900000, tzinfo=UTC).timestamp() * 1000)
    spend.reserve("a", 9_000, -1, LEASE, HOUR, end_of_hour)
    spend.settle("a", 9_000, -1, end_of_hour)
    assert spend.reserve("b", 2_000, -1, LEASE, HOUR, end_of_hour).status == "refused"
    assert spend.reserve("c", 2_000, -1, LEASE, HOUR, end_of_hour + 100).status == "ok"


def test_the_guard_waits_within_the_deadline_then_names_the_ceiling(redis_url: str) -> None:
    settings = load_settings(
        redis_url=redis_url, key_prefix="sp4", spend_fleet_tokens_per_hour=10_000
    )
    guard = FleetSpendGuard.from_settings(settings, connect(redis_url))
    request = snapshot_request(target=SnapshotTarget(path="examples/snapshots/prod-eu"))
    holder = guard.reserve(request, 8_000, None, time.monotonic() + 30)
    started = time.monotonic()
    with pytest.raises(SpendRefused) as waited:
        guard.reserve(request, 4_000, None, time.monotonic() + 0.5)
    assert 0.3 < time.monotonic() - started < 2.0, "it waited for room, up to the deadline"
    assert "the fleet's token ceiling per UTC hour" in waited.value.message
    assert "no room before the run's deadline" in waited.value.message
    guard.settle(holder, 7_000, None)
    assert guard.flush()
    with pytest.raises(SpendRefused) as refused:
        guard.reserve(request, 4_000, None, time.monotonic() + 30)
    assert "is reached: 7,000 tokens of 10,000 tokens spent" in refused.value.message


def test_a_call_in_the_last_millisecond_of_a_year_counts_toward_that_hour_and_day(
    redis_url: str,
) -> None:
    # The UTC hour and day a call is charged to, as `assay spend` shows them, across a
    # year's end (and a leap day before it): the last millisecond stays in the old year.
    spend = store(redis_url, "sp-period")
    scopes = [
        Scope("fleet-hour", default_tokens=10_000, ttl_seconds=3600),
        Scope("fleet-day", default_tokens=10_000),
    ]
    last = datetime(2032, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    first = datetime(2033, 1, 1, tzinfo=UTC)
    for name, moment in (("old", last), ("new", first)):
        now_ms = int(moment.timestamp() * 1000)
        assert spend.reserve(name, 100, -1, LEASE, scopes, now_ms).status == "ok"
        spend.settle(name, 100, -1, now_ms)
    for moment, hour, day in (
        (last, "2032-12-31T23", "2032-12-31"),
        (first, "2033-01-01T00", "2033-01-01"),
    ):
        rows = spend.fleet_now(moment)
        assert [(r.period, r.calls, r.tokens) for r in rows] == [(hour, 1, 100), (day, 1, 100)]


def test_a_call_that_exactly_fills_the_ceiling_is_accepted(redis_url: str) -> None:
    """A ceiling of 10,000 tokens allows 10,000: the call that brings spend, or spend plus
    what other calls hold, to the ceiling itself goes; one token more does not."""
    spend = store(redis_url)
    spend.reserve("a", 6_000, -1, LEASE, HOUR, T0)
    spend.settle("a", 6_000, -1, T0)
    assert spend.reserve("b", 4_000, -1, LEASE, HOUR, T0).status == "ok", "6,000 + 4,000"
    assert spend.reserve("c", 1, -1, LEASE, HOUR, T0).status == "wait"
    spend.settle("b", 3_000, -1, T0)
    assert spend.reserve("d", 500, -1, LEASE, HOUR, T0).status == "ok"
    held = spend.reserve("e", 500, -1, LEASE, HOUR, T0)
    assert held.status == "ok", "9,000 spent + 500 held + 500 is the ceiling: it fits"
    spend.settle("d", 500, -1, T0)
    spend.settle("e", 500, -1, T0)
    assert hour_record(spend)["tokens"] == "10000", "spent to the ceiling, not past it"
    assert spend.reserve("f", 1, -1, LEASE, HOUR, T0).status == "refused"


def test_a_call_that_exactly_fills_a_cost_ceiling_is_accepted(redis_url: str) -> None:
    spend = store(redis_url)
    dollars = [Scope("fleet-day", default_cost_micro=2_000_000, ttl_seconds=86_400)]
    spend.reserve("a", 10, 1_500_000, LEASE, dollars, T0)
    spend.settle("a", 10, 1_500_000, T0)
    assert spend.reserve("b", 10, 500_000, LEASE, dollars, T0).status == "ok"
    spend.settle("b", 10, 500_000, T0)
    refused = spend.reserve("c", 10, 1, LEASE, dollars, T0)
    assert (refused.status, refused.resource) == ("refused", "cost")


@pytest.mark.parametrize(("spent", "events"), [(7_999, []), (8_000, [80]), (9_999, [80])])
def test_the_80_percent_event_comes_when_spend_reaches_80_percent(
    redis_url: str, spent: int, events: list[int]
) -> None:
    """The warning before a ceiling stops calls: at 8,000 of 10,000 tokens, not later."""
    spend = store(redis_url)
    spend.reserve("a", spent, -1, LEASE, HOUR, T0)
    spend.settle("a", spent, -1, T0)
    assert [event.threshold for event in spend.read_events()] == events


def test_the_80_percent_event_of_a_cost_ceiling(redis_url: str) -> None:
    spend = store(redis_url)
    dollars = [Scope("fleet-day", default_cost_micro=1_000_000, ttl_seconds=86_400)]
    spend.reserve("a", 10, 799_999, LEASE, dollars, T0)
    spend.settle("a", 10, 799_999, T0)
    assert spend.read_events() == []
    spend.reserve("b", 10, 1, LEASE, dollars, T0)
    spend.settle("b", 10, 1, T0)
    (event,) = spend.read_events()
    assert (event.resource, event.threshold, event.spent) == ("cost_usd", 80, 0.8)
