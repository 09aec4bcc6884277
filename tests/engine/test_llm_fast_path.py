"""The direct path to OpenAI-compatible endpoints behaves like the litellm path it replaces.

Every behaviour test runs on both paths (``llm_fast_path`` on and off) against the
scripted model over HTTP: the same body, retries, Retry-After, deadlines, error kinds.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from assay.testing.scripted_model import ScriptedModel
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.engine_support import get_deployments, make_snapshot, request_for, run, script, scripted
from tests.tcp_support import read_request, tcp_server
from workers.engine.engine import EngineDeps, evaluate
from workers.engine.llm import LiteLLMClient, LLMCall, LLMError, load_litellm
from workers.engine.openai_compat import fast_path_model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get",
            "description": "get objects",
            "parameters": {
                "type": "object",
                "properties": {"kind": {"type": "string", "default": None, "title": "Kind"}},
                "required": [],
            },
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "planner"},
    {"role": "user", "content": "Predicate: every pod is ready"},
]
PATHS = pytest.mark.parametrize("fast", [True, False], ids=["direct", "litellm"])


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    load_litellm().token_counter(model="openai/scripted", text="warm up")


def client(fast: bool, sleep: Any = time.sleep, **settings: Any) -> LiteLLMClient:
    return LiteLLMClient(load_settings(llm_fast_path=fast, **settings), sleep=sleep)


def call(model: ScriptedModel, *, name: str = "openai/scripted", seconds: float = 10.0,
         **extra: Any) -> LLMCall:  # fmt: skip
    return LLMCall(
        model=name,
        messages=MESSAGES,
        max_tokens=300,
        deadline=time.monotonic() + seconds,
        user="run-fast",
        api_base=model.url,
        **extra,
    )


def test_the_direct_path_applies_only_where_litellm_would_send_the_request_as_given() -> None:
    base = "http://127.0.0.1:1/v1"
    assert fast_path_model("openai/scripted", base) == "scripted"
    assert fast_path_model("hosted_vllm/llama-3-8b", base) == "llama-3-8b"
    # litellm rewrites these requests (max_completion_tokens) or speaks another protocol.
    for other in ("openai/o3-mini", "openai/gpt-5-mini", "anthropic/claude-3-5-sonnet-20240620",
                  "ollama/llama3"):  # fmt: skip
        assert fast_path_model(other, base) is None, other


@pytest.mark.parametrize(
    "model",
    ["openai/scripted", "openai/qwen2.5-32b", "openai/gpt-4o-mini", "openai/meta/llama-3-70b",
     "hosted_vllm/llama-3-8b", "hosted_vllm/Qwen/Qwen2.5-7B-Instruct", "openai/o3-mini",
     "openai/o1", "openai/gpt-5-mini", "openai/gpt-5-chat-latest", "openai/org/o4-mini"],
)  # fmt: skip
def test_what_is_told_without_litellm_is_what_litellm_would_decide(model: str) -> None:
    """Names the direct path takes without importing litellm are the names litellm itself
    would send as given; anything that might be rewritten is left to litellm's own test."""
    from workers.engine.openai_compat import _compatible_by_litellm, _known_compatible

    quick = _known_compatible(model)
    if quick is not None:
        assert quick == _compatible_by_litellm(model, "http://127.0.0.1:1/v1"), model


@pytest.mark.parametrize("name", ["openai/scripted", "hosted_vllm/scripted"])
@pytest.mark.parametrize(
    "extra",
    [{"tools": TOOLS}, {"response_format": {"type": "json_object"}}, {}],
    ids=["tools", "json", "plain"],
)
def test_both_paths_send_the_same_body_and_read_the_same_reply(
    name: str, extra: dict[str, Any]
) -> None:
    turn = {"action": {"action": "COMMAND", "tool": "get", "arguments": {"kind": "Pod"}}}
    with ScriptedModel({"scenarios": [{"turns": [turn]}]}) as model:
        direct = client(True).complete(call(model, name=name, **extra))
        via_litellm = client(False).complete(call(model, name=name, **extra))
        first, second = model.requests
    assert first == second
    assert first["model"] == "scripted" and first["user"] == "run-fast"
    for field in ("content", "finish_reason", "prompt_tokens", "completion_tokens"):
        assert getattr(direct, field) == getattr(via_litellm, field), field
    calls = [[(c.name, c.arguments) for c in r.tool_calls] for r in (direct, via_litellm)]
    assert calls[0] == calls[1]  # the ids are fresh per answer


