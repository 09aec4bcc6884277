"""The direct path to OpenAI-compatible endpoints: one HTTP POST through urllib3, no litellm.

Why: litellm's per-call machinery and the OpenAI SDK were about three quarters of a
fleet worker's CPU per evaluation, and importing them costs a command line seconds
(issue 15, issue 32). For the endpoints fleets run at volume (vLLM, Ollama, gateways)
litellm adds nothing to the request: it sends the messages, tools and limits as given.
So for those, and only those, the call is one POST, and nothing of litellm, the OpenAI
SDK or tiktoken is imported for it.

When it applies (``fast_path_model``): ``api_base`` is set, litellm would route the
model through its OpenAI-compatible client (``openai/...``, ``hosted_vllm/...``, a bare
name with ``api_base``), and litellm does not rewrite the request for that model
(OpenAI's o-series and GPT-5 get ``max_completion_tokens`` instead of ``max_tokens``, so
they keep going through litellm). A ``provider/NAME`` with one of those two prefixes is
told without importing litellm; anything else asks litellm. ``ASSAY_LLM_FAST_PATH=false``
turns the path off.

The HTTP client is urllib3 (what requests is built on): one connection pool per
process (:func:`shared_client`), kept-alive connections, redirects followed (an
``Authorization`` header is not sent to another host), compressed answers decoded.
Why urllib3 and not httpx (which the OpenAI SDK and litellm use): with 64 threads
posting at once through one shared client, httpx cost several times urllib3's CPU per
call on the development machine (0.9-2.8 ms against 0.3-0.4 ms; httpx's pool looks at every
connection it holds for each request), twice as much from one thread, and it takes
three times as long to import (``bench/bench_http.py`` prints the figures).

What stays the same as litellm's path (tests/engine/test_llm_fast_path.py runs both):
- the body: the same JSON object litellm sends (model without its provider prefix,
  messages, max_tokens, user, tools, response_format);
- one retry policy and one error mapping: the caller (workers/engine/llm.py) wraps this
  in the same tenacity loop; errors raised here carry ``status_code`` and the response
  headers (Retry-After) that ``is_transient`` and ``retry_after_seconds`` read;
  timeouts and dropped connections are :class:`EndpointUnreachable` (transient), a 200
  whose body is not a chat completion is a 500 (transient), as litellm reports it;
- proxies from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``,
  ``NO_PROXY``, read by the standard library's ``urllib.request.getproxies`` and
  ``proxy_bypass``), HTTPS through a proxy by CONNECT; a SOCKS proxy leaves the call
  to litellm;
- TLS verified against the system's certificates (which honour ``SSL_CERT_FILE`` and
  ``SSL_CERT_DIR``) and certifi's bundle. litellm's own ``SSL_VERIFY=false`` is not
  read here: the direct path always verifies (``ASSAY_LLM_FAST_PATH=false`` sends every
  call through litellm, which reads it).

Bounded: each attempt's timeout is the time left before the run's deadline, for the
connection and each read, and for the whole body (a body dripped byte by byte is cut
when that time is up; the status line and headers are read with the per-read timeout,
as httpx reads them); a body over :data:`MAX_BODY_BYTES` (announced or decoded) is a
failure, never held in memory.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from workers.engine.litellm_import import load_litellm
from workers.engine.tool_schemas import Tools, encode_body

if TYPE_CHECKING:
    import urllib3

FAST_PATH_PROVIDERS = frozenset({"openai", "hosted_vllm"})
# A chat completion is kilobytes; an endpoint that sends more than this is refused rather
# than allowed to fill the worker's memory (the whole answer is kept).
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_REDIRECTS = 5
_READ_SIZE = 64 * 1024


class EndpointError(Exception):
    """The endpoint answered with an HTTP error, or with a body that is not a completion."""

    def __init__(self, status_code: int, message: str, response: Answer | None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.response = response  # retry_after_seconds reads its headers


class EndpointUnreachable(Exception):
    """No answer: the connection failed or dropped, or the attempt's timeout passed."""


@dataclass(frozen=True)
class Answer:
    """An HTTP answer, read whole; ``headers`` look up case-insensitively (Retry-After)."""

    status_code: int
    headers: Any
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass(frozen=True)
class WireCompletion:
    """The parts of a chat completion the engine reads (workers/engine/llm.py ``_reply_from``)."""

    choices: list[Any]
    usage: Any


@lru_cache(maxsize=256)
def fast_path_model(model: str, api_base: str) -> str | None:
    """The model name to send when ``model`` at ``api_base`` can take the direct path, or None."""
    wire_model = _known_compatible(model)
    if wire_model is None:
        wire_model = _compatible_by_litellm(model, api_base)
    if wire_model is None or not _proxy_spoken(api_base):
        return None
    return wire_model


def _known_compatible(model: str) -> str | None:
    """``NAME`` of ``openai/NAME`` or ``hosted_vllm/NAME`` when litellm would send NAME as
    given, told without importing litellm; None means "ask litellm".

    litellm takes such a name by its prefix, whatever the endpoint. It rewrites the request
    only for OpenAI's reasoning models (a name ending in ``o`` + digit..., or holding
    ``gpt-5``/``gpt-6``); any name that might be one is left to litellm's own test.
    tests/engine/test_llm_fast_path.py checks this against litellm.
    """
    provider, slash, name = model.partition("/")
    if not slash or provider not in FAST_PATH_PROVIDERS or not name.strip():
        return None
    last = name.split("/")[-1].lower()
    if (len(last) > 1 and last[0] == "o" and last[1].isdigit()) or any(
        marker in name.lower() for marker in ("gpt-5", "gpt-6")
    ):
        return None
    return name


