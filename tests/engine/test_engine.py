"""The planner loop end to end: real snapshot backend, real litellm, scripted model over HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.engine_support import (
    CANARY,
    PREDICATE,
    done,
    get_deployments,
    make_snapshot,
    request_for,
    run,
    script,
    scripted,
)
from workers.engine.budget_meter import MIN_USEFUL_COMPLETION_TOKENS, padded_prompt
from workers.engine.llm import load_litellm
from workers.engine.token_ceiling import request_ceiling


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    """Import litellm once up front so its import time does not eat a test's deadline."""
    load_litellm().token_counter(model="openai/scripted", text="warm up")


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return make_snapshot(tmp_path / "snap")


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] in ("tool", "user")]


@pytest.mark.parametrize(
    ("verdict", "code"),
    [("true", 0), ("false", 1), ("poorly_posed", 2), ("cannot_determine", 3)],
)
def test_each_model_verdict_becomes_the_run_verdict(
    snapshot: Path, verdict: str, code: int
) -> None:
    steps = (0,) if verdict in ("true", "false") else ()
    with scripted(script(get_deployments(), done(verdict, *steps))) as model:
        report = run(model, request_for(snapshot))
    assert report.status == "done"
    assert report.verdict is not None
    assert report.verdict.verdict == VerdictKind(verdict)
    assert report.verdict.exit_code == code
    assert report.verdict.iterations == 2


def test_a_true_verdict_carries_enriched_evidence_and_the_step_label(snapshot: Path) -> None:
    with scripted(script(get_deployments(), done("true", 0))) as model:
        request = request_for(snapshot)
        report = run(model, request)
        bodies = model.requests
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.TRUE
    [evidence] = verdict.evidence
    assert (evidence.step, evidence.tool, evidence.ok) == (0, "get", True)
    assert evidence.arguments == {"kind": "Deployment", "namespace": "prod"}
    fed_back = tool_messages(bodies[1])[-1]
    assert fed_back.startswith('[step 0] get {"kind":"Deployment","namespace":"prod"} -> ok')
    assert "web" in fed_back and "api" in fed_back
    assert {body["user"] for body in bodies} == {request.run_id}
    assert verdict.usage.total_tokens == sum(u["total_tokens"] for u in model.usage_reported)
    assert verdict.target == f"snapshot:{snapshot.name}"
    assert verdict.run_id == request.run_id and verdict.check_id == request.check_id


def test_a_multi_step_evaluation_follows_what_the_lookups_returned(tmp_path: Path) -> None:
    turns = script(
        {"action": {"action": "THOUGHT", "thought": "list Deployments, then look at web"}},
        get_deployments(),
        {"action": {"action": "COMMAND", "tool": "get",
                    "arguments": {"kind": "Deployment", "name": "web", "namespace": "prod"}}},
        {"when": [
            {"if_contains": "readyReplicas: 1", **done("false", 1, 2)},
            done("true", 1, 2),
        ]},
    )  # fmt: skip
    healthy = make_snapshot(tmp_path / "healthy", web_ready=2)
    degraded = make_snapshot(tmp_path / "degraded", web_ready=1)
    with scripted(turns) as model:
        ok_report = run(model, request_for(healthy))
        bad_report = run(model, request_for(degraded))
    assert ok_report.verdict is not None and bad_report.verdict is not None
    assert ok_report.verdict.verdict == VerdictKind.TRUE
    assert bad_report.verdict.verdict == VerdictKind.FALSE
    assert [s.kind for s in bad_report.steps] == ["THOUGHT", "COMMAND", "COMMAND", "DONE"]
    assert "readyReplicas: 1" in (bad_report.steps[2].output or "")
    assert bad_report.verdict.iterations == 4
    assert [e.step for e in bad_report.verdict.evidence] == [1, 2]


def test_a_repair_turn_fixes_plain_text_output(snapshot: Path) -> None:
    with scripted(script({"text": "I think it is fine."}, get_deployments(), done("true", 1))) as m:
        report = run(m, request_for(snapshot))
        second = m.requests[1]
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert [s.kind for s in report.steps] == ["MALFORMED", "COMMAND", "DONE"]
    assert report.steps[0].raw == "I think it is fine."
    repair = second["messages"][-1]
    assert repair["role"] == "user"
    assert "rejected" in repair["content"] and "no tool call" in repair["content"]
    assert report.verdict.iterations == 3  # the repair turn was charged


