"""Token usage a model reports is data too: odd numbers never crash a run or lower its spend.

The scripted model reports negative and absurd usage over HTTP, through litellm, as a
misbehaving provider would.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from schemas.verdict import VerdictKind
from tests.engine_support import (
    done,
    done_ignoring_max_tokens,
    get_deployments,
    make_snapshot,
    request_for,
    run,
    script,
)
from tests.engine_support import scripted as scripted_model
from workers.engine.budget_meter import padded_prompt
from workers.engine.llm import load_litellm
from workers.engine.token_ceiling import request_ceiling


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    load_litellm().token_counter(model="openai/scripted", text="warm up")


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return make_snapshot(tmp_path / "snap")


def anomalies() -> float:
    value = REGISTRY.get_sample_value(
        "assay_model_usage_anomalies_total", {"model": "openai/scripted"}
    )
    return value or 0.0


def test_negative_usage_is_replaced_by_an_estimate_and_recorded(snapshot: Path) -> None:
    negative = {"prompt_tokens": -5000, "completion_tokens": -300}
    before = anomalies()
    turns = script(get_deployments(usage=negative), done("true", 0, usage=negative))
    with scripted_model(turns) as model:
        report = run(model, request_for(snapshot))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.TRUE
    assert verdict.reason is None or "internal error" not in verdict.reason
    running_total = 0
    for step in report.steps:
        assert step.usage.prompt_tokens > 0 and step.usage.completion_tokens > 0
        assert step.usage.anomaly is not None and "negative" in step.usage.anomaly
        running_total += step.usage.total_tokens
    assert verdict.usage.total_tokens == running_total > 0
    assert anomalies() == before + 2


def test_absurdly_large_usage_exhausts_the_budget_instead_of_overflowing_it(
    snapshot: Path,
) -> None:
    huge = {"prompt_tokens": 10**15, "completion_tokens": 10**15}
    with scripted_model(script(get_deployments(usage=huge), done("true", 0))) as model:
        report = run(model, request_for(snapshot))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "tokens"
    assert report.steps[0].usage.anomaly is not None
    assert "absurd" in report.steps[0].usage.anomaly
    assert 0 < verdict.usage.total_tokens <= 20_000_000  # clamped, still past any budget


def test_usage_the_provider_left_out_is_estimated_not_charged_as_zero(snapshot: Path) -> None:
    silent = {"prompt_tokens": 0, "completion_tokens": 0}  # litellm's stand-in for "none"
    with scripted_model(script(get_deployments(usage=silent), done("true", 0))) as model:
        report = run(model, request_for(snapshot))
        sent = model.requests[0]
    first = report.steps[0].usage
    assert first.prompt_tokens > 0 and first.completion_tokens > 0
    # charged the upper bound the call was capped by: never less than it could have cost
    bound = request_ceiling(sent["messages"], sent.get("tools"), None)
    assert first.prompt_tokens == padded_prompt(bound)
    assert first.anomaly is not None and "not reported" in first.anomaly
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 3000, "completion_tokens": 200_000},  # ignored its max_tokens
        {"prompt_tokens": 10**15, "completion_tokens": 10**15},  # absurd: charged the ceiling
    ],
    ids=["past max_tokens", "absurd"],
)
def test_a_verdict_whose_reply_spent_past_the_token_budget_does_not_stand(
    snapshot: Path, usage: dict[str, int]
) -> None:
    """The budget is enforced, not advisory: a provider that ignores ``max_tokens`` (or says
    it did) takes the run past its token budget with the very reply that carries the verdict,
    which must not then be acted on as if the budget held."""
    turns = script(get_deployments(), done_ignoring_max_tokens(usage))
    with scripted_model(turns) as model:
        report = run(model, request_for(snapshot, max_tokens=50_000))
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "tokens" and verdict.exit_code == 3
    assert report.steps[-1].kind == "DONE" and "past the budget" in (report.steps[-1].error or "")
    assert verdict.usage.total_tokens == sum(step.usage.total_tokens for step in report.steps)
