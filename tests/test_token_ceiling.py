"""The token ceiling: never below litellm's count, and distrusted for good once it was.

A run far from its budget caps each call from this ceiling instead of the tokenizer's
count (workers/core/token_ceiling.py); the budget guarantee rests on the ceiling never
being lower than the count, for any text a cluster or a model can put in a message.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.settings import load_settings
from workers.core.llm import LiteLLMClient, load_litellm
from workers.core.prompt_tally import PromptTally
from workers.core.token_ceiling import CeilingCheck, message_ceiling

# the default tokenizer (what an OpenAI-compatible endpoint's model gets) and GPT-4o's
MODELS = ("openai/scripted", "gpt-4o")


@pytest.fixture(scope="module")
def client() -> LiteLLMClient:
    load_litellm()
    return LiteLLMClient(load_settings(model="openai/scripted"))


def exact(client: LiteLLMClient, model: str, message: dict[str, Any]) -> int:
    return client.count_tokens(model, [message], None)


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
def test_the_ceiling_is_never_below_litellms_count(
    client: LiteLLMClient, message: dict[str, Any], model: str
) -> None:
    assert message_ceiling(message) >= exact(client, model, message)


def test_a_conversations_ceiling_bounds_its_count_and_is_worth_having(
    client: LiteLLMClient,
) -> None:
    """A real conversation's ceiling is above its count, but not so far that it never serves."""
    table = "NAME  READY  UP-TO-DATE  AVAILABLE\n" + "web-%03d  3/3  3  3\n" * 40
    conversation = [
        {"role": "system", "content": "You are assay's planner. " * 40},
        {"role": "user", "content": "every Deployment in namespace prod has 2 ready replicas"},
        tool_call_message('{"kind": "Deployment", "namespace": "prod"}', "get"),
        {"role": "tool", "tool_call_id": "call_1", "content": table},
    ]
    tally = PromptTally(client, "openai/scripted")
    ceiling, count = tally.ceiling(conversation, None), tally.count(conversation, None)
    assert ceiling is not None and count <= ceiling <= 4 * count


def test_a_model_whose_count_breaks_the_ceiling_is_counted_exactly_from_then_on() -> None:
    check = CeilingCheck(verified_messages=3)
    small = {"role": "user", "content": "hi"}
    assert check.ceiling("fits", small, lambda message: 1) == message_ceiling(small)
    # a tokenizer that counts above the ceiling (say, a new one litellm picked up)
    assert check.ceiling("odd", small, lambda message: 10_000) is None
    # never trusted again in this process, even for a message its count would fit
    assert check.ceiling("odd", small, lambda message: 1) is None
    # a model that held for its checked messages is trusted without counting
    for _ in range(3):
        check.ceiling("fits", small, lambda message: 1)

    def never(message: dict[str, Any]) -> int:
        raise AssertionError("a checked model's ceiling needs no count")

    assert check.ceiling("fits", small, never) == message_ceiling(small)


def test_without_a_trusted_ceiling_the_tally_says_so(client: LiteLLMClient) -> None:
    class Untrusted(LiteLLMClient):
        def token_ceiling(self, model: str, message: dict[str, Any]) -> int | None:
            return None

    tally = PromptTally(Untrusted(load_settings(model="openai/scripted")), "openai/scripted")
    assert tally.ceiling([{"role": "user", "content": "hi"}], None) is None
