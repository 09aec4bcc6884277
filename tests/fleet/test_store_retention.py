"""What the store keeps of a run is sized by what it is for (workers/fleet/retention.py).

Against a real redis-server, measured with Redis's own MEMORY USAGE: a probe or policy re-run
that finds what the latest report says writes no report and costs a few hundred bytes; a
fixed set of checks stops growing once its history is full, however many more runs come;
a run id stays recorded (exactly one verdict) while a redelivery could still bring it back;
and every run still answers for its verdict, its history entry and its report, or says that
the report has expired.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis

from schemas.fleet import SubmitReceipt
from schemas.policy import PolicySetEntry, PolicySetResult, policy_run_id
from schemas.report import RunReport
from schemas.request import EvaluationRequest
from schemas.settings import AssaySettings
from schemas.verdict import VerdictKind
from tests.fleet_support import finished_report, snapshot_request
from workers.fleet.redis_client import connect
from workers.fleet.retention import ENTRY_FIELDS, HistoryEntry, micros, report_fingerprint
from workers.fleet.store import ReportExpired, VerdictStore

pytestmark = pytest.mark.integration

P = "rt"
HOUR = timedelta(hours=1)


def make_store(redis_url: str, **settings: object) -> VerdictStore:
    values: dict[str, object] = {
        "key_prefix": P,
        "history_limit": 20,
        "run_ttl_seconds": 30 * 86400,
        "report_ttl_seconds": 3 * 86400,
        **settings,
    }
    return VerdictStore.from_settings(AssaySettings(**values), client=connect(redis_url))


@pytest.fixture
def store(redis_url: str) -> Iterator[VerdictStore]:
    yield make_store(redis_url)


def probe_report(
    request: EvaluationRequest,
    verdict: str = "false",
    finished_at: datetime | None = None,
    explanation: str = "Probe v1 evaluated it over 3 object(s): false. It is false for "
    "Deployment prod/api.",
) -> RunReport:
    """A probe re-run's report, as workers/fleet/probe_rerun.py builds it (no model asked)."""
    report = finished_report(request, verdict, finished_at=finished_at, explanation=explanation)
    assert report.verdict is not None
    return report.model_copy(
        update={
            "model": "(probe)",
            "verdict": report.verdict.model_copy(update={"source": "probe", "model": "(probe)"}),
        }
    )


def rerun(first: EvaluationRequest, number: int, **fields: object) -> EvaluationRequest:
    """Fire ``number`` of the same check (a schedule's next run: a new run id)."""
    return first.model_copy(update={"run_id": f"{first.run_id}-{number:04d}", **fields})


def key_bytes(client: redis.Redis) -> int:
    """MEMORY USAGE of every key of the store's prefix."""
    return sum(
        int(client.memory_usage(key, samples=0) or 0)
        for key in client.scan_iter(match=f"{P}:*", count=1000)
    )


def record_fires(
    store: VerdictStore, first: EvaluationRequest, numbers: range, start: datetime
) -> None:
    """Re-runs of the check an hour apart from ``start``, each registered, begun, recorded."""
    for number in numbers:
        request = rerun(first, number)
        store.register_run(request)
        assert store.begin_delivery(request) == 1
        assert store.record_verdict(probe_report(request, finished_at=start + number * HOUR))


def test_a_rerun_that_finds_the_same_writes_no_report_and_costs_under_1000_bytes(
    store: VerdictStore,
) -> None:
    first = snapshot_request(run_id="fire-first")
    start = datetime.now(UTC) - timedelta(days=1)
    record_fires(store, first, range(2), start)  # the first report, and one repeat
    before = key_bytes(store.client)
    record_fires(store, first, range(2, 18), start)  # 16 more, within history_limit=20
    per_rerun = (key_bytes(store.client) - before) / 16

    assert per_rerun <= 1000, per_rerun
    original, repeat = rerun(first, 0).run_id, rerun(first, 17).run_id
    assert store.client.exists(f"{P}:run:{original}")
    assert not store.client.exists(f"{P}:run:{repeat}"), "a repeat stores no report of its own"
    assert store.client.hget(f"{P}:run:{original}", "repeats") == "17"
    assert store.history_length(first.check_id) == 18


