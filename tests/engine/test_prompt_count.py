"""Near its token budget a run counts its prompt with the model's tokenizer; far from it, nothing
is imported (workers/engine/tokenizer_count.py, budget_meter.py ``allow_call``).

Each run goes in a fresh process (the engine on the direct path, the scripted model over HTTP,
a real snapshot), so what the run imported can be told: litellm costs `assay check` seconds,
and only a call near the budget may pay them. The test process then works out, from the
requests the model received, what each call's cap must have been. The budget meter's rule
(when it asks for the count, and that the smaller figure decides) is tested on its own below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from schemas.budget import PROFILES, Budget
from schemas.verdict import Usage
from workers.engine.budget_meter import (
    MAX_COMPLETION_TOKENS,
    BudgetExhausted,
    BudgetMeter,
    padded_prompt,
)
from workers.engine.llm import load_litellm
from workers.engine.token_ceiling import message_ceiling, request_ceiling

ROOT = Path(__file__).resolve().parents[2]
MODEL = "openai/scripted"

# Three steps whose lookups each charge 2,500 completion tokens: under smoke's 20,000 the third
# call comes near the budget, under fast's 120,000 no call does.
RUN = """
import json, sys
from pathlib import Path
from assay.testing.scripted_model import ScriptedModel
from schemas.settings import load_settings
from tests.engine_support import done, get_deployments, make_snapshot, request_for, script
from workers.engine.engine import EngineDeps, evaluate

snapshot = make_snapshot(Path(sys.argv[1]))
spend = {"completion_tokens": 2500}
describe = {"action": {"action": "COMMAND", "tool": "describe",
            "arguments": {"kind": "Deployment", "name": "web", "namespace": "prod"}},
            "usage": spend}
turns = script(get_deployments(usage=spend), describe, done("true", 0))
imported_by_step = []
with ScriptedModel(turns) as model:
    settings = load_settings(model="openai/scripted", api_base=model.url, snapshot_roots=["/"])
    deps = EngineDeps(settings=settings,
                      on_step=lambda step: imported_by_step.append("litellm" in sys.modules))
    report = evaluate(request_for(snapshot, profile=sys.argv[2]), deps)
    bodies, reported = model.requests, model.usage_reported
print(json.dumps({
    "verdict": report.verdict.verdict.value,
    "imported_by_step": imported_by_step,
    "imported": sorted(m for m in ("litellm", "openai", "tiktoken") if m in sys.modules),
    "bodies": bodies,
    "reported": reported,
}))
"""


def run_in_a_fresh_process(tmp_path: Path, profile: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(tmp_path / "snap"), profile],
        capture_output=True, text=True, env=env, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def size_bound(bodies: list[dict[str, Any]], reported: list[dict[str, Any]], call: int) -> int:
    """The bound without a tokenizer: the whole first request by its size; later, the provider's
    count of the previous request plus the size of the messages added since."""
    body = bodies[call]
    if call == 0:
        return request_ceiling(body["messages"], body["tools"], None)
    added = body["messages"][len(bodies[call - 1]["messages"]) :]
    return reported[call - 1]["prompt_tokens"] + sum(message_ceiling(m) for m in added)


def tokenizer_count(body: dict[str, Any]) -> int:
    """The request as the model's tokenizer counts it: messages, and the tools as their JSON."""
    litellm = load_litellm()
    messages = litellm.token_counter(model=MODEL, messages=body["messages"])
    return int(messages) + int(litellm.token_counter(model=MODEL, text=json.dumps(body["tools"])))


def cap_for(budget: int, spent: int, prompt: int) -> int:
    return min(MAX_COMPLETION_TOKENS, budget - spent - padded_prompt(prompt))


def test_a_smoke_run_near_its_budget_counts_its_prompt_and_imports_litellm_only_then(
    tmp_path: Path,
) -> None:
    run = run_in_a_fresh_process(tmp_path, "smoke")
    bodies, reported = run["bodies"], run["reported"]
    budget = PROFILES["smoke"].budget.max_tokens
    assert budget is not None
    assert run["verdict"] == "true" and len(bodies) == 3
    counted_calls = []
    spent = 0
    for call, body in enumerate(bodies):
        by_size = cap_for(budget, spent, size_bound(bodies, reported, call))
        if by_size >= MAX_COMPLETION_TOKENS:  # far from the budget: the size bound decides
            assert body["max_tokens"] == MAX_COMPLETION_TOKENS
        else:  # near it: the tokenizer's count (+10 %) gives the call the room it has
            counted_calls.append(call)
            exact = cap_for(budget, spent, tokenizer_count(body))
            assert body["max_tokens"] == exact > by_size, call
        assert spent + reported[call]["prompt_tokens"] + body["max_tokens"] <= budget
        spent += reported[call]["total_tokens"]
    assert counted_calls == [2]  # the last call only: the first two were far from the budget
    assert bodies[2]["max_tokens"] < MAX_COMPLETION_TOKENS  # capped, but by the exact count
    # litellm was imported for the call that needed the count, not before
    assert run["imported_by_step"] == [False, False, True]


