"""The lost-run sweeper against a real redis-server used as store and broker.

And against a Redis Sentinel broker: a real ``redis-server --sentinel`` watching
the broker's redis-server (with a replica when a failover is tested), the store
on the tests' own redis-server.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from assay.redis_process import RedisProcess
from schemas.settings import AssaySettings, load_settings
from tests.fleet_support import finished_report, snapshot_request, wait_until
from tests.sentinel_support import SentinelBroker, sentinel_settings
from workers.fleet.broker import broker_redis, queue_name
from workers.fleet.dispatch import Dispatcher
from workers.fleet.recovery import LostRunSweeper, broker_run_ids, start_sweeper
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


# --- a Redis Sentinel broker --------------------------------------------------------------


def queued_on(server: RedisProcess, settings: AssaySettings) -> list[str]:
    """Run ids waiting in the fleet's queue on this very server (not through a sentinel)."""
    from workers.fleet.recovery import _task_id

    raw = redis.Redis(port=server.port, decode_responses=True)
    try:
        return [t for t in map(_task_id, raw.lrange(queue_name(settings), 0, -1)) if t]
    finally:
        raw.close()


def test_a_workers_sweeper_on_a_sentinel_broker_sends_a_lost_run_again(
    redis_url: str, sentinel_broker: SentinelBroker
) -> None:
    """What a worker starts (``start_sweeper``) finds the broker through the sentinel."""
    settings = sentinel_settings(redis_url, sentinel_broker, broker_visibility_timeout_seconds=2)
    store = VerdictStore.from_settings(settings)
    dispatcher = Dispatcher.from_settings(settings, store)
    alive = snapshot_request()
    dispatcher.submit(alive)  # sent through the Sentinel transport
    lost = snapshot_request()
    store.register_run(lost)  # registered, but its message never reached the broker
    assert queued_on(sentinel_broker.master, settings) == [alive.run_id]

    stop = start_sweeper(settings, store, dispatcher)
    assert stop is not None, "no sweeper on a sentinel:// broker"
    try:
        # silent for the visibility timeout (2 s), then sent again by the sweeper's thread
        assert wait_until(
            lambda: lost.run_id in queued_on(sentinel_broker.master, settings), timeout=20
        ), "the lost run was never sent again"
        assert sorted(queued_on(sentinel_broker.master, settings)) == sorted(
            [alive.run_id, lost.run_id]
        )
    finally:
        stop.set()
        dispatcher.close()


def test_the_sweeper_follows_a_sentinel_failover_to_the_new_master(
    redis_url: str, sentinel_broker: SentinelBroker, tmp_path: Path
) -> None:
    """The broker's master dies and the sentinel promotes its replica: the same sweeper
    then reads the new master's queue and sends its lost runs there."""
    old = sentinel_broker.master
    replica = RedisProcess(data_dir=tmp_path / "replica").start()
    try:
        to_replica = redis.Redis(port=replica.port, decode_responses=True)
        to_replica.replicaof("127.0.0.1", str(old.port))
        assert wait_until(
            lambda: to_replica.info("replication").get("master_link_status") == "up", timeout=20
        )
        assert wait_until(lambda: sentinel_broker.knows_replica(replica.port), timeout=20)

        settings = sentinel_settings(redis_url, sentinel_broker)
        store = VerdictStore.from_settings(settings)
        dispatcher = Dispatcher.from_settings(settings, store)
        sweeper = LostRunSweeper(
            store,
            dispatcher,
            broker_redis(settings),
            queue=queue_name(settings),
            lost_after_seconds=30,
        )
        later = datetime.now(UTC) + timedelta(seconds=31)
        before = snapshot_request()
        store.register_run(before)
        assert sweeper.sweep_once(now=later) == [before.run_id]
        assert queued_on(old, settings) == [before.run_id]
        assert redis.Redis(port=old.port).wait(1, 5000) == 1  # the replica has it too

        old.stop()
        assert wait_until(
            lambda: sentinel_broker.named_master_port() == replica.port, timeout=30
        ), "the sentinel did not promote the replica"

        after = snapshot_request()
        store.register_run(after)
        later = datetime.now(UTC) + timedelta(seconds=31)
        # the message of `before` is found on the new master: only `after` is sent
        assert sweeper.sweep_once(now=later) == [after.run_id]
        assert sorted(queued_on(replica, settings)) == sorted([before.run_id, after.run_id])
        dispatcher.close()
        to_replica.close()
    finally:
        replica.stop()
