"""The lost-run sweeper against a real redis-server used as store and broker."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis

from schemas.settings import load_settings
from tests.fleet_support import finished_report, snapshot_request
from workers.fleet.dispatch import Dispatcher
from workers.fleet.recovery import LostRunSweeper, broker_run_ids
from workers.fleet.redis_client import connect
from workers.fleet.store import VerdictStore

pytestmark = pytest.mark.integration


@pytest.fixture
def parts(redis_url: str) -> Iterator[tuple[VerdictStore, Dispatcher, LostRunSweeper]]:
    settings = load_settings(redis_url=redis_url)
    store = VerdictStore.from_settings(settings)
    dispatcher = Dispatcher.from_settings(settings, store)
    sweeper = LostRunSweeper(
        store, dispatcher, connect(redis_url), queue="assay.evaluations", lost_after_seconds=30
    )
    yield store, dispatcher, sweeper
    dispatcher.close()


def _queued_ids(redis_url: str) -> list[str]:
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    from workers.fleet.recovery import _task_id

    return [t for t in map(_task_id, raw.lrange("assay.evaluations", 0, -1)) if t]


def test_a_run_whose_message_vanished_is_sent_again(
    redis_url: str, parts: tuple[VerdictStore, Dispatcher, LostRunSweeper]
) -> None:
    store, dispatcher, sweeper = parts
    alive = snapshot_request()
    dispatcher.submit(alive)  # registered and in the queue
    lost = snapshot_request()
    store.register_run(lost)  # registered, but its message never reached the broker
    finished = snapshot_request()
    store.register_run(finished)
    store.record_verdict(finished_report(finished, "true"))

    assert broker_run_ids(sweeper.broker, "assay.evaluations") == {alive.run_id}
    assert sweeper.sweep_once() == [], "nothing is silent for 30 s yet"

    later = datetime.now(UTC) + timedelta(seconds=31)
    assert sweeper.sweep_once(now=later) == [lost.run_id]
    assert sorted(_queued_ids(redis_url)) == sorted([alive.run_id, lost.run_id])
    assert sweeper.sweep_once(now=later) == [], "a re-sent run is not sent again at once"


def test_reserved_runs_are_left_alone_and_parked_ones_wait_for_their_instant(
    redis_url: str, parts: tuple[VerdictStore, Dispatcher, LostRunSweeper]
) -> None:
    store, dispatcher, sweeper = parts
    reserved = snapshot_request()
    dispatcher.submit(reserved)
    raw = redis.Redis.from_url(redis_url)
    message = raw.rpop("assay.evaluations")  # what a worker's BRPOP + unacked write leaves
    assert message is not None
    raw.hset("unacked", "tag-1", b"[" + message + b', "assay.evaluations", "assay.evaluations"]')

    parked = snapshot_request()
    store.register_run(parked)
    wake = datetime.now(UTC) + timedelta(seconds=5)
    report = finished_report(parked, "true").model_copy(
        update={"status": "waiting", "verdict": None, "wake_at": wake}
    )
    store.mark_waiting(report)

    assert sweeper.sweep_once(now=datetime.now(UTC) + timedelta(seconds=20)) == []
    assert _queued_ids(redis_url) == [], "a parked run waits for its wake-up instant"
    # long after its wake-up with no continuation in the broker, the parked run is resumed
    assert sweeper.sweep_once(now=datetime.now(UTC) + timedelta(minutes=5)) == [parked.run_id]
    assert _queued_ids(redis_url) == [parked.run_id], "the reserved run was never re-sent"
