"""The litellm adapter: every model call of assay goes through :class:`LiteLLMClient`.

Why an adapter: the engine needs four things from a model provider (which
transport to use, a token count, a price, and one completion under a deadline)
and must not care which provider it is. litellm does the provider work; this
module adds the policy:

- one retry layer (tenacity): litellm's and the OpenAI SDK's own retries are
  turned off (``num_retries=0``, ``max_retries=0``) so a 429 is not retried
  three times inside a call we think is one attempt;
- transient errors (rate limits, 5xx, timeouts, dropped connections) are retried
  with exponential backoff and jitter, waiting at least what Retry-After asks,
  and never past the run's deadline; permanent ones (auth, bad request, context
  window, not found) are not retried;
- each attempt's timeout is the time left before the deadline (capped by
  ``llm_call_timeout_seconds``);
- the caller may watch the attempts (:class:`AttemptObserver`): before each retry is
  sent (the spend guard reserves it, or stops the retries), and after each attempt that
  failed, with whether the provider may have billed it (:func:`may_have_been_billed`).

litellm is imported lazily, with ``LITELLM_LOCAL_MODEL_COST_MAP`` set first so
it never downloads its price list, and only when a call or a question needs it: the
direct path to OpenAI-compatible endpoints (workers/engine/openai_compat.py) needs none,
and a model litellm's catalogue holds nothing on (workers/engine/model_names.py) has no
price and calls tools without asking it. Prompt tokens are bounded before a call from
the provider's own counts and the messages' sizes (workers/engine/prompt_tally.py); only a
call near the run's token budget is counted with the model's tokenizer
(workers/engine/tokenizer_count.py), which imports litellm then.
"""

from __future__ import annotations

import email.utils
import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, Protocol

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential, wait_random

from schemas.actions import PlannerResponse
from schemas.settings import AssaySettings
from workers.engine.budget_meter import MIN_CALL_SECONDS, Price
from workers.engine.litellm_import import load_litellm, loaded_litellm
from workers.engine.model_names import catalogue_may_know, refused_for_certain, routes_for_certain
from workers.engine.openai_compat import (
    EndpointError,
    EndpointUnreachable,
    fast_path_model,
    request_body,
    shared_client,
)
from workers.engine.shown_urls import shown_url
from workers.engine.tool_schemas import Tools, tools_list

Transport = Literal["tools", "json"]
ErrorKind = Literal["permanent", "transient", "deadline"]

# Sent as the key when an endpoint is set but no key is configured: local
# OpenAI-compatible servers (vLLM, Ollama, the scripted model) need none, but
# the OpenAI SDK refuses to send a request without one. With an endpoint set,
# the key comes from ASSAY_API_KEY only (provider env vars are not consulted).
PLACEHOLDER_API_KEY = "sk-no-key-configured"
_CHARS_PER_TOKEN_ESTIMATE = 3  # conservative: YAML tables run at ~2.5-3.5 chars/token
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_MAX_BACKOFF_SECONDS = 30.0
# 0.5 s doubling to 30 s, plus up to 0.5 s of jitter; stateless, so built once per process.
_BACKOFF = wait_exponential(multiplier=0.5, max=_MAX_BACKOFF_SECONDS) + wait_random(0, 0.5)

log = structlog.get_logger("assay.llm")


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


class RetryRefused(Exception):
    """Raised by :meth:`AttemptObserver.before_retry` to send no further attempt; the call
    raises it as it is (``message`` says why: a spend ceiling)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AttemptObserver(Protocol):
    """What a caller learns of a call's attempts (the engine's spend guard)."""

    def before_retry(self, attempt: int) -> None:
        """Attempt ``attempt`` (2 or more) is about to be sent; RetryRefused stops it."""
        ...

    def attempt_failed(self, billed: bool) -> None:
        """The attempt just sent failed; ``billed``: the provider may have charged it."""
        ...


@dataclass(frozen=True)
class LLMCall:
    """One planner request; ``deadline`` is a ``time.monotonic()`` instant."""

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int
    deadline: float
    user: str
    tools: Tools | None = None
    response_format: dict[str, Any] | None = None
    api_base: str | None = None
    observer: AttemptObserver | None = None


@dataclass(frozen=True)
class LLMReply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_seconds: float = 0.0
    attempts: int = 1


class LLMError(Exception):
    """A model call that did not produce a reply; ``kind`` says whether time or retries ran out."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class LLMClient(Protocol):
    """What the engine needs from a model provider."""

    def transport_for(self, model: str) -> Transport: ...

    def price(self, model: str) -> Price | None: ...

    def complete(self, call: LLMCall) -> LLMReply: ...