def test_malformed_output_after_two_repairs_is_cannot_determine(snapshot: Path) -> None:
    bad = [
        {"text": "no tool call"},
        {"tool_call": {"name": "done", "arguments": "{not json"}},
        {"action": {"action": "DONE", "verdict": "maybe", "explanation": "unsure"}},
        done("true"),  # never reached
    ]
    with scripted(script(*bad)) as model:
        report = run(model, request_for(snapshot))
        assert len(model.requests) == 3
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.exit_code == 3
    assert "after 2 repair turns" in (verdict.reason or "")
    assert "verdict" in (verdict.reason or "")
    assert [s.kind for s in report.steps] == ["MALFORMED"] * 3
    assert "not valid JSON" in (report.steps[1].error or "")


def test_an_unknown_tool_is_refused_and_never_run(snapshot: Path) -> None:
    delete = {"action": {"action": "COMMAND", "tool": "delete", "arguments": {"kind": "Pod"}}}
    with scripted(script(delete, get_deployments(), done("false", 1))) as model:
        report = run(model, request_for(snapshot))
        repair = model.requests[1]["messages"][-1]
    assert report.steps[0].kind == "MALFORMED"
    assert "unknown tool 'delete'" in (report.steps[0].error or "")
    assert repair["role"] == "tool" and "unknown tool 'delete'" in repair["content"]
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.FALSE


def test_evidence_citing_a_step_that_was_not_a_lookup_is_sent_back(snapshot: Path) -> None:
    turns = script(get_deployments(), done("true", 5), done("true", 0))
    with scripted(turns) as model:
        report = run(model, request_for(snapshot))
    assert [s.kind for s in report.steps] == ["COMMAND", "REPAIR", "DONE"]
    assert "step 5" in (report.steps[1].error or "")
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE


def confirmer(*turns: dict[str, Any]) -> dict[str, Any]:
    """A scenario answering the strict profile's confirmation call."""
    return {"role": "confirmer", "turns": list(turns)}


def test_strict_refuses_a_verdict_without_evidence_then_confirms_true(snapshot: Path) -> None:
    turns = script(done("true"), get_deployments(), done("true", 1, excerpt="web     2/2"))
    turns["scenarios"].append(confirmer(done("true")))
    with scripted(turns) as model:
        report = run(model, request_for(snapshot, profile="strict"))
        confirm_request = model.requests[3]
    assert [s.kind for s in report.steps] == ["REPAIR", "COMMAND", "DONE", "CONFIRM"]
    assert "must cite at least one lookup" in (report.steps[0].error or "")
    system, user = confirm_request["messages"]  # a fresh context: nothing of the planner's
    assert system["content"].startswith("You are assay's confirmer.")
    assert [tool["function"]["name"] for tool in confirm_request["tools"]] == ["done"]
    assert PREDICATE in user["content"]
    assert 'step 1, lookup get {"kind":"Deployment","namespace":"prod"}' in user["content"]
    assert "=> web" in user["content"]  # the cited line, marked, with the table around it
    assert "checked" not in user["content"]  # the planner's explanation is not shown
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.TRUE
    assert verdict.confirmed is True and verdict.iterations == 4
    assert verdict.evidence[0].structured is True


def test_strict_never_accepts_true_without_evidence(snapshot: Path) -> None:
    turns = script(done("true"), done("true"), done("true"), done("true"))
    turns["scenarios"].append(confirmer(done("true")))
    with scripted(turns) as model:
        report = run(model, request_for(snapshot, profile="strict"))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert "must cite at least one lookup" in (verdict.reason or "")


def test_the_confirmation_can_turn_true_into_cannot_determine(snapshot: Path) -> None:
    turns = script(get_deployments(), done("true", 0))
    turns["scenarios"].append(confirmer(done("cannot_determine")))
    with scripted(turns) as model:
        report = run(model, request_for(snapshot, profile="strict"))
    assert report.verdict is not None
    assert report.verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert report.verdict.confirmed is False


def test_model_error_action_is_cannot_determine(snapshot: Path) -> None:
    give_up = {"action": {"action": "ERROR", "message": "every lookup is refused"}}
    with scripted(script(give_up)) as model:
        report = run(model, request_for(snapshot))
    assert report.verdict is not None and report.verdict.exit_code == 3
    assert report.verdict.reason == "the model gave up: every lookup is refused"


