"""Re-running a check by its probe: stored with the check, 0 model tokens, falls back to the
model when it cannot run (never true), re-validated on a schedule and on a flip.

Real redis-server (tests/conftest.py), real snapshot backend, the scripted model over HTTP;
``evaluate_check`` is what the worker task calls.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from schemas.budget import Budget
from schemas.report import RunReport
from schemas.request import EvaluationRequest, new_run_id
from schemas.settings import AssaySettings, load_settings
from schemas.verdict import VerdictKind
from tests.engine_support import done, get_deployments, make_snapshot, request_for, script
from tests.engine_support import scripted as scripted_model
from tests.probe_support import done_with_probe, probe
from workers.engine.engine import EngineDeps
from workers.engine.llm import load_litellm
from workers.fleet import probe_rerun
from workers.fleet.probe_rerun import evaluate_check
from workers.fleet.probe_store import ProbeStore
from workers.fleet.redis_client import connect
from workers.fleet.store import VerdictStore, verdict_source

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    load_litellm().token_counter(model="openai/scripted", text="warm up")


@pytest.fixture
def probes(redis_url: str) -> ProbeStore:
    return ProbeStore(connect(redis_url), prefix="tp", history_limit=50)


def _request(snapshot: Path, **fields: Any) -> EvaluationRequest:
    return request_for(snapshot).model_copy(update={"run_id": new_run_id(), **fields})


def _check(
    snapshot: Path,
    probes: ProbeStore,
    turns: dict[str, Any],
    *,
    check_id: str = "chk-ready",
    **fields: Any,
) -> tuple[RunReport, int]:
    """One run of the check through the probe path; also how many model calls it made."""
    settings_fields = {k: fields.pop(k) for k in list(fields) if k.startswith("probe_re")}
    with scripted_model(turns) as model:
        settings = load_settings(model="openai/scripted", api_base=model.url, **settings_fields)
        request = _request(snapshot, check_id=check_id, **fields)
        report = evaluate_check(request, EngineDeps(settings=settings), probes)
        return report, len(model.requests)


COMPILE_TRUE = script(get_deployments(), done_with_probe("true", 0, probe_spec=probe()))
MODEL_TRUE = script(get_deployments(), done("true", 0))
MODEL_FALSE = script(get_deployments(), done("false", 0))
NO_MODEL = script(done("true", 0, excerpt="never used"))  # any call would find no lookup


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return make_snapshot(tmp_path / "snap")


def test_compiled_probe_is_stored_then_rerun_for_zero_tokens(
    snapshot: Path, probes: ProbeStore
) -> None:
    first, calls = _check(snapshot, probes, COMPILE_TRUE)
    assert first.verdict is not None and first.verdict.source == "model"
    assert first.verdict.probe_version == 1 and first.probe is not None
    assert first.probe.version == 1
    stored = probes.current("chk-ready")
    assert stored is not None and stored.version == 1 and stored.compiled_by_run == first.run_id
    assert [e.why for e in probes.agreement("chk-ready")] == ["compile"]

    again, calls = _check(snapshot, probes, NO_MODEL)
    assert calls == 0
    assert again.verdict is not None and again.verdict.verdict == VerdictKind.TRUE
    assert again.verdict.source == "probe" and again.verdict.probe_version == 1
    assert again.verdict.usage.total_tokens == 0
    assert "Deployment prod/web" in again.verdict.evidence[0].excerpt
    assert "status.readyReplicas" in again.verdict.evidence[0].excerpt
    record = probes.current("chk-ready")
    assert record is not None and record.runs_since_validation == 1


def test_probe_off_always_asks_the_model(snapshot: Path, probes: ProbeStore) -> None:
    _check(snapshot, probes, COMPILE_TRUE)
    report, calls = _check(snapshot, probes, MODEL_TRUE, probe="off")
    assert calls == 2 and report.verdict is not None and report.verdict.source == "model"


def test_probe_only_without_a_probe_is_cannot_determine(snapshot: Path, probes: ProbeStore) -> None:
    report, calls = _check(snapshot, probes, MODEL_TRUE, probe="only")
    assert calls == 0
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.CANNOT_DETERMINE


def _break_probe(probes: ProbeStore, **probe_fields: Any) -> None:
    record = probes.current("chk-ready")
    assert record is not None
    broken = record.probe.model_copy(update=probe_fields)
    probes.put(record.model_copy(update={"probe": broken}))


@pytest.mark.parametrize(
    "breakage",
    [
        {"lookups": [probe(lookups=[{"tool": "get", "args": {"kind": "Rollout"}}])["lookups"][0]]},
        {"expression": "object.status.nothere == 1"},
        {"expression": "object.status.readyReplicas"},
        {"expression": "object.status.readyReplicas / 0 == 1"},
    ],
    ids=["kind missing", "expression error", "non-boolean", "division by zero"],
)
def test_probe_that_cannot_run_falls_back_and_never_says_true(
    snapshot: Path, probes: ProbeStore, breakage: dict[str, Any]
) -> None:
    _check(snapshot, probes, COMPILE_TRUE)
    from schemas.probe import ProbeLookup

    if "lookups" in breakage:
        breakage = {"lookups": [ProbeLookup.model_validate(x) for x in breakage["lookups"]]}
    _break_probe(probes, **breakage)
    # auto: the model answers instead (here it says false: the run's verdict is the model's)
    report, calls = _check(snapshot, probes, MODEL_FALSE)
    assert calls == 2
    assert report.verdict is not None and report.verdict.source == "model"
    assert report.verdict.verdict == VerdictKind.FALSE
    assert report.probe is not None and report.probe.status == "failed"
    # only: no model, and never true
    only, calls = _check(snapshot, probes, MODEL_TRUE, probe="only")
    assert calls == 0
    assert only.verdict is not None and only.verdict.verdict == VerdictKind.CANNOT_DETERMINE


def test_lookup_error_on_an_unreadable_target_falls_back(
    snapshot: Path, probes: ProbeStore, tmp_path: Path
) -> None:
    _check(snapshot, probes, COMPILE_TRUE)
    gone = tmp_path / "gone"
    report, calls = _check(gone, probes, MODEL_TRUE, probe="only")
    assert calls == 0
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.CANNOT_DETERMINE


def test_flip_is_confirmed_by_the_model_before_it_is_recorded(
    tmp_path: Path, probes: ProbeStore
) -> None:
    snap = make_snapshot(tmp_path / "snap")
    _check(snap, probes, COMPILE_TRUE)
    make_snapshot(snap, web_ready=1)  # the cluster changes: the probe now says false
    from workers.engine.toolsets.factory import snapshot_cache

    snapshot_cache.clear()
    confirmed, calls = _check(snap, probes, MODEL_FALSE)
    assert calls == 2  # the flip went to the model
    assert confirmed.verdict is not None and confirmed.verdict.verdict == VerdictKind.FALSE
    assert confirmed.verdict.source == "model" and confirmed.verdict.probe_version == 1
    assert confirmed.probe is not None and confirmed.probe.status == "accepted"
    history = probes.agreement("chk-ready")
    assert [(e.why, e.agreed) for e in history] == [("compile", True), ("flip", True)]
    # confirmed: the next run is the probe's again, at no model cost
    after, calls = _check(snap, probes, NO_MODEL)
    assert calls == 0 and after.verdict is not None
    assert after.verdict.verdict == VerdictKind.FALSE and after.verdict.source == "probe"


def test_flip_the_model_contradicts_retires_the_probe(tmp_path: Path, probes: ProbeStore) -> None:
    snap = make_snapshot(tmp_path / "snap")
    _check(snap, probes, COMPILE_TRUE)
    make_snapshot(snap, web_ready=1)
    from workers.engine.toolsets.factory import snapshot_cache

    snapshot_cache.clear()
    report, calls = _check(snap, probes, MODEL_TRUE)  # the model still says true
    assert calls == 2
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert report.verdict.source == "model" and report.probe is not None
    assert report.probe.status == "rejected"
    record = probes.current("chk-ready")
    assert record is not None and not record.active and record.disagreements == 1
    _, calls = _check(snap, probes, MODEL_TRUE)  # retired: the model again
    assert calls == 2


def test_revalidation_every_n_runs(snapshot: Path, probes: ProbeStore) -> None:
    _check(snapshot, probes, COMPILE_TRUE)
    first, calls = _check(snapshot, probes, NO_MODEL, probe_revalidate_runs=2)
    assert calls == 0 and first.verdict is not None and first.verdict.source == "probe"
    # the model re-validates, proposing the same probe again: no new version
    second, calls = _check(snapshot, probes, COMPILE_TRUE, probe_revalidate_runs=2)
    assert calls == 2 and second.verdict is not None and second.verdict.source == "model"
    assert second.verdict.probe_version == 1
    assert [e.why for e in probes.agreement("chk-ready")] == ["compile", "revalidate"]
    record = probes.current("chk-ready")
    assert record is not None and record.runs_since_validation == 0 and record.agreements == 2
    assert record.version == 1 and len(probes.versions("chk-ready")) == 1
    third, calls = _check(snapshot, probes, NO_MODEL, probe_revalidate_runs=2)
    assert calls == 0 and third.verdict is not None and third.verdict.source == "probe"


def test_a_new_probe_from_the_model_becomes_the_next_version(
    snapshot: Path, probes: ProbeStore
) -> None:
    _check(snapshot, probes, COMPILE_TRUE)
    again, _ = _check(snapshot, probes, COMPILE_TRUE, probe="off")  # same probe: same version
    assert again.verdict is not None and again.verdict.probe_version == 1
    other = probe("object.spec.replicas >= 2")
    turns = script(get_deployments(), done_with_probe("true", 0, probe_spec=other))
    newer, _ = _check(snapshot, probes, turns, probe="off")
    assert newer.verdict is not None and newer.verdict.probe_version == 2
    assert [v.version for v in probes.versions("chk-ready")] == [1, 2]
    record = probes.current("chk-ready")
    assert record is not None and record.probe.expression == "object.spec.replicas >= 2"


def test_batch_compiles_once_and_probes_the_other_targets(
    tmp_path: Path, probes: ProbeStore
) -> None:
    targets = [make_snapshot(tmp_path / f"t{i}", web_ready=2 if i != 2 else 1) for i in range(4)]
    results = []
    for index, target in enumerate(targets):
        turns = COMPILE_TRUE if index == 0 else MODEL_FALSE
        report, calls = _check(target, probes, turns, check_id=f"chk-t{index}", batch_id="batch-1")
        results.append((report.verdict.verdict if report.verdict else None, calls,
                        report.verdict.source if report.verdict else None))  # fmt: skip
    assert results[0] == (VerdictKind.TRUE, 2, "model")
    assert results[1] == (VerdictKind.TRUE, 0, "probe")
    assert results[2] == (VerdictKind.FALSE, 0, "probe")  # the probe decides false here
    assert results[3] == (VerdictKind.TRUE, 0, "probe")


def test_probe_ids_are_checked_before_any_key_is_built(probes: ProbeStore) -> None:
    from schemas.ids import InvalidId

    with pytest.raises(InvalidId):
        probes.current("victim:versions")
    assert probes.drop("chk-none") is False


def test_a_probe_verdict_is_recorded_as_the_probes(
    snapshot: Path, probes: ProbeStore, redis_url: str
) -> None:
    """The store, the per-check gauges and the notifier read ``source`` from the verdict."""
    verdicts = VerdictStore.from_settings(AssaySettings(key_prefix="tp"), client=connect(redis_url))
    _check(snapshot, probes, COMPILE_TRUE)
    report, _ = _check(snapshot, probes, NO_MODEL)
    verdicts.register_run(report.request)
    assert verdicts.record_verdict(report)
    stored = verdicts.run_verdict(report.run_id)
    assert stored is not None and verdict_source(stored) == "probe"
    assert stored.probe_version == 1
    (gauge,) = [g for g in verdicts.check_gauges(10) if g.check_id == "chk-ready"]
    assert gauge.source == "probe" and gauge.exit_code == 0


def _changed_to_false(snap: Path) -> None:
    """The cluster changes: web drops to 1 ready replica, so the predicate is now false."""
    make_snapshot(snap, web_ready=1)
    from workers.engine.toolsets.factory import snapshot_cache

    snapshot_cache.clear()


@pytest.mark.parametrize(
    "spec",
    [
        # a namespace typo: the listing is empty, so `all` is vacuously true
        probe(
            "results[0].all(d, has(d.status.readyReplicas) && d.status.readyReplicas >= 2)",
            scope="results",
            lookups=[{"tool": "get", "args": {"kind": "Deployment", "namespace": "prd"}}],
        ),
        # expressions that read nothing the lookups returned
        probe("true", scope="results"),
        probe("1 == 1", scope="results"),
        probe("size([]) == 0", scope="results"),
        probe("[1].all(results, results == 1)", scope="results"),
        probe("[1].all(i, results, results == 1)", scope="results"),
    ],
    ids=[
        "empty listing",
        "true",
        "1 == 1",
        "size([]) == 0",
        "shadowed results",
        "shadowed by a second variable",
    ],
)
def test_a_probe_blind_to_the_cluster_does_not_keep_a_check_true(
    tmp_path: Path, probes: ProbeStore, spec: dict[str, Any]
) -> None:
    """A probe whose value cannot depend on the objects it read agrees with any true, and,
    re-run, would answer true for ever after the cluster made the predicate false: it never
    flips, so the model is not asked before the next re-validation (up to a day)."""
    snap = make_snapshot(tmp_path / "snap")
    first, _ = _check(
        snap, probes, script(get_deployments(), done_with_probe("true", 0, probe_spec=spec))
    )
    assert first.verdict is not None and first.verdict.verdict == VerdictKind.TRUE
    assert first.probe is not None and first.probe.status == "failed"
    assert probes.current("chk-ready") is None
    _changed_to_false(snap)
    after, calls = _check(snap, probes, MODEL_FALSE)
    assert calls == 2  # the model was asked
    assert after.verdict is not None and after.verdict.verdict == VerdictKind.FALSE


def test_a_probe_answers_only_the_predicate_it_was_compiled_for(
    snapshot: Path, probes: ProbeStore
) -> None:
    """A check id is the caller's (``--check-id``, the API's ``check_id``): rewording the check
    under the same id must not have the old predicate's probe answer the new one."""
    _check(snapshot, probes, COMPILE_TRUE, check_id="replicas")  # "... at least 2 ready ..."
    stricter = "every Deployment in namespace prod has at least 3 ready replicas"
    report, calls = _check(snapshot, probes, MODEL_FALSE, check_id="replicas", text=stricter)
    assert calls == 2  # the model, not the probe of the other predicate (which says true)
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.FALSE
    assert report.verdict.source == "model"


