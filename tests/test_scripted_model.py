"""The scripted OpenAI-compatible server, spoken to over real HTTP (and through litellm)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from assay.redis_process import free_port
from assay.testing.scripted_model import ScriptedModel, ScriptError, load_script

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get",
            "description": "get objects",
            "parameters": {"type": "object", "properties": {"kind": {"type": "string"}}},
        },
    }
]
DONE_TRUE = {
    "action": "DONE",
    "verdict": "true",
    "explanation": "all ready",
    "evidence": [{"step": 0, "excerpt": "3/3"}],
}


def post(model: ScriptedModel, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{model.url}/chat/completions", json=body, timeout=10)


def conversation(*assistant_turns: int, user: str = "run-1", **extra: Any) -> dict[str, Any]:
    """A request whose history holds ``len(assistant_turns)`` assistant messages."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "planner"},
        {"role": "user", "content": "Predicate: every deployment has ready replicas"},
    ]
    for _ in assistant_turns:
        messages.append({"role": "assistant", "content": "{}"})
        messages.append({"role": "user", "content": "[step 0] get -> ok\napi 3/3"})
    return {"model": "scripted", "messages": messages, "user": user, **extra}


def test_an_action_becomes_a_tool_call_when_tools_are_offered() -> None:
    script = {"scenarios": [{"turns": [{"action": {"action": "COMMAND", "tool": "get",
              "arguments": {"kind": "Deployment"}, "reason": "list them"}}]}]}  # fmt: skip
    with ScriptedModel(script) as model:
        reply = post(model, conversation(tools=TOOLS)).json()
    message = reply["choices"][0]["message"]
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    call = message["tool_calls"][0]["function"]
    assert call["name"] == "get"
    assert json.loads(call["arguments"]) == {"kind": "Deployment", "reason": "list them"}


def test_an_action_becomes_json_content_when_a_response_format_is_asked() -> None:
    script = {"scenarios": [{"turns": [{"action": DONE_TRUE}]}]}
    with ScriptedModel(script) as model:
        body = conversation(tools=TOOLS, response_format={"type": "json_object"})
        reply = post(model, body).json()
    content = json.loads(reply["choices"][0]["message"]["content"])
    assert content == {"action": DONE_TRUE}
    assert "tool_calls" not in reply["choices"][0]["message"]


def test_turns_follow_the_number_of_assistant_messages_and_scenarios_match_the_predicate() -> None:
    script = {
        "scenarios": [
            {"match": "certificate", "turns": [{"text": "cert scenario"}]},
            {"match": "READY REPLICAS", "turns": [{"text": "first"}, {"text": "second"}]},
        ]
    }
    with ScriptedModel(script) as model:
        first = post(model, conversation()).json()
        second = post(model, conversation(1)).json()
        past_end = post(model, conversation(1, 1))
    assert first["choices"][0]["message"]["content"] == "first"
    assert second["choices"][0]["message"]["content"] == "second"
    assert past_end.status_code == 400
    assert "no turn 2" in past_end.json()["error"]["message"]


def test_when_picks_the_answer_by_the_last_tool_result() -> None:
    script = {"scenarios": [{"turns": [
        {"text": "look"},
        {"when": [{"if_contains": "0/3", "text": "broken"}, {"text": "healthy"}]},
    ]}]}  # fmt: skip
    with ScriptedModel(script) as model:
        healthy = post(model, conversation(1)).json()
        body = conversation(1)
        body["messages"][-1]["content"] = "[step 0] get -> ok\napi 0/3"
        broken = post(model, body).json()
    assert healthy["choices"][0]["message"]["content"] == "healthy"
    assert broken["choices"][0]["message"]["content"] == "broken"


def test_attempts_replay_per_conversation_with_retry_after() -> None:
    script = {"scenarios": [{"turns": [{"attempts": [
        {"error": {"status": 429, "retry_after": 2}},
        {"text": "after the retry"},
    ]}]}]}  # fmt: skip
    with ScriptedModel(script) as model:
        limited = post(model, conversation(user="a"))
        other_run = post(model, conversation(user="b"))
        retried = post(model, conversation(user="a"))
        assert [r.get("user") for r in model.requests] == ["a", "b", "a"]
        assert len(model.requests_for("a")) == 2
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "2"
    assert other_run.status_code == 429  # its own first attempt, not run a's second
    assert retried.json()["choices"][0]["message"]["content"] == "after the retry"