def test_secret_values_never_reach_the_model_or_the_report(snapshot: Path) -> None:
    secret = {"kind": "Secret", "name": "db-credentials", "namespace": "prod"}
    turns = script(
        {"action": {"action": "COMMAND", "tool": "get", "arguments": secret}},
        {"action": {"action": "COMMAND", "tool": "describe", "arguments": secret}},
        {"action": {"action": "COMMAND", "tool": "get",
                    "arguments": {"kind": "Secret", "namespace": "all"}}},
        done("true", 0),
    )  # fmt: skip
    with scripted(turns) as model:
        report = run(model, request_for(snapshot))
        sent = json.dumps(model.requests)
    assert [s.ok for s in report.steps[:3]] == [True, True, True]
    assert "db-credentials" in sent  # the lookups did reach the model...
    encoded = "Q0FOQVJZLTdm"
    for text in (sent, report.model_dump_json()):
        assert CANARY not in text  # ...but never the values
        assert encoded not in text


def test_the_iteration_budget_ends_the_run(snapshot: Path) -> None:
    thought = {"action": {"action": "THOUGHT", "thought": "hmm"}}
    with scripted(script(*[thought] * 5)) as model:
        report = run(model, request_for(snapshot, max_iterations=3))
        assert len(model.requests) == 3
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "iterations"
    assert verdict.iterations == 3


def test_the_token_budget_is_never_exceeded(snapshot: Path) -> None:
    # Each completion claims 5000 tokens; the server cuts it at the max_tokens the engine sent.
    greedy = get_deployments(usage={"completion_tokens": 5000})
    budget = 20000
    with scripted(script(*[greedy] * 10)) as model:
        report = run(model, request_for(snapshot, max_tokens=budget))
        reported = model.usage_reported
        caps = [body["max_tokens"] for body in model.requests]
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "tokens"
    assert len(reported) >= 2
    spent = 0
    for usage, cap in zip(reported, caps, strict=True):  # each call, as the provider counted it
        assert spent + usage["prompt_tokens"] + cap <= budget
        spent += usage["total_tokens"]
    assert spent <= budget
    assert verdict.usage.total_tokens == spent
    assert caps == sorted(caps, reverse=True)


def test_a_budget_the_conversation_fits_as_the_provider_counts_it_is_enough(
    snapshot: Path,
) -> None:
    """Only what the provider has not counted yet is bounded by its size: from the second
    call on, the prompt is the provider's count of the last one plus a bound on the new
    messages. A size bound of the whole conversation (about four times the real count)
    would refuse this run's second call; the provider's count leaves room for it."""
    budget = 16000
    with scripted(script(get_deployments(), done("true", 0))) as model:
        report = run(model, request_for(snapshot, max_tokens=budget))
        requests, reported = model.requests, model.usage_reported
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert len(requests) == 2
    second = requests[1]
    whole = request_ceiling(second["messages"], second.get("tools"), None)
    spent = reported[0]["total_tokens"]
    assert budget - spent - padded_prompt(whole) < MIN_USEFUL_COMPLETION_TOKENS  # would refuse
    assert spent + reported[1]["prompt_tokens"] + second["max_tokens"] <= budget


def test_the_deadline_ends_a_slow_run_in_time(snapshot: Path) -> None:
    slow = get_deployments(delay=0.6)
    with scripted(script(*[slow] * 20)) as model:
        report = run(model, request_for(snapshot, timeout_seconds=2))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "deadline"
    assert verdict.duration_seconds < 3.5


def test_the_cost_cap_ends_the_run_when_the_price_is_known(snapshot: Path) -> None:
    # gpt-4o-mini has a price in litellm's bundled cost map; the scripted server answers for it.
    turns = script(*[get_deployments()] * 10)
    with scripted(turns) as model:
        request = request_for(snapshot, model="openai/gpt-4o-mini", max_cost_usd=0.004)
        report = run(model, request)
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "cost"
    assert verdict.usage.cost_usd is not None
    assert 0 < verdict.usage.cost_usd <= 0.004


