"""A batch fanned out in chunks queues every run exactly once, registered before it is sent.

``submit_batch`` submits targets ``FANOUT_CHUNK`` (200) at a time, each chunk
in a few round trips. What a user would notice if that went wrong, asserted
against a real redis-server with no worker (the queue is read as the worker
would find it):

* a batch bigger than one chunk: one message per target in the broker, one
  registered run per message, the tally's total right;
* a dated predicate over as many targets: every run held (its request and
  timer stored), nothing queued;
* resubmitting a batch id: the batch gains a fresh run per target (the run ids
  are new), each queued once; the tally counts them all;
* Redis refusing writes half-way through (over its maxmemory): the fan-out fails,
  and no message in the queue names a run the store does not know.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from kombu.exceptions import KombuError

from assay.client import Client
from assay.redis_process import RedisProcess
from assay.submission import FANOUT_CHUNK
from scheduler.deferred import deferred_request
from schemas.settings import AssaySettings, load_settings
from tests.fleet_support import PREDICATE, make_snapshots
from workers.fleet.broker import kombu_queue_keys, queue_name
from workers.fleet.timers import TimerStore, deferred_timer_id

TARGETS = FANOUT_CHUNK + 50  # more than one chunk, the last one partial
DATED = "on 2030-01-01T00:00:00Z, " + PREDICATE
DUE = datetime(2030, 1, 1, tzinfo=UTC)


def queued_run_ids(client: redis.Redis, settings: AssaySettings) -> list[str]:
    """The run id (Celery task id) of every message waiting in the fleet's queue."""
    ids = []
    for key in kombu_queue_keys(queue_name(settings)):
        for raw in client.lrange(key, 0, -1):
            ids.append(json.loads(raw)["headers"]["id"])
    return ids


def batch_run_ids(client: redis.Redis, settings: AssaySettings, batch_id: str) -> list[str]:
    return [str(r) for r in client.lrange(f"{settings.key_prefix}:batch:{batch_id}:runs", 0, -1)]


@pytest.fixture
def fleet(redis_url: str) -> Iterator[Client]:
    with Client(load_settings(redis_url=redis_url)) as client:
        yield client


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def test_a_batch_over_several_chunks_queues_every_run_once(
    fleet: Client, raw: redis.Redis, tmp_path: Path
) -> None:
    make_snapshots(tmp_path / "many", TARGETS)
    batch_id = fleet.start_batch(PREDICATE, snapshots=str(tmp_path / "many" / "*"))

    queued = queued_run_ids(raw, fleet.settings)
    runs = batch_run_ids(raw, fleet.settings, batch_id)
    assert len(queued) == len(set(queued)) == TARGETS
    assert sorted(queued) == sorted(runs)
    targets = set()
    for run_id in runs:
        state = fleet.run_state(run_id)
        assert state is not None and state.status == "queued" and state.batch_id == batch_id
        targets.add(state.target)
    assert len(targets) == TARGETS
    status = fleet.batch_status(batch_id)
    assert status is not None
    assert (status.total, status.pending, status.sealed) == (TARGETS, TARGETS, True)
    assert status.not_before is None


def test_a_dated_batch_over_several_chunks_holds_every_run(
    fleet: Client, raw: redis.Redis, tmp_path: Path
) -> None:
    make_snapshots(tmp_path / "dated", TARGETS)
    batch_id = fleet.start_batch(DATED, snapshots=str(tmp_path / "dated" / "*"))

    assert queued_run_ids(raw, fleet.settings) == []
    runs = batch_run_ids(raw, fleet.settings, batch_id)
    assert len(set(runs)) == TARGETS
    timers = TimerStore(raw, fleet.settings.key_prefix)
    for run_id in runs:
        held = deferred_request(raw, fleet.settings, run_id)
        assert held is not None and held.not_before == DUE
        assert fleet.due_at(run_id) == DUE
        timer = timers.get(deferred_timer_id(run_id))
        assert timer is not None and timer.due == DUE.timestamp()
    status = fleet.batch_status(batch_id)
    assert status is not None
    assert (status.total, status.pending, status.not_before) == (TARGETS, TARGETS, DUE)


def test_resubmitting_a_batch_id_adds_fresh_runs_each_queued_once(
    fleet: Client, raw: redis.Redis, tmp_path: Path
) -> None:
    make_snapshots(tmp_path / "again", TARGETS)
    pattern = str(tmp_path / "again" / "*")
    batch_id = fleet.start_batch(PREDICATE, snapshots=pattern, batch_id="batch-again")
    assert fleet.start_batch(PREDICATE, snapshots=pattern, batch_id=batch_id) == batch_id

    queued = queued_run_ids(raw, fleet.settings)
    runs = batch_run_ids(raw, fleet.settings, batch_id)
    assert len(queued) == len(set(queued)) == 2 * TARGETS
    assert sorted(queued) == sorted(runs)
    status = fleet.batch_status(batch_id)
    assert status is not None and (status.total, status.pending) == (2 * TARGETS, 2 * TARGETS)


def test_redis_refusing_writes_mid_fan_out_queues_no_task_for_an_unregistered_run(
    tmp_path: Path,
) -> None:
    server = RedisProcess(data_dir=tmp_path / "redis", appendonly=False).start()
    try:
        raw = redis.Redis.from_url(server.url, decode_responses=True)
        make_snapshots(tmp_path / "full", 4 * FANOUT_CHUNK)
        with Client(load_settings(redis_url=server.url)) as fleet:
            fleet.store.ping()
            used = int(raw.info("memory")["used_memory"])
            raw.config_set("maxmemory", used + 1_500_000)  # room for a chunk or two
            with pytest.raises((redis.exceptions.RedisError, KombuError)):
                fleet.start_batch(PREDICATE, snapshots=str(tmp_path / "full" / "*"))
            queued = queued_run_ids(raw, fleet.settings)
            assert FANOUT_CHUNK <= len(queued) < 4 * FANOUT_CHUNK  # it failed mid-way
            registered = {run_id for run_id in queued if fleet.run_state(run_id) is not None}
            assert registered == set(queued)
        raw.close()
    finally:
        server.stop()
