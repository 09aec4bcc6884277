"""The litellm adapter: transports, prices, what needs litellm, retry policy, deadlines."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.testing.scripted_model import ScriptedModel
from schemas.settings import load_settings
from workers.engine.llm import (
    LiteLLMClient,
    LLMCall,
    LLMError,
    is_transient,
    load_litellm,
    retry_after_seconds,
    unroutable_model,
)

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "Predicate: every pod is ready"}]
DONE_TOOL = {
    "type": "function",
    "function": {
        "name": "done",
        "description": "finish",
        "parameters": {"type": "object", "properties": {"verdict": {"type": "string"}}},
    },
}


def call(model: ScriptedModel, *, seconds: float = 10.0, **extra: Any) -> LLMCall:
    return LLMCall(
        model="openai/scripted",
        messages=MESSAGES,
        max_tokens=200,
        deadline=time.monotonic() + seconds,
        user="run-llm",
        api_base=model.url,
        **extra,
    )


def test_a_direct_path_run_imports_no_litellm_openai_or_tokenizer(tmp_path: Path) -> None:
    """The direct path, its price and transport questions and the token estimate need none of
    them: a fresh process that evaluates a check against the scripted model loads none."""
    code = """
import sys
from assay.testing.scripted_model import ScriptedModel
from schemas.settings import load_settings
from tests.engine_support import done, get_deployments, make_snapshot, request_for, script
from workers.engine.engine import EngineDeps, evaluate
snapshot = make_snapshot(__import__("pathlib").Path(sys.argv[1]))
with ScriptedModel(script(get_deployments(), done("true", 0))) as model:
    settings = load_settings(model="openai/scripted", api_base=model.url, snapshot_roots=["/"])
    report = evaluate(request_for(snapshot), EngineDeps(settings=settings))
loaded = sorted(m for m in ("litellm", "openai", "tiktoken") if m in sys.modules)
print(report.verdict.verdict, loaded)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "snap")],
        capture_output=True, text=True, env=env, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "true []", done.stdout


def test_transport_is_tool_calling_unless_asked_or_known_unsupported() -> None:
    auto = LiteLLMClient(load_settings())
    assert auto.transport_for("openai/scripted") == "tools"  # unknown endpoint: tools
    assert auto.transport_for("gpt-4o-mini") == "tools"
    assert auto.transport_for("deepseek/deepseek-reasoner") == "json"  # litellm: no tools
    forced = LiteLLMClient(load_settings(transport="json"))
    assert forced.transport_for("gpt-4o-mini") == "json"


def test_prices_come_from_litellm_and_are_none_when_unknown() -> None:
    client = LiteLLMClient(load_settings())
    assert client.price("openai/scripted") is None
    price = client.price("gpt-4o-mini")
    assert price is not None and price.input_per_token > 0 and price.output_per_token > 0


@pytest.mark.parametrize(
    "model",
    [
        "openai/scripted",
        "hosted_vllm/meta-llama/Llama-3.1-8B",
        "openai/qwen2.5-32b-instruct",
        "gpt-4o-mini",
        "openai/GPT-4o-mini",  # litellm looks names up in any case
        "ollama/llama3",
        "openai/claude-sonnet-9-9",  # no entry, but a rule of litellm's gives it capabilities
        "openai/gemini-3-pro",
        "deepseek/deepseek-reasoner",
    ],
)
def test_a_model_said_to_be_unknown_without_litellm_is_unknown_to_litellm(model: str) -> None:
    """``catalogue_may_know`` spares litellm's import only for names its catalogue has
    nothing on: for those, litellm itself must find no model info (no price, no transport)."""
    from workers.engine.model_names import catalogue_may_know

    litellm = load_litellm()
    try:
        known = bool(litellm.get_model_info(model))
    except Exception:  # ModelNotMappedError
        known = False
    assert catalogue_may_know(model) or not known, model
    if model in ("openai/scripted", "hosted_vllm/meta-llama/Llama-3.1-8B"):
        assert not catalogue_may_know(model)  # the names the direct path serves most


