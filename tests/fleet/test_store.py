"""The verdict store against a real redis-server: layout, idempotency, indexes, batches."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import redis

from schemas.report import Step
from schemas.settings import AssaySettings
from schemas.verdict import VerdictKind
from tests.fleet_support import finished_report, snapshot_request
from workers.fleet.redis_client import connect
from workers.fleet.store import VerdictStore

pytestmark = pytest.mark.integration


@pytest.fixture
def store(redis_url: str) -> VerdictStore:
    return VerdictStore.from_settings(
        AssaySettings(key_prefix="t1", history_limit=3, run_ttl_seconds=3600),
        client=connect(redis_url),
    )


def test_recorded_verdict_is_readable_by_run_and_by_check(store: VerdictStore) -> None:
    request = snapshot_request()
    assert store.register_run(request)
    assert store.run_state(request.run_id).status == "queued"  # type: ignore[union-attr]
    assert store.begin_delivery(request) == 1
    assert store.run_state(request.run_id).status == "running"  # type: ignore[union-attr]

    assert store.record_verdict(finished_report(request, "false"))

    state = store.run_state(request.run_id)
    assert state is not None and state.status == "done" and state.verdict == VerdictKind.FALSE
    assert store.run_verdict(request.run_id).verdict == VerdictKind.FALSE  # type: ignore[union-attr]
    assert store.latest_verdict(request.check_id).run_id == request.run_id  # type: ignore[union-attr]
    report = store.run_report(request.run_id)
    assert report is not None and report.request.text == request.text
    assert store.begin_delivery(request) is None, "a finished run must not be started again"


@pytest.mark.parametrize("codec", ["dictionary", "zlib", "off"])
def test_full_reports_are_kept_compressed_and_read_back_whole(redis_url: str, codec: str) -> None:
    client = connect(redis_url)
    store = VerdictStore.from_settings(
        AssaySettings(key_prefix=f"zr-{codec}", report_compression=codec), client=client
    )
    request = snapshot_request()
    store.register_run(request)
    store.begin_delivery(request)
    report = finished_report(request, "true")
    table = "NAME      READY   UP-TO-DATE   AVAILABLE\n" + "web-ok    3/3     3            3\n" * 40
    steps = [
        Step(
            index=i,
            kind="COMMAND",
            tool="get",
            arguments={"kind": "Deployment"},
            ok=True,
            output=table,
            started_at=datetime.now(UTC),
        )
        for i in range(3)
    ]
    report = report.model_copy(update={"steps": steps})  # tool output: what a report holds
    assert store.record_verdict(report)
    stored = client.hget(f"zr-{codec}:run:{request.run_id}", "report")
    plain = report.model_dump_json()
    assert (len(stored) < len(plain) / 2) is (codec != "off")
    read = store.run_report(request.run_id)
    assert read is not None and read.steps == report.steps and read.verdict == report.verdict


def test_a_report_stored_as_plain_json_before_still_reads(redis_url: str) -> None:
    client = connect(redis_url)
    request = snapshot_request()
    plain_store = VerdictStore.from_settings(
        AssaySettings(key_prefix="zr-old", report_compression="off"), client=client
    )
    plain_store.register_run(request)
    plain_store.begin_delivery(request)
    assert plain_store.record_verdict(finished_report(request, "false"))
    read = VerdictStore.from_settings(
        AssaySettings(key_prefix="zr-old", report_compression="dictionary"), client=client
    ).run_report(request.run_id)
    assert read is not None and read.verdict is not None
    assert read.verdict.verdict == VerdictKind.FALSE


def test_second_record_of_a_run_writes_nothing(store: VerdictStore) -> None:
    request = snapshot_request()
    store.register_run(request)
    assert store.record_verdict(finished_report(request, "true"))
    assert not store.record_verdict(finished_report(request, "false"))

    assert store.history_length(request.check_id) == 1
    assert store.run_verdict(request.run_id).verdict == VerdictKind.TRUE  # type: ignore[union-attr]
    assert store.latest_verdict(request.check_id).verdict == VerdictKind.TRUE  # type: ignore[union-attr]
    assert store.changes(datetime.now(UTC) - timedelta(hours=1)) == []


def test_concurrent_duplicate_records_write_once(store: VerdictStore) -> None:
    request = snapshot_request()
    outcomes: list[bool] = []
    threads = [
        threading.Thread(
            target=lambda: outcomes.append(store.record_verdict(finished_report(request, "true")))
        )
        for _ in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count(True) == 1
    assert store.history_length(request.check_id) == 1


def test_history_is_capped_and_newest_first(store: VerdictStore) -> None:
    base = datetime.now(UTC) - timedelta(minutes=10)
    runs = []
    for minute in range(5):
        request = snapshot_request()
        runs.append(request.run_id)
        store.record_verdict(
            finished_report(request, "true", finished_at=base + timedelta(minutes=minute))
        )
    history = store.history(request.check_id, limit=10)
    assert [v.run_id for v in history] == list(reversed(runs))[:3]
    assert store.history_length(request.check_id) == 3


def test_indexes_follow_the_current_verdict(store: VerdictStore) -> None:
    base = datetime.now(UTC) - timedelta(minutes=5)
    prod = snapshot_request(path="examples/snapshots/prod-eu")
    staging = snapshot_request(path="examples/snapshots/staging-us")
    store.record_verdict(finished_report(prod, "false", finished_at=base))
    store.record_verdict(finished_report(staging, "false", finished_at=base))

    false_in_prod = store.checks(verdict="false", target="snapshot:prod-eu")
    assert [c.check_id for c in false_in_prod] == [prod.check_id]
    assert {c.check_id for c in store.checks(verdict="false")} == {prod.check_id, staging.check_id}

    again = snapshot_request(path="examples/snapshots/prod-eu")
    assert again.check_id == prod.check_id
    store.record_verdict(finished_report(again, "true", finished_at=base + timedelta(minutes=1)))

    assert store.checks(verdict="false", target="snapshot:prod-eu") == []
    assert [c.check_id for c in store.checks(verdict="true")] == [prod.check_id]
    assert {c.check_id for c in store.checks(target="snapshot:prod-eu")} == {prod.check_id}
    assert len(store.checks()) == 2


def test_a_verdict_change_is_an_event_and_a_first_verdict_is_not(store: VerdictStore) -> None:
    since = datetime.now(UTC) - timedelta(seconds=5)
    first = snapshot_request()
    store.record_verdict(finished_report(first, "true"))
    assert store.changes(since) == []

    second = snapshot_request()
    store.record_verdict(finished_report(second, "false"))
    third = snapshot_request()
    store.record_verdict(finished_report(third, "false"))

    changes = store.changes(since)
    assert len(changes) == 1
    assert (changes[0].from_verdict, changes[0].to_verdict) == (VerdictKind.TRUE, VerdictKind.FALSE)
    assert changes[0].run_id == second.run_id
    changed = store.checks(changed_since=since)
    assert [c.check_id for c in changed] == [first.check_id]
    assert changed[0].previous_verdict == VerdictKind.TRUE
    assert store.checks(changed_since=datetime.now(UTC) + timedelta(seconds=5)) == []


def test_an_older_run_finishing_late_does_not_replace_the_latest(store: VerdictStore) -> None:
    now = datetime.now(UTC)
    newer = snapshot_request()
    older = snapshot_request()
    store.record_verdict(finished_report(newer, "true", finished_at=now))
    store.record_verdict(finished_report(older, "false", finished_at=now - timedelta(minutes=1)))
    assert store.latest_verdict(newer.check_id).run_id == newer.run_id  # type: ignore[union-attr]
    assert store.history_length(newer.check_id) == 2
    assert store.checks(verdict="false") == []


def test_batch_tally_counts_each_run_exactly_once(store: VerdictStore) -> None:
    store.create_batch("b1", kind="check", text="p")
    requests = [
        snapshot_request(path=f"examples/snapshots/cluster-{i}", batch_id="b1") for i in range(7)
    ]
    for request in requests:
        assert store.register_run(request)
        assert not store.register_run(request), "registering twice must not count twice"
    store.seal_batch("b1")
    outcomes = ["true", "true", "false", "poorly_posed", "cannot_determine", "true"]
    for request, verdict in zip(requests, outcomes, strict=False):
        store.record_verdict(finished_report(request, verdict))
        store.record_verdict(finished_report(request, "false"))  # a duplicate delivery

    status = store.batch("b1")
    assert status is not None
    assert (status.total, status.pending, status.true, status.false) == (7, 1, 3, 1)
    assert (status.poorly_posed, status.cannot_determine, status.done) == (1, 1, False)

    page = store.batch_results("b1", offset=4, count=2)
    assert [r.target for r in page] == ["snapshot:cluster-4", "snapshot:cluster-5"]
    assert page[0].verdict == VerdictKind.CANNOT_DETERMINE
    last = store.batch_results("b1", offset=6, count=10)
    assert len(last) == 1 and last[0].verdict is None and last[0].target == "snapshot:cluster-6"

    store.record_verdict(finished_report(requests[6], "false"))
    status = store.batch("b1")
    assert status is not None and status.done and status.false == 2 and status.pending == 0
    assert status.finished_at is not None
    assert len(list(store.iter_batch_results("b1", page_size=3))) == 7


def test_a_batch_whose_runs_all_ended_before_its_seal_finishes_at_the_seal(
    store: VerdictStore,
) -> None:
    # Fast runs (probes) can all be recorded while the fan-out is still going: the batch is
    # not finished then, and is once it is sealed, with the instant it finished.
    store.create_batch("quick", kind="check", text="p")
    request = snapshot_request(batch_id="quick")
    assert store.register_run(request)
    assert store.record_verdict(finished_report(request, "true"))
    before = store.batch("quick")
    assert before is not None and not before.done and before.finished_at is None
    sealed_from = datetime.now(UTC)
    store.seal_batch("quick")
    after = store.batch("quick")
    assert after is not None and after.done and after.finished_at is not None
    assert sealed_from - timedelta(seconds=1) <= after.finished_at <= datetime.now(UTC)


def test_every_key_is_under_the_prefix_and_runs_expire(store: VerdictStore, redis_url: str) -> None:
    request = snapshot_request(batch_id="b2")
    store.create_batch("b2", kind="check", text="p")
    store.register_run(request)
    store.record_verdict(finished_report(request, "true"))
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = list(raw.scan_iter("*"))
    assert keys and all(k.startswith("t1:") for k in keys), keys
    assert 0 < raw.ttl(f"t1:run:{request.run_id}") <= 3600
    assert 0 < raw.ttl("t1:batch:b2") <= 3600
    assert raw.ttl(f"t1:check:{request.check_id}") == -1, "a check's latest verdict is kept"


def test_persistence_warnings(store: VerdictStore, redis_url: str) -> None:
    assert store.check_persistence().warnings == []  # the fixture runs AOF + noeviction
    raw = redis.Redis.from_url(redis_url)
    try:
        raw.config_set("maxmemory-policy", "allkeys-lru")
        raw.config_set("appendonly", "no")
        warnings = store.check_persistence().warnings
    finally:
        raw.config_set("maxmemory-policy", "noeviction")
        raw.config_set("appendonly", "yes")
    assert any("noeviction" in w for w in warnings)
    assert any("appendonly yes" in w for w in warnings)


def test_waiting_run_resets_its_delivery_count(store: VerdictStore) -> None:
    request = snapshot_request()
    store.register_run(request)
    assert store.begin_delivery(request) == 1
    assert store.begin_delivery(request) == 2
    report = finished_report(request, "true").model_copy(
        update={"status": "waiting", "verdict": None, "wake_at": datetime.now(UTC)}
    )
    assert store.mark_waiting(report)
    state = store.run_state(request.run_id)
    assert state is not None and state.status == "waiting" and state.attempts == 0
    assert state.wake_at is not None
    assert store.begin_delivery(request) == 1
