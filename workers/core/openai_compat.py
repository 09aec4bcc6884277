"""The direct path to OpenAI-compatible endpoints: one HTTP POST, no litellm per call.

Why: a fleet worker spends most of its CPU in litellm's per-call machinery
(request set-up, model-info lookups, response objects, a logging object, cost
calculated twice, a background success handler) and in the OpenAI SDK, about
three quarters of the CPU of an evaluation (issue 15; ``bench/bench_fleet.py``
prints the breakdown). For the endpoints fleets run at volume (vLLM, Ollama,
gateways) litellm adds nothing to the request: it sends the messages, tools
and limits as given. So for those, and only those, the call is one POST.

When it applies (``fast_path_model``): ``api_base`` is set, litellm routes the
model through its OpenAI-compatible client (``openai/...``, a bare name with
``api_base``, or ``hosted_vllm/...``), and litellm does not rewrite the request
for that model (OpenAI's o-series and GPT-5 get ``max_completion_tokens``
instead of ``max_tokens``, so they keep going through litellm).
``ASSAY_LLM_FAST_PATH=false`` turns it off.

What stays the same (tests/test_llm_fast_path.py compares both paths):
- the body: the same JSON object litellm sends (model without its provider
  prefix, messages, max_tokens, user, tools, response_format);
- one retry policy and one error mapping: the caller (workers/core/llm.py) wraps
  this in the same tenacity loop; errors raised here carry ``status_code`` and
  the response headers (Retry-After) that ``is_transient`` and
  ``retry_after_seconds`` read, timeouts and dropped connections are
  :class:`EndpointUnreachable` (transient), a 200 whose body is not a chat
  completion is a 500 (transient), as litellm reports it;
- the per-attempt timeout is the time left before the run's deadline;
- pricing, token counting and every other provider stay with litellm.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from workers.core.keepalive_http import Answer, KeepAliveClient, TransportFailure, unsupported_proxy
from workers.core.litellm_import import load_litellm
from workers.core.tool_schemas import Tools, encode_body

FAST_PATH_PROVIDERS = frozenset({"openai", "hosted_vllm"})


class EndpointError(Exception):
    """The endpoint answered with an HTTP error, or with a body that is not a completion."""

    def __init__(self, status_code: int, message: str, response: Answer | None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.response = response  # retry_after_seconds reads its headers


class EndpointUnreachable(Exception):
    """No answer: the connection failed or dropped, or the attempt's timeout passed."""


@dataclass(frozen=True)
class WireCompletion:
    """The parts of a chat completion the engine reads (see workers/core/llm.py ``_reply_from``)."""

    choices: list[Any]
    usage: Any


@lru_cache(maxsize=256)
def fast_path_model(model: str, api_base: str) -> str | None:
    """The model name to send when ``model`` at ``api_base`` can take the direct path, or None."""
    litellm = load_litellm()
    try:
        wire_model, provider, _, _ = litellm.get_llm_provider(model=model, api_base=api_base)
    except Exception:  # litellm cannot route it: let completion() report that
        return None
    if provider not in FAST_PATH_PROVIDERS or _litellm_maps_parameters(str(wire_model)):
        return None
    if unsupported_proxy(api_base) is not None:  # an https:// or SOCKS proxy: litellm's httpx
        return None
    return str(wire_model)


def _litellm_maps_parameters(wire_model: str) -> bool:
    """Whether litellm rewrites the request for this model (OpenAI's o-series and GPT-5 take
    ``max_completion_tokens``, not ``max_tokens``). If litellm's checks cannot be found, every
    model litellm has data on counts as rewritten: the direct path then only serves models
    litellm knows nothing about, which it forwards as given."""
    try:
        from litellm.llms.openai.chat.gpt_5_transformation import OpenAIGPT5Config
        from litellm.llms.openai.chat.o_series_transformation import OpenAIOSeriesConfig
    except ImportError:
        try:
            return bool(load_litellm().get_model_info(wire_model))
        except Exception:
            return False
    return bool(
        OpenAIOSeriesConfig().is_model_o_series_model(wire_model)
        or OpenAIGPT5Config.is_model_gpt_5_model(wire_model)
    )


