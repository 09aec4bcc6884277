"""A probe failure never costs the verdict (issue 31): a probe that is too long or does not
compile is dropped with its reason on the run, and the model's verified verdict stands with no
extra turn. Real engine, real litellm, the scripted model over HTTP, a real snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.verdict import VerdictKind
from tests.engine_support import get_deployments, make_snapshot, request_for, run, script
from tests.engine_support import scripted as scripted_model
from tests.probe_support import READY_TWO, done_with_probe, probe
from workers.core.llm import load_litellm

OVER_LONG = READY_TWO + " && " + " && ".join(["object.metadata.name != ''"] * 200)


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    load_litellm().token_counter(model="openai/scripted", text="warm up")


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (probe(OVER_LONG), "at most 4000 characters"),
        (probe("object.status.readyReplicas >= "), "does not compile"),
        (probe(READY_TWO) | {"origin": {"format": "vap", "name": "x", "source": "-"}}, "origin"),
        (
            probe("object.status.readyReplicas >= 2")
            | {"scope": "each_object", "empty_result": "pass"},
            "empty_result pass is for imported policies only",
        ),
    ],
    ids=["over-long", "uncompilable", "origin-from-a-model", "empty-pass-from-a-model"],
)
def test_a_dropped_probe_leaves_the_verdict_standing(tmp_path: Path, spec: dict, why: str) -> None:  # type: ignore[type-arg]
    snapshot = make_snapshot(tmp_path / "snap")  # web has 2 ready: the predicate holds
    turns = script(get_deployments(), done_with_probe("true", 0, probe_spec=spec))
    with scripted_model(turns) as model:
        report = run(model, request_for(snapshot, profile="fast"))
        calls = len(model.requests)
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert report.verdict.evidence_verified
    assert calls == 2  # the lookup, then the DONE: no repair turn
    assert [step.kind for step in report.steps] == ["COMMAND", "DONE"]
    assert report.probe is not None and report.probe.status == "failed"
    assert why in report.probe.reason
