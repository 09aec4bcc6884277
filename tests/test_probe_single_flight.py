"""Single-flight probe compilation (workers/fleet/probe_store.py, probe_rerun.py).

A batch's targets of one check start together on many worker threads; without single-flight
each asks the model before the first has compiled a probe. With it, one run asks the model
and the others wait for its probe. Real redis-server, a real `celery worker` process with 8
threads, the scripted model (slowed so the runs overlap); and, in-process, the lock's
fail-safe paths: a holder that vanished, a holder that ended without a probe.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

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
    PREDICATE,
    make_snapshots,
    scripted_worker,
    wait_until,
)
from tests.probe_support import done_with_probe, fleet_script_with_probe, probe
from workers.core.engine import EngineDeps
from workers.fleet.probe_rerun import evaluate_check
from workers.fleet.probe_store import ProbeStore
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
        batch_id = client.start_batch(PREDICATE, snapshots="snaps/*")
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


def _run(snapshot: Path, probes: ProbeStore, check_id: str) -> tuple[RunReport, int]:
    with scripted_model(COMPILE_FALSE) as model:
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
