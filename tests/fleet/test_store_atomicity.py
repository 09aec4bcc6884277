"""A store write is all or nothing: a script that cannot finish writes nothing at all.

Redis does not roll back a Lua script that fails halfway, so each script checks
everything that could make it fail (a key of the wrong type, an unreadable
stored value) before its first write. The store here is pre-seeded with a key
of the wrong type in each place a script touches; the write must fail with a
clear error and every key under the prefix must read exactly as before: never
a run marked done whose check has no verdict.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from schemas.request import EvaluationRequest
from schemas.settings import AssaySettings
from tests.boundary_support import dump_keys, seed_wrong_type
from tests.fleet_support import finished_report, snapshot_request
from workers.fleet.redis_client import connect
from workers.fleet.store import StoreConflict, VerdictStore

pytestmark = pytest.mark.integration

P = "atom"
TARGET = "snapshot:prod-eu"


@pytest.fixture
def store(redis_url: str) -> VerdictStore:
    return VerdictStore.from_settings(
        AssaySettings(key_prefix=P, run_ttl_seconds=3600), client=connect(redis_url)
    )


def _batched_request(store: VerdictStore) -> EvaluationRequest:
    request = snapshot_request(check_id="c1", batch_id="b1")
    store.create_batch("b1", kind="check", text=request.text)
    store.register_run(request)
    store.begin_delivery(request)
    return request


# (key that gets the wrong type, the type the record script expects there)
RECORD_KEYS: list[tuple[str, str]] = [
    (f"{P}:check:c1", "hash"),
    (f"{P}:check:c1:history", "stream"),
    (f"{P}:checks", "zset"),
    (f"{P}:unfinished", "zset"),
    (f"{P}:idx:verdict:true", "set"),
    (f"{P}:idx:target:{TARGET}", "set"),
    (f"{P}:idx:tv:true:{TARGET}", "set"),
    (f"{P}:batch:b1", "hash"),
    (f"{P}:batch:b1:results", "hash"),
]


@pytest.mark.parametrize(("key", "expected"), RECORD_KEYS, ids=[k for k, _ in RECORD_KEYS])
def test_record_with_a_wrong_typed_key_writes_nothing(
    store: VerdictStore, key: str, expected: str
) -> None:
    request = _batched_request(store)
    seed_wrong_type(store.client, key, expected)
    before = dump_keys(store.client, P)
    with pytest.raises(StoreConflict, match=key):
        store.record_verdict(finished_report(request, "true"))
    assert dump_keys(store.client, P) == before
    state = store.run_state(request.run_id)
    assert state is not None and state.status == "running" and state.verdict is None


def test_record_with_wrong_typed_previous_indexes_writes_nothing(store: VerdictStore) -> None:
    """The indexes of the check's previous verdict are cleaned up by the same script."""
    first = snapshot_request(check_id="c1")
    store.register_run(first)
    store.record_verdict(finished_report(first, "false"))
    seed_wrong_type(store.client, f"{P}:idx:tv:false:{TARGET}", "set")
    second = snapshot_request(check_id="c1")
    store.register_run(second)
    before = dump_keys(store.client, P)
    with pytest.raises(StoreConflict):
        store.record_verdict(finished_report(second, "true"))
    assert dump_keys(store.client, P) == before


def test_record_with_an_unreadable_previous_verdict_writes_nothing(store: VerdictStore) -> None:
    first = snapshot_request(check_id="c1")
    store.register_run(first)
    store.record_verdict(finished_report(first, "false"))
    store.client.hset(f"{P}:check:c1", "finished_ms", "not-a-number")
    second = snapshot_request(check_id="c1")
    store.register_run(second)
    before = dump_keys(store.client, P)
    with pytest.raises(StoreConflict, match="finished_ms"):
        store.record_verdict(finished_report(second, "true"))
    assert dump_keys(store.client, P) == before