def test_retry_after_is_read_in_seconds_milliseconds_and_dates() -> None:
    class Failure(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            self.litellm_response_headers = headers

    assert retry_after_seconds(Failure({"retry-after": "7"})) == 7.0
    assert retry_after_seconds(Failure({"retry-after-ms": "250"})) == 0.25
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (retry_after_seconds(Failure({"retry-after": later})) or 0) <= 31
    assert retry_after_seconds(Failure({})) is None


def test_rate_limits_5xx_and_timeouts_are_transient_auth_and_bad_requests_are_not() -> None:
    litellm = load_litellm()
    args = {"message": "x", "llm_provider": "openai", "model": "m"}
    assert is_transient(litellm.RateLimitError(**args))
    assert is_transient(litellm.InternalServerError(**args))
    assert is_transient(litellm.ServiceUnavailableError(**args))
    assert is_transient(litellm.Timeout(**args))
    assert not is_transient(litellm.AuthenticationError(**args))
    assert not is_transient(litellm.BadRequestError(**args))
    assert not is_transient(litellm.ContextWindowExceededError(**args))
    assert not is_transient(litellm.NotFoundError(**args))


def test_a_tool_calling_completion_works_with_the_shipped_litellm() -> None:
    """Guards the known trap: litellm importing `mcp` inside completion() when tools are sent."""
    script = {"scenarios": [{"turns": [{"action": {"action": "ERROR", "message": "stop"}}]}]}
    with ScriptedModel(script) as model:
        reply = LiteLLMClient(load_settings()).complete(call(model, tools=[DONE_TOOL]))
        sent = model.requests[0]
    assert [c.name for c in reply.tool_calls] == ["error"]
    assert sent["user"] == "run-llm"  # forwarded even though litellm drops it for unknown models
    assert sent["max_tokens"] == 200
    assert reply.prompt_tokens and reply.completion_tokens


def test_retries_stop_at_the_retry_limit_for_transient_errors() -> None:
    script = {"scenarios": [{"turns": [{"error": {"status": 503}}]}]}
    slept: list[float] = []
    with ScriptedModel(script) as model:
        client = LiteLLMClient(load_settings(llm_max_retries=2), sleep=slept.append)
        with pytest.raises(LLMError) as failure:
            client.complete(call(model))
        assert len(model.requests) == 3
    assert failure.value.kind == "transient"
    assert "503" in failure.value.message
    assert len(slept) == 2 and slept[1] >= slept[0] * 0.5  # backoff with jitter


def test_a_retry_after_past_the_deadline_is_not_waited_for() -> None:
    script = {"scenarios": [{"turns": [{"error": {"status": 429, "retry_after": 30}}]}]}
    slept: list[float] = []
    with ScriptedModel(script) as model:
        client = LiteLLMClient(load_settings(), sleep=slept.append)
        with pytest.raises(LLMError) as failure:
            client.complete(call(model, seconds=5))
        assert len(model.requests) == 1
    assert failure.value.kind == "deadline"
    assert slept == []


def test_no_call_is_made_after_the_deadline() -> None:
    script = {"scenarios": [{"turns": [{"text": "late"}]}]}
    with ScriptedModel(script) as model:
        with pytest.raises(LLMError) as failure:
            LiteLLMClient(load_settings()).complete(call(model, seconds=-1))
        assert model.requests == []
    assert failure.value.kind == "deadline"


def test_a_reply_is_not_kept_once_the_run_is_done_with_it() -> None:
    """A worker makes millions of model calls: each reply's tool calls (a whole DONE with its
    explanation and evidence) must be freed with the reply, not cached for the process."""
    import gc
    import weakref

    from workers.engine.llm import _reply_from
    from workers.engine.openai_compat import parse_completion

    arguments = '{"verdict": "true", "explanation": "' + "x" * 5000 + '"}'
    completion = {"choices": [{"message": {"tool_calls": [
        {"id": "call_once", "function": {"name": "done", "arguments": arguments}}]}}]}  # fmt: skip
    reply = _reply_from(parse_completion(completion), 0.1, 1)
    kept = weakref.ref(reply.tool_calls[0])
    del reply
    gc.collect()
    assert kept() is None


ENDPOINT = "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    ("model", "api_base"),
    [
        ("gpt-4o-mini", None),  # litellm knows the bare name
        ("openai/gpt-4o-mini", None),
        ("openai/scripted", ENDPOINT),  # what the tests and `--scripted` use
        ("openai/scripted", None),
        ("gpt-4o-mini", ENDPOINT),
        ("openai/", ENDPOINT),  # some local servers ignore the name: not for assay to refuse
        ("hosted_vllm/meta-llama/Llama-3.1-8B", ENDPOINT),
        ("ollama/llama3", None),
        ("anthropic/claude-x", None),
        ("azure/my-deployment", None),
    ],
)
def test_a_model_litellm_can_route_is_not_refused(model: str, api_base: str | None) -> None:
    assert unroutable_model(model, api_base) is None


