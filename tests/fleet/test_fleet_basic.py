"""The fleet end to end: a real redis-server, a real `celery worker` process, the scripted model.

Submit and retrieve, duplicate deliveries, a 50-target batch and its tally.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from assay.client import Client
from assay.testing.scripted_model import ScriptedModel
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.fleet_support import (
    NO_CONFIRMER_PROFILE,
    PREDICATE,
    make_snapshots,
    scripted_worker,
    snapshot_request,
    three_step_script,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def scripted_model() -> Iterator[ScriptedModel]:
    with ScriptedModel(three_step_script()) as model:
        yield model


@pytest.fixture
def worker(
    redis_url: str, scripted_model: ScriptedModel, tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with scripted_worker(redis_url, scripted_model.url, tmp_path / "worker.log", 16) as process:
        yield process


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    with Client(load_settings(redis_url=redis_url)) as fleet:
        yield fleet


def test_submit_then_read_verdict_history_report_and_checks(
    client: Client, worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    bad, good = make_snapshots(tmp_path / "snaps", 2, bad_every=2)
    bad_receipt = client.submit(PREDICATE, snapshot=str(bad))
    good_receipt = client.submit(PREDICATE, snapshot=str(good))
    assert client.run_state(bad_receipt.run_id) is not None

    bad_verdict = client.wait(bad_receipt.run_id, timeout=90)
    good_verdict = client.wait(good_receipt.run_id, timeout=90)

    assert bad_verdict.verdict == VerdictKind.FALSE and bad_verdict.exit_code == 1
    assert "web-bad" in bad_verdict.explanation
    assert good_verdict.verdict == VerdictKind.TRUE and good_verdict.exit_code == 0
    assert client.verdict(bad_receipt.check_id) == bad_verdict
    assert client.verdict(bad_receipt.run_id) == bad_verdict
    assert [v.run_id for v in client.history(bad_receipt.check_id)] == [bad_receipt.run_id]

    report = client.run_report(bad_receipt.run_id)
    assert report is not None and report.status == "done" and report.attempts == 1
    assert [step.kind for step in report.steps] == ["THOUGHT", "COMMAND", "DONE"]

    false_here = client.checks(verdict="false", target="snapshot:cluster-000")
    assert [c.check_id for c in false_here] == [bad_receipt.check_id]
    assert client.run_state(good_receipt.run_id).status == "done"  # type: ignore[union-attr]


def test_the_same_run_delivered_twice_is_recorded_once(
    client: Client,
    worker: subprocess.Popen[bytes],
    scripted_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    (folder,) = make_snapshots(tmp_path / "snaps", 1)
    request = snapshot_request(path=str(folder))
    client.submit_request(request)
    client.dispatcher.send(request)  # the broker delivers a second copy
    client.wait(request.run_id, timeout=90)
    raw = redis.Redis.from_url(client.settings.redis_url or "")

    def copies_handled() -> bool:  # neither waiting in the queue nor held unacknowledged
        return raw.llen("assay.evaluations") == 0 and raw.hlen("unacked") == 0

    # The second copy may have started before the first was recorded (both then run and
    # the store keeps one): let it finish before counting the model's requests.
    assert wait_until(copies_handled, timeout=60)
    # a third copy after the verdict exists must not even start the engine
    asked_before = len(scripted_model.requests_for(request.run_id))
    client.dispatcher.send(request)
    assert wait_until(copies_handled, timeout=30)
    assert client.store.history_length(request.check_id) == 1
    assert len(client.history(request.check_id)) == 1
    assert len(scripted_model.requests_for(request.run_id)) == asked_before


def test_batch_of_fifty_snapshots_has_the_right_tally_and_results(
    client: Client, worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    make_snapshots(tmp_path / "fleet", 50, bad_every=5)  # clusters 0, 5, 10 ... are bad
    batch_id = client.start_batch(
        PREDICATE, snapshots=str(tmp_path / "fleet" / "*"), profile=NO_CONFIRMER_PROFILE
    )
    seen: list[int] = []
    status = client.wait_batch(batch_id, timeout=180, on_progress=lambda s: seen.append(s.pending))

    assert status.done and status.sealed
    assert (status.total, status.pending, status.true, status.false) == (50, 0, 40, 10)
    assert status.poorly_posed == 0 and status.cannot_determine == 0
    assert seen[0] > 0, "the tally was live: targets were pending when first read"

    results = list(client.batch_results(batch_id, page_size=7))
    assert len(results) == 50 and len({r.run_id for r in results}) == 50
    for row in results:
        index = int(row.target.rsplit("-", 1)[1])
        expected = VerdictKind.FALSE if index % 5 == 0 else VerdictKind.TRUE
        assert row.verdict == expected, row
    assert {c.check_id for c in client.checks(verdict="false")} == {
        r.check_id for r in results if r.verdict == VerdictKind.FALSE
    }
