"""Compiling a probe: the engine runs the model's proposed probe itself and keeps it only when it
reproduces the verdict. Real snapshot backend, real litellm, the scripted model over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.verdict import VerdictKind
from tests.engine_support import done, get_deployments, make_snapshot, request_for, run, script
from tests.engine_support import scripted as scripted_model
from tests.probe_support import done_with_probe, probe
from workers.engine.llm import load_litellm


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    load_litellm().token_counter(model="openai/scripted", text="warm up")


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return make_snapshot(tmp_path / "snap")  # web has 2 ready: the predicate holds


def _run_with(snapshot: Path, verdict: str, probe_spec: dict, profile: str = "fast"):  # type: ignore[no-untyped-def,type-arg]
    turns = script(get_deployments(), done_with_probe(verdict, 0, probe_spec=probe_spec))
    with scripted_model(turns) as model:
        return run(model, request_for(snapshot, profile=profile))


def test_agreeing_probe_is_accepted_and_recorded(snapshot: Path) -> None:
    report = _run_with(snapshot, "true", probe())
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert report.probe is not None and report.probe.status == "accepted"
    assert report.probe.run.objects_read == 2
    assert {o.name for o in report.probe.run.objects} == {"api", "web"}
    assert "status.readyReplicas" in report.probe.run.fields


def test_inverted_mapping_agreeing_with_false(tmp_path: Path) -> None:
    snap = make_snapshot(tmp_path / "snap", web_ready=1)
    # "no Deployment is short" is false here -> map the expression's false to the verdict false
    spec = probe(
        "results[0].exists(d, d.status.readyReplicas < 2)",
        scope="results",
        when_true="false",
        when_false="true",
    )
    report = _run_with(snap, "false", spec)
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.FALSE
    assert report.probe is not None and report.probe.status == "accepted"


def test_disagreeing_probe_is_rejected_and_the_model_verdict_stands(tmp_path: Path) -> None:
    snap = make_snapshot(tmp_path / "snap", web_ready=1)
    report = _run_with(snap, "false", probe("object.spec.replicas >= 1"))  # true for both
    assert report.probe is not None and report.probe.status == "rejected"
    assert "gave true" in report.probe.reason
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.FALSE


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (probe(lookups=[{"tool": "get", "args": {"kind": "Rollout"}}]), "Rollout"),
        (probe(lookups=[{"tool": "get", "args": {"kind": "Deployment", "bogus": 1}}]), "invalid"),
        (probe("object.status.nothere == 1"), "failed"),
        (probe("object.status.readyReplicas", scope="each_object"), "not a boolean"),
        (probe("object.metadata.name.reverse() == 'x'"), "does not compile"),
        (
            probe(lookups=[{"tool": "get", "args": {"kind": "Deployment", "namespace": "nope"}}]),
            "no objects",
        ),
    ],
)
def test_probe_that_cannot_run_is_not_accepted(snapshot: Path, spec: dict, why: str) -> None:  # type: ignore[type-arg]
    report = _run_with(snapshot, "true", spec)
    assert report.probe is not None and report.probe.status == "failed"
    assert why in report.probe.reason
    assert report.probe.run.verdict is None


def test_an_agreeing_probe_does_not_stand_in_for_the_strict_confirmation(tmp_path: Path) -> None:
    """The probe is the model's own word: any true has a probe that agrees with it (here every
    Deployment has a replica, while web has 1 of 2 ready, so the predicate is false). Under
    strict the fresh-context confirmation is what a planted or hostile true must get past."""
    snap = make_snapshot(tmp_path / "snap", web_ready=1)
    spec = probe("object.spec.replicas >= 1")
    turns = script(get_deployments(), done_with_probe("true", 0, probe_spec=spec))
    turns["scenarios"].append({"role": "confirmer", "turns": [done("false")]})
    with scripted_model(turns) as model:
        report = run(model, request_for(snap, profile="strict"))
    assert report.probe is not None and report.probe.status == "accepted"
    assert [step.kind for step in report.steps][-1] == "CONFIRM"
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert report.verdict.confirmed is False


def test_strict_true_with_agreeing_probe_is_confirmed_too(snapshot: Path) -> None:
    turns = script(get_deployments(), done_with_probe("true", 0, probe_spec=probe()))
    turns["scenarios"].append({"role": "confirmer", "turns": [done("true")]})
    with scripted_model(turns) as model:
        report = run(model, request_for(snapshot, profile="strict"))
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert report.probe is not None and report.probe.status == "accepted"
    assert report.verdict.confirmed is True


def test_strict_true_with_failing_probe_still_needs_confirmation(snapshot: Path) -> None:
    spec = probe(lookups=[{"tool": "get", "args": {"kind": "Rollout"}}])
    with scripted_model(
        script(get_deployments(), done_with_probe("true", 0, probe_spec=spec))
    ) as model:
        report = run(model, request_for(snapshot, profile="strict"))
    assert any(step.kind == "CONFIRM" for step in report.steps)
    assert report.verdict is not None and report.verdict.verdict != VerdictKind.TRUE


def test_query_and_undecided_verdicts_compile_nothing(snapshot: Path) -> None:
    turn = done("cannot_determine", 0)
    turn["action"]["probe"] = probe()
    with scripted_model(script(get_deployments(), turn)) as model:
        report = run(model, request_for(snapshot))
    assert report.probe is None


def test_probe_on_an_incomplete_snapshot_does_not_decide(tmp_path: Path) -> None:
    snap = make_snapshot(tmp_path / "snap")
    (snap / "prod" / "broken.yaml").write_text("kind: Deployment\n  metadata: [unclosed\n")
    report = _run_with(snap, "true", probe())
    assert report.probe is not None and report.probe.status == "failed"
    assert "problem" in report.probe.reason and report.probe.run.verdict is None