def test_an_unknown_price_says_the_cost_cap_was_not_checked(snapshot: Path) -> None:
    with scripted(script(get_deployments(), done("true", 0))) as model:
        report = run(model, request_for(snapshot, max_cost_usd=0.01))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.TRUE
    assert verdict.usage.cost_usd is None
    assert "was not checked" in (verdict.reason or "")


def test_rate_limit_with_retry_after_then_success(snapshot: Path) -> None:
    turns = script(
        {"attempts": [{"error": {"status": 429, "retry_after": 1}}, get_deployments()]},
        done("true", 0),
    )
    with scripted(turns) as model:
        report = run(model, request_for(snapshot))
        assert len(model.requests) == 3
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.TRUE
    assert report.steps[0].usage.latency_seconds >= 1.0  # waited as Retry-After asked


def test_persistent_server_errors_end_in_cannot_determine_within_the_deadline(
    snapshot: Path,
) -> None:
    with scripted(script({"error": {"status": 500, "body": "boom"}})) as model:
        report = run(model, request_for(snapshot, timeout_seconds=3))
        attempts = len(model.requests)
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "deadline"
    assert "boom" in (verdict.reason or "")
    assert attempts >= 2  # retried...
    assert verdict.duration_seconds < 4.5  # ...but not past the deadline


def test_a_permanent_error_is_not_retried(snapshot: Path) -> None:
    with scripted(script({"error": {"status": 401, "body": "bad key"}})) as model:
        report = run(model, request_for(snapshot))
        assert len(model.requests) == 1
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted is None
    assert "401" in (verdict.reason or "") and "bad key" in (verdict.reason or "")


def test_a_hung_model_call_is_cut_by_the_deadline(snapshot: Path) -> None:
    with scripted(script({"hang": 60})) as model:
        report = run(model, request_for(snapshot, timeout_seconds=2))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "deadline"
    assert verdict.duration_seconds < 4


def test_a_short_wait_sleeps_in_place(snapshot: Path) -> None:
    wait = {"action": {"action": "WAIT", "seconds": 0.3, "reason": "let it settle"}}
    slept: list[float] = []
    with scripted(script(wait, get_deployments(), done("true", 1))) as model:
        report = run(model, request_for(snapshot), sleep=slept.append)
        fed = model.requests[1]["messages"][-1]["content"]
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert len(slept) == 1 and 0.2 < slept[0] <= 0.3
    assert fed.startswith("[step 0] waited until")


def test_a_long_wait_without_deferral_is_cannot_determine_with_the_instant(
    snapshot: Path,
) -> None:
    wait = {"action": {"action": "WAIT", "until": "2031-01-01T00:00:00Z"}}
    with scripted(script(wait)) as model:
        report = run(model, request_for(snapshot))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.wake_at is not None and verdict.wake_at.year == 2031
    assert "inline cap" in (verdict.reason or "")


def test_a_deferred_wait_checkpoints_and_resumes_the_same_run(snapshot: Path) -> None:
    wait = {"action": {"action": "WAIT", "seconds": 3600}}
    turns = script(get_deployments(), wait, done("true", 0))
    with scripted(turns) as model:
        request = request_for(snapshot, max_iterations=5)
        waiting = run(model, request, allow_defer=True)
        assert waiting.status == "waiting" and waiting.verdict is None
        assert waiting.checkpoint is not None and waiting.wake_at is not None
        stored = waiting.checkpoint.model_dump_json()  # what the scheduler keeps in Redis
        from schemas.report import RunState

        resumed = run(model, request, state=RunState.model_validate_json(stored))
        last = model.requests[-1]
    verdict = resumed.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.TRUE
    assert resumed.run_id == request.run_id
    assert [s.kind for s in resumed.steps] == ["COMMAND", "WAIT", "DONE"]
    assert verdict.iterations == 3
    assert last["messages"][-1]["content"].startswith("[step 1] waited until")
    assert verdict.usage.total_tokens == sum(u["total_tokens"] for u in model.usage_reported)


def test_json_transport_reaches_the_same_verdict(snapshot: Path) -> None:
    with scripted(script(get_deployments(), done("false", 0))) as model:
        report = run(model, request_for(snapshot), settings={"transport": "json"})
        first = model.requests[0]
    assert "tools" not in first
    assert first["response_format"]["type"] == "json_schema"
    assert "get" in first["messages"][0]["content"]  # the lookups are described in the prompt
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.FALSE


