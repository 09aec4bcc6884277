"""Single-flight probe compilation (workers/fleet/probe_store.py, probe_rerun.py).

A batch's targets of one check start together on many worker threads; without single-flight
each asks the model before the first has compiled a probe. With it, one run asks the model
and the others wait for its probe. Real redis-server, a real `celery worker` process with 8
threads, the scripted model (slowed so the runs overlap); and, in-process, the lock's
fail-safe paths: a holder that vanished, a holder that ended without a probe; and the claim's
lease: a killed holder (one that stops renewing, or a process SIGKILLed) frees its waiters
within a lease, a live holder keeps its claim past the lease, a stale token renews nothing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.client import Client
from assay.testing.scripted_model import ScriptedModel
from schemas.probe import ProbeOutcome, ProbeRun, ProposedProbe
from schemas.report import RunReport
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.engine_support import get_deployments, make_snapshot, request_for, script
from tests.engine_support import scripted as scripted_model
from tests.fleet_support import (
    NO_CONFIRMER_PROFILE,
    PREDICATE,
    make_snapshots,
    scripted_worker,
    wait_until,
)
from tests.probe_support import done_with_probe, fleet_script_with_probe, probe
from workers.engine.engine import EngineDeps
from workers.fleet.probe_rerun import evaluate_check
from workers.fleet.probe_store import COMPILE_LEASE_SECONDS, ProbeStore
from workers.fleet.redis_client import connect

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TARGETS = 8


@pytest.fixture(scope="module")
def slow_model() -> Iterator[ScriptedModel]:
    # 0.5 s per turn, so all 8 threads start before one run ends.
    with ScriptedModel(fleet_script_with_probe(delay=0.5)) as model:
        yield model


@pytest.fixture
def worker(
    redis_url: str, slow_model: ScriptedModel, tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with scripted_worker(redis_url, slow_model.url, tmp_path / "worker.log", 8) as process:
        yield process


def test_a_batch_on_many_threads_asks_the_model_once(
    redis_url: str,
    worker: subprocess.Popen[bytes],
    slow_model: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_snapshots(tmp_path / "snaps", TARGETS, bad_every=3)  # cluster-000, -003, -006 unready
    monkeypatch.chdir(tmp_path)
    with Client(load_settings(redis_url=redis_url)) as client:
        batch_id = client.start_batch(PREDICATE, snapshots="snaps/*", profile=NO_CONFIRMER_PROFILE)
        assert wait_until(lambda: (s := client.batch_status(batch_id)) is not None
                          and s.pending == 0, timeout=180)  # fmt: skip
        results = list(client.batch_results(batch_id))
        verdicts = {r.target: client.verdict(r.run_id) for r in results}
    assert len(verdicts) == TARGETS
    asked = [r.run_id for r in results if slow_model.requests_for(r.run_id)]
    assert len(asked) == 1, f"{len(asked)} of {TARGETS} runs asked the model"
    sources = sorted(v.source for v in verdicts.values() if v is not None)
    assert sources == ["model"] + ["probe"] * (TARGETS - 1)
    falses = sorted(t for t, v in verdicts.items() if v and v.verdict == VerdictKind.FALSE)
    assert falses == ["snapshot:cluster-000", "snapshot:cluster-003", "snapshot:cluster-006"]
    probes = ProbeStore(connect(redis_url), prefix="assay")
    stored = [probes.current(r.check_id) for r in results]
    assert sum(1 for record in stored if record is not None) == 1  # one probe compiled


# --- the lock's fail-safe paths, in-process ----------------------------------------------------
COMPILE_FALSE = script(get_deployments(), done_with_probe("false", 0, probe_spec=probe()))


def _run(
    snapshot: Path, probes: ProbeStore, check_id: str, turns: dict[str, Any] = COMPILE_FALSE
) -> tuple[RunReport, int]:
    with scripted_model(turns) as model:
        settings = load_settings(model="openai/scripted", api_base=model.url)
        request = request_for(snapshot).model_copy(update={"check_id": check_id})
        report = evaluate_check(request, EngineDeps(settings=settings), probes)
        return report, len(model.requests)


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return make_snapshot(tmp_path / "snap", web_ready=1)  # web is unready: false


def test_a_vanished_holder_blocks_no_one_beyond_the_lock_ttl(
    redis_url: str, snapshot: Path
) -> None:
    probes = ProbeStore(connect(redis_url), prefix="sf1", compile_lock_seconds=2.0)
    assert probes.claim_compile("chk-lost", None) is not None  # a holder that then died
    assert probes.claim_compile("chk-lost", None) is None
    report, calls = _run(snapshot, probes, "chk-lost")
    assert calls == 2 and report.verdict is not None
    assert report.verdict.source == "model" and report.verdict.verdict == VerdictKind.FALSE
    assert probes.current("chk-lost") is not None  # and it compiled the probe


@pytest.mark.timeout(60)
def test_after_a_compile_without_a_probe_runs_do_not_queue(redis_url: str, snapshot: Path) -> None:
    """The holder ended without a probe: later runs ask the model at once (the 600 s lock
    would make this test time out if they waited for it)."""
    probes = ProbeStore(connect(redis_url), prefix="sf2", compile_lock_seconds=600)
    token = probes.claim_compile("chk-none", None)
    assert token is not None
    probes.finish_compile("chk-none", None, "someone-else")  # not the owner: no effect
    assert probes.compile_state("chk-none", None) == "compiling"
    probes.finish_compile("chk-none", None, token)
    assert probes.compile_state("chk-none", None) == "done"
    report, calls = _run(snapshot, probes, "chk-none")
    assert calls == 2 and report.verdict is not None and report.verdict.source == "model"


def test_a_waiter_runs_the_probe_the_holder_compiled(redis_url: str, snapshot: Path) -> None:
    probes = ProbeStore(connect(redis_url), prefix="sf3", compile_lock_seconds=120)
    token = probes.claim_compile("chk-wait", None)
    assert token is not None
    finished: list[tuple[RunReport, int]] = []
    waiter = threading.Thread(target=lambda: finished.append(_run(snapshot, probes, "chk-wait")))
    waiter.start()
    spec = ProposedProbe.model_validate(probe())
    outcome = ProbeOutcome(status="accepted", reason="the holder's", probe=spec,
                           run=ProbeRun(verdict=VerdictKind.FALSE))  # fmt: skip
    probes.save_compiled(
        "chk-wait", "run-holder", outcome, VerdictKind.FALSE, predicate=PREDICATE, profile="fast"
    )
    probes.finish_compile("chk-wait", None, token)
    waiter.join(timeout=60)
    assert not waiter.is_alive()
    [(report, calls)] = finished
    assert calls == 0
    assert report.verdict is not None and report.verdict.source == "probe"
    assert report.verdict.verdict == VerdictKind.FALSE and report.verdict.probe_version == 1


def test_probe_off_neither_claims_nor_waits(redis_url: str, snapshot: Path) -> None:
    probes = ProbeStore(connect(redis_url), prefix="sf4", compile_lock_seconds=600)
    assert probes.claim_compile("chk-off", None) is not None
    with scripted_model(COMPILE_FALSE) as model:
        settings = load_settings(model="openai/scripted", api_base=model.url)
        request = request_for(snapshot).model_copy(update={"check_id": "chk-off", "probe": "off"})
        report = evaluate_check(request, EngineDeps(settings=settings), probes)
        assert len(model.requests) == 2
    assert report.verdict is not None and report.verdict.source == "model"


# --- the one-round-trip lookup (ProbeStore.lookup) ---------------------------------------------
def _compiled(probes: ProbeStore, check_id: str, verdict: VerdictKind) -> None:
    spec = ProposedProbe.model_validate(probe())
    outcome = ProbeOutcome(status="accepted", reason="compiled", probe=spec,
                           run=ProbeRun(verdict=verdict))  # fmt: skip
    probes.save_compiled(
        check_id, f"run-{check_id}", outcome, verdict, predicate=PREDICATE, profile="fast"
    )


def test_lookup_claims_only_where_there_is_no_probe_and_no_claim(redis_url: str) -> None:
    probes = ProbeStore(connect(redis_url), prefix="sf5", compile_lock_seconds=600)
    assert probes.lookup("chk-a", None, claim=False) == probes.lookup("chk-a", None, claim=False)
    assert probes.compile_state("chk-a", None) == "free"  # claim=False took nothing
    first = probes.lookup("chk-a", None, claim=True)
    assert first.own is None and first.batch is None
    assert first.state == "free" and first.token is not None
    second = probes.lookup("chk-a", None, claim=True)
    assert second.token is None and second.state == "compiling"
    probes.finish_compile("chk-a", None, first.token)
    assert probes.lookup("chk-a", None, claim=True).state == "done"

    _compiled(probes, "chk-b", VerdictKind.TRUE)
    found = probes.lookup("chk-b", None, claim=True)
    assert found.own is not None and found.own.check_id == "chk-b" and found.token is None
    assert probes.compile_state("chk-b", None) == "free"  # a run with a probe claims nothing


def test_lookup_reads_the_checks_probe_and_the_batchs_in_one_go(redis_url: str) -> None:
    probes = ProbeStore(connect(redis_url), prefix="sf6", compile_lock_seconds=600)
    _compiled(probes, "chk-batch-first", VerdictKind.FALSE)
    batch_record = probes.current("chk-batch-first")
    assert batch_record is not None
    probes.save_batch_probe("batch-1", batch_record)
    borrowed = probes.lookup("chk-new", "batch-1", claim=True)
    assert borrowed.own is None and borrowed.batch == batch_record and borrowed.token is None

    _compiled(probes, "chk-own", VerdictKind.TRUE)
    own = probes.lookup("chk-own", "batch-1", claim=True)
    assert own.own is not None and own.own.check_id == "chk-own" and own.batch == batch_record

    retired = own.own.model_copy(update={"active": False, "retired_reason": "disagreed"})
    probes.put(retired)
    alone = probes.lookup("chk-own", None, claim=True)
    assert alone.own == retired and alone.token is None  # a probe exists: the run decides


def test_a_check_whose_probe_was_retired_compiles_again(redis_url: str, snapshot: Path) -> None:
    """A retired probe is no probe: the next run claims the compile, asks the model and stores
    the probe it proposes as the next version."""
    probes = ProbeStore(connect(redis_url), prefix="sf7", compile_lock_seconds=600)
    _compiled(probes, "chk-retired", VerdictKind.TRUE)
    record = probes.current("chk-retired")
    assert record is not None
    probes.put(record.model_copy(update={"active": False, "retired_reason": "disagreed"}))
    report, calls = _run(snapshot, probes, "chk-retired")
    assert calls == 2 and report.verdict is not None
    assert report.verdict.source == "model" and report.verdict.verdict == VerdictKind.FALSE
    assert probes.compile_state("chk-retired", None) == "done"  # it held the claim, released
    current = probes.current("chk-retired")
    assert current is not None and current.active and current.version == 2


# --- the claim's lease: a killed holder frees its waiters within seconds -----------------------
WAIT = 60.0  # the default probe_compile_wait_seconds: what a killed holder cost before the lease


def _claim_key(prefix: str, check_id: str) -> str:
    return f"{prefix}:probe:{check_id}:compiling"


def _in_background(work: Any) -> tuple[threading.Thread, list[Any]]:
    """``work()`` on a daemon thread (so a waiter stuck on the old 60 s claim cannot hold the
    test run), its result and when it returned (monotonic) appended to the list."""
    finished: list[Any] = []
    thread = threading.Thread(
        target=lambda: finished.append((work(), time.monotonic())), daemon=True
    )
    thread.start()
    return thread, finished


@pytest.mark.timeout(60)
def test_a_holder_that_stops_renewing_holds_its_waiters_up_for_a_lease_not_the_wait(
    redis_url: str, snapshot: Path
) -> None:
    """A holder killed right after its claim never renews it nor marks it done: the claim
    expires within one lease, and the waiter takes it over and asks the model. Before the
    lease it waited the claim's whole TTL, the 60 s wait."""
    probes = ProbeStore(connect(redis_url), prefix="sf8", compile_lock_seconds=WAIT)
    assert probes.claim_compile("chk-killed", None) is not None  # then the holder is killed
    started = time.monotonic()
    waiter, finished = _in_background(lambda: _run(snapshot, probes, "chk-killed"))
    waiter.join(timeout=15)
    assert finished, "the waiter still waits for a dead holder's claim"
    [((report, calls), ended)] = finished
    assert ended - started < 10
    assert calls == 2 and report.verdict is not None  # it asked the model itself
    assert report.verdict.source == "model" and report.verdict.verdict == VerdictKind.FALSE
    assert probes.current("chk-killed") is not None  # as the new holder: it compiled the probe
    assert probes.compile_state("chk-killed", None) == "done"


