"""A batch whose fan-out stops part way is closed as incomplete, never left "enqueueing".

Before, a batch was sealed only when its fan-out reached the end, so a fan-out that
stopped (the target listing raised, Ctrl-C, the submitting process killed) left it
unsealed for ever: `assay batch status` said "enqueueing", ``done`` never came, and
whatever waited on it waited until its own timeout. What the user sees now, against a
real redis-server with no worker (verdicts are recorded as a worker would):

* an exception from the target iterator after some chunks: the exception says what
  became of the batch; its status reads "incomplete" with the reason at once, it
  finishes once its registered runs have verdicts, and all of them true exits 3, not 0;
* Ctrl-C in `assay batch` mid fan-out: exit 130 with the batch id and the same closing;
* a submitter SIGKILLed mid fan-out (a real subprocess, which runs no code as it dies):
  while it lives, its lease keeps the batch "enqueueing" well past one lease; once it is
  killed the lease lapses and the first reader closes the batch as incomplete, so
  ``Client.wait_batch`` returns, the API's JSON says so, and the exit code is 3;
* a submitter that stalled past its lease cannot add targets to the closed batch;
* a batch record from before the lease (no ``fanout_lease`` field) keeps the old
  behaviour: unsealed stays "enqueueing".
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import structlog

from assay.client import Client
from assay.submission import submit_batch
from schemas.request import SnapshotTarget, Target
from schemas.settings import load_settings
from tests.cli_support import run_cli
from tests.fleet_support import (
    PREDICATE,
    ROOT,
    finished_report,
    make_snapshots,
    snapshot_request,
    stop_process,
    wait_until,
    worker_env,
)
from workers.fleet.store import VerdictStore

LEASE = 1.0  # ASSAY_BATCH_FANOUT_LEASE_SECONDS in these tests


@pytest.fixture
def assay_cli(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """``assay ARGV`` in this process -> (exit code, stdout, stderr)."""

    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_BATCH_FANOUT_LEASE_SECONDS", str(LEASE))

    def run(*argv: str) -> tuple[int, str, str]:
        return run_cli(capsys, *argv)

    yield run
    structlog.reset_defaults()  # the command configured logging on the captured stderr


@pytest.fixture
def fleet(redis_url: str) -> Iterator[Client]:
    with Client(load_settings(redis_url=redis_url, batch_fanout_lease_seconds=LEASE)) as client:
        yield client


def record_all(fleet: Client, batch_id: str, verdict: str = "true") -> int:
    """Record ``verdict`` for every run the batch registered, as the workers would."""
    rows = list(fleet.batch_results(batch_id))
    for row in rows:
        request = fleet.store.run_request(row.run_id)
        assert request is not None and fleet.store.record_verdict(finished_report(request, verdict))
    return len(rows)


def failing_after(paths: list[Path], error: BaseException) -> Iterator[Target]:
    """The targets of ``paths``, then ``error`` as the listing of the next one fails."""
    for path in paths:
        yield SnapshotTarget(path=str(path))
    raise error


def test_a_target_listing_that_raises_mid_fan_out_closes_the_batch_as_incomplete(
    fleet: Client, assay_cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    paths = make_snapshots(tmp_path / "snaps", 5)
    with pytest.raises(OSError, match="listing failed") as raised:
        submit_batch(
            failing_after(paths, OSError("listing failed")),
            text=PREDICATE,
            store=fleet.store,
            redis=fleet.store.client,
            settings=fleet.settings,
            dispatcher=lambda: fleet.dispatcher,
            batch_id="batch-listing-failed",
            chunk_size=2,
        )
    assert raised.value.__notes__ == [
        "batch batch-listing-failed stopped mid fan-out: its first 4 runs are submitted and "
        "the targets after them were not; it is closed as incomplete: it finishes once they "
        "have run, and never counts as all true: start a new batch for the rest"
    ]
    state = (
        "incomplete: the fan-out stopped after 4 targets (the fan-out failed: OSError); the "
        "targets after them were not submitted"
    )
    code, out, _err = assay_cli("batch", "status", "batch-listing-failed")
    assert code == 75
    assert f"batch batch-listing-failed · running, {state} · 0/4 done" in out

    assert record_all(fleet, "batch-listing-failed") == 4
    code, out, _err = assay_cli("batch", "status", "batch-listing-failed")
    assert code == 3, "all four registered runs are true, but the fifth target never ran"
    assert f"batch batch-listing-failed · done, {state} · 4/4 done" in out
    status = fleet.wait_batch("batch-listing-failed", timeout=5)
    assert status.done and status.incomplete and (status.total, status.true) == (4, 4)
    assert status.finished_at is not None


def test_ctrl_c_in_assay_batch_mid_fan_out_names_the_batch_and_closes_it(
    fleet: Client,
    assay_cli: Callable[..., tuple[int, str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import assay.client

    paths = make_snapshots(tmp_path / "snaps", 201)  # one whole chunk, then Ctrl-C
    monkeypatch.setattr(
        assay.client,
        "snapshot_targets",
        lambda pattern, roots: failing_after(paths, KeyboardInterrupt()),
    )

    code, out, err = assay_cli("batch", PREDICATE, "--snapshots", str(tmp_path / "snaps" / "*"))

    assert code == 130 and out == ""
    batch_id = fleet.latest_batch_id()
    assert batch_id is not None
    assert f"assay: error: interrupted; batch {batch_id} stopped mid fan-out: its first 200 " in err
    code, out, _err = assay_cli("batch", "status", "--json")
    shown = json.loads(out)
    assert code == 75
    assert (shown["batch_id"], shown["total"], shown["sealed"], shown["done"]) == (
        batch_id,
        200,
        True,
        False,
    )
    assert shown["incomplete"] and shown["stop_reason"] == "its submitter was interrupted"
    record_all(fleet, batch_id)
    code, out, _err = assay_cli("batch", "status", batch_id)
    assert code == 3
    assert "done, incomplete: the fan-out stopped after 200 targets" in out


SUBMITTER = """
import sys, time
from assay.client import Client
from assay.submission import submit_batch
from schemas.request import SnapshotTarget