def test_models_off_the_direct_path_still_go_through_litellm() -> None:
    with ScriptedModel({"scenarios": [{"turns": [{"text": "from litellm"}]}]}) as model:
        reply = client(True).complete(call(model, name="openai/o3-mini"))
        sent = model.requests[0]
    assert reply.content == "from litellm"
    assert "max_completion_tokens" in sent and "max_tokens" not in sent  # litellm's mapping


@PATHS
def test_transient_errors_are_retried_up_to_the_limit_with_backoff(fast: bool) -> None:
    slept: list[float] = []
    with ScriptedModel({"scenarios": [{"turns": [{"error": {"status": 503}}]}]}) as model:
        with pytest.raises(LLMError) as failure:
            client(fast, slept.append, llm_max_retries=2).complete(call(model))
        assert len(model.requests) == 3
    assert failure.value.kind == "transient" and "503" in failure.value.message
    assert len(slept) == 2


@PATHS
def test_retry_after_is_honoured_then_the_answer_is_used(fast: bool) -> None:
    turn = {"attempts": [{"error": {"status": 429, "retry_after": 3}}, {"text": "after"}]}
    slept: list[float] = []
    with ScriptedModel({"scenarios": [{"turns": [turn]}]}) as model:
        reply = client(fast, slept.append).complete(call(model))
    assert reply.content == "after" and reply.attempts == 2
    assert slept and slept[0] >= 3


@PATHS
def test_permanent_errors_are_not_retried(fast: bool) -> None:
    for status in (400, 401, 404):
        error = {"scenarios": [{"turns": [{"error": {"status": status, "body": "no"}}]}]}
        with ScriptedModel(error) as model:
            with pytest.raises(LLMError) as failure:
                client(fast, lambda _: None).complete(call(model))
            assert len(model.requests) == 1, status
        assert failure.value.kind == "permanent"


@PATHS
def test_a_malformed_answer_is_a_transient_failure_never_a_reply(fast: bool) -> None:
    bad = {"scenarios": [{"turns": [{"body": "not json at all"}]}]}
    with ScriptedModel(bad) as model:
        with pytest.raises(LLMError) as failure:
            client(fast, lambda _: None, llm_max_retries=1).complete(call(model))
        assert len(model.requests) == 2
    assert failure.value.kind == "transient"


@PATHS
def test_a_hung_endpoint_is_cut_at_the_deadline(fast: bool) -> None:
    with ScriptedModel({"scenarios": [{"turns": [{"hang": 60}]}]}) as model:
        began = time.monotonic()
        with pytest.raises(LLMError) as failure:
            client(fast, lambda _: None).complete(call(model, seconds=1.5))
        took = time.monotonic() - began
    assert failure.value.kind == "deadline"
    assert took < 5


@PATHS
def test_no_request_is_sent_after_the_deadline(fast: bool) -> None:
    with ScriptedModel({"scenarios": [{"turns": [{"text": "late"}]}]}) as model:
        with pytest.raises(LLMError) as failure:
            client(fast).complete(call(model, seconds=-1))
        assert model.requests == []
    assert failure.value.kind == "deadline"


class Attempts:
    """An AttemptObserver that records what it is told."""

    def __init__(self) -> None:
        self.retries: list[int] = []
        self.billed: list[bool] = []

    def before_retry(self, attempt: int) -> None:
        self.retries.append(attempt)

    def attempt_failed(self, billed: bool) -> None:
        self.billed.append(billed)


@PATHS
def test_each_failed_attempt_is_told_billed_or_not(fast: bool) -> None:
    """A timeout and a 5xx came after the request left (the provider may bill them), a 429
    was refused before any work: the caller is told before each retry and after each
    failure, on either path."""
    rate_limited = {"error": {"status": 429, "retry_after": 0}}
    turn = {"attempts": [{"hang": 3}, {"error": {"status": 503}}, rate_limited, {"text": "done"}]}
    seen = Attempts()
    with ScriptedModel({"scenarios": [{"turns": [turn]}]}) as model:
        quick = client(fast, lambda _: None, llm_call_timeout_seconds=0.5)
        reply = quick.complete(call(model, observer=seen))
    assert reply.content == "done" and reply.attempts == 4
    assert seen.retries == [2, 3, 4] and seen.billed == [True, True, False]