def test_a_repeat_still_answers_with_its_own_verdict_state_and_report(store: VerdictStore) -> None:
    first = snapshot_request(run_id="same")
    start = datetime(2026, 1, 1, 6, tzinfo=UTC)
    record_fires(store, first, range(3), start)
    repeat_id = rerun(first, 2).run_id

    verdict = store.run_verdict(repeat_id)
    assert verdict is not None and verdict.run_id == repeat_id
    assert verdict.finished_at == start + 2 * HOUR and verdict.verdict == VerdictKind.FALSE
    state = store.run_state(repeat_id)
    assert state is not None and state.status == "done" and state.verdict == VerdictKind.FALSE
    assert state.check_id == first.check_id and state.target == first.target.name
    assert state.attempts == 1
    report = store.run_report(repeat_id)
    assert report is not None and report.repeat_of == rerun(first, 0).run_id
    assert report.run_id == repeat_id and report.request.run_id == repeat_id
    assert report.verdict == verdict
    assert report.verdict.explanation.endswith("Deployment prod/api.")
    assert [v.run_id for v in store.history(first.check_id, 5)] == [
        rerun(first, n).run_id for n in (2, 1, 0)
    ]
    latest = store.latest_verdict(first.check_id)
    assert latest is not None and latest.run_id == repeat_id
    # a repeat is recorded once: its redelivery and a resubmission of its id find it
    request = rerun(first, 2)
    assert not store.record_verdict(probe_report(request, finished_at=start))
    assert store.begin_delivery(request) is None
    assert not store.register_run(request)
    assert store.history_length(first.check_id) == 3


def test_memory_stays_flat_once_the_history_is_full(store: VerdictStore) -> None:
    """An hourly check, run for weeks: its history keeps its last 20 runs, and 200 more runs
    add nothing (a stream's node and a hash's table grow in steps: a few KB either way)."""
    first = snapshot_request(run_id="hourly")
    start = datetime.now(UTC) - timedelta(days=60)
    record_fires(store, first, range(40), start)  # past the bound of 20
    full = key_bytes(store.client)
    record_fires(store, first, range(40, 240), start)
    grown = key_bytes(store.client) - full

    assert abs(grown) < 6000, f"200 more runs changed the store by {grown} bytes"
    assert store.history_length(first.check_id) == 20
    assert store.client.hlen(f"{P}:runs") == 20, "run ids out of the history are forgotten"
    assert store.client.hlen(f"{P}:check:{first.check_id}:verdicts") == 2  # one wording
    assert not store.client.exists(f"{P}:run:{rerun(first, 100).run_id}")


def test_a_verdicts_wording_leaves_with_its_last_history_entry(store: VerdictStore) -> None:
    """Each run says something else (a model's words, or other objects each time): the
    check keeps the wordings of the runs in its history, not of every run it ever had."""
    first = snapshot_request(run_id="wordy")
    start = datetime.now(UTC) - timedelta(days=10)
    for number in range(60):
        request = rerun(first, number)
        explanation = f"Deployment prod/api-{number} has 1 of 3 replicas ready."
        store.record_verdict(
            probe_report(request, finished_at=start + number * HOUR, explanation=explanation)
        )
    templates = store.client.hgetall(f"{P}:check:{first.check_id}:verdicts")
    assert len(templates) == 2 * 20  # 20 wordings and the count of each
    assert [v.explanation for v in store.history(first.check_id, 2)] == [
        "Deployment prod/api-59 has 1 of 3 replicas ready.",
        "Deployment prod/api-58 has 1 of 3 replicas ready.",
    ]