def test_malformed_bodies_errors_and_hangs() -> None:
    script = {"scenarios": [
        {"match": "body", "turns": [{"body": "not json at all"}]},
        {"match": "fail", "turns": [{"error": {"status": 503, "body": "overloaded"}}]},
        {"match": "hang", "turns": [{"hang": 5, "text": "too late"}]},
    ]}  # fmt: skip
    with ScriptedModel(script) as model:
        base = conversation()
        base["messages"][1]["content"] = "body"
        assert post(model, base).text == "not json at all"
        base["messages"][1]["content"] = "fail"
        failed = post(model, base)
        assert failed.status_code == 503
        assert failed.json()["error"]["message"] == "overloaded"
        base["messages"][1]["content"] = "hang"
        began = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{model.url}/chat/completions", json=base, timeout=0.5)
        assert time.monotonic() - began < 2


def test_usage_defaults_to_a_size_estimate_and_is_capped_by_max_tokens() -> None:
    script = {"scenarios": [{"turns": [
        {"text": "x" * 400},
        {"text": "y" * 4000, "usage": {"prompt_tokens": 10, "completion_tokens": 5000}},
    ]}]}  # fmt: skip
    with ScriptedModel(script) as model:
        estimated = post(model, conversation()).json()
        capped = post(model, conversation(1, max_tokens=50)).json()
        reported = model.usage_reported
    assert estimated["usage"]["completion_tokens"] == 101
    assert estimated["usage"]["prompt_tokens"] > 10
    assert capped["usage"] == {"prompt_tokens": 10, "completion_tokens": 50, "total_tokens": 60}
    assert capped["choices"][0]["finish_reason"] == "length"
    assert len(capped["choices"][0]["message"]["content"]) == 200
    assert [u["total_tokens"] for u in reported] == [
        estimated["usage"]["total_tokens"],
        60,
    ]


def test_bad_scripts_are_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="one answer"):
        load_script({"scenarios": [{"turns": [{"text": "a", "body": "b"}]}]})
    with pytest.raises(ScriptError, match="does not exist"):
        load_script(tmp_path / "missing.yaml")
    with pytest.raises(ScriptError, match="not a valid regex"):
        load_script({"scenarios": [{"match": "(", "turns": [{"text": "a"}]}]})


def test_litellm_reaches_it_as_an_openai_compatible_endpoint() -> None:
    from workers.llm import load_litellm

    litellm = load_litellm()
    script = {"scenarios": [{"turns": [{"action": DONE_TRUE}]}]}
    with ScriptedModel(script) as model:
        response = litellm.completion(
            model="openai/scripted",
            api_base=model.url,
            api_key="unused",
            messages=conversation()["messages"],
            tools=TOOLS,
            num_retries=0,
            max_retries=0,
            timeout=10,
        )
    call = response.choices[0].message.tool_calls[0]
    assert call.function.name == "done"
    assert json.loads(call.function.arguments)["verdict"] == "true"
    assert response.usage.total_tokens > 0


def test_runs_as_a_process_and_records_requests(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("scenarios:\n  - turns:\n      - text: from a process\n")
    record = tmp_path / "requests.jsonl"
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "assay.testing.scripted_model", "--script", str(script),
         "--port", str(port), "--record", str(record)],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        banner = process.stderr.readline()
        assert "SCRIPTED MODEL" in banner and "not a real LLM" in banner
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions", json=conversation(), timeout=10
        ).json()
        assert reply["choices"][0]["message"]["content"] == "from a process"
    finally:
        process.terminate()
        process.wait(timeout=10)
    recorded = [json.loads(line) for line in record.read_text().splitlines()]
    assert recorded[0]["user"] == "run-1"
    assert process.returncode == 0