@PATHS
def test_a_request_never_sent_or_dropped_after_it_left_is_told_apart(fast: bool) -> None:
    """A refused connection is no request; a connection the endpoint drops after reading the
    request may have been billed."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{unused.getsockname()[1]}/v1"
    refused = Attempts()
    with pytest.raises(LLMError):
        client(fast, lambda _: None, llm_max_retries=1).complete(
            LLMCall(model="openai/scripted", messages=MESSAGES, max_tokens=300,
                    deadline=time.monotonic() + 10, user="run-fast", api_base=closed,
                    observer=refused)
        )  # fmt: skip
    assert refused.billed == [False, False]

    def drop(conn: socket.socket, stop: threading.Event, tally: Callable[[], int]) -> None:
        read_request(conn)  # the request arrived whole; no answer comes

    dropped = Attempts()
    with tcp_server(drop) as (port, _), pytest.raises(LLMError):
        client(fast, lambda _: None, llm_max_retries=1).complete(
            LLMCall(model="openai/scripted", messages=MESSAGES, max_tokens=300,
                    deadline=time.monotonic() + 10, user="run-fast",
                    api_base=f"http://127.0.0.1:{port}/v1", observer=dropped)
        )  # fmt: skip
    assert dropped.billed == [True, True]


@PATHS
def test_the_token_budget_holds_and_cost_is_reported_on_either_path(
    fast: bool, tmp_path: Path
) -> None:
    litellm = load_litellm()
    priced = f"openai/priced-{'direct' if fast else 'litellm'}"
    litellm.register_model(
        {
            priced: {
                "input_cost_per_token": 1e-6,
                "output_cost_per_token": 2e-6,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
    )
    snapshot = make_snapshot(tmp_path / "snap")
    greedy = get_deployments(usage={"completion_tokens": 5000})
    with scripted(script(*[greedy] * 10)) as model:
        assert (fast_path_model(priced, model.url) is not None) is True
        request = request_for(snapshot, max_tokens=20000).model_copy(update={"model": priced})
        report = run(model, request, settings={"llm_fast_path": fast})
        reported = model.usage_reported
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "tokens"
    assert len(reported) >= 2
    assert sum(u["total_tokens"] for u in reported) <= 20000
    expected = sum(u["prompt_tokens"] * 1e-6 + u["completion_tokens"] * 2e-6 for u in reported)
    assert verdict.usage.cost_usd == pytest.approx(expected)


def _completion(name: str, arguments: dict[str, Any]) -> bytes:
    call = {"id": f"call_{name}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return json.dumps(
        {
            "id": "chatcmpl-drip",
            "object": "chat.completion",
            "created": 0,
            "model": "drip",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }
    ).encode()


@contextmanager
def dripping_endpoint(seconds: float) -> Iterator[str]:
    """An endpoint that answers a lookup at once, then drips a ``done(true)`` over ``seconds``:
    every read gets a byte or two well within any per-read timeout."""
    lookup = _completion("get", {"kind": "Deployment", "namespace": "prod"})
    verdict = _completion(
        "done",
        {"verdict": "true", "explanation": "checked", "evidence": [{"step": 0, "excerpt": "web"}]},
    )

    def serve(conn: socket.socket, stop: threading.Event, tally: Callable[[], int]) -> None:
        while not stop.is_set() and read_request(conn):
            body = lookup if tally() == 1 else verdict
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            conn.sendall(head)
            if body is lookup:
                conn.sendall(body)
                continue
            pause = seconds / len(body)
            for index in range(len(body)):
                if stop.wait(pause):
                    return
                conn.sendall(body[index : index + 1])

    with tcp_server(serve) as (port, _):
        yield f"http://127.0.0.1:{port}/v1"


@PATHS
def test_an_answer_dripped_past_the_deadline_is_not_a_verdict(fast: bool, tmp_path: Path) -> None:
    """A reply that trickles in, byte by byte, never trips a per-read timeout; the run's
    deadline still holds, and what arrives after it is not acted on."""
    snapshot = make_snapshot(tmp_path / "snap")
    with dripping_endpoint(seconds=4.0) as url:
        settings = load_settings(model="openai/drip", api_base=url, llm_fast_path=fast)
        began = time.monotonic()
        report = evaluate(request_for(snapshot, timeout_seconds=1.5), EngineDeps(settings=settings))
        took = time.monotonic() - began
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "deadline"
    if fast:  # the direct path's own client stops reading at the deadline
        assert took < 3.5