HOLDER = """
import sys, time
from workers.fleet.probe_store import ProbeStore
from workers.fleet.redis_client import connect

url, prefix, check_id, lease = sys.argv[1:5]
probes = ProbeStore(connect(url), prefix=prefix, compile_lock_seconds=60,
                    compile_lease_seconds=float(lease))
lookup = probes.lookup(check_id, None, claim=True)
assert lookup.token is not None
probes.hold(check_id, None, lookup.token)
print("held", flush=True)
time.sleep(600)  # "asking the model" until killed
"""


@pytest.mark.timeout(60)
def test_a_sigkilled_holder_process_frees_its_waiter_within_a_lease(
    redis_url: str, snapshot: Path
) -> None:
    """A real holder process: while it lives its heartbeat keeps the claim past the lease
    (the waiter waits); SIGKILLed, its claim expires and the waiter goes its own way."""
    lease = 2.0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, redis_url, "sf9", "chk-sigkill", str(lease)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        probes = ProbeStore(connect(redis_url), prefix="sf9", compile_lock_seconds=WAIT)
        waiter, finished = _in_background(lambda: _run(snapshot, probes, "chk-sigkill"))
        time.sleep(lease * 1.5)
        assert waiter.is_alive() and not finished  # the live holder's claim outlived a lease
        assert probes.compile_state("chk-sigkill", None) == "compiling"
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        killed = time.monotonic()
        waiter.join(timeout=15)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert finished, "the waiter still waits for a killed holder's claim"
    [((report, calls), ended)] = finished
    assert ended - killed < 10
    assert calls == 2 and report.verdict is not None and report.verdict.source == "model"


