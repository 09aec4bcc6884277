"""The shipped demo script over the shipped example snapshots, and their Secret canary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.testing.scripted_model import ScriptedModel
from schemas.verdict import VerdictKind
from tests.engine_support import PREDICATE, done, request_for, run, script

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = ROOT / "examples" / "snapshots"
DEMO = ROOT / "examples" / "scripts" / "demo.yaml"
CANARY = "ASSAY-CANARY-7f3a9c"


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        ("prod-eu", VerdictKind.TRUE),
        ("staging-us", VerdictKind.FALSE),
        ("dev-ap", VerdictKind.CANNOT_DETERMINE),
    ],
)
def test_the_demo_script_answers_each_example_cluster(cluster: str, expected: VerdictKind) -> None:
    with ScriptedModel(DEMO) as model:
        report = run(model, request_for(SNAPSHOTS / cluster, text=PREDICATE))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == expected
    lookup = report.steps[0].output or ""
    for evidence in verdict.evidence:  # every excerpt is really in the cited output
        assert evidence.excerpt in lookup


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        ("prod-eu", VerdictKind.TRUE),
        ("staging-us", VerdictKind.FALSE),
        ("dev-ap", VerdictKind.CANNOT_DETERMINE),
    ],
)
def test_the_demo_script_holds_under_the_strict_profile(
    cluster: str, expected: VerdictKind
) -> None:
    with ScriptedModel(DEMO) as model:
        report = run(model, request_for(SNAPSHOTS / cluster, text=PREDICATE, profile="strict"))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == expected
    assert verdict.confirmed is (True if expected == VerdictKind.TRUE else None)
    if expected != VerdictKind.CANNOT_DETERMINE:
        assert verdict.evidence_verified
        assert all(item.verified and item.structured for item in verdict.evidence)


@pytest.mark.parametrize("cluster", ["prod-eu", "staging-us"])
def test_the_demo_script_proposes_a_probe_the_engine_accepts(cluster: str) -> None:
    """So `assay probe show|test|export` have something to show on what ships. Before: the
    demo never proposed one and `assay probe show` exited 66 on every shipped check."""
    with ScriptedModel(DEMO) as model:
        report = run(model, request_for(SNAPSHOTS / cluster, text=PREDICATE))
    assert report.probe is not None and report.probe.status == "accepted", report.probe


def test_the_demo_script_never_says_true_about_another_predicate() -> None:
    with ScriptedModel(DEMO) as model:
        report = run(model, request_for(SNAPSHOTS / "prod-eu", text="no pod runs as root"))
    assert report.verdict is not None
    assert report.verdict.verdict == VerdictKind.CANNOT_DETERMINE


def test_the_example_secret_canary_never_reaches_a_prompt_or_the_report() -> None:
    lookups = [
        {"kind": "Secret", "namespace": "all"},
        {"kind": "Secret", "name": "api-credentials", "namespace": "prod"},
    ]
    turns = [{"action": {"action": "COMMAND", "tool": "get", "arguments": a}} for a in lookups]
    describe = {"kind": "Secret", "name": "api-credentials", "namespace": "prod"}
    turns.append({"action": {"action": "COMMAND", "tool": "describe", "arguments": describe}})
    turns.append(done("true", 1, excerpt="api-credentials"))
    assert CANARY in (SNAPSHOTS / "prod-eu" / "prod" / "secrets.yaml").read_text()
    with ScriptedModel(script(*turns)) as model:
        report = run(model, request_for(SNAPSHOTS / "prod-eu"))
        sent = json.dumps(model.requests)
    assert all(step.ok for step in report.steps if step.kind == "COMMAND")
    assert "api-credentials" in sent
    for text in (sent, report.model_dump_json()):
        assert CANARY not in text
        assert "QVNTQVktQ0FOQVJZ" not in text  # nor its base64 form
