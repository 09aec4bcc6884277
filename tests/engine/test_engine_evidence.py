"""A verdict is earned: the engine itself checks what a `true` or `false` cites, in every profile.

Real snapshot backend, real litellm, the scripted model over HTTP. Each test plays a model
that claims more than its lookups showed and checks that the claim never becomes an exit 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from schemas.report import RunState
from schemas.verdict import VerdictKind
from tests.engine_support import done, get_deployments, make_snapshot, request_for, run, script
from tests.engine_support import scripted as scripted_model
from workers.engine.evidence import MIN_EXCERPT_CHARS, meaningful
from workers.engine.llm import load_litellm

PROFILES = ("smoke", "fast", "strict")


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    load_litellm().token_counter(model="openai/scripted", text="warm up")


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return make_snapshot(tmp_path / "snap")


def get_missing() -> dict[str, Any]:
    """A lookup that fails: there is no Deployment 'payments' in prod."""
    args = {"kind": "Deployment", "name": "payments", "namespace": "prod"}
    return {"action": {"action": "COMMAND", "tool": "get", "arguments": args}}


def many_deployments(root: Path, count: int) -> Path:
    """A snapshot whose Deployment list renders to more than 4000 characters."""
    items = "".join(
        f"- apiVersion: apps/v1\n  kind: Deployment\n"
        f"  metadata: {{name: service-{i:03d}, namespace: prod}}\n"
        f"  spec:\n    replicas: 2\n    template:\n      spec:\n        containers:\n"
        f"        - {{name: app, image: registry.example.com/team/service-{i:03d}:1.0.0}}\n"
        f"  status: {{replicas: 2, readyReplicas: 2}}\n"
        for i in range(count)
    )
    (root / "prod").mkdir(parents=True)
    (root / "prod" / "deployments.yaml").write_text(f"apiVersion: v1\nkind: List\nitems:\n{items}")
    return root


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("verdict", ["true", "false"])
def test_a_decisive_verdict_without_evidence_is_never_accepted(
    snapshot: Path, profile: str, verdict: str
) -> None:
    turns = script(get_deployments(), *[done(verdict)] * 3)
    with scripted_model(turns) as model:
        report = run(model, request_for(snapshot, profile=profile))
        repairs = [body["messages"][-1]["content"] for body in model.requests[2:]]
    assert report.verdict is not None
    assert report.verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert [s.kind for s in report.steps] == ["COMMAND", "REPAIR", "REPAIR", "REPAIR"]
    assert report.verdict.iterations == 4  # each repair turn was charged
    assert all("at least one lookup of this run that succeeded" in text for text in repairs)


@pytest.mark.parametrize("profile", PROFILES)
def test_a_true_citing_only_a_failed_lookup_is_never_accepted(snapshot: Path, profile: str) -> None:
    turns = script(get_missing(), *[done("true", 0, excerpt="not found")] * 3)
    with scripted_model(turns) as model:
        report = run(model, request_for(snapshot, profile=profile))
    verdict = report.verdict
    assert report.steps[0].ok is False
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert "succeeded" in (verdict.reason or "")


@pytest.mark.parametrize("profile", PROFILES)
def test_an_excerpt_absent_from_the_cited_output_is_never_accepted(
    snapshot: Path, profile: str
) -> None:
    forged = done("true", 0, excerpt="payments  3/3")
    with scripted_model(script(get_deployments(), forged, forged, forged, forged)) as model:
        report = run(model, request_for(snapshot, profile=profile))
        second = model.requests[2]["messages"][-1]["content"]
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert "does not occur in the output" in second
    assert "payments" not in second  # the repair names the citation, it does not echo it
    assert report.steps[1].kind == "REPAIR"


def test_a_repaired_citation_is_accepted_and_recorded_as_verified(snapshot: Path) -> None:
    turns = script(get_deployments(), done("true", 0, excerpt="web 9/9"), done("true", 0))
    with scripted_model(turns) as model:
        report = run(model, request_for(snapshot))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.TRUE
    assert [s.kind for s in report.steps] == ["COMMAND", "REPAIR", "DONE"]
    assert verdict.iterations == 3
    assert verdict.evidence_verified is True
    assert [(e.step, e.verified) for e in verdict.evidence] == [(0, True)]


def test_excerpts_are_compared_whitespace_normalised_and_case_sensitive(snapshot: Path) -> None:
    spaced = done("true", 0, excerpt="  api\n3/3  ")  # the table pads it as "api     3/3"
    shouted = done("true", 0, excerpt="API 3/3")
    with scripted_model(script(get_deployments(), spaced)) as model:
        accepted = run(model, request_for(snapshot))
    with scripted_model(script(get_deployments(), shouted, shouted, shouted)) as model:
        refused = run(model, request_for(snapshot))
    assert accepted.verdict is not None and accepted.verdict.verdict == VerdictKind.TRUE
    assert refused.verdict is not None
    assert refused.verdict.verdict == VerdictKind.CANNOT_DETERMINE


def test_a_citation_of_a_failed_lookup_may_support_a_successful_one(snapshot: Path) -> None:
    answer = done("false", 0, explanation="payments does not exist")
    answer["action"]["evidence"] = [
        {"step": 0, "excerpt": "not found"},
        {"step": 1, "excerpt": "api"},
    ]
    with scripted_model(script(get_missing(), get_deployments(), answer)) as model:
        report = run(model, request_for(snapshot))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.FALSE
    assert [(e.ok, e.verified) for e in verdict.evidence] == [(False, True), (True, True)]


def test_a_non_decisive_verdict_keeps_its_citations_with_their_flags(snapshot: Path) -> None:
    unsure = done("cannot_determine", 0, excerpt="something the output never said")
    with scripted_model(script(get_deployments(), unsure)) as model:
        report = run(model, request_for(snapshot))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert [s.kind for s in report.steps] == ["COMMAND", "DONE"]  # no repair for a 3
    assert [e.verified for e in verdict.evidence] == [False]
    assert verdict.evidence_verified is False


def test_excerpts_are_checked_against_all_the_model_saw_not_the_stored_copy(
    tmp_path: Path,
) -> None:
    snapshot = many_deployments(tmp_path / "big", 120)
    late_row = done("true", 0, excerpt="service-060  2/2")
    with scripted_model(script(get_deployments(), late_row)) as model:
        report = run(model, request_for(snapshot))
        seen = model.requests[1]["messages"][-1]["content"]
    verdict = report.verdict
    assert "service-060" in seen
    assert "service-060" not in (report.steps[0].output or "")  # the report keeps 4000 chars
    assert verdict is not None and verdict.verdict == VerdictKind.TRUE
    assert verdict.evidence[0].verified is True


def test_citations_are_still_checked_after_a_deferred_wait(tmp_path: Path) -> None:
    snapshot = many_deployments(tmp_path / "big", 120)
    wait = {"action": {"action": "WAIT", "seconds": 3600}}
    honest = done("true", 0, excerpt="service-060 2/2")
    forged = done("true", 0, excerpt="service-999 2/2")
    for answer, expected in ((honest, VerdictKind.TRUE), (forged, VerdictKind.CANNOT_DETERMINE)):
        with scripted_model(script(get_deployments(), wait, answer, answer, answer)) as model:
            request = request_for(snapshot)
            waiting = run(model, request, allow_defer=True)
            assert waiting.status == "waiting" and waiting.checkpoint is not None
            state = RunState.model_validate_json(waiting.checkpoint.model_dump_json())
            resumed = run(model, request, state=state)
        assert resumed.verdict is not None and resumed.verdict.verdict == expected


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("excerpt", ["w", "2", "we", "/", " : ", "---", "- -", "2 /"])
def test_a_too_short_excerpt_is_treated_as_unverified(
    snapshot: Path, profile: str, excerpt: str
) -> None:
    # Every one of these occurs in the Deployment listing, so only the minimum refuses it.
    short = done("true", 0, excerpt=excerpt)
    with scripted_model(script(get_deployments(), short, short, short)) as model:
        report = run(model, request_for(snapshot, profile=profile))
        repair = model.requests[2]["messages"][-1]["content"]
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert [s.kind for s in report.steps] == ["COMMAND", "REPAIR", "REPAIR", "REPAIR"]
    assert "too short" in repair and f"at least {MIN_EXCERPT_CHARS} characters" in repair
    assert verdict.evidence_verified is False


def test_a_too_short_excerpt_repaired_with_a_whole_row_is_accepted(snapshot: Path) -> None:
    turns = script(
        get_deployments(), done("true", 0, excerpt="2"), done("true", 0, excerpt="web 2/2")
    )
    with scripted_model(turns) as model:
        report = run(model, request_for(snapshot))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.TRUE
    assert [s.kind for s in report.steps] == ["COMMAND", "REPAIR", "DONE"]
    assert [e.verified for e in verdict.evidence] == [True]


@pytest.mark.parametrize(
    ("excerpt", "expected"),
    [("web", True), ("1/3", True), ("v1", False), ("  a b  ", False), ("...", False),
     ("a: b", True), ("名前", False), ("名前空", True), ("", False), ("_-_", False)],
)  # fmt: skip
def test_meaningful_counts_non_blank_characters_and_needs_a_word(
    excerpt: str, expected: bool
) -> None:
    assert meaningful(excerpt) is expected


THOUGHT = {"action": {"action": "THOUGHT", "thought": "web 2/2 ready, all good"}}
WAIT = {"action": {"action": "WAIT", "seconds": 0.01, "reason": "web 2/2 ready"}}
WEB = {"kind": "Deployment", "name": "web", "namespace": "prod"}
GET_WEB = {"action": {"action": "COMMAND", "tool": "get", "arguments": WEB}}


@pytest.mark.parametrize(
    ("turns", "step", "excerpt"),
    [
        ((get_deployments(), THOUGHT), 1, "web 2/2 ready"),  # a thought's own words
        ((get_deployments(), WAIT), 1, "web 2/2 ready"),  # a wait's reason
        ((get_deployments(), get_deployments()), 2, "web"),  # the DONE's own step
        ((get_deployments(),), 7, "web"),  # a step that never happened
        # the engine's label before the fence: the arguments the model chose, and "-> ok"
        ((get_deployments(),), 0, '"namespace":"prod"} -> ok'),
        ((get_deployments(),), 0, "[step 0] get"),
        # stitched: the end of one lookup's output and the start of the next one's
        ((get_deployments(), GET_WEB), 1, "name=NAME namespace=prod apiVersion: apps/v1"),
    ],
    ids=["thought", "wait", "own step", "no such step", "engine label", "step header", "stitched"],
)
def test_a_citation_of_anything_but_a_lookups_own_output_is_never_accepted(
    snapshot: Path, turns: tuple[dict[str, Any], ...], step: int, excerpt: str
) -> None:
    answer = done("true", step, excerpt=excerpt)
    with scripted_model(script(*turns, answer, answer, answer)) as model:
        report = run(model, request_for(snapshot), sleep=lambda _: None)
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert [step.kind for step in report.steps][-3:] == ["REPAIR"] * 3


def test_the_engines_own_cut_never_makes_a_value_the_lookup_did_not_return(
    snapshot: Path,
) -> None:
    """Tool output over the engine's backstop (1.5 x tool_output_limit_chars: a shell command
    may print more) is cut before the model sees it. Cut mid-token, ``ready: 10/10`` would
    read ``ready: 1``: a value the lookup never returned, which a citation would then verify."""
    from pydantic import BaseModel

    from workers.engine.toolsets.base import ToolRegistry, ToolResult
    from workers.engine.toolsets.factory import build_registry

    limit = 6000
    cut_at = int(limit * 1.5)
    long_output = "a" * (cut_at - 9) + "\nready: 10/10\n" + "b" * 5000

    class NoArgs(BaseModel):
        pass

    class Report:
        name, description, args_model = "readiness", "a long report", NoArgs

        def run(self, args: Any) -> ToolResult:
            return ToolResult(ok=True, output=long_output)

    def tools(request: Any, settings: Any) -> ToolRegistry:
        return ToolRegistry([*build_registry(request, settings), Report()])

    lookup = {"action": {"action": "COMMAND", "tool": "readiness", "arguments": {}}}
    answer = done("false", 0, excerpt="ready: 1")
    with scripted_model(script(lookup, answer, answer, answer)) as model:
        settings = {"tool_output_limit_chars": limit}
        report = run(model, request_for(snapshot), tools=tools, settings=settings)
        shown = model.requests[1]["messages"][-1]["content"]
    assert "truncated by the engine" in shown and "ready: 1" not in shown
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