SLOW_COMPILE_FALSE = script(
    get_deployments(), done_with_probe("false", 0, probe_spec=probe()), delay=1.25
)


@pytest.mark.timeout(60)
def test_a_live_holder_compiling_longer_than_its_lease_keeps_the_claim(
    redis_url: str, snapshot: Path
) -> None:
    """The claim lives one short lease at a time (its TTL never exceeds the lease), yet a
    holder whose model takes over two leases keeps it: the waiter waits, never asks the
    model, and runs the holder's probe."""
    lease = 1.0
    probes = ProbeStore(
        connect(redis_url), prefix="sf10", compile_lock_seconds=WAIT, compile_lease_seconds=lease
    )
    holder, held = _in_background(lambda: _run(snapshot, probes, "chk-live", SLOW_COMPILE_FALSE))
    assert wait_until(lambda: probes.compile_state("chk-live", None) != "free", 10, 0.01)
    claimed = time.monotonic()
    waiter, waited = _in_background(lambda: _run(snapshot, probes, "chk-live"))
    key = _claim_key("sf10", "chk-live")
    samples: list[tuple[float, str | None, int]] = []  # (since the claim, value, PTTL ms)
    while holder.is_alive():
        value, pttl = probes.client.pipeline().get(key).pttl(key).execute()
        samples.append((time.monotonic() - claimed, value, pttl))
        time.sleep(0.05)
    holder.join()
    waiter.join(timeout=15)
    holding = [(at, pttl) for at, value, pttl in samples if value not in (None, "done")]
    assert holding and max(pttl for _, pttl in holding) <= lease * 1000  # a short lease
    assert max(at for at, _ in holding) > 2 * lease  # renewed: it outlived two leases
    assert all(value is not None for _, value, _ in samples)  # never gone meanwhile
    [((holder_report, holder_calls), _)] = held
    assert holder_calls == 2 and holder_report.verdict is not None
    assert holder_report.verdict.source == "model"
    [((report, calls), _)] = waited
    assert calls == 0 and report.verdict is not None and report.verdict.source == "probe"
    assert report.verdict.verdict == VerdictKind.FALSE and report.verdict.probe_version == 1
    assert probes.compile_state("chk-live", None) == "done"