def test_a_run_with_a_verdict_never_leaves_its_check_without_one(store: VerdictStore) -> None:
    """The original finding, at the store: check 'victim' has a history stream at
    'P:check:victim:history'; a record that fails must not mark its run done."""
    victim = snapshot_request(check_id="victim")
    store.register_run(victim)
    store.record_verdict(finished_report(victim, "true"))
    # a later run of another check whose check key holds a stream (what "victim:history" was)
    other = snapshot_request(check_id="other")
    store.register_run(other)
    store.client.xadd(f"{P}:check:other", {"junk": "1"})
    with pytest.raises(StoreConflict):
        store.record_verdict(finished_report(other, "true"))
    for key, (kind, value) in dump_keys(store.client, P).items():
        if key.startswith(f"{P}:run:") and kind == "hash" and "verdict" in value:
            check_key = f"{P}:check:{value['check_id']}"
            assert store.client.type(check_key) == "hash", key
            assert store.client.hget(check_key, "run_id") is not None, key


STEPS: dict[str, Callable[[VerdictStore, EvaluationRequest], object]] = {
    "register": lambda s, r: s.register_run(r),
    "begin": lambda s, r: s.begin_delivery(r),
}
STEP_KEYS: list[tuple[str, str, str]] = [
    ("register", f"{P}:unfinished", "zset"),
    ("register", f"{P}:batch:b1", "hash"),
    ("register", f"{P}:batch:b1:runs", "list"),
    ("begin", f"{P}:unfinished", "zset"),
]


@pytest.mark.parametrize(("step", "key", "expected"), STEP_KEYS)
def test_register_and_begin_with_a_wrong_typed_key_write_nothing(
    store: VerdictStore, step: str, key: str, expected: str
) -> None:
    request = snapshot_request(check_id="c1", batch_id="b1")
    if step == "begin":
        store.register_run(request)
    seed_wrong_type(store.client, key, expected)
    before = dump_keys(store.client, P)
    with pytest.raises(StoreConflict, match=key):
        STEPS[step](store, request)
    assert dump_keys(store.client, P) == before


def test_a_run_key_of_the_wrong_type_is_reported_not_overwritten(store: VerdictStore) -> None:
    request = snapshot_request(check_id="c1")
    seed_wrong_type(store.client, f"{P}:run:{request.run_id}", "hash")
    before = dump_keys(store.client, P)
    for write in (store.register_run, store.begin_delivery):
        with pytest.raises(StoreConflict, match=f"{P}:run:{request.run_id}"):
            write(request)
    with pytest.raises(StoreConflict):
        store.record_verdict(finished_report(request, "true"))
    assert dump_keys(store.client, P) == before


# --- the scheduler's scripts: timers and schedules ---------------------------------------------


def test_timer_scripts_with_wrong_typed_or_unreadable_keys_write_nothing(
    redis_url: str,
) -> None:
    import redis as redis_lib

    from scheduler.schedules import ScheduleStore
    from schemas.schedule import Schedule, ScheduleTargets
    from workers.fleet.timers import TimerEntry, TimerStore

    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    timers = TimerStore(client, "tm")
    timers.put(TimerEntry(id="a", kind="deferred", due=100.0, run_id="a"))
    timers.put(TimerEntry(id="b", kind="deferred", due=100.0, run_id="b"))
    [claimed, _] = timers.claim(100.0, 30, 10)
    assert claimed.entry is not None
    # an unreadable entry: the ack must not drop the timer from in-flight and then fail
    client.hset("tm:timers:entries", "a", "{not json")
    before = dump_keys(client, "tm")
    with pytest.raises(redis_lib.ResponseError, match="ASSAY_CONFLICT"):
        timers.ack(claimed.entry)
    assert dump_keys(client, "tm") == before
    # a wrong-typed entries key: claim and requeue write nothing
    client.delete("tm:timers:entries")
    client.set("tm:timers:entries", "not a hash")
    client.zadd("tm:timers:due", {"c": 50.0})
    before = dump_keys(client, "tm")
    with pytest.raises(redis_lib.ResponseError, match="ASSAY_CONFLICT"):
        timers.claim(200.0, 30, 10)
    with pytest.raises(redis_lib.ResponseError, match="ASSAY_CONFLICT"):
        timers.requeue_expired(500.0)
    assert dump_keys(client, "tm") == before

    schedules = ScheduleStore(client, "sc", 60)
    seed_wrong_type(client, "sc:schedules", "hash")
    before = dump_keys(client, "sc")
    with pytest.raises(redis_lib.ResponseError, match="ASSAY_CONFLICT"):
        schedules.create(
            Schedule(
                name="n",
                predicate="p",
                targets=ScheduleTargets(contexts=["a"]),
                interval_seconds=60,
            )
        )
    assert dump_keys(client, "sc") == before, "the name was taken without its schedule"