@pytest.mark.parametrize(
    ("model", "at_endpoint"),
    [("nonsense-model", False), ("nonsense-model", True), ("nonsense/foo", True), ("", False)],
)
def test_what_is_refused_up_front_is_what_every_call_would_fail_on(
    model: str, at_endpoint: bool
) -> None:
    """The CLI refuses a model only when litellm's own call would fail before sending
    anything: the same name at a live endpoint gets a permanent error and no request."""
    with ScriptedModel(script_ending_at_once()) as server:
        endpoint = server.url if at_endpoint else None
        problem = unroutable_model(model, endpoint)
        assert problem is not None and f"the model {model!r}" in problem
        assert ("openai/" + model if endpoint else "provider/model") in problem
        with pytest.raises(LLMError) as failed:
            LiteLLMClient(load_settings()).complete(
                LLMCall(model=model, messages=MESSAGES, max_tokens=50,
                        deadline=time.monotonic() + 10, user="r", api_base=endpoint)
            )  # fmt: skip
        assert failed.value.kind == "permanent"
        assert server.requests == []


def script_ending_at_once() -> dict[str, Any]:
    return {"scenarios": [{"turns": [{"action": {"action": "ERROR", "message": "stop"}}]}]}


def test_a_worker_run_with_a_model_litellm_cannot_route_ends_cannot_determine(
    tmp_path: Path,
) -> None:
    """Only the CLI refuses such a model up front; a fleet run (the model came with the
    request or from the worker's settings) still ends 3 with litellm's reason, never true."""
    from tests.engine_support import make_snapshot, request_for
    from workers.engine.engine import EngineDeps, evaluate

    request = request_for(make_snapshot(tmp_path / "prod-eu"), model="nonsense-model")
    report = evaluate(request, EngineDeps(settings=load_settings()))
    assert report.verdict is not None
    assert report.verdict.verdict == "cannot_determine" and report.verdict.exit_code == 3
    assert "LLM Provider NOT provided" in (report.verdict.reason or "")
    assert "nonsense-model" in (report.verdict.reason or "")


def test_every_name_told_without_litellm_is_one_litellm_routes() -> None:
    """``workers.engine.model_names`` says yes without importing litellm; each of its yeses
    must be litellm's too, at any endpoint, or a front door would pass what a run fails."""
    from workers.engine.model_names import ROUTED_PREFIXES, _bare_names

    litellm = load_litellm()
    bare = _bare_names()
    assert {"gpt-4o-mini", "gpt-4o"} <= set(bare)
    names = [f"{prefix}/{rest}" for prefix in ROUTED_PREFIXES for rest in ("x", "org/model-1")]
    for name in [*names, *bare]:
        for endpoint in (None, ENDPOINT, "https://api.groq.com/openai/v1"):
            litellm.get_llm_provider(model=name, api_base=endpoint)  # raises if not routed
            assert unroutable_model(name, endpoint) is None


# --- a typo's refusal, told without litellm ----------------------------------------------------


