"""A run's tools are sent as the JSON text they were made as: the same bytes, never stale.

Why this matters: the direct path (workers/engine/openai_compat.py) promises the body
litellm would send. Reusing the tools' text instead of encoding a list again (issue 15)
must not change one byte of it, nor let one run change what another run is offered.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from assay.testing.scripted_model import ScriptedModel
from schemas.settings import load_settings
from tests.engine_support import make_snapshot, request_for
from workers.engine.conversation import tools_for
from workers.engine.llm import LiteLLMClient, LLMCall, load_litellm
from workers.engine.openai_compat import request_body
from workers.engine.token_ceiling import request_ceiling
from workers.engine.tool_schemas import ToolSchemas, encode_body, tools_json, tools_list
from workers.engine.toolsets.factory import build_registry

MESSAGES = [
    {"role": "system", "content": 'planner \u00e9\u4e2d "quoted" \\ back'},
    {"role": "user", "content": "Predicate: every pod is ready \U0001f600"},
]


def run_tools(tmp_path: Path) -> ToolSchemas:
    snapshot = make_snapshot(tmp_path / "snap")
    settings = load_settings(snapshot_roots=[tmp_path])
    tools = tools_for("tools", build_registry(request_for(snapshot), settings))
    assert isinstance(tools, ToolSchemas)
    return tools


@pytest.mark.parametrize("response_format", [None, {"type": "json_object"}])
def test_the_body_is_byte_for_byte_what_json_dumps_writes(
    tmp_path: Path, response_format: dict[str, Any] | None
) -> None:
    tools = run_tools(tmp_path)
    listed = tools.fresh()
    assert json.dumps(listed) == tools.json_text
    body = request_body("scripted", MESSAGES, 300, "run-1", tools, response_format)
    as_litellm_sends_it = {**body, "tools": listed}
    assert encode_body(body) == json.dumps(as_litellm_sends_it).encode()
    assert json.loads(encode_body(body))["tools"] == listed


def test_plain_tool_lists_and_bodies_without_tools_are_encoded_as_given() -> None:
    plain = [{"type": "function", "function": {"name": "get", "parameters": {}}}]
    for tools in (plain, None):
        body = request_body("scripted", MESSAGES, 300, "run-1", tools, None)
        assert encode_body(body) == json.dumps(body).encode()
    assert tools_json(plain) == json.dumps(plain)


def test_no_run_can_change_what_another_run_is_offered(tmp_path: Path) -> None:
    first, second = run_tools(tmp_path), run_tools(tmp_path)
    assert first == second
    mine = tools_list(first)  # what litellm's path gets: a list of its own, per call
    mine[0]["function"]["description"] = "changed by one run"
    mine.append({"type": "function", "function": {"name": "extra"}})
    third = run_tools(tmp_path)
    assert third == second and "changed by one run" not in third.json_text
    assert "extra" not in third.json_text and tools_list(third) != mine
    assert tools_list(first) is not tools_list(first)  # every caller gets its own list


def test_the_token_bound_of_a_runs_tools_is_that_of_the_same_list_encoded_again(
    tmp_path: Path,
) -> None:
    tools = run_tools(tmp_path)
    assert request_ceiling(MESSAGES, tools, None) == request_ceiling(MESSAGES, tools.fresh(), None)


@pytest.mark.parametrize("fast", [True, False], ids=["direct", "litellm"])
def test_a_runs_tools_reach_the_endpoint_as_litellm_sends_them(tmp_path: Path, fast: bool) -> None:
    load_litellm()
    tools = run_tools(tmp_path)
    turn = {"action": {"action": "COMMAND", "tool": "get", "arguments": {"kind": "Pod"}}}
    with ScriptedModel({"scenarios": [{"turns": [turn]}]}) as model:
        llm = LiteLLMClient(load_settings(llm_fast_path=fast))
        call = LLMCall(
            model="openai/scripted", messages=MESSAGES, max_tokens=300,
            deadline=time.monotonic() + 10, user="run-1", tools=tools, api_base=model.url,
        )  # fmt: skip
        reply = llm.complete(call)
        sent = model.requests[0]
    assert sent["tools"] == tools.fresh() and sent["messages"] == MESSAGES
    assert [c.name for c in reply.tool_calls] == ["get"]


def test_a_system_prompt_sent_again_is_the_same_bytes_and_other_messages_are_encoded_anew() -> None:
    """The system message's JSON is kept per process; every other message is encoded each time,
    so a message with the same text in another order, or a changed one, is never stale."""
    conversation = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "NAME  READY\nweb   1/1"},
        {"content": "late system text", "role": "system"},  # other key order
        {"role": "system", "content": ["not", "text"]},  # not all text: encoded as given
    ]
    for _ in range(2):
        body = request_body("scripted", conversation, 300, "run-1", None, None)
        assert encode_body(body) == json.dumps(body).encode()
    conversation[-3]["content"] = "changed"  # a message changed in place is sent as it is now
    body = request_body("scripted", conversation, 300, "run-1", None, None)
    assert encode_body(body) == json.dumps(body).encode()
    empty = request_body("scripted", [], 300, "run-1", None, None)
    assert encode_body(empty) == json.dumps(empty).encode()
