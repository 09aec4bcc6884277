"""The timer set in a real Redis: claim with lease, ack, requeue, replacement, markers."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import redis as redis_lib

from workers.fleet.timers import TimerEntry, TimerStore

T0 = 1_900_000_000.0


@pytest.fixture
def client(redis_url: str) -> redis_lib.Redis:
    return redis_lib.Redis.from_url(redis_url, decode_responses=True)


@pytest.fixture
def timers(client: redis_lib.Redis) -> TimerStore:
    return TimerStore(client, "t")


def entry(timer_id: str, due: float, **extra: object) -> TimerEntry:
    return TimerEntry(id=timer_id, kind="deferred", due=due, run_id=timer_id, **extra)  # type: ignore[arg-type]


def test_only_due_timers_are_claimed_in_due_order(timers: TimerStore) -> None:
    timers.put(entry("late", T0 + 5))
    timers.put(entry("b", T0 + 1))
    timers.put(entry("a", T0))
    assert [c.id for c in timers.claim(T0 + 1, lease_seconds=30, limit=10)] == ["a", "b"]
    assert timers.claim(T0 + 1, 30, 10) == []
    assert timers.counts() == (1, 2)


def test_claim_moves_to_in_flight_and_ack_removes(
    timers: TimerStore, client: redis_lib.Redis
) -> None:
    timers.put(entry("x", T0))
    [claimed] = timers.claim(T0, 30, 10)
    assert claimed.entry is not None and claimed.entry.run_id == "x"
    assert client.zscore("t:timers:inflight", "x") == T0 + 30
    assert timers.ack(claimed.entry) == 1
    assert timers.counts() == (0, 0)
    assert timers.get("x") is None
    assert timers.ack(claimed.entry) == 0  # a second ack changes nothing


def test_a_dead_claimer_loses_nothing(timers: TimerStore) -> None:
    timers.put(entry("x", T0))
    assert len(timers.claim(T0, lease_seconds=30, limit=10)) == 1
    # the claimer dies here; nobody acks. Before the lease ends nothing happens:
    assert timers.requeue_expired(T0 + 29) == 0
    assert timers.claim(T0 + 29, 30, 10) == []
    # after it, the timer is back at its original due instant and claimable again
    assert timers.requeue_expired(T0 + 31) == 1
    [second] = timers.claim(T0 + 31, 30, 10)
    assert second.id == "x" and second.entry is not None
    assert second.entry.due == T0
    assert timers.ack(second.entry) == 1
    assert timers.counts() == (0, 0)


def test_ack_puts_the_successor_in_place(timers: TimerStore) -> None:
    timers.put(entry("s", T0))
    [claimed] = timers.claim(T0, 30, 10)
    assert claimed.entry is not None
    assert timers.ack(claimed.entry, entry("s", T0 + 3600)) == 1
    assert timers.counts() == (1, 0)
    assert timers.next_due() == T0 + 3600
    with pytest.raises(ValueError):
        timers.ack(claimed.entry, entry("other", T0))


def test_a_replacement_written_while_in_flight_wins_over_the_successor(
    timers: TimerStore,
) -> None:
    timers.put(entry("s", T0))
    [claimed] = timers.claim(T0, 30, 10)
    timers.put(entry("s", T0 + 10))  # e.g. the schedule changed, or the run parked again
    assert timers.counts() == (0, 1)  # not duplicated into due while in flight
    assert claimed.entry is not None
    assert timers.ack(claimed.entry, entry("s", T0 + 3600)) == 2
    assert timers.counts() == (1, 0)
    assert timers.next_due() == T0 + 10


def test_release_gives_the_timer_back_early(timers: TimerStore) -> None:
    timers.put(entry("x", T0))
    timers.claim(T0, 30, 10)
    assert timers.release("x", T0 + 2)
    assert timers.claim(T0 + 1, 30, 10) == []
    assert [c.id for c in timers.claim(T0 + 2, 30, 10)] == ["x"]


def test_remove_while_in_flight_drops_the_successor(timers: TimerStore) -> None:
    timers.put(entry("s", T0))
    [claimed] = timers.claim(T0, 30, 10)
    assert timers.remove("s")
    assert claimed.entry is not None
    assert timers.ack(claimed.entry, entry("s", T0 + 60)) == 0
    assert timers.counts() == (0, 0)


def test_enqueue_markers(timers: TimerStore) -> None:
    assert timers.begin_enqueue("f1", "replica-a", T0, 10).state == "acquired"
    held = timers.begin_enqueue("f1", "replica-b", T0 + 4, 10)
    assert held.state == "held" and held.retry_after_seconds == pytest.approx(6)
    assert timers.begin_enqueue("f1", "replica-a", T0 + 5, 10).state == "acquired"  # own retry
    timers.finish_enqueue("f1")
    assert timers.begin_enqueue("f1", "replica-b", T0 + 6, 10).state == "sent"
    assert timers.was_enqueued("f1")
    # a holder that died: its hold runs out and another claimer takes over
    timers.begin_enqueue("f2", "replica-a", T0, 10)
    timers.abandon_enqueue("f2", "replica-b")  # not the owner: no effect
    assert timers.begin_enqueue("f2", "replica-b", T0 + 9, 10).state == "held"
    assert timers.begin_enqueue("f2", "replica-b", T0 + 11, 10).state == "acquired"
    timers.abandon_enqueue("f2", "replica-b")
    assert timers.begin_enqueue("f2", "replica-c", T0 + 12, 10).state == "acquired"


def test_an_acknowledged_timers_markers_go_and_its_stale_claim_sends_nothing(
    timers: TimerStore, client: redis_lib.Redis
) -> None:
    """Markers are kept while their timer is in flight, not a week per fire: acknowledging the
    timer drops them, and a claimer still holding the old claim (it stalled while another
    replica took the timer over and sent it) is told the fires are sent."""
    timers.put(entry("s", T0))
    [claimed] = timers.claim(T0, 30, 10)
    assert claimed.entry is not None
    claims = {"s.a": claimed.entry, "s.b": claimed.entry}
    got = timers.begin_enqueue_many(["s.a", "s.b"], "replica-a", T0, 10, claims)
    assert {claim.state for claim in got.values()} == {"acquired"}
    timers.finish_enqueue("s.a")
    assert timers.finish_and_ack(["s.b"], claimed.entry, settled=["s.a", "s.b"]) == 1
    assert client.keys("t:enqueued:*") == []
    stale = timers.begin_enqueue_many(["s.a", "s.b"], "replica-b", T0 + 40, 10, claims)
    assert {claim.state for claim in stale.values()} == {"sent"}
    assert client.keys("t:enqueued:*") == []


def test_concurrent_claimers_each_get_disjoint_timers(
    client: redis_lib.Redis, redis_url: str
) -> None:
    setup = TimerStore(client, "t")
    for index in range(2000):
        setup.put(entry(f"r{index}", T0 + index / 1000))
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def claimer() -> None:
        own = TimerStore(redis_lib.Redis.from_url(redis_url, decode_responses=True), "t")
        while True:
            batch = own.claim(T0 + 10, 30, 25)
            if not batch:
                return
            for claimed in batch:
                assert claimed.entry is not None
                own.ack(claimed.entry)
            with lock:
                seen.update(c.id for c in batch)

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(seen) == 2000
    assert max(seen.values()) == 1
    assert setup.counts() == (0, 0)


def test_bytes_mode_clients_work_too(redis_url: str) -> None:
    timers = TimerStore(redis_lib.Redis.from_url(redis_url), "t")
    timers.put(entry("x", T0))
    [claimed] = timers.claim(T0, 30, 10)
    assert claimed.id == "x" and claimed.entry is not None
    assert timers.begin_enqueue("f", "me", T0, 5).state == "acquired"
    assert timers.begin_enqueue("f", "you", T0, 5).state == "held"
    timers.finish_enqueue("f")
    assert timers.begin_enqueue("f", "you", T0, 5).state == "sent"