def test_the_bare_names_litellm_lists_outside_its_price_list_are_the_ones_kept() -> None:
    """``UNPRICED_BARE_NAMES`` is exactly what the installed litellm lists beyond its price
    list; a litellm that adds one fails here rather than have it refused."""
    from workers.engine.model_names import UNPRICED_BARE_NAMES, _all_priced_names

    litellm = load_litellm()
    unpriced = {
        name
        for name in litellm.model_list_set
        if "/" not in name and ":" not in name and name not in _all_priced_names()
    }
    assert unpriced == UNPRICED_BARE_NAMES


def test_no_name_litellm_knows_is_refused_without_asking_it() -> None:
    from workers.engine.model_names import refused_for_certain

    litellm = load_litellm()
    known = [*litellm.model_list_set, "claude-instant-1", "gpt-image-1", "amazon_nova_x"]
    assert [name for name in known if refused_for_certain(name, None)] == []


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._ ", min_size=1, max_size=24))
def test_every_name_refused_without_litellm_is_refused_by_litellm(name: str) -> None:
    from workers.engine.model_names import refused_for_certain

    if not refused_for_certain(name, None):
        return
    with pytest.raises(Exception):  # noqa: B017 - any refusal is one (unroutable_model's rule)
        load_litellm().get_llm_provider(model=name)


PRIVATE_ENDPOINTS = (
    "http://127.0.0.1:8000/v1",
    "http://[::1]:8000/v1",
    "http://localhost:11434/v1",
    "http://vllm:8000/v1",
    "http://vllm.models.svc:8000/v1",
    "http://llm.corp.internal/v1",
)


def test_no_endpoint_litellm_routes_by_is_private() -> None:
    """litellm routes a bare name by its endpoint only at the public hosts it knows
    (``openai_compatible_endpoints``); the private-endpoint rule holds while none of them is
    private, which a litellm that adds one would break here rather than in a refusal."""
    from workers.engine.model_names import private_endpoint

    known = list(load_litellm().openai_compatible_endpoints)
    assert known and [endpoint for endpoint in known if private_endpoint(endpoint)] == []
    assert all(private_endpoint(endpoint) for endpoint in PRIVATE_ENDPOINTS)
    assert not private_endpoint("https://api.groq.com/openai/v1")


@settings(max_examples=100, deadline=None)
@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._ ", min_size=1, max_size=24),
    st.sampled_from(PRIVATE_ENDPOINTS),
)
def test_every_name_refused_at_a_private_endpoint_is_refused_there_by_litellm(
    name: str, endpoint: str
) -> None:
    from workers.engine.model_names import refused_for_certain

    if not refused_for_certain(name, endpoint):
        return
    with pytest.raises(Exception):  # noqa: B017 - any refusal is one (unroutable_model's rule)
        load_litellm().get_llm_provider(model=name, api_base=endpoint)


def test_a_typo_is_refused_without_importing_litellm() -> None:
    """Before: `assay check --model nonsense-model` imported litellm to refuse it (13.8 s on
    a busy host; the API 5.2 s). The same sentence now comes from the names alone."""
    code = (
        "import sys; from workers.engine.llm import unroutable_model; "
        "print(unroutable_model('nonsense-model', None)); print('litellm' in sys.modules)"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("USE_LITELLM_PROXY", None)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.splitlines()
    assert out[0].startswith("litellm cannot tell which provider serves the model")
    assert out[1] == "False"


# --- a missing provider key, told before the run --------------------------------------------------


def test_each_provider_key_is_the_one_litellm_asks_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.engine.provider_keys import KEY_VARIABLES

    litellm = load_litellm()
    for variables in KEY_VARIABLES.values():
        for name in variables:
            monkeypatch.delenv(name, raising=False)
    for provider, variables in KEY_VARIABLES.items():
        asked = litellm.validate_environment(model=f"{provider}/some-model")
        assert set(asked["missing_keys"]) == set(variables), provider
        monkeypatch.setenv(variables[0], "set")
        assert litellm.validate_environment(model=f"{provider}/some-model")[
            "keys_in_environment"
        ], provider
        monkeypatch.delenv(variables[0])