def planner_response_format() -> dict[str, Any]:
    """The ``response_format`` of JSON mode: the PlannerResponse JSON schema."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "planner_response",
            "schema": PlannerResponse.model_json_schema(),
            "strict": False,
        },
    }


def retry_after_seconds(exc: BaseException) -> float | None:
    """The provider's Retry-After, in seconds, if the error carried one."""
    headers = getattr(exc, "litellm_response_headers", None)
    if not headers:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return None if parsed is None else max(0.0, parsed.timestamp() - time.time())


def is_transient(exc: BaseException) -> bool:
    """Rate limits, 5xx, timeouts and dropped connections are worth another attempt."""
    if isinstance(exc, _DeadlineReached):
        return False
    if isinstance(exc, EndpointUnreachable):
        return True
    if not isinstance(exc, EndpointError):  # litellm raised it, so it is loaded
        if "Missing credentials" in str(exc):  # litellm reports a missing key as a 500
            return False
        litellm = loaded_litellm()
        if litellm is not None and isinstance(exc, litellm.Timeout | litellm.APIConnectionError):
            return True
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        return False
    return status in _TRANSIENT_STATUS or status >= 500


def may_have_been_billed(exc: BaseException) -> bool:
    """Whether a failed attempt may have been billed by the provider: it was sent and not
    refused. Not billed: an attempt never sent (the deadline had passed, litellm could not
    be imported or found no key, the connection could not be opened: refused, no such
    host, a connect timeout, a TLS handshake that failed) and a 4xx answer (401, 404, 422,
    a 429 rate limit: refused before any work). Anything else may have been: a timeout or a
    connection dropped after the request left, a 5xx, a 200 that is no completion, an error
    of unknown kind (the guard errs high)."""
    if isinstance(exc, _DeadlineReached | ModuleNotFoundError):
        return False
    if not isinstance(exc, EndpointError) and "Missing credentials" in str(exc):
        return False
    if _connect_failed(exc):
        return False
    litellm = None if isinstance(exc, EndpointError) else loaded_litellm()
    if litellm is not None and isinstance(exc, litellm.Timeout):
        return True  # litellm gives its own timeouts the status 408
    status = getattr(exc, "status_code", None)
    return not (isinstance(status, int) and 400 <= status < 500)


def _connect_failed(exc: BaseException) -> bool:
    """Whether the error, or one it was raised from, is a connection that was never made."""
    import ssl

    kinds: tuple[type[BaseException], ...] = (ConnectionRefusedError, ssl.SSLError)
    try:
        import urllib3.exceptions as urllib3_errors

        kinds += (urllib3_errors.ConnectTimeoutError, urllib3_errors.SSLError)
    except ImportError:  # pragma: no cover - urllib3 is a dependency
        pass
    httpx = sys.modules.get("httpx")  # only litellm's path raises its errors
    if httpx is not None:
        kinds += (httpx.ConnectError, httpx.ConnectTimeout)
    return _raised_from(exc, kinds)


def connection_refused(exc: BaseException) -> bool:
    """Whether the error, or one it was raised from, is a refused connection: nothing
    listens at the endpoint's address (a server not started, a wrong port)."""
    return _raised_from(exc, (ConnectionRefusedError,))