def test_the_same_run_far_from_its_budget_imports_no_tokenizer(tmp_path: Path) -> None:
    run = run_in_a_fresh_process(tmp_path, "fast")
    assert run["verdict"] == "true"
    assert [body["max_tokens"] for body in run["bodies"]] == [MAX_COMPLETION_TOKENS] * 3
    assert run["imported"] == [] and run["imported_by_step"] == [False, False, False]


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    """This process counts with litellm to check the runs' caps (the runs have their own)."""
    load_litellm()


class Counter:
    """A tokenizer count handed to the meter, recording whether it was asked for."""

    def __init__(self, tokens: int | None) -> None:
        self.tokens, self.asked = tokens, 0

    def __call__(self) -> int | None:
        self.asked += 1
        return self.tokens


def meter(spent: int, budget: int = 20_000, **limits: int) -> BudgetMeter:
    usage = Usage(prompt_tokens=spent, total_tokens=spent)
    return BudgetMeter(Budget(max_tokens=budget, **limits), usage=usage)


def test_far_from_the_budget_the_count_is_never_asked_for() -> None:
    count = Counter(1_000)
    allowance = meter(spent=0).allow_call(12_000, tighter=count)
    assert allowance.max_completion_tokens == MAX_COMPLETION_TOKENS
    assert allowance.prompt_tokens_estimate == padded_prompt(12_000)
    assert count.asked == 0


def test_near_the_budget_the_smaller_count_decides_and_a_larger_one_never_does() -> None:
    smaller = Counter(4_000)  # 8,000 left: the bound leaves 1,384, the count 3,584
    allowance = meter(spent=12_000).allow_call(6_000, tighter=smaller)
    assert allowance.max_completion_tokens == 8_000 - padded_prompt(4_000)
    assert allowance.prompt_tokens_estimate == padded_prompt(4_000) and smaller.asked == 1
    for useless in (Counter(7_000), Counter(None)):  # above the bound, or no tokenizer
        allowance = meter(spent=12_000).allow_call(6_000, tighter=useless)
        assert allowance.max_completion_tokens == 8_000 - padded_prompt(6_000)
        assert useless.asked == 1


def test_a_call_the_bound_refuses_is_made_when_the_count_leaves_room() -> None:
    with pytest.raises(BudgetExhausted) as refused:
        meter(spent=5_000, budget=16_000).allow_call(14_000)
    assert refused.value.which == "tokens"
    allowance = meter(spent=5_000, budget=16_000).allow_call(14_000, tighter=Counter(4_000))
    assert allowance.max_completion_tokens == MAX_COMPLETION_TOKENS
    with pytest.raises(BudgetExhausted, match="the next prompt needs about"):
        meter(spent=5_000, budget=16_000).allow_call(14_000, tighter=Counter(10_500))


def test_a_run_out_of_steps_is_refused_without_counting() -> None:
    count = Counter(1_000)
    spent = meter(spent=19_000, max_iterations=2)
    spent.iterations = 2
    with pytest.raises(BudgetExhausted) as refused:
        spent.allow_call(6_000, tighter=count)
    assert refused.value.which == "iterations" and count.asked == 0


def test_counting_a_prompt_never_reaches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm fetches a Hugging Face tokenizer for some names (llama, ...) unless told not
    to: near the budget, a run on an offline host would wait on that, and tests must never
    reach the internet. tiktoken's bundled encoding counts such names instead."""
    import socket

    from workers.engine.tokenizer_count import tokenizer_count

    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    messages = [{"role": "user", "content": "every Deployment has 2 ready replicas " * 20}]
    counted = tokenizer_count("hosted_vllm/meta-llama/llama-3-8b-instruct", messages, None, None)
    assert attempts == []
    assert counted is not None and counted > 100