def test_a_query_answer_carries_findings(snapshot: Path) -> None:
    answer = done("true", 0, explanation="2 Deployments in prod")
    answer["action"]["findings"] = ["prod/api: 3/3 ready", "prod/web: 2/2 ready"]
    with scripted(script(get_deployments(), answer)) as model:
        report = run(model, request_for(snapshot, kind="query", text="which Deployments in prod?"))
        system_prompt = model.requests[0]["messages"][0]["content"]
    from assay.render import query_summary

    summary = query_summary(report)
    assert "QUESTION" in system_prompt
    assert summary["success"] is True
    assert summary["findings"] == ["prod/api: 3/3 ready", "prod/web: 2/2 ready"]
    assert summary["tools_used"] == ["get"]
    assert summary["iterations"] == 2


def test_a_target_that_cannot_be_read_is_cannot_determine(tmp_path: Path) -> None:
    with scripted(script(done("true"))) as model:
        report = run(model, request_for(tmp_path / "missing"))
        assert model.requests == []
    assert report.verdict is not None and report.verdict.exit_code == 3
    assert "could not be set up" in (report.verdict.reason or "")


def test_an_internal_error_is_cannot_determine_never_a_crash(snapshot: Path) -> None:
    def broken_tools(request: Any, settings: Any) -> Any:
        class Registry:
            names = {"get"}

            def json_schemas(self) -> list[dict[str, Any]]:
                raise RuntimeError("bug in a toolset")

        return Registry()

    with scripted(script(done("true"))) as model:
        report = run(model, request_for(snapshot), tools=broken_tools)
    assert report.verdict is not None and report.verdict.exit_code == 3
    assert report.verdict.reason == "internal error: RuntimeError: bug in a toolset"


def test_no_model_configured_is_cannot_determine(snapshot: Path) -> None:
    from workers.engine.engine import EngineDeps, evaluate

    report = evaluate(request_for(snapshot), EngineDeps(settings=load_settings()))
    assert report.verdict is not None and report.verdict.exit_code == 3
    assert "no model configured" in (report.verdict.reason or "")


def test_the_rate_limiter_is_asked_before_every_model_call(snapshot: Path) -> None:
    import time

    asked: list[tuple[str, int, float]] = []

    class Limiter:
        def acquire(self, model: str, tokens: int, deadline: float) -> None:
            asked.append((model, tokens, deadline))

    with scripted(script(get_deployments(), done("true", 0))) as model:
        report = run(model, request_for(snapshot), rate_limiter=Limiter())
        sent = model.requests
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert len(asked) == len(sent) == 2
    for (name, tokens, deadline), body in zip(asked, sent, strict=True):
        assert name == "openai/scripted"
        assert tokens > body["max_tokens"]  # the prompt estimate plus the completion cap
        assert deadline > time.monotonic()


def test_a_rate_limit_that_cannot_be_had_in_time_ends_at_the_deadline(snapshot: Path) -> None:
    class Exhausted:
        def acquire(self, model: str, tokens: int, deadline: float) -> None:
            raise TimeoutError("no capacity before the deadline")

    with scripted(script(done("true"))) as model:
        report = run(model, request_for(snapshot), rate_limiter=Exhausted())
        assert model.requests == []
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "deadline"


def test_the_tools_are_closed_when_the_run_ends_however_it_ends(snapshot: Path) -> None:
    """A live backend holds connections per run; the engine must release them every time."""
    from workers.engine.toolsets.base import ToolRegistry
    from workers.engine.toolsets.factory import build_registry

    closed: list[str] = []

    def tools_with_a_closer(request: Any, settings: Any) -> ToolRegistry:
        registry = build_registry(request, settings)
        return ToolRegistry(registry, [lambda: closed.append(request.run_id)])

    with scripted(script(get_deployments(), done("true", 0))) as model:
        finished = run(model, request_for(snapshot), tools=tools_with_a_closer)
    with scripted(script({"error": {"status": 400, "body": "bad request"}})) as model:
        failed = run(model, request_for(snapshot), tools=tools_with_a_closer)
    assert finished.verdict is not None and finished.verdict.exit_code == 0
    assert failed.verdict is not None and failed.verdict.exit_code == 3
    assert closed == [finished.run_id, failed.run_id]