def test_a_run_out_of_the_history_stays_recorded_while_it_could_be_redelivered(
    redis_url: str,
) -> None:
    """A check run more often than its history holds: a run that has just left the history
    is still refused a second verdict (its message may still come back from a killed
    worker); once twice the visibility timeout has passed since it finished, it is let go."""
    store = make_store(redis_url, history_limit=3, broker_visibility_timeout_seconds=3600)
    first = snapshot_request(run_id="busy")
    now = datetime.now(UTC)
    for number in range(6):  # runs 0-2 leave the history, just finished
        request = rerun(first, number)
        store.register_run(request)
        store.begin_delivery(request)
        store.record_verdict(probe_report(request, finished_at=now))
    gone = rerun(first, 1)  # a repeat: nothing of it is kept but its place in P:runs now
    assert store.history_length(first.check_id) == 3
    assert store.begin_delivery(gone) is None
    assert not store.record_verdict(probe_report(gone, finished_at=now))
    assert store.history_length(first.check_id) == 3
    state = store.run_state(gone.run_id)
    assert state is not None and state.status == "done" and state.verdict == VerdictKind.FALSE
    with pytest.raises(ReportExpired, match=r"left check .* history"):
        store.run_verdict(gone.run_id)

    old = snapshot_request(path="examples/snapshots/staging-us", run_id="long-ago")
    long_ago = now - timedelta(hours=3)  # more than 2 x 3600 s before now
    for number in range(6):
        request = rerun(old, number)
        store.record_verdict(probe_report(request, finished_at=long_ago + number * HOUR / 60))
    assert store.run_state(rerun(old, 1).run_id) is None  # a repeat, out of the window


