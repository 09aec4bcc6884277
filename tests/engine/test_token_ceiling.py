"""The prompt estimate a call's cap rests on: never below a real tokenizer's count, and exact
where the provider has already counted (workers/engine/token_ceiling.py, prompt_tally.py).

The budget guarantee rests on the estimate never being lower than what the provider
will count, for any text a cluster or a model can put in a message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from workers.engine.llm import load_litellm
from workers.engine.prompt_tally import PromptTally
from workers.engine.token_ceiling import message_ceiling, request_ceiling, tools_ceiling

# the default tokenizer (what an OpenAI-compatible endpoint's model gets) and GPT-4o's
MODELS = ("openai/scripted", "gpt-4o")


@pytest.fixture(scope="module")
def litellm() -> Any:
    return load_litellm()


texts = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec="ascii"), min_size=100, max_size=3000),
    st.text(alphabet="日本語のテキスト🙂🚀é\u200b\n\t ", min_size=1, max_size=500),
    st.sampled_from(["", " ", "\n" * 50, "a" * 5000, "🙂" * 300, "ab" * 2000]),
)


def tool_call_message(arguments: str, name: str) -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


messages = st.one_of(
    st.builds(lambda text: {"role": "user", "content": text}, texts),
    st.builds(lambda text: {"role": "tool", "tool_call_id": "call_1", "content": text}, texts),
    st.builds(tool_call_message, texts, st.text(min_size=1, max_size=20)),
    st.builds(lambda text, name: {"role": "user", "name": name, "content": text}, texts, texts),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages, model=st.sampled_from(MODELS))
def test_the_bound_is_never_below_a_real_tokenizers_count(
    litellm: Any, message: dict[str, Any], model: str
) -> None:
    assert message_ceiling(message) >= litellm.token_counter(model=model, messages=[message])


TABLE = "NAME  READY  UP-TO-DATE  AVAILABLE\n" + "web-%03d  3/3  3  3\n" * 40
CONVERSATION = [
    {"role": "system", "content": "You are assay's planner. " * 40},
    {"role": "user", "content": "every Deployment in namespace prod has 2 ready replicas"},
    tool_call_message('{"kind": "Deployment", "namespace": "prod"}', "get"),
    {"role": "tool", "tool_call_id": "call_1", "content": TABLE},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get",
            "description": "List or read Kubernetes objects of a kind.",
            "parameters": {
                "type": "object",
                "properties": {"kind": {"type": "string"}, "namespace": {"type": "string"}},
                "required": ["kind"],
            },
        },
    }
]


def test_a_requests_bound_covers_its_count_and_is_worth_having(litellm: Any) -> None:
    """A real conversation's bound is above its count, but not so far that it never serves."""
    count = litellm.token_counter(model="openai/scripted", messages=CONVERSATION)
    count += litellm.token_counter(model="openai/scripted", text=json.dumps(TOOLS, indent=4))
    bound = request_ceiling(CONVERSATION, TOOLS, None)
    assert count <= bound <= 5 * count
    # the tools as a template renders them, indented: the bound still covers them
    assert tools_ceiling(TOOLS) >= litellm.token_counter(
        model="openai/scripted", text=json.dumps(TOOLS, indent=4)
    )


def test_before_the_provider_counts_the_whole_request_is_bounded_by_its_size() -> None:
    tally = PromptTally()
    assert tally.estimate(CONVERSATION, TOOLS, None) == request_ceiling(CONVERSATION, TOOLS, None)


def test_after_the_provider_counts_only_the_new_messages_are_bounded() -> None:
    tally, sent = PromptTally(), list(CONVERSATION[:2])
    first = tally.estimate(sent, TOOLS, None)
    tally.counted(sent, TOOLS, None, estimate=first, reported=900)
    sent += CONVERSATION[2:]  # the model's call and the tool's answer, appended
    expected = 900 + message_ceiling(CONVERSATION[2]) + message_ceiling(CONVERSATION[3])
    assert tally.estimate(sent, TOOLS, None) == expected < request_ceiling(sent, TOOLS, None)


def test_a_replaced_message_or_other_tools_go_back_to_the_size_bound() -> None:
    tally, sent = PromptTally(), list(CONVERSATION)
    tally.counted(sent, TOOLS, None, estimate=tally.estimate(sent, TOOLS, None), reported=900)
    assert tally.estimate(sent, TOOLS, None) == 900
    other_tools = [dict(TOOLS[0])]
    assert tally.estimate(sent, other_tools, None) == request_ceiling(sent, other_tools, None)
    resumed = [dict(message) for message in sent]  # equal, but not what was counted
    assert tally.estimate(resumed, TOOLS, None) == request_ceiling(resumed, TOOLS, None)


@pytest.mark.parametrize("reported", [None, 0, -5, 12.5, True, "900", 10**12])
def test_a_count_the_provider_got_wrong_is_not_used(reported: object) -> None:
    tally, sent = PromptTally(), list(CONVERSATION)
    bound = tally.estimate(sent, TOOLS, None)
    tally.counted(sent, TOOLS, None, estimate=bound, reported=reported)
    assert tally.estimate(sent, TOOLS, None) == bound


def test_a_provider_counting_above_the_estimate_is_logged() -> None:
    tally, sent = PromptTally(), list(CONVERSATION)
    bound = tally.estimate(sent, TOOLS, None)
    with capture_logs() as logs:
        tally.counted(sent, TOOLS, None, estimate=bound, reported=bound + 1)
    assert [entry["event"] for entry in logs] == ["prompt_estimate_exceeded"]