def _compatible_by_litellm(model: str, api_base: str) -> str | None:
    litellm = load_litellm()
    try:
        wire_model, provider, _, _ = litellm.get_llm_provider(model=model, api_base=api_base)
    except Exception:  # litellm cannot route it: let completion() report that
        return None
    if provider not in FAST_PATH_PROVIDERS or _litellm_maps_parameters(str(wire_model)):
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


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``NO_PROXY`` applied), or None."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme.lower()) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def _proxy_spoken(url: str) -> bool:
    """False for a proxy urllib3 cannot use without extra packages (SOCKS): litellm's path."""
    proxy = proxy_for(url)
    return proxy is None or urlsplit(proxy).scheme.lower() in ("http", "https")


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
    """Posts chat completions through urllib3 pools: one for direct connections, one per proxy.

    Thread-safe; a worker's threads share one (:func:`shared_client`). ``pool_size`` is how
    many idle connections per endpoint it keeps: at least the threads that post at once,
    or connections are closed after use and opened again. The proxy for an endpoint is read
    from the environment once per client, as httpx reads it once per client.
    """

    def __init__(self, pool_size: int = 64) -> None:
        self._pool_size = pool_size
        self._managers: dict[str | None, urllib3.PoolManager] = {}
        self._proxies: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def complete(
        self, api_base: str, api_key: str, body: dict[str, Any], timeout: float
    ) -> WireCompletion:
        """One attempt: the completion, or EndpointError / EndpointUnreachable."""
        import urllib3

        url = api_base.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        ends = time.monotonic() + timeout
        try:
            response = self._manager(self._proxy(url)).request(
                "POST",
                url,
                body=encode_body(body),
                headers=headers,
                timeout=urllib3.Timeout(connect=timeout, read=timeout),
                retries=_redirects_only(),
                preload_content=False,
            )
            try:
                answer = Answer(response.status, response.headers, _read_body(response, ends))
            finally:
                response.release_conn()
        except urllib3.exceptions.HTTPError as exc:
            raise EndpointUnreachable(f"{type(exc).__name__}: {exc}") from exc
        if answer.status_code >= 400:
            raise EndpointError(
                answer.status_code,
                f"the endpoint answered {answer.status_code}: {_error_text(answer)}",
                answer,
            )
        try:
            payload = answer.json()
        except ValueError as exc:
            raise EndpointError(
                500, f"the endpoint's answer is not JSON: {answer.text[:200]!r}", answer
            ) from exc
        return parse_completion(payload, answer)

    def _proxy(self, url: str) -> str | None:
        try:
            return self._proxies[url]
        except KeyError:
            proxy = self._proxies[url] = proxy_for(url)
            return proxy

    def _manager(self, proxy: str | None) -> urllib3.PoolManager:
        manager = self._managers.get(proxy)
        if manager is None:
            with self._lock:
                manager = self._managers.get(proxy)
                if manager is None:
                    manager = self._managers[proxy] = _new_manager(proxy, self._pool_size)
        return manager


@lru_cache(maxsize=1)
def _redirects_only() -> urllib3.Retry:
    """urllib3 follows redirects and retries nothing: tenacity in llm.py is the one retry layer."""
    import urllib3

    return urllib3.Retry(
        total=None, connect=0, read=0, status=0, other=0, redirect=MAX_REDIRECTS,
        raise_on_redirect=False, raise_on_status=False,
    )  # fmt: skip


def _new_manager(proxy: str | None, pool_size: int) -> urllib3.PoolManager:
    import urllib3

    options: dict[str, Any] = {"maxsize": pool_size, "block": False, "ssl_context": _tls()}
    if proxy is None:
        return urllib3.PoolManager(**options)
    parts = urlsplit(proxy)
    proxy_headers = None
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        proxy_headers = urllib3.make_headers(proxy_basic_auth=credentials)
    return urllib3.ProxyManager(proxy, proxy_headers=proxy_headers, **options)


@lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """The system's certificates (OpenSSL reads SSL_CERT_FILE / SSL_CERT_DIR) and certifi's."""
    context = ssl.create_default_context()
    try:
        import certifi
    except ImportError:  # pragma: no cover - certifi comes with urllib3's users here
        return context
    context.load_verify_locations(cafile=certifi.where())
    return context


def _read_body(response: Any, ends: float) -> bytes:
    """The decoded body, or EndpointUnreachable when it is over the bound or past ``ends``."""
    announced = response.headers.get("content-length")
    if announced and announced.isdigit() and int(announced) > MAX_BODY_BYTES:
        raise EndpointUnreachable(f"the answer announces {announced} bytes, over the bound")
    chunks: list[bytes] = []
    size = 0
    while chunk := response.read1(_READ_SIZE, decode_content=True):  # what has arrived
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise EndpointUnreachable(f"the answer is over {MAX_BODY_BYTES} bytes")
        if time.monotonic() > ends:
            raise EndpointUnreachable("the answer did not arrive within the attempt's timeout")
        chunks.append(chunk)
    return b"".join(chunks)


_shared: DirectClient | None = None
_shared_lock = threading.Lock()


def shared_client(pool_size: int) -> DirectClient:
    """The process's client, made on first use with ``pool_size`` (a worker's concurrency)."""
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = DirectClient(pool_size)
    return _shared


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