paths = sys.argv[2:]

def targets():
    for path in paths:
        yield SnapshotTarget(path=path)
    print("first chunk submitted", flush=True)  # the next chunk's listing never ends
    time.sleep(3600)

with Client() as fleet:
    submit_batch(targets(), text=sys.argv[1], store=fleet.store, redis=fleet.store.client,
                 settings=fleet.settings, dispatcher=lambda: fleet.dispatcher,
                 batch_id="batch-killed", chunk_size=len(paths))
"""


def test_a_submitter_killed_mid_fan_out_leaves_a_batch_that_finishes_incomplete(
    fleet: Client,
    assay_cli: Callable[..., tuple[int, str, str]],
    redis_url: str,
    tmp_path: Path,
) -> None:
    from fastapi.testclient import TestClient

    from assay.api import create_app
    from tests.api_support import READ_TOKEN, TOKENS, auth

    paths = make_snapshots(tmp_path / "snaps", 3)
    env = worker_env(redis_url, batch_fanout_lease_seconds=str(LEASE))
    submitter = subprocess.Popen(
        [sys.executable, "-c", SUBMITTER, PREDICATE, *map(str, paths)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert submitter.stdout is not None
        line = submitter.stdout.readline()
        assert line == b"first chunk submitted\n", submitter.stderr.read() if line == b"" else line
        # Alive, it renews its lease: the batch is still being fanned out, past a lease.
        time.sleep(3 * LEASE)
        code, out, _err = assay_cli("batch", "status", "batch-killed")
        assert code == 75 and "batch batch-killed · enqueueing · 0/3 done" in out
        stop_process(submitter, kill=True)  # SIGKILL: no finally, no handler runs
    finally:
        stop_process(submitter, kill=True)

    def closed() -> bool:
        status = fleet.batch_status("batch-killed")
        return status is not None and bool(status.model_dump().get("incomplete"))

    assert wait_until(closed, timeout=5 * LEASE), "the lapsed lease did not close the batch"
    code, out, _err = assay_cli("batch", "status", "batch-killed")
    assert code == 75
    assert (
        "batch batch-killed · running, incomplete: the fan-out stopped after 3 targets (its "
        "submitter stopped renewing the fan-out's lease (killed, or cut off)); the targets "
        "after them were not submitted · 0/3 done"
    ) in out

    record_all(fleet, "batch-killed")
    status = fleet.wait_batch("batch-killed", timeout=5)  # before: WaitTimeout, for ever
    assert status.done and status.finished_at is not None and status.true == status.total == 3
    code, out, _err = assay_cli("batch", "status", "batch-killed", "--json")
    assert code == 3, "every registered run is true, but the fan-out never finished: not 0"
    with TestClient(create_app(load_settings(redis_url=redis_url, api_tokens=TOKENS))) as api:
        answer = api.get("/v1/batches/batch-killed", headers=auth(READ_TOKEN))
    assert answer.status_code == 200
    assert answer.json() == json.loads(out)
    assert answer.json()["done"] and answer.json()["incomplete"]


def test_a_submitter_that_stalled_past_its_lease_cannot_add_to_the_closed_batch(
    redis_url: str,
) -> None:
    from workers.fleet.store import BatchClosed  # new with the lease

    store = VerdictStore.from_settings(load_settings(redis_url=redis_url))
    store.create_batch(
        "batch-stalled", kind="check", text=PREDICATE, lease_token="t", lease_seconds=0.2
    )
    store.register_run(snapshot_request(batch_id="batch-stalled"))
    time.sleep(0.3)  # the lease lapses: no one renewed it
    status = store.batch("batch-stalled")
    assert status is not None and status.incomplete and status.total == 1
    assert not store.renew_fanout("batch-stalled", "t", 1.0)
    with pytest.raises(BatchClosed, match="batch batch-stalled was closed as incomplete"):
        store.register_run(snapshot_request(batch_id="batch-stalled"))
    status = store.batch("batch-stalled")
    assert status is not None and (status.total, status.pending) == (1, 1)


def test_a_batch_record_from_before_the_lease_stays_enqueueing_until_sealed(
    redis_url: str,
) -> None:
    """No ``fanout_lease`` field (a batch written by an older assay): the old behaviour."""
    store = VerdictStore.from_settings(load_settings(redis_url=redis_url))
    store.create_batch("batch-old", kind="check", text=PREDICATE)
    request = snapshot_request(batch_id="batch-old")
    store.register_run(request)
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    assert "fanout_lease" not in raw.hgetall(f"{store.prefix}:batch:batch-old")
    raw.close()
    store.record_verdict(finished_report(request, "true"))
    status = store.batch("batch-old")
    assert status is not None and not status.sealed and not status.done
    assert not status.incomplete
    store.seal_batch("batch-old")
    status = store.batch("batch-old")
    assert status is not None and status.done and not status.incomplete