def test_renewal_by_a_stale_token_extends_nothing(redis_url: str) -> None:
    """Compare-and-extend: a holder whose claim expired and went to another run cannot renew
    the other run's claim (its heartbeat stops at once), nor a claim marked done."""
    lease = 1.0
    probes = ProbeStore(
        connect(redis_url), prefix="sf11", compile_lock_seconds=WAIT, compile_lease_seconds=lease
    )
    key = _claim_key("sf11", "chk-stale")
    stale = probes.claim_compile("chk-stale", None)
    assert stale is not None
    assert wait_until(lambda: probes.compile_state("chk-stale", None) == "free", 3, 0.02)
    current = probes.claim_compile("chk-stale", None)  # another run takes the expired claim
    assert current is not None and current != stale
    before = probes.client.pttl(key)
    assert 0 < before <= lease * 1000
    assert not probes.renew_compile("chk-stale", None, stale, 30_000)
    assert 0 < probes.client.pttl(key) <= before and probes.client.get(key) == current

    beat = probes.hold("chk-stale", None, stale)  # the stale holder's heartbeat
    assert wait_until(lambda: not beat.renewing, 2, 0.02)  # stopped at its first renewal
    # the current claim, never renewed by its own holder, expires on time: nothing extended it
    assert wait_until(lambda: probes.compile_state("chk-stale", None) == "free", 2, 0.02)

    done = probes.claim_compile("chk-stale", None)
    assert done is not None
    probes.finish_compile("chk-stale", None, done, 500)
    assert not probes.renew_compile("chk-stale", None, done, 30_000)  # "done" is no token
    assert 0 < probes.client.pttl(key) <= 500
    assert probes.compile_state("chk-stale", None) == "done"


