"""A scheduler replica on a real Redis, driven by a controllable clock.

The sender records what would go on the broker (the real-process tests in
test_scheduler_processes.py use the real Celery broker); everything else —
schedules, timers, Lua scripts, markers, the verdict store — is the real code
on a real redis-server.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import redis as redis_lib

from scheduler.deferred import Enqueue, defer_evaluation
from scheduler.schedules import ScheduleConflict, ScheduleNotFound, ScheduleStore
from scheduler.service import Replica
from schemas.request import EvaluationRequest, SnapshotTarget
from schemas.schedule import Schedule, ScheduleTargets
from schemas.settings import AssaySettings, load_settings
from workers.fleet.store import VerdictStore

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now.timestamp()

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class Recorder:
    """Stands in for the broker: keeps every message a replica sends, in order."""

    def __init__(self) -> None:
        self.sent: list[Enqueue] = []
        self.fail = False

    def send(self, message: Enqueue) -> None:
        if self.fail:
            raise ConnectionError("broker unreachable")
        self.sent.append(message)

    def run_ids(self) -> list[str]:
        return [m.request.run_id for m in self.sent]


@pytest.fixture
def settings(redis_url: str) -> AssaySettings:
    return load_settings(
        redis_url=redis_url,
        key_prefix="st",
        min_interval_seconds=60,
        scheduler_lease_seconds=30,
        scheduler_misfire_grace_seconds=60,
    )


@pytest.fixture
def client(redis_url: str) -> redis_lib.Redis:
    return redis_lib.Redis.from_url(redis_url, decode_responses=True)


@pytest.fixture
def clock() -> Clock:
    return Clock(START)


@pytest.fixture
def store(client: redis_lib.Redis, settings: AssaySettings) -> ScheduleStore:
    return ScheduleStore(client, settings.key_prefix, settings.min_interval_seconds)


@pytest.fixture
def snapshots(tmp_path: Path) -> list[Path]:
    folders = [tmp_path / "fleet" / name for name in ("east", "west")]
    for folder in folders:
        folder.mkdir(parents=True)
    return folders


def make_replica(
    settings: AssaySettings, client: redis_lib.Redis, clock: Clock, recorder: Recorder, name: str
) -> Replica:
    return Replica(settings, client, recorder, clock=clock, replica_id=name)


def run_until(replica: Replica, clock: Clock, end: datetime, step: timedelta) -> None:
    while clock.now < end:
        clock.now = min(end, clock.now + step)
        replica.tick()


def schedule(**fields: object) -> Schedule:
    base: dict[str, object] = {"name": "nightly", "predicate": "pods are ready"}
    base.update(fields)
    return Schedule.model_validate(base)


def test_interval_fires_one_evaluation_per_target(
    settings: AssaySettings,
    client: redis_lib.Redis,
    store: ScheduleStore,
    clock: Clock,
    snapshots: list[Path],
) -> None:
    created = store.create(
        schedule(
            targets=ScheduleTargets(snapshots=[str(snapshots[0].parent / "*")]),
            interval_seconds=300,
        ),
        now=clock.now,
    )
    recorder = Recorder()
    replica = make_replica(settings, client, clock, recorder, "r1")
    clock.advance(seconds=299)
    replica.tick()
    assert recorder.sent == []
    clock.advance(seconds=1.5)
    replica.tick()
    assert sorted(m.request.target.name for m in recorder.sent) == [
        "snapshot:east",
        "snapshot:west",
    ]
    assert {m.request.schedule_id for m in recorder.sent} == {created.id}
    assert all(
        m.request.run_id.startswith(f"{created.id}.20260301T120500.000Z.") for m in recorder.sent
    )
    run_until(replica, clock, START + timedelta(minutes=31), timedelta(seconds=20))
    assert len(recorder.sent) == 2 * 6  # 12:05, 12:10, ... 12:30
    assert len(set(recorder.run_ids())) == 12
    last = store.get("nightly").last_fire
    assert last is not None
    assert last.scheduled_at == START + timedelta(minutes=30)
    assert set(last.runs) == {"snapshot:east", "snapshot:west"}


def test_a_new_target_matching_the_glob_is_picked_up_at_fire_time(
    settings: AssaySettings,
    client: redis_lib.Redis,
    store: ScheduleStore,
    clock: Clock,
    snapshots: list[Path],
) -> None:
    store.create(
        schedule(
            targets=ScheduleTargets(snapshots=[str(snapshots[0].parent / "*")]), interval_seconds=60
        ),
        now=clock.now,
    )
    recorder = Recorder()
    replica = make_replica(settings, client, clock, recorder, "r1")
    run_until(replica, clock, START + timedelta(seconds=61), timedelta(seconds=10))
    assert len(recorder.sent) == 2
    (snapshots[0].parent / "north").mkdir()
    run_until(replica, clock, START + timedelta(seconds=121), timedelta(seconds=10))
    assert len(recorder.sent) == 5


@pytest.mark.parametrize(
    ("zone", "expr", "expected_local"),
    [
        # spring forward in New York: 02:30 does not exist on 2026-03-08
        ("America/New_York", "30 2 * * *", ["03-07 02:30", "03-08 03:00", "03-09 02:30"]),
        # Paris springs forward on 2026-03-29 (02:00 -> 03:00)
        ("Europe/Paris", "30 2 * * *", ["03-28 02:30", "03-29 03:00", "03-30 02:30"]),
        # Kolkata has no DST: every day at 09:15
        ("Asia/Kolkata", "15 9 * * *", ["03-07 09:15", "03-08 09:15", "03-09 09:15"]),
    ],
)
def test_cron_fires_at_local_times_through_dst(
    settings: AssaySettings,
    client: redis_lib.Redis,
    store: ScheduleStore,
    zone: str,
    expr: str,
    expected_local: list[str],
) -> None:
    first_day = datetime.strptime(f"2026-{expected_local[0][:5]}", "%Y-%m-%d")
    start = datetime(first_day.year, first_day.month, first_day.day, tzinfo=ZoneInfo(zone))
    clock = Clock(start.astimezone(UTC))
    store.create(
        schedule(targets=ScheduleTargets(contexts=["prod"]), cron=expr, timezone=zone),
        now=clock.now,
    )
    recorder = Recorder()
    replica = make_replica(settings, client, clock, recorder, "r1")
    run_until(replica, clock, clock.now + timedelta(days=3), timedelta(minutes=5))
    fired = [m.request.run_id.split(".")[1] for m in recorder.sent]
    local = [
        datetime.strptime(stamp, "%Y%m%dT%H%M%S").replace(tzinfo=UTC).astimezone(ZoneInfo(zone))
        for stamp in fired
    ]
    assert [moment.strftime("%m-%d %H:%M") for moment in local] == expected_local


def test_fall_back_day_fires_a_fixed_time_job_once(
    settings: AssaySettings, client: redis_lib.Redis, store: ScheduleStore
) -> None:
    clock = Clock(datetime(2026, 10, 31, 12, tzinfo=UTC))
    store.create(
        schedule(
            targets=ScheduleTargets(contexts=["prod"]),
            cron="30 1 * * *",
            timezone="America/New_York",
        ),
        now=clock.now,
    )
    recorder = Recorder()
    replica = make_replica(settings, client, clock, recorder, "r1")
    run_until(replica, clock, datetime(2026, 11, 2, 12, tzinfo=UTC), timedelta(minutes=5))
    assert [m.request.run_id.split(".")[1] for m in recorder.sent] == [
        "20261101T053000",  # 01:30 EDT; the 01:30 EST an hour later does not fire
        "20261102T063000",
    ]


def test_pause_and_resume_at_runtime(
    settings: AssaySettings, client: redis_lib.Redis, store: ScheduleStore, clock: Clock
) -> None:
    store.create(
        schedule(targets=ScheduleTargets(contexts=["prod"]), interval_seconds=60), now=clock.now
    )
    recorder = Recorder()
    replica = make_replica(settings, client, clock, recorder, "r1")
    run_until(replica, clock, START + timedelta(seconds=130), timedelta(seconds=5))
    assert len(recorder.sent) == 2
    paused = store.pause("nightly", now=clock.now)
    assert paused.paused and store.next_fire_at(paused) is None
    run_until(replica, clock, START + timedelta(minutes=10), timedelta(seconds=5))
    assert len(recorder.sent) == 2
    resumed = store.resume("nightly", now=clock.now)
    assert store.next_fire_at(resumed) == START + timedelta(minutes=11)  # no make-up fires
    run_until(replica, clock, START + timedelta(minutes=12, seconds=5), timedelta(seconds=5))
    assert len(recorder.sent) == 4


def test_change_at_runtime_retimes_without_restart(
    settings: AssaySettings, client: redis_lib.Redis, store: ScheduleStore, clock: Clock
) -> None:
    store.create(
        schedule(targets=ScheduleTargets(contexts=["prod"]), interval_seconds=3600), now=clock.now
    )
    recorder = Recorder()
    replica = make_replica(settings, client, clock, recorder, "r1")
    replica.tick()
    clock.advance(minutes=1)
    changed = store.update(
        "nightly", now=clock.now, interval_seconds=120, predicate="nodes are ready"
    )
    assert changed.revision == 2
    run_until(replica, clock, clock.now + timedelta(minutes=5), timedelta(seconds=5))
    # the 2-minute grid keeps its anchor (creation at 12:00): 12:02, 12:04, 12:06
    assert [m.request.run_id.split(".")[1] for m in recorder.sent] == [
        "20260301T120200",
        "20260301T120400",
        "20260301T120600",
    ]
    assert {m.request.text for m in recorder.sent} == {"nodes are ready"}
    store.remove("nightly")
    run_until(replica, clock, clock.now + timedelta(minutes=10), timedelta(seconds=5))
    assert len(recorder.sent) == 3
    with pytest.raises(ScheduleNotFound):
        store.get("nightly")


def test_schedule_rules(store: ScheduleStore, clock: Clock) -> None:
    store.create(
        schedule(targets=ScheduleTargets(contexts=["prod"]), interval_seconds=60), now=clock.now
    )
    with pytest.raises(ScheduleConflict, match="already exists"):
        store.create(schedule(targets=ScheduleTargets(contexts=["x"]), interval_seconds=60))
    with pytest.raises(ScheduleConflict, match="under the minimum"):
        store.create(
            schedule(name="fast", targets=ScheduleTargets(contexts=["x"]), interval_seconds=10)
        )
    with pytest.raises(ScheduleConflict, match="under the minimum"):
        store.update("nightly", interval_seconds=5)
    with pytest.raises(ScheduleConflict, match="unknown time zone"):
        store.update("nightly", cron="0 * * * *", interval_seconds=None, timezone="Nowhere/Land")
    assert [s.name for s in store.all()] == ["nightly"]
    assert store.get("nightly").revision == 1


@pytest.mark.parametrize("policy", ["skip", "run_once"])
def test_misfire_policy_after_a_scheduler_outage(
    settings: AssaySettings,
    client: redis_lib.Redis,
    store: ScheduleStore,
    clock: Clock,
    policy: str,
) -> None:
    store.create(
        schedule(targets=ScheduleTargets(contexts=["prod"]), cron="0 * * * *", misfire=policy),
        now=clock.now,
    )
    recorder = Recorder()
    replica = make_replica(settings, client, clock, recorder, "r1")
    run_until(replica, clock, START + timedelta(hours=1, minutes=1), timedelta(minutes=1))
    assert len(recorder.sent) == 1  # 13:00
    clock.now = START + timedelta(hours=6, minutes=30)  # down from 13:01 to 18:30
    revived = make_replica(settings, client, clock, recorder, "r2")
    revived.tick()
    after_outage = recorder.sent[1:]
    if policy == "skip":
        assert after_outage == []
        assert revived.stats.missed_instants == 5  # 14:00 .. 18:00
    else:
        assert [m.request.run_id.split(".")[1] for m in after_outage] == ["20260301T180000"]
    run_until(revived, clock, START + timedelta(hours=8, minutes=1), timedelta(minutes=1))
    assert [m.request.run_id.split(".")[1] for m in recorder.sent[-2:]] == [
        "20260301T190000",
        "20260301T200000",
    ]


def test_a_fire_claimed_twice_is_sent_once(
    settings: AssaySettings, client: redis_lib.Redis, store: ScheduleStore, clock: Clock
) -> None:
    store.create(
        schedule(targets=ScheduleTargets(contexts=["a", "b", "c"]), interval_seconds=60),
        now=clock.now,
    )
    recorder = Recorder()
    stalled = make_replica(settings, client, clock, recorder, "stalled")
    clock.advance(seconds=60)
    # "stalled" claims the fire and then hangs (GC pause, network stall) past its lease.
    [claimed] = stalled.timers.claim(clock(), settings.scheduler_lease_seconds, 10)
    assert claimed.entry is not None
    survivor = make_replica(settings, client, clock, recorder, "survivor")
    survivor.tick()
    assert recorder.sent == []  # still leased to the stalled replica
    clock.advance(seconds=31)  # lease over: the survivor re-claims and sends all three
    survivor.tick()
    assert len(recorder.sent) == 3
    # the stalled replica wakes up and carries on with its stale claim: nothing new is sent
    stalled.handle([claimed])
    assert len(recorder.sent) == 3
    assert stalled.stats.already_sent == 3
    assert Counter(recorder.run_ids()).most_common(1)[0][1] == 1
    assert stalled.timers.counts() == (1, 0)  # exactly one next fire, not two


def test_partial_send_before_a_crash_is_completed_without_duplicates(
    settings: AssaySettings, client: redis_lib.Redis, store: ScheduleStore, clock: Clock
) -> None:
    store.create(
        schedule(targets=ScheduleTargets(contexts=["a", "b", "c"]), interval_seconds=60),
        now=clock.now,
    )

    class DiesAfterOne(Recorder):
        def send(self, message: Enqueue) -> None:
            if self.sent:
                raise SystemExit("killed")  # the process dies mid-fire
            super().send(message)

    broker = DiesAfterOne()
    dying = make_replica(settings, client, clock, broker, "dying")
    clock.advance(seconds=60)
    with pytest.raises(SystemExit):
        dying.tick()
    assert len(broker.sent) == 1
    survivor_broker = Recorder()
    survivor = make_replica(settings, client, clock, survivor_broker, "survivor")
    clock.advance(seconds=31)
    survivor.tick()
    sent = broker.run_ids() + survivor_broker.run_ids()
    assert len(sent) == 3 and len(set(sent)) == 3


def test_broker_outage_keeps_the_fire_until_it_can_be_sent(
    settings: AssaySettings, client: redis_lib.Redis, store: ScheduleStore, clock: Clock
) -> None:
    store.create(
        schedule(targets=ScheduleTargets(contexts=["a"]), interval_seconds=60), now=clock.now
    )
    recorder = Recorder()
    recorder.fail = True
    replica = make_replica(settings, client, clock, recorder, "r1")
    clock.advance(seconds=60)
    replica.tick()
    assert recorder.sent == [] and replica.stats.send_failures == 1
    recorder.fail = False
    clock.advance(seconds=3)
    replica.tick()
    assert len(recorder.sent) == 1


def test_run_now_fires_once_even_while_paused(
    settings: AssaySettings, client: redis_lib.Redis, store: ScheduleStore, clock: Clock
) -> None:
    store.create(
        schedule(targets=ScheduleTargets(contexts=["a"]), interval_seconds=3600), now=clock.now
    )
    store.pause("nightly", now=clock.now)
    store.run_now("nightly", now=clock.now)
    recorder = Recorder()
    replica = make_replica(settings, client, clock, recorder, "r1")
    run_until(replica, clock, START + timedelta(hours=3), timedelta(minutes=1))
    assert len(recorder.sent) == 1


def test_deferred_evaluation_fires_at_its_instant(
    settings: AssaySettings, client: redis_lib.Redis, clock: Clock, redis_url: str
) -> None:
    not_before = START + timedelta(hours=2)
    request = EvaluationRequest(
        text="the certificate is Ready", target=SnapshotTarget(path="/snap"), not_before=not_before
    )
    defer_evaluation(client, settings, request, now=clock.now)
    verdicts = VerdictStore.from_settings(
        AssaySettings(key_prefix=settings.key_prefix), client=client
    )
    state = verdicts.run_state(request.run_id)
    assert state is not None and state.status == "queued"
    recorder = Recorder()
    replica = make_replica(settings, client, clock, recorder, "r1")
    run_until(replica, clock, not_before - timedelta(seconds=1), timedelta(minutes=1))
    assert recorder.sent == []
    clock.now = not_before + timedelta(milliseconds=50)
    replica.tick()
    [message] = recorder.sent
    assert message.request.run_id == request.run_id
    assert message.request.text == "the certificate is Ready"
    assert message.resume_sequence is None
    assert replica.stats.lateness == [] and replica.stats.sent == 1
    run_until(replica, clock, not_before + timedelta(hours=1), timedelta(minutes=1))
    assert len(recorder.sent) == 1


def test_reconcile_restores_a_lost_timer(
    settings: AssaySettings, client: redis_lib.Redis, store: ScheduleStore, clock: Clock
) -> None:
    created = store.create(
        schedule(targets=ScheduleTargets(contexts=["a"]), interval_seconds=60), now=clock.now
    )
    store.timers.remove(f"sched:{created.id}")  # e.g. an operator deleted the key by hand
    recorder = Recorder()
    replica = make_replica(settings, client, clock, recorder, "r1")
    run_until(replica, clock, START + timedelta(minutes=3, seconds=1), timedelta(seconds=5))
    assert [m.request.run_id.split(".")[1] for m in recorder.sent] == [
        "20260301T120100",
        "20260301T120200",
        "20260301T120300",
    ]
    assert store.reconcile(clock.now) == 0  # in step: nothing to fix