def test_a_strict_check_is_not_answered_by_a_probe_compiled_without_confirmation(
    snapshot: Path, probes: ProbeStore
) -> None:
    """A probe compiled under fast was never put to strict's fresh-context confirmation."""
    _check(snapshot, probes, COMPILE_TRUE)  # fast
    report, calls = _check(snapshot, probes, MODEL_TRUE, profile="strict")
    assert calls >= 1  # the model (and, for its true, the confirmation) was asked
    assert report.verdict is not None and report.verdict.source == "model"
    assert report.verdict.verdict == VerdictKind.CANNOT_DETERMINE  # no confirmer scripted
    # a probe compiled under strict serves fast and strict alike
    with_confirmer = script(get_deployments(), done_with_probe("true", 0, probe_spec=probe()))
    with_confirmer["scenarios"].append({"role": "confirmer", "turns": [done("true")]})
    compiled, _ = _check(snapshot, probes, with_confirmer, profile="strict", probe="off")
    assert compiled.verdict is not None and compiled.verdict.confirmed is True
    for profile in ("strict", "fast"):
        again, calls = _check(snapshot, probes, NO_MODEL, profile=profile)
        assert calls == 0 and again.verdict is not None
        assert again.verdict.source == "probe" and again.verdict.verdict == VerdictKind.TRUE