def test_a_live_holders_claim_still_ends_after_the_wait(redis_url: str) -> None:
    """The heartbeat renews a short lease, but never past ``compile_lock_seconds`` from the
    claim: a live holder's claim ends when it did before there was a lease, and its release
    after that marks nothing done (the next run may try once more)."""
    probes = ProbeStore(
        connect(redis_url), prefix="sf12", compile_lock_seconds=1.5, compile_lease_seconds=0.5
    )
    key = _claim_key("sf12", "chk-capped")
    lookup = probes.lookup("chk-capped", None, claim=True)
    assert lookup.token is not None
    claimed = time.monotonic()
    claim = probes.hold("chk-capped", None, lookup.token)
    time.sleep(0.7)  # past one lease: renewed, and the TTL is the lease's, not the wait's
    assert probes.compile_state("chk-capped", None) == "compiling"
    assert 0 < probes.client.pttl(key) <= 500
    assert wait_until(lambda: probes.compile_state("chk-capped", None) == "free", 3, 0.02)
    assert time.monotonic() - claimed >= 1.4
    assert wait_until(lambda: not claim.renewing, 1, 0.02)
    claim.release()
    assert probes.compile_state("chk-capped", None) == "free"


def test_the_lease_is_short_and_never_longer_than_the_wait(redis_url: str) -> None:
    """The default lease is seconds, not the wait; a wait shorter than the lease bounds it."""
    assert 1 <= COMPILE_LEASE_SECONDS <= 10
    client = connect(redis_url)
    for wait, most in ((WAIT, COMPILE_LEASE_SECONDS), (2.0, 2.0)):
        probes = ProbeStore(client, prefix="sf13", compile_lock_seconds=wait)
        assert probes.lookup(f"chk-{int(wait)}", None, claim=True).token is not None
        assert 0 < client.pttl(_claim_key("sf13", f"chk-{int(wait)}")) <= most * 1000


def test_a_batch_keeps_its_probe_as_the_check_it_came_from(redis_url: str) -> None:
    """A batch's probe names the check whose probe it is (a few bytes per batch, not a copy of
    the record); once that probe is retired, the batch's other targets borrow nothing."""
    probes = ProbeStore(connect(redis_url), prefix="sf8", compile_lock_seconds=600)
    _compiled(probes, "chk-first", VerdictKind.FALSE)
    record = probes.current("chk-first")
    assert record is not None
    probes.save_batch_probe("batch-2", record)
    assert len(probes.client.get("sf8:batchprobe:batch-2") or "") < 20
    assert probes.lookup("chk-new", "batch-2", claim=False).batch == record
    probes.put(record.model_copy(update={"active": False, "retired_reason": "disagreed"}))
    assert probes.lookup("chk-new", "batch-2", claim=False).batch is None
    assert probes.batch_probe("batch-2") is None