def _raised_from(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc``, or an error it was raised from or wraps, is one of ``kinds``."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, kinds):
            return True
        reason = getattr(item, "reason", None)  # urllib3's MaxRetryError wraps its cause
        todo += [item.__cause__, item.__context__]
        if isinstance(reason, BaseException):
            todo.append(reason)
    return False


def unroutable_model(model: str, api_base: str | None) -> str | None:
    """Why litellm cannot send ``model`` anywhere, as one sentence for the user; None if it can.

    Why ask up front: litellm's first step in every completion is this same
    ``get_llm_provider`` (model and endpoint in, provider out), and it fails before any
    request for a name that says no provider (``nonsense-model``, ``nonsense/x``). Left to
    the run, that ends ``cannot_determine`` (3), which a CI job may retry or tolerate,
    though the command line is simply wrong. Only what this lookup refuses is refused,
    so every model litellm can route today (``gpt-4o-mini``, ``openai/NAME`` with an
    endpoint, ``ollama/llama3``) passes. The CLI asks; a worker does not, and its run
    still ends 3 with litellm's reason.

    Most names are answered without importing litellm (``workers.engine.model_names``: a
    known ``provider/`` prefix, a bare name from litellm's bundled price list, and the
    typo's shape it refuses for certain); only the rest pay the import, which is what
    lets `assay submit` and the API ask too, and a typo be refused in well under a second.
    """
    if routes_for_certain(model):
        return None
    if not refused_for_certain(model, api_base):
        try:
            load_litellm().get_llm_provider(model=model, api_base=api_base)
        except Exception:  # litellm raises BadRequestError ("LLM Provider NOT provided")
            pass
        else:
            return None
    if api_base:
        return (
            f"litellm cannot tell which provider serves the model {model!r} at "
            f"{shown_url(api_base)}: "
            f"for an OpenAI-compatible server name it openai/MODEL (--model openai/{model}), "
            "or give another provider's prefix as provider/model"
        )
    return (
        f"litellm cannot tell which provider serves the model {model!r}: name it as "
        "provider/model (e.g. --model openai/gpt-4o-mini), or for an OpenAI-compatible "
        "server pass --model openai/MODEL with --api-base URL"
    )


def needs_litellm(model: str, api_base: str | None, fast_path: bool) -> bool:
    """Whether runs of ``model`` at ``api_base`` ask litellm anything: their calls (off the
    direct path) or its catalogue (a model it may hold a price or capabilities for).

    A worker imports litellm at start-up when they do, so that no run pays the import
    inside its deadline, and not otherwise (a worker ready in a second instead of four).
    """
    direct = fast_path and api_base is not None and fast_path_model(model, api_base) is not None
    return not direct or catalogue_may_know(model)


class _DeadlineReached(Exception):
    pass


REFUSED_RETRIES = 2
"""Retries of a refused connection (nothing listens at the address): a server restarting
is back within these (about 2 s of backoff), a server never started is said in seconds
rather than after every retry the run's deadline allows (44 s before)."""


class _RetryPolicy:
    """Backoff with jitter, at least Retry-After, and no sleep that would end past the deadline;
    a refused connection only :data:`REFUSED_RETRIES` times."""

    def __init__(self, max_retries: int, deadline: float, clock: Callable[[], float]) -> None:
        self.max_retries = max_retries
        self.deadline = deadline
        self.clock = clock
        self.stopped_by_deadline = False

    def wait(self, state: RetryCallState) -> float:
        backoff = float(_BACKOFF(state))
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after_seconds(exc) if exc is not None else None
        return backoff if asked is None else max(asked, min(backoff, 1.0))

    def stop(self, state: RetryCallState) -> bool:
        if state.attempt_number > self.max_retries:
            return True
        exc = state.outcome.exception() if state.outcome else None
        if exc is not None and state.attempt_number > REFUSED_RETRIES and connection_refused(exc):
            return True
        if self.clock() + state.upcoming_sleep + MIN_CALL_SECONDS >= self.deadline:
            self.stopped_by_deadline = True
            return True
        return False


class LiteLLMClient:
    """The production :class:`LLMClient`."""

    def __init__(
        self,
        settings: AssaySettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._sleep = sleep
        self._clock = clock
        self._sdk_clients = threading.local()
        self._direct = shared_client(settings.worker_concurrency)

    # -- capabilities ------------------------------------------------------------------

    def _model_info(self, model: str) -> dict[str, Any] | None:
        if loaded_litellm() is None and not catalogue_may_know(model):
            return None  # litellm would raise ModelNotMappedError: no need to import it
        litellm = load_litellm()
        # Per process: the lookup is costly and only changes when a model is registered
        # (litellm.register_model grows model_cost, which makes a new cache key).
        return _model_info_cached(model, len(litellm.model_cost))

    def transport_for(self, model: str) -> Transport:
        """Tool calling unless asked for JSON or litellm knows the model lacks it."""
        if self.settings.transport != "auto":
            return self.settings.transport
        info = self._model_info(model)
        if info is not None and info.get("supports_function_calling") is False:
            return "json"
        return "tools"  # unknown OpenAI-compatible endpoints mostly support it

    def price(self, model: str) -> Price | None:
        info = self._model_info(model)
        if info is None:
            return None
        prompt = info.get("input_cost_per_token")
        completion = info.get("output_cost_per_token")
        if prompt is None or completion is None:
            return None
        return Price(input_per_token=float(prompt), output_per_token=float(completion))

    # -- the call ----------------------------------------------------------------------

    def complete(self, call: LLMCall) -> LLMReply:
        started = self._clock()
        policy = _RetryPolicy(self.settings.llm_max_retries, call.deadline, self._clock)
        attempts = 0
        observer = call.observer

        def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            if attempts > 1 and observer is not None:
                observer.before_retry(attempts)
            try:
                return self._attempt(call)
            except Exception as exc:
                if observer is not None:
                    observer.attempt_failed(may_have_been_billed(exc))
                raise

        try:
            response = self._with_retries(attempt, policy)
        except RetryRefused:
            raise
        except _DeadlineReached as exc:
            raise LLMError("deadline", str(exc)) from exc
        except ModuleNotFoundError as exc:
            raise LLMError(
                "permanent",
                f"litellm could not import {exc.name!r}: install it (pip install {exc.name}) "
                "into the environment that runs assay",
            ) from exc
        except Exception as exc:
            raise _as_llm_error(exc, policy, attempts, call.api_base) from exc
        return _reply_from(response, self._clock() - started, attempts)

    def _with_retries(self, attempt: Callable[[], Any], policy: _RetryPolicy) -> Any:
        """``attempt()`` under the retry policy; the first try is a plain call.

        Why: nearly every call succeeds at once, and setting up tenacity's loop
        cost about a tenth of a model call's CPU on the direct path (issue 15).
        A first failure worth retrying is replayed into the same tenacity loop
        as its first outcome, so attempt numbers, Retry-After, backoff, the
        deadline stop and the retry log are what they always were.
        """
        try:
            return attempt()
        except Exception as exc:
            if not is_transient(exc):
                raise
            first: BaseException | None = exc
        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            wait=policy.wait,
            stop=policy.stop,
            sleep=self._sleep,
            before_sleep=_log_retry,
            reraise=True,
        )

        def replayed() -> Any:
            nonlocal first
            if first is not None:
                failed, first = first, None
                raise failed
            return attempt()

        return retrying(replayed)

    def _attempt(self, call: LLMCall) -> Any:
        wire_model = None
        if call.api_base and self.settings.llm_fast_path:
            wire_model = fast_path_model(call.model, call.api_base)
        if wire_model is None:
            load_litellm()  # before the clock is read: importing it is part of this attempt
        remaining = call.deadline - self._clock()
        if remaining < MIN_CALL_SECONDS:
            raise _DeadlineReached("the run's deadline passed before the model answered")
        timeout = min(self.settings.llm_call_timeout_seconds, remaining)
        api_key = self.settings.api_key.get_secret_value() if self.settings.api_key else None
        if call.api_base and wire_model is not None:  # openai_compat.py: same body, one POST
            body = request_body(
                wire_model, call.messages, call.max_tokens, call.user, call.tools,
                call.response_format,
            )  # fmt: skip
            key = api_key or PLACEHOLDER_API_KEY
            return self._direct.complete(call.api_base, key, body, timeout)
        kwargs: dict[str, Any] = {
            "model": call.model,
            "messages": call.messages,
            "max_tokens": call.max_tokens,
            "timeout": timeout,
            "num_retries": 0,
            "max_retries": 0,
            "user": call.user,
        }
        if call.tools:
            kwargs["tools"] = tools_list(call.tools)  # litellm may rewrite it: its own copy
        if call.response_format:
            kwargs["response_format"] = call.response_format
        if call.api_base:
            kwargs["api_base"] = call.api_base
            # litellm forwards `user` only for models in OpenAI's catalogue; a custom
            # endpoint gets it in the body too, so it can tell concurrent runs apart.
            kwargs["extra_body"] = {"user": call.user}
            api_key = api_key or PLACEHOLDER_API_KEY
            if _routes_to_openai_sdk(call.model, call.api_base):
                kwargs["client"] = self._sdk_client(call.api_base, api_key)
        if api_key:
            kwargs["api_key"] = api_key
        return load_litellm().completion(**kwargs)

    def _sdk_client(self, api_base: str, api_key: str) -> Any:
        """This thread's OpenAI SDK client for an endpoint and key, kept between calls.

        litellm caches the SDK clients it builds under a key that includes the
        call's timeout; ours is the time left before the run's deadline, new on
        every call, so litellm would build a fresh client (and a fresh connection:
        a new TCP, or TLS, handshake) for every model call. Handing litellm a
        client keeps the connection alive between calls; the per-call timeout
        still applies, as litellm passes it with each request. No SDK retries:
        tenacity here is the only retry layer.

        One client per thread rather than one shared pool: a thread runs one
        evaluation at a time, so it needs one connection, and httpcore's pool
        scans every connection it holds on each request (quadratic work with
        200 runs in flight in one worker).
        """
        clients: dict[tuple[str, str], Any] | None = getattr(self._sdk_clients, "by_key", None)
        if clients is None:
            clients = self._sdk_clients.by_key = {}
        key = (api_base, api_key)
        client = clients.get(key)
        if client is None:
            client = clients[key] = _new_sdk_client(api_base, api_key)
        return client


@lru_cache(maxsize=256)
def _model_info_cached(model: str, catalogue_size: int) -> dict[str, Any] | None:
    try:
        info = load_litellm().get_model_info(model)
    except Exception:  # litellm raises for models it has no data on
        return None
    return dict(info) if info else None


@lru_cache(maxsize=64)
def _routes_to_openai_sdk(model: str, api_base: str) -> bool:
    """Whether litellm serves ``model`` at ``api_base`` through the OpenAI SDK (``openai``)."""
    try:
        provider = load_litellm().get_llm_provider(model=model, api_base=api_base)[1]
    except Exception:  # litellm cannot route it: let completion() report that
        return False
    return bool(provider == "openai")


def _new_sdk_client(api_base: str, api_key: str) -> Any:
    """An OpenAI SDK client over its own httpx client, TLS set up the way litellm does it."""
    import httpx
    import openai
    from litellm.llms.custom_httpx.http_handler import get_ssl_configuration

    http = httpx.Client(
        verify=get_ssl_configuration(),
        follow_redirects=True,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=2),
    )
    return openai.OpenAI(api_key=api_key, base_url=api_base, max_retries=0, http_client=http)


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.warning(
        "llm_retry",
        attempt=state.attempt_number,
        sleep_seconds=round(state.upcoming_sleep, 3),
        error=type(exc).__name__ if exc else None,
    )