def test_a_probe_whose_verdict_did_not_stand_is_not_stored(
    tmp_path: Path, probes: ProbeStore
) -> None:
    """Strict: the planner's true carries a probe that agrees with it, and the fresh-context
    confirmation refuses the true. The run ends cannot_determine; its probe must not become
    the check's, or the next run would answer true by probe with no confirmation at all."""
    snap = make_snapshot(tmp_path / "snap", web_ready=1)  # the predicate is false
    spec = probe("object.spec.replicas >= 1")  # agrees with any true
    turns = script(get_deployments(), done_with_probe("true", 0, probe_spec=spec))
    turns["scenarios"].append({"role": "confirmer", "turns": [done("false")]})
    first, _ = _check(snap, probes, turns, profile="strict")
    assert first.verdict is not None and first.verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert probes.current("chk-ready") is None
    again, calls = _check(snap, probes, MODEL_FALSE, profile="strict")
    assert calls == 2 and again.verdict is not None
    assert again.verdict.verdict == VerdictKind.FALSE and again.verdict.source == "model"


def test_a_bug_in_the_probe_path_leaves_the_model_only_the_rest_of_the_budget(
    snapshot: Path, probes: ProbeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe path spends 1.5 s of a 2.5 s budget, then fails on a bug: the model (1 s a
    reply, two replies) cannot answer in what is left. Before: it got a fresh 2.5 s and the
    run answered true after about 3.5 s of its 2.5 s budget."""

    def broken(self: object, state: object) -> RunReport:
        time.sleep(1.5)
        raise RuntimeError("a bug in the probe path")

    monkeypatch.setattr(probe_rerun._Rerun, "execute", broken)
    slow_true = script(get_deployments(), done("true", 0), delay=1.0)
    report, _ = _check(snapshot, probes, slow_true, budget=Budget(timeout_seconds=2.5))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "deadline"
    assert report.request.budget.timeout_seconds == 2.5