def test_runs_of_one_check_recorded_at_once_are_each_recorded_once(redis_url: str) -> None:
    """Eight workers record runs of one check at the same moment (a set's policy on many
    ticks): each reads the check, and a record whose check changed meanwhile reads it again;
    every run is recorded once, in the history, its run id known, its template counted."""
    store = make_store(redis_url, history_limit=200)
    first = snapshot_request(run_id="crowd")
    start = datetime.now(UTC) - timedelta(days=30)
    outcomes: list[bool] = []

    def worker(offset: int) -> None:
        own = make_store(redis_url, history_limit=200)
        for number in range(offset, 160, 8):
            request = rerun(first, number)
            outcomes.append(
                own.record_verdict(probe_report(request, finished_at=start + number * HOUR))
            )

    threads = [threading.Thread(target=worker, args=(offset,)) for offset in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count(True) == 160
    assert store.history_length(first.check_id) == 160
    assert store.client.hlen(f"{P}:runs") == 160
    templates = store.client.hgetall(f"{P}:check:{first.check_id}:verdicts")
    assert sorted(v for k, v in templates.items() if k.startswith("#")) == ["160"]
    latest = store.latest_verdict(first.check_id)
    assert latest is not None and latest.run_id == rerun(first, 159).run_id


def test_reports_are_kept_by_what_the_run_did(store: VerdictStore) -> None:
    first = snapshot_request(run_id="kinds")
    start = datetime.now(UTC) - timedelta(hours=5)

    def ttl(number: int) -> int:
        return int(store.client.ttl(f"{P}:run:{rerun(first, number).run_id}"))

    store.record_verdict(probe_report(rerun(first, 0), finished_at=start))  # first verdict
    store.record_verdict(
        probe_report(rerun(first, 1), finished_at=start + HOUR, explanation="another pod")
    )  # same verdict, other findings
    store.record_verdict(probe_report(rerun(first, 2), "true", finished_at=start + 2 * HOUR))
    store.record_verdict(finished_report(rerun(first, 3), "true", finished_at=start + 3 * HOUR))
    store.record_verdict(probe_report(rerun(first, 4), "true", finished_at=start + 4 * HOUR))

    month, days = 30 * 86400, 3 * 86400
    assert month - 60 < ttl(0) <= month, "a first verdict is a change: kept run_ttl"
    assert days - 60 < ttl(1) <= days, "same verdict, other findings: kept report_ttl"
    assert month - 60 < ttl(2) <= month, "a changed verdict: kept run_ttl"
    assert days - 60 < ttl(3) <= days, "a model run that kept the verdict: report_ttl"
    assert days - 60 < ttl(4) <= days, "after a model run a probe's findings are written again"


def test_each_repeat_keeps_the_report_it_repeats_alive(store: VerdictStore) -> None:
    first = snapshot_request(run_id="alive")
    start = datetime.now(UTC) - timedelta(hours=3)
    store.record_verdict(
        probe_report(rerun(first, 0), finished_at=start, explanation="one pod")
    )  # a first verdict: kept a month
    store.record_verdict(
        probe_report(rerun(first, 1), finished_at=start + HOUR, explanation="two pods")
    )  # the report later runs repeat, kept report_ttl (3 days)
    original = f"{P}:run:{rerun(first, 1).run_id}"
    store.client.expire(original, 60)  # nearly gone
    store.record_verdict(
        probe_report(rerun(first, 2), finished_at=start + 2 * HOUR, explanation="two pods")
    )
    assert store.client.ttl(original) > 3 * 86400 - 60
    report = store.run_report(rerun(first, 2).run_id)
    assert report is not None and report.repeat_of == rerun(first, 1).run_id


def test_an_expired_report_says_so_and_the_verdict_stays_in_the_history(
    store: VerdictStore,
) -> None:
    first = snapshot_request(run_id="expiring")
    start = datetime.now(UTC) - timedelta(days=40)
    record_fires(store, first, range(3), start)
    written, repeat = rerun(first, 0).run_id, rerun(first, 2).run_id
    store.client.delete(f"{P}:run:{written}")  # its TTL ran out

    for run_id in (written, repeat):
        with pytest.raises(ReportExpired, match=f"run {run_id}'s report has expired"):
            store.run_report(run_id)
        state = store.run_state(run_id)
        assert state is not None and state.status == "done" and state.verdict == VerdictKind.FALSE
        verdict = store.run_verdict(run_id)
        assert verdict is not None and verdict.run_id == run_id
    assert len(store.history(first.check_id)) == 3
    assert store.run_report("never-was") is None and store.run_state("never-was") is None


def test_history_written_before_compact_entries_still_reads(store: VerdictStore) -> None:
    first = snapshot_request(run_id="older")
    old = probe_report(rerun(first, 0), finished_at=datetime(2025, 6, 1, tzinfo=UTC))
    assert old.verdict is not None
    store.client.xadd(
        f"{P}:check:{first.check_id}:history",
        {"run_id": old.run_id, "verdict": old.verdict.model_dump_json()},
    )  # as an earlier version wrote it
    record_fires(store, first, range(1, 3), datetime(2025, 6, 1, tzinfo=UTC))
    assert [v.run_id for v in store.history(first.check_id)] == [
        rerun(first, n).run_id for n in (2, 1, 0)
    ]
    assert store.history(first.check_id)[-1] == old.verdict


def test_a_repeated_batch_run_counts_in_its_batch(store: VerdictStore) -> None:
    first = snapshot_request(run_id="batched")
    start = datetime.now(UTC) - timedelta(hours=2)
    record_fires(store, first, range(1), start)
    store.create_batch("b1", kind="check", text=first.text)
    request = rerun(first, 1, batch_id="b1")
    store.register_run(request)
    store.seal_batch("b1")
    store.begin_delivery(request)
    assert store.record_verdict(probe_report(request, finished_at=start + HOUR))

    assert not store.client.exists(f"{P}:run:{request.run_id}")
    status = store.batch("b1")
    assert status is not None and status.done and status.false == 1
    [row] = store.batch_results("b1")
    assert row.run_id == request.run_id and row.verdict == VerdictKind.FALSE
    state = store.run_state(request.run_id)
    assert state is not None and state.batch_id == "b1"
    receipt = SubmitReceipt.of(request)
    assert receipt.batch_id == state.batch_id


def test_a_repeated_set_run_names_its_own_policy_runs(store: VerdictStore) -> None:
    first = snapshot_request(text="policy-set:baseline", run_id="set")
    start = datetime.now(UTC) - timedelta(hours=2)

    def set_report(number: int) -> RunReport:
        request = rerun(first, number)
        report = probe_report(request, finished_at=start + number * HOUR)
        entries = [
            PolicySetEntry(
                policy=name,
                verdict=VerdictKind.FALSE,
                run_id=policy_run_id(request.run_id, name),
                check_id=f"chk-{name}",
            )
            for name in ("run-as-non-root", "required-labels")
        ]
        report.policy_set = PolicySetResult(
            policy_set="baseline", policies=entries, duration_seconds=0.01 * number
        )
        return report

    assert report_fingerprint(set_report(0)) == report_fingerprint(set_report(1))
    store.record_verdict(set_report(0))
    store.record_verdict(set_report(1))
    shown = store.run_report(rerun(first, 1).run_id)
    assert shown is not None and shown.repeat_of == rerun(first, 0).run_id
    assert shown.policy_set is not None
    assert [p.run_id for p in shown.policy_set.policies] == [
        policy_run_id(rerun(first, 1).run_id, name)
        for name in ("run-as-non-root", "required-labels")
    ]


def set_fire(
    first: EvaluationRequest, number: int, start: datetime, names: tuple[str, ...]
) -> tuple[list[RunReport], RunReport]:
    """Fire ``number`` of a policy set on one target: each policy's run, then the set's."""
    request = rerun(first, number)
    finished = start + number * HOUR
    children = []
    for name in names:
        child = request.model_copy(
            update={
                "run_id": policy_run_id(request.run_id, name),
                "check_id": f"chk-{name}",
                "text": f"policy:{name}",
            }
        )
        children.append(probe_report(child, finished_at=finished - timedelta(seconds=1)))
    report = probe_report(request, finished_at=finished)
    report.policy_set = PolicySetResult(
        policy_set="baseline",
        policies=[
            PolicySetEntry(
                policy=name,
                verdict=VerdictKind.FALSE,
                run_id=child.run_id,
                check_id=child.check_id,
            )
            for name, child in zip(names, children, strict=True)
        ],
    )
    return children, report


def test_a_set_runs_policy_runs_are_recorded_once_through_the_set_run(
    store: VerdictStore,
) -> None:
    names = ("run-as-non-root", "required-labels", "no-latest-tag")
    first = snapshot_request(text="policy-set:baseline", run_id="set")
    start = datetime.now(UTC) - timedelta(hours=6)
    for number in range(4):
        children, report = set_fire(first, number, start, names)
        for child in children:
            assert store.record_verdict(child, part_of=report.run_id)
            # a redelivered set run before its set run is recorded: each policy's run once
            assert not store.record_verdict(child, part_of=report.run_id)
        assert store.record_verdict(report)
        for child in children:  # and after it is
            assert not store.record_verdict(child, part_of=report.run_id)
    # one run-id record per set run, none per policy run
    assert store.client.hlen(f"{P}:runs") == 4
    for name in names:
        assert store.history_length(f"chk-{name}") == 4
    children, report = set_fire(first, 2, start, names)
    for child in children:
        state = store.run_state(child.run_id)
        assert state is not None and state.check_id == child.check_id
        assert state.verdict == VerdictKind.FALSE
        verdict = store.run_verdict(child.run_id)
        assert verdict is not None and verdict.run_id == child.run_id
        shown = store.run_report(child.run_id)
        assert shown is not None and shown.run_id == child.run_id
        assert shown.check_id == child.check_id
    assert store.run_state(policy_run_id(report.run_id, "not-in-the-set")) is None


def test_history_entries_keep_instants_as_offsets_and_read_older_whole_ones() -> None:
    finished = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    entry = HistoryEntry(
        run_id="r1",
        template_id="t" * 16,
        started_us=micros(finished - timedelta(seconds=2)),
        finished_us=micros(finished),
        duration=2.0,
        attempts=1,
        batch_id=None,
        submitted_us=micros(finished - timedelta(days=400)),  # a run held for a year
        scheduled_us=None,
        repeat_of=None,
    )
    fields = dict(zip(ENTRY_FIELDS, entry.fields(), strict=True))
    assert fields["s"] == "2000000"  # µs before the finish, not a nine-byte instant
    assert HistoryEntry.parse(fields) == entry
    whole = {**fields, "s": str(entry.started_us), "q": str(entry.submitted_us)}
    assert HistoryEntry.parse(whole) == entry  # as entries were written before offsets


def batch_fire(store: VerdictStore, batch_id: str, number: int, verdict: str) -> list[str]:
    """One batch of the demo check over three targets, each run recorded; its run ids."""
    store.create_batch(batch_id, kind="check", text="p")
    requests = [
        snapshot_request(
            path=f"examples/snapshots/cluster-{i}", batch_id=batch_id, run_id=f"{batch_id}-{i}"
        )
        for i in range(3)
    ]
    store.register_runs(requests)
    store.seal_batch(batch_id)
    at = datetime.now(UTC) - timedelta(hours=10) + number * HOUR
    for request in requests:
        assert store.record_verdict(probe_report(request, verdict, finished_at=at))
    return [request.run_id for request in requests]


def test_a_finished_batch_that_changed_nothing_is_kept_the_reports_window(
    store: VerdictStore,
) -> None:
    batch_fire(store, "first", 0, "false")  # first verdicts: what an alert links to
    batch_fire(store, "again", 1, "false")  # nothing changed
    batch_fire(store, "flip", 2, "true")  # every verdict changed
    day = 86400
    for suffix in ("", ":runs"):  # (rows stand in the runs list)
        assert store.client.ttl(f"{P}:batch:first{suffix}") > 29 * day
        assert 2 * day < store.client.ttl(f"{P}:batch:again{suffix}") <= 3 * day
        assert store.client.ttl(f"{P}:batch:flip{suffix}") > 29 * day


def test_a_batch_row_names_its_verdict_and_reads_the_explanation_from_the_check(
    store: VerdictStore,
) -> None:
    run_ids = batch_fire(store, "b1", 0, "false")
    rows = store.client.lrange(f"{P}:batch:b1:runs", 0, -1)  # each in its run id's place
    assert [json.loads(row)[0] for row in rows] == run_ids
    assert all(len(row) < 100 for row in rows)  # no copy of the explanation
    assert not store.client.exists(f"{P}:batch:b1:results")
    [first, *_] = store.batch_results("b1")
    assert first.run_id == run_ids[0] and first.verdict == VerdictKind.FALSE
    assert first.exit_code == 1 and first.target == "snapshot:cluster-0"
    assert first.explanation is not None and first.explanation.startswith("Probe v1 evaluated")


def test_the_batches_index_forgets_batches_whose_window_has_passed(store: VerdictStore) -> None:
    batch_fire(store, "again", 1, "false")
    batch_fire(store, "kept", 2, "false")
    # four days later: "again" (nothing changed) has expired; "kept" is still kept
    four_days_ago = (datetime.now(UTC) - timedelta(days=4)).timestamp() * 1000
    store.client.zadd(f"{P}:batches", {"again": four_days_ago, "kept": four_days_ago})
    store.client.delete(*(f"{P}:batch:again{suffix}" for suffix in ("", ":runs", ":results")))
    store.create_batch("next", kind="check", text="p")
    assert store.client.zrange(f"{P}:batches", 0, -1) == ["kept", "next"]


def test_a_batch_whose_runs_all_ended_before_its_seal_gets_the_same_window(
    store: VerdictStore,
) -> None:
    batch_fire(store, "first", 0, "false")
    store.create_batch("fast", kind="check", text="p")
    requests = [
        snapshot_request(path=f"examples/snapshots/cluster-{i}", batch_id="fast", run_id=f"f-{i}")
        for i in range(3)
    ]
    store.register_runs(requests)
    for request in requests:  # probe runs end within milliseconds, before the fan-out seals
        assert store.record_verdict(probe_report(request, "false", finished_at=datetime.now(UTC)))
    assert store.client.ttl(f"{P}:batch:fast") > 29 * 86400  # still running: kept
    store.seal_batch("fast")
    status = store.batch("fast")
    assert status is not None and status.done
    for suffix in ("", ":runs"):  # (rows stand in the runs list)
        assert 2 * 86400 < store.client.ttl(f"{P}:batch:fast{suffix}") <= 3 * 86400


def test_a_batch_row_names_its_check_only_when_the_batch_predicate_does_not(
    store: VerdictStore,
) -> None:
    request = snapshot_request(batch_id="b9", run_id="b9-0")
    own = snapshot_request(batch_id="b9", run_id="b9-1", check_id="chk-chosen")
    store.create_batch("b9", kind="check", text=request.text)
    store.register_runs([request, own])
    store.seal_batch("b9")
    for each in (request, own):
        assert store.record_verdict(probe_report(each, "true"))
    rows = [json.loads(row) for row in store.client.lrange(f"{P}:batch:b9:runs", 0, -1)]
    assert [len(row) for row in rows] == [4, 5]  # the default check id is not stored in the row
    assert [r.check_id for r in store.batch_results("b9")] == [request.check_id, "chk-chosen"]
