"""A probe failure never costs the verdict (issue 31): a probe that is too long or does not
compile is dropped with its reason on the run, and the model's verified verdict stands with no
extra turn. Real engine, real litellm, the scripted model over HTTP, a real snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from schemas.probe import ModelProbe
from schemas.verdict import VerdictKind
from tests.engine_support import get_deployments, make_snapshot, request_for, run, script
from tests.engine_support import scripted as scripted_model
from tests.probe_support import READY_TWO, done_with_probe, probe
from workers.engine.llm import load_litellm

# What a stored probe may carry (schemas/probe.py ProposedProbe) and a model may not give.
IMPORTED_ONLY = ("validations", "match_conditions", "params", "empty_result", "origin", "variables")

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
        # an imported policy's fields: valid in a stored probe, never taken from a model
        (
            probe(READY_TWO) | {"validations": [{"expression": READY_TWO}]},
            "validations: not part of a model's probe",
        ),
        (probe(READY_TWO) | {"params": {"min": 2}}, "params: not part of a model's probe"),
        (
            probe(READY_TWO) | {"variables": [{"name": "ready", "expression": READY_TWO}]},
            "variables: not part of a model's probe",
        ),
        (
            probe("object.status.readyReplicas >= 2")
            | {"scope": "each_object", "empty_result": "pass"},
            "empty_result: not part of a model's probe",
        ),
    ],
    ids=[
        "over-long",
        "uncompilable",
        "origin-from-a-model",
        "validations",
        "params",
        "variables",
        "empty-pass-from-a-model",
    ],
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


def shown_probe_schema(body: dict[str, Any]) -> dict[str, Any]:
    """The probe's schema in a request the model received: in the done tool, or (JSON mode) in
    the response format."""
    if "tools" in body:
        [done_tool] = [t for t in body["tools"] if t["function"]["name"] == "done"]
        options = done_tool["function"]["parameters"]["properties"]["probe"]["anyOf"]
        [shown] = [option for option in options if option.get("type") == "object"]
        return dict(shown)
    return dict(body["response_format"]["json_schema"]["schema"]["$defs"]["ModelProbe"])


@pytest.mark.parametrize("transport", ["tools", "json"])
def test_the_model_is_shown_the_probe_fields_it_may_use_and_they_suffice(
    tmp_path: Path, transport: str
) -> None:
    snapshot = make_snapshot(tmp_path / "snap")
    turns = script(get_deployments(), done_with_probe("true", 0, probe_spec=probe(READY_TWO)))
    with scripted_model(turns) as model:
        report = run(model, request_for(snapshot), settings={"transport": transport})
        first = model.requests[0]
    shown = shown_probe_schema(first)
    assert set(shown["properties"]) == set(ModelProbe.model_fields)
    assert set(shown["properties"]) == {"lookups", "scope", "expression", "when_true", "when_false"}
    text = json.dumps(shown)
    assert not [name for name in IMPORTED_ONLY if f'"{name}"' in text]
    assert report.probe is not None and report.probe.status == "accepted", report.probe