def request_body(
    wire_model: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    user: str,
    tools: Tools | None,
    response_format: dict[str, Any] | None,
) -> dict[str, Any]:
    """The JSON body litellm sends for these arguments to an OpenAI-compatible endpoint."""
    body: dict[str, Any] = {"model": wire_model, "messages": messages, "max_tokens": max_tokens}
    if tools:
        body["tools"] = tools
    if response_format:
        body["response_format"] = response_format
    body["user"] = user
    return body


class DirectClient:
    """Posts chat completions over kept-alive connections (workers/core/keepalive_http.py)."""

    def __init__(self) -> None:
        self._http: KeepAliveClient | None = None

    def _client(self) -> KeepAliveClient:
        if self._http is None:  # a race makes two; both work, one is kept
            self._http = KeepAliveClient(_ssl_context())
        return self._http

    def complete(
        self, api_base: str, api_key: str, body: dict[str, Any], timeout: float
    ) -> WireCompletion:
        """One attempt: the completion, or EndpointError / EndpointUnreachable."""
        url = api_base.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        try:
            response = self._client().post_json(url, encode_body(body), headers, timeout)
        except TransportFailure as exc:
            raise EndpointUnreachable(str(exc)) from exc
        if response.status_code >= 400:
            raise EndpointError(
                response.status_code,
                f"the endpoint answered {response.status_code}: {_error_text(response)}",
                response,
            )
        try:
            payload = response.json()
        except ValueError as exc:
            raise EndpointError(
                500, f"the endpoint's answer is not JSON: {response.text[:200]!r}", response
            ) from exc
        return parse_completion(payload, response)


def _ssl_context() -> ssl.SSLContext:
    """TLS as litellm would verify it (SSL_VERIFY, SSL_CERT_FILE, certifi)."""
    load_litellm()
    from litellm.llms.custom_httpx.http_handler import get_ssl_configuration

    configured = get_ssl_configuration()
    if isinstance(configured, ssl.SSLContext):
        return configured
    if configured is False:
        unverified = ssl.create_default_context()
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
        return unverified
    if isinstance(configured, str):
        return ssl.create_default_context(cafile=configured)
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def parse_completion(payload: Any, response: Answer | None = None) -> WireCompletion:
    """A completion from its JSON; a body of another shape is a 500, like litellm reports it."""
    if not isinstance(payload, dict) or not isinstance(payload.get("choices", []), list):
        raise EndpointError(
            500, f"the endpoint's answer is not a chat completion: {str(payload)[:200]!r}",
            response,
        )  # fmt: skip
    choices = [_choice(item) for item in payload.get("choices") or [] if isinstance(item, dict)]
    return WireCompletion(choices=choices, usage=_Usage.of(payload.get("usage")))


def _error_text(response: Answer) -> str:
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return str(message)[:300]
    except (ValueError, AttributeError):
        return response.text[:300]


# Small attribute views of the JSON, shaped like the SDK objects _reply_from reads.


@dataclass(frozen=True)
class _Function:
    name: str
    arguments: str


@dataclass(frozen=True)
class _ToolCall:
    id: str
    function: _Function


@dataclass(frozen=True)
class _Message:
    content: str | None
    tool_calls: list[_ToolCall]


@dataclass(frozen=True)
class _Choice:
    message: _Message
    finish_reason: str | None


@dataclass(frozen=True)
class _Usage:
    prompt_tokens: Any
    completion_tokens: Any

    @classmethod
    def of(cls, usage: Any) -> _Usage | None:
        if not isinstance(usage, dict):
            return None
        return cls(_number(usage.get("prompt_tokens")), _number(usage.get("completion_tokens")))


def _number(value: Any) -> Any:
    """A usage figure; a numeric string becomes its number (litellm's model does the same)."""
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            return None
    return value


def _choice(item: dict[str, Any]) -> _Choice:
    message: dict[str, Any] = item["message"] if isinstance(item.get("message"), dict) else {}
    calls = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function: dict[str, Any] = (
            call["function"] if isinstance(call.get("function"), dict) else {}
        )
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = "" if arguments is None else json.dumps(arguments)
        calls.append(
            _ToolCall(
                str(call.get("id") or ""), _Function(str(function.get("name") or ""), arguments)
            )
        )
    content = message.get("content")
    return _Choice(
        _Message(content if isinstance(content, str) else None, calls),
        item.get("finish_reason") if isinstance(item.get("finish_reason"), str) else None,
    )
