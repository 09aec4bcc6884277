"""assay's keys on Redis Cluster: with a hash-tagged key prefix (``{assay}``) every key of a
deployment is in one slot, so every Lua script, transaction and multi-key command is legal
on a cluster (docs/fleet.md, "Redis Cluster").

The server is a real redis-server in cluster mode owning every slot itself. Redis refuses
an ``EVAL`` whose ``KEYS`` lie in different slots (``CROSSSLOT``); it checks the keys a
script touches beyond its ``KEYS`` only for a script that declares flags (a ``#!lua``
first line, Redis 7), so the client here registers every script with one: a script that
touched a key of another slot than its ``KEYS`` would fail here as on a cluster of many
nodes (``test_the_cluster_refuses_a_script_touching_a_key_of_another_slot``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import ValidationError
from redis.client import Pipeline
from redis.commands.core import Script

from assay.redis_process import RedisProcess, free_port
from scheduler.schedules import ScheduleStore
from schemas.schedule import Schedule, ScheduleFire, ScheduleTargets
from schemas.settings import AssaySettings
from schemas.spend import SpendCeiling
from schemas.verdict import VerdictKind
from tests.fleet_support import finished_report, snapshot_request
from tests.report_support import declare_check
from workers.fleet import checkpoints
from workers.fleet.check_definitions import CheckDefinitionStore
from workers.fleet.notify_feed import SinkFeed, Told
from workers.fleet.policy_store import PolicyStore
from workers.fleet.probe_store import ProbeStore
from workers.fleet.ratelimit import FleetRateLimiter
from workers.fleet.spend import Scope, SpendStore
from workers.fleet.store import VerdictStore
from workers.fleet.timers import TimerEntry, TimerStore
from workers.policy_engine.policies.documents import read_files
from workers.policy_engine.policies.importer import import_documents

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "{assay}"
SLOTS = 16384
MARK = "cluster-test:mark"  # published after a script call: its events are all in


class SlotCheckedRedis(redis.Redis):
    """A client whose scripts declare flags (``#!lua``): Redis 7 then refuses any key a
    script touches in another slot than its ``KEYS``, as a cluster of many nodes must.
    A script must also write only keys of its ``KEYS`` (in a pipeline: keys some command
    of the pipeline names): the keyspace events of the call say which it wrote (a key built
    inside a script from the tagged prefix is in the same slot, unseen by the slot check)."""

    _events: Any = None

    def register_script(self, script: Any) -> Any:
        return KeysChecked(self, "#!lua\n" + str(script))

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        checked = CheckedPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        checked.owner = self
        return checked

    def written_during(self, call: Callable[[], Any]) -> tuple[Any, set[str]]:
        """What ``call`` returned, and the keys written meanwhile (keyspace events)."""
        if self._events is None:
            self._events = self.pubsub(ignore_subscribe_messages=True)
            self._events.psubscribe("__keyevent@0__:*")
            self._events.subscribe(MARK)
        self._written_until_mark()  # what other commands wrote before
        result = call()
        return result, self._written_until_mark()

    def _written_until_mark(self) -> set[str]:
        """The keys written since the last mark: a new mark is published and read back."""
        token = uuid.uuid4().hex
        self.publish(MARK, token)
        written: set[str] = set()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            message = self._events.get_message(timeout=1.0)
            if message is None:
                continue
            if message["channel"] != MARK:
                written.add(message["data"])
            elif message["data"] == token:
                return written
        raise AssertionError("the keyspace events of a script call never arrived")


class CheckedPipeline(Pipeline):
    """A pipeline that fails when its commands (scripts among them) wrote a key none of
    them names (``COMMAND GETKEYS``: a script's are its ``KEYS``)."""

    owner: SlotCheckedRedis

    def execute(self, raise_on_error: bool = True) -> Any:
        declared: set[str] = set()
        for command, _ in self.command_stack:
            try:
                declared.update(self.owner.command_getkeys(*command))
            except redis.ResponseError:  # a command without keys
                continue
        result, written = self.owner.written_during(
            lambda: super(CheckedPipeline, self).execute(raise_on_error)
        )
        undeclared = written - declared
        assert not undeclared, f"a pipeline wrote keys none of its commands names: {undeclared}"
        return result


class KeysChecked(Script):
    """A script whose call fails when it wrote a key it was not given in ``KEYS``."""

    def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        owner = self.registered_client
        if (client is not None and client is not owner) or not isinstance(owner, SlotCheckedRedis):
            return super().__call__(keys, args, client)
        result, written = owner.written_during(
            lambda: super(KeysChecked, self).__call__(keys, args)
        )
        undeclared = written - {str(key) for key in keys or []}
        assert not undeclared, f"a script wrote keys it was not given: {sorted(undeclared)}"
        return result


@pytest.fixture(scope="module")
def cluster_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """One redis-server in cluster mode that serves every slot itself."""
    folder = tmp_path_factory.mktemp("cluster")
    node = RedisProcess(
        data_dir=folder,
        appendonly=False,
        extra_args=(
            *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
            *("--cluster-port", str(free_port())),  # the bus: not port + 10000 (> 65535)
        ),
    ).start()
    client = redis.Redis.from_url(node.url, decode_responses=True)
    client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, SLOTS - 1)
    deadline = time.monotonic() + 20
    while client.execute_command("CLUSTER", "INFO").find("cluster_state:ok") < 0:
        assert time.monotonic() < deadline, "the one-node cluster never came up"
        time.sleep(0.1)
    # every write is an event (the generic, string, list, set, hash, zset and stream ones)
    client.config_set("notify-keyspace-events", "Eg$lshzt")
    client.close()
    yield node
    node.stop()


@pytest.fixture
def client(cluster_node: RedisProcess) -> Iterator[SlotCheckedRedis]:
    checked = SlotCheckedRedis.from_url(cluster_node.url, decode_responses=True)
    checked.flushall()  # our own server, started above
    yield checked
    checked.close()


def one_slot(client: redis.Redis) -> None:
    """Every key written is in the prefix's slot."""
    keys = list(client.scan_iter(count=1000))
    assert keys, "the step under test wrote keys"
    slots = {client.execute_command("CLUSTER", "KEYSLOT", key) for key in keys}
    assert slots == {client.execute_command("CLUSTER", "KEYSLOT", PREFIX)}, keys


def test_the_cluster_refuses_a_script_touching_a_key_of_another_slot(
    client: SlotCheckedRedis,
) -> None:
    # What this module relies on: were a script to touch a key outside its KEYS' slot, or
    # to be given KEYS of two slots, the cluster refuses it.
    stray = client.register_script("redis.call('SET', KEYS[1], 1) redis.call('SET', 'x', 1)")
    with pytest.raises(redis.ResponseError, match="do not hash to the same slot"):
        stray(keys=[f"{PREFIX}:a"])
    split = client.register_script("redis.call('SET', KEYS[1], 1) redis.call('SET', KEYS[2], 1)")
    with pytest.raises(redis.ResponseError, match="hash to the same slot"):
        split(keys=["assay:a", "assay:b"])
    split(keys=[f"{PREFIX}:a", f"{PREFIX}:b"])


def test_a_script_writing_a_key_it_was_not_given_fails_here(client: SlotCheckedRedis) -> None:
    # A key built inside a script from one it was given: the same slot, so only the
    # keyspace events show it.
    built = client.register_script("redis.call('SET', KEYS[1] .. ':copy', 1)")
    with pytest.raises(AssertionError, match=r"not given: \['\{assay\}:a:copy'\]"):
        built(keys=[f"{PREFIX}:a"])


def test_without_a_hash_tag_the_prefix_spreads_a_script_over_slots(
    client: SlotCheckedRedis,
) -> None:
    # The plain default prefix is what a single Redis (or Sentinel) takes: on a cluster the
    # first multi-key step is refused, so the hash tag is what makes it legal.
    store = VerdictStore.from_settings(AssaySettings(key_prefix="assay"), client=client)
    with pytest.raises(redis.ResponseError, match="hash to the same slot"):
        store.register_run(snapshot_request())


def test_the_verdict_store_runs_on_a_cluster(client: SlotCheckedRedis) -> None:
    store = VerdictStore.from_settings(
        AssaySettings(key_prefix=PREFIX, run_ttl_seconds=3600), client=client
    )
    assert store.create_batch("b1", kind="check", text="p", lease_token="t", lease_seconds=30)
    assert store.renew_fanout("b1", "t", 30)
    requests = [snapshot_request(batch_id="b1"), snapshot_request(batch_id="b1", text="q")]
    assert store.register_runs(requests) == [True, True]
    for request in requests:
        assert store.begin_delivery(request) == 1
    assert store.claim_fence(requests[0].run_id, "fire-1", "token-1")
    assert store.record_verdict(finished_report(requests[0], "false"))
    assert store.record_verdict(finished_report(requests[1], "true"))
    store.seal_batch("b1")
    status = store.batch("b1")
    assert status is not None and status.done and (status.true, status.false) == (1, 1)
    parked = snapshot_request()
    assert store.register_run(parked) and store.begin_delivery(parked) == 1
    waiting = finished_report(parked, "true").model_copy(
        update={"status": "waiting", "verdict": None, "wake_at": datetime.now(UTC)}
    )
    settings = AssaySettings(key_prefix=PREFIX)
    assert checkpoints.park(client, settings, store, waiting, {"turn": 1}) is not None
    definition = declare_check(store, "web", "p", {"ctx": requests[0].check_id})
    CheckDefinitionStore(client, PREFIX).delete(definition)
    assert store.create_batch("b2", kind="check", text="p")
    assert store.abandon_batch("b2", "stopped")
    assert {gauge.check_id for gauge in store.check_gauges(10)} == {r.check_id for r in requests}
    one_slot(client)


def test_timers_and_schedules_run_on_a_cluster(client: SlotCheckedRedis) -> None:
    now = datetime.now(UTC)
    schedules = ScheduleStore(client, PREFIX, 60)
    schedule = schedules.create(
        Schedule(name="n", predicate="p", targets=ScheduleTargets(contexts=["a"]), cron="* * * * *")
    )
    schedules.update(schedule.id, name="renamed")
    schedules.record_fire(schedule.id, ScheduleFire(scheduled_at=now, fired_at=now))
    timers = TimerStore(client, PREFIX)
    timers.put(TimerEntry(id="defer:r2", kind="deferred", due=100.0, run_id="r2"))
    claimed = [c.entry for c in timers.claim(time.time() + 120, 30, 10) if c.entry]
    assert {entry.id for entry in claimed} >= {"defer:r2"}
    owner = uuid.uuid4().hex
    for entry in claimed:
        fires = [f"{entry.id}@1", f"{entry.id}@2"]
        claims = timers.begin_enqueue_many(fires, owner, 1_000.0, 30)
        for fire in fires:
            assert claims[fire].state == "acquired"
            assert timers.confirm_enqueue(fire, owner, claims[fire].token, 1_001.0, 30)
        assert timers.finish_and_ack(fires, entry, settled=fires) == 1
    timers.abandon_enqueue("fire-x", owner)
    timers.put(TimerEntry(id="defer:r3", kind="deferred", due=100.0, run_id="r3"))
    timers.claim(200.0, 1, 10)
    assert timers.requeue_expired(500.0) == 1
    timers.claim(600.0, 30, 10)
    assert timers.release("defer:r3", 700.0)
    one_slot(client)
    assert timers.remove("defer:r3")
    schedules.remove(schedule.id)


def test_the_spend_guard_runs_on_a_cluster(client: SlotCheckedRedis) -> None:
    spend = SpendStore(client, PREFIX)
    t0 = int(datetime(2030, 1, 1, 10, 30, tzinfo=UTC).timestamp() * 1000)
    scopes = [
        Scope("fleet-hour", default_tokens=10_000, ttl_seconds=3600),
        Scope("fleet-day", ttl_seconds=3600),
        Scope("schedule", "s1", "20300101", 5_000),
        Scope("batch", "b1", ttl_seconds=3600),
    ]
    spend.set_batch_ceiling("b1", SpendCeiling(tokens=9_000))
    spend.set_schedule_ceiling("s1", SpendCeiling(tokens=6_000))
    assert spend.reserve("dead", 3_000, 10, 1_000, scopes, t0).status == "ok"
    assert spend.reserve("a", 1_000, 10, 60_000, scopes, t0).status == "ok"
    # the dead call's lease runs out: the next reserve has it swept first, every key given
    assert spend.reserve("b", 1_000, 10, 60_000, scopes, t0 + 2_000).status == "ok"
    assert spend.settle_many([("a", 500, 5), ("b", 600, 6)], t0 + 3_000) == [1, 1]
    assert spend.release_expired(t0 + 3_000) == 0
    assert spend.reserve("c", 2_000, 10, 1_000, scopes, t0 + 3_000).status == "refused"
    skipped = spend.skip_if_reached("s1", "20300101", 1, SpendCeiling(tokens=6_000))
    assert skipped is not None and skipped.skipped_today == 1
    one_slot(client)


def test_the_rate_limiter_runs_on_a_cluster(client: SlotCheckedRedis) -> None:
    limiter = FleetRateLimiter(client, prefix=PREFIX, rpm=60, tpm=1_000)
    assert limiter.try_acquire("openai/x", 100) == 0
    one_slot(client)


def test_policies_probes_and_notifications_run_on_a_cluster(client: SlotCheckedRedis) -> None:
    policies, refusals = import_documents(
        read_files([ROOT / "examples" / "policies" / "vap-trusted-registries.yaml"])
    )
    assert not refusals
    store = PolicyStore(client, prefix=PREFIX)
    store.save(policies, "team-a")
    assert store.drop(policies[0].name)
    store.save(policies, "team-b")
    assert store.drop_set("team-b")

    probes = ProbeStore(client, prefix=PREFIX)
    token = probes.claim_compile("chk", None)
    assert token is not None
    assert probes.renew_compile("chk", None, token)
    probes.finish_compile("chk", None, token)
    assert probes.lookup("chk", "b1", claim=True) is not None

    verdicts = VerdictStore.from_settings(AssaySettings(key_prefix=PREFIX), client=client)
    feed = SinkFeed(verdicts, "ops", "a")
    feed.ensure_group()
    for verdict in ("true", "false"):
        request = snapshot_request()
        verdicts.register_run(request)
        verdicts.begin_delivery(request)
        assert verdicts.record_verdict(finished_report(request, verdict))
    entries = feed.read_new(10, None)
    assert len(entries) == 1, "the second verdict is a change"
    assert feed.keep([entries[0].entry_id]) == [entries[0].entry_id]
    assert feed.begin_attempt(entries[0].entry_id) == 1
    assert feed.ack(entries[0], "delivered", Told(VerdictKind.FALSE, 1))
    request = snapshot_request()
    verdicts.register_run(request)
    verdicts.begin_delivery(request)
    assert verdicts.record_verdict(finished_report(request, "true"))
    (entry,) = feed.read_new(10, None)
    assert feed.dead_letter(entry, 3, "sink ops: answered HTTP 500")
    one_slot(client)


@pytest.mark.parametrize("prefix", ["{assay", "assay}", "{}", "{a}b", "a{b}", "{a b}"])
def test_a_key_prefix_is_a_plain_name_or_one_whole_hash_tag(prefix: str) -> None:
    # Braces only around the whole prefix: Redis hashes the first {...} of a key, so a
    # prefix with a tag elsewhere (or half a tag) would not say which slot its keys are in.
    assert AssaySettings(key_prefix=PREFIX).key_prefix == PREFIX
    with pytest.raises(ValidationError):
        AssaySettings(key_prefix=prefix)