def _as_llm_error(
    exc: Exception, policy: _RetryPolicy, attempts: int, api_base: str | None = None
) -> LLMError:
    if connection_refused(exc):
        where = f"the model endpoint {shown_url(api_base)}" if api_base else "the model provider"
        return LLMError(
            "transient",
            f"nothing answered at {where} (connection refused, {attempts} attempts): start "
            "the model server or fix --api-base / ASSAY_API_BASE",
        )
    status = getattr(exc, "status_code", None)
    detail = str(exc).replace("\n", " ")
    if len(detail) > 300:
        detail = detail[:300] + "..."
    what = f"{type(exc).__name__}" + (f" {status}" if status else "")
    if is_transient(exc):
        if policy.stopped_by_deadline:
            return LLMError(
                "deadline",
                f"the model endpoint kept failing ({what}) until the run's deadline: {detail}",
            )
        return LLMError(
            "transient", f"the model endpoint failed {attempts} times ({what}): {detail}"
        )
    return LLMError("permanent", f"the model endpoint refused the request ({what}): {detail}")


def _reply_from(response: Any, latency: float, attempts: int) -> LLMReply:
    choices = getattr(response, "choices", None) or []
    if not choices:
        return LLMReply(content=None, latency_seconds=latency, attempts=attempts)
    choice = choices[0]
    message = choice.message
    calls = [
        ToolCall(
            id=str(getattr(tc, "id", "") or f"call_{index}"),
            name=str(tc.function.name or ""),
            arguments=str(tc.function.arguments or ""),
        )
        for index, tc in enumerate(getattr(message, "tool_calls", None) or [])
    ]
    usage = getattr(response, "usage", None)
    return LLMReply(
        content=getattr(message, "content", None),
        tool_calls=calls,
        finish_reason=getattr(choice, "finish_reason", None),
        prompt_tokens=_reported_count(getattr(usage, "prompt_tokens", None)),
        completion_tokens=_reported_count(getattr(usage, "completion_tokens", None)),
        latency_seconds=latency,
        attempts=attempts,
    )


def _reported_count(value: Any) -> int | None:
    """A usage figure as a whole number (fractions rounded up), or None when it is none.

    Negative and absurd numbers pass through unchanged: the budget meter decides what
    to charge for them (workers/engine/budget_meter.py ``sanitize_usage``) and records the
    anomaly, so this only makes the type safe.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float):
        return math.ceil(value) if math.isfinite(value) else None
    return value


def estimate_completion_tokens(reply: LLMReply) -> int:
    """What a reply's text costs at most, about: used when the provider's figure is unusable."""
    size = len(reply.content or "") + sum(
        len(call.name) + len(call.arguments) for call in reply.tool_calls
    )
    return math.ceil(size / _CHARS_PER_TOKEN_ESTIMATE) + 1
