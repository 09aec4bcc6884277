"""The notifier's view of the change stream against a real redis-server: one consumer group
per sink, acknowledgement is final, dead consumers' changes are taken over, live ones' are not,
attempts survive a takeover, dead letters are kept and counted."""

from __future__ import annotations

import time

import pytest

from schemas.settings import AssaySettings
from schemas.verdict import VerdictKind
from tests.alerting_support import record
from workers.fleet.notify_feed import SinkFeed, Told
from workers.fleet.redis_client import connect
from workers.fleet.store import VerdictStore

pytestmark = pytest.mark.integration


@pytest.fixture
def store(redis_url: str) -> VerdictStore:
    return VerdictStore.from_settings(AssaySettings(key_prefix="nf"), client=connect(redis_url))


def flips(store: VerdictStore, *verdicts: str) -> None:
    for verdict in verdicts:
        record(store, verdict)


def test_every_sink_reads_every_change_and_first_verdicts_are_not_changes(
    store: VerdictStore,
) -> None:
    ops, chat = SinkFeed(store, "ops", "a"), SinkFeed(store, "chat", "a")
    assert ops.ensure_group() and chat.ensure_group()
    assert not ops.ensure_group(), "a second start must not move the group"
    flips(store, "true", "false", "true")
    for feed in (ops, chat):
        entries = feed.read_new(10, None)
        assert [(e.change.from_verdict, e.change.to_verdict) for e in entries if e.change] == [
            (VerdictKind.TRUE, VerdictKind.FALSE),
            (VerdictKind.FALSE, VerdictKind.TRUE),
        ]


def test_a_sink_hears_only_changes_recorded_after_its_first_start(store: VerdictStore) -> None:
    flips(store, "true", "false")
    feed = SinkFeed(store, "late", "a")
    feed.ensure_group()
    assert feed.read_new(10, None) == []
    flips(store, "true")
    assert len(feed.read_new(10, None)) == 1


def test_an_acknowledged_change_never_comes_back(store: VerdictStore) -> None:
    first = SinkFeed(store, "ops", "first")
    first.ensure_group()
    flips(store, "true", "false", "true")
    delivered, held = first.read_new(10, None)
    assert first.ack(delivered, "delivered", Told(VerdictKind.FALSE, 1))
    assert not first.ack(delivered, "delivered"), "a second ack changes nothing"
    time.sleep(0.05)
    restarted = SinkFeed(store, "ops", "restarted")
    assert restarted.read_new(10, None) == []
    taken = restarted.claim_stale(min_idle_ms=10, count=10)
    assert [e.entry_id for e in taken] == [held.entry_id], "only the unacknowledged one"
    status = restarted.status("webhook")
    assert (status.delivered, status.pending, status.lag) == (1, 1, 0)


def test_a_live_consumer_keeps_its_changes_and_a_silent_one_loses_them(
    store: VerdictStore,
) -> None:
    alive, other = SinkFeed(store, "ops", "alive"), SinkFeed(store, "ops", "other")
    alive.ensure_group()
    flips(store, "true", "false")
    (entry,) = alive.read_new(10, None)
    for _ in range(4):
        time.sleep(0.1)
        assert alive.keep([entry.entry_id]) == [entry.entry_id]
        assert other.claim_stale(min_idle_ms=250, count=10) == []
    time.sleep(0.3)  # alive stops answering
    assert [e.entry_id for e in other.claim_stale(min_idle_ms=250, count=10)] == [entry.entry_id]
    assert alive.keep([entry.entry_id]) == [], "the old owner learns it lost the change"


def test_a_released_change_is_taken_over_at_once(store: VerdictStore) -> None:
    leaving, staying = SinkFeed(store, "ops", "leaving"), SinkFeed(store, "ops", "staying")
    leaving.ensure_group()
    flips(store, "true", "false")
    (entry,) = leaving.read_new(10, None)
    assert leaving.release([entry.entry_id]) == [entry.entry_id]
    assert [e.entry_id for e in staying.claim_stale(min_idle_ms=60_000, count=10)] == [
        entry.entry_id
    ]


def test_attempts_survive_a_takeover_and_dead_letters_are_kept_and_counted(
    store: VerdictStore,
) -> None:
    dying, heir = SinkFeed(store, "ops", "dying"), SinkFeed(store, "ops", "heir")
    dying.ensure_group()
    flips(store, "true", "false")
    (entry,) = dying.read_new(10, None)
    assert [dying.begin_attempt(entry.entry_id) for _ in range(2)] == [1, 2]
    time.sleep(0.05)
    (taken,) = heir.claim_stale(min_idle_ms=10, count=10)
    assert heir.attempts(taken.entry_id) == 2
    assert heir.begin_attempt(taken.entry_id) == 3
    assert heir.dead_letter(taken, 3, "sink ops: answered HTTP 500")
    (dead,) = heir.dead_letters()
    assert dead["entry_id"] == entry.entry_id and dead["to"] == "false"
    assert dead["attempts"] == "3" and "HTTP 500" in dead["error"]
    status = heir.status("webhook")
    assert (status.dead_letters, status.retries, status.pending, status.delivered) == (1, 2, 0, 0)
    assert heir.attempts(entry.entry_id) == 0, "a finished change leaves no attempt count"


def test_told_only_moves_forward_and_absent_mode_never_overwrites(store: VerdictStore) -> None:
    feed = SinkFeed(store, "ops", "a")
    feed.ensure_group()
    flips(store, "true", "false", "true", "false", "true")
    first, second, third, fourth = feed.read_new(10, None)
    check = first.change.check_id if first.change else ""
    feed.ack(second, "delivered", Told(VerdictKind.TRUE, 200))
    feed.ack(first, "delivered", Told(VerdictKind.FALSE, 100))  # older: ignored
    assert feed.told(check) == Told(VerdictKind.TRUE, 200)
    feed.ack(third, "filtered", Told(VerdictKind.FALSE, 300), "absent")  # already known
    assert feed.told(check) == Told(VerdictKind.TRUE, 200)
    feed.ack(fourth, "delivered", Told(VerdictKind.TRUE, 400))
    assert feed.told(check) == Told(VerdictKind.TRUE, 400)
    assert feed.status("webhook").filtered == 1


def test_status_of_a_sink_that_never_started(store: VerdictStore) -> None:
    status = SinkFeed(store, "nobody", "a").status("slack")
    assert not status.started and status.lag is None and status.pending == 0
