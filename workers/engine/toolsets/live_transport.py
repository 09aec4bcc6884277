"""The only road from assay to a live API server: GET requests, nothing else.

Everything the live backend reads goes through :class:`GetOnlyTransport`. It
holds the kubernetes ``ApiClient`` privately and exposes a single verb, ``get``.
Two more locks sit behind that door, so a future edit cannot open a write path
by accident:

* every path is checked against the short list of read shapes assay uses
  (discovery, OpenAPI, list/get of a resource, a pod's ``log``); ``exec``,
  ``attach``, ``portforward``, ``proxy`` or any other subresource is refused;
* the client's REST layer is wrapped so that any method other than GET raises
  before a socket is touched.

Each request carries a timeout, waits for a token from the per-target QPS
bucket (shared by every backend of the same target in the process), and
transient failures (429, 5xx, resets, timeouts) are retried with tenacity,
honouring Retry-After, within a deadline. Failures end as ``BackendError``
with a sentence the model (and a person) can act on.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_before_delay,
    wait_random_exponential,
)

from schemas.kubernetes_metadata import is_dns1123_label
from workers.engine.toolsets.backend import BackendError
from workers.engine.toolsets.kube_import import ensure_imported

ALLOWED_METHOD = "GET"
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER_SECONDS = 30.0
MAX_RESPONSE_BYTES = 128 * 1024 * 1024
"""Largest answer read from an API server (an OpenAPI v2 document of a cluster with many
CRDs is tens of MB; a page of 500 objects a few): a body that never ends must fail the
lookup, not fill the worker's memory."""
READ_CHUNK_BYTES = 64 * 1024


class WriteRefused(RuntimeError):
    """Raised if anything ever asks the transport for a non-GET request or a non-read path."""


@dataclass(frozen=True)
class TransportLimits:
    request_timeout: float
    retry_deadline: float
    qps: float


class TokenBucket:
    """A plain token bucket: ``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = max(1.0, burst if burst is not None else rate)
        self._tokens = self.burst
        self._updated = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self, deadline: float) -> bool:
        """Take one token, sleeping as needed; False if it would come after ``deadline``."""
        while True:
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
                self._updated = now
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return True
                wait = (1.0 - self._tokens) / self.rate
            if now + wait > deadline:
                return False
            time.sleep(wait)


_buckets: dict[str, TokenBucket] = {}
_buckets_lock = threading.Lock()


def bucket_for(target_key: str, qps: float) -> TokenBucket:
    """The process-wide bucket of one target, so a fleet of runs shares one QPS budget."""
    with _buckets_lock:
        bucket = _buckets.get(target_key)
        if bucket is None or bucket.rate != qps:
            bucket = TokenBucket(qps)
            _buckets[target_key] = bucket
        return bucket


# --- which paths are reads -------------------------------------------------------------

_SEGMENT = r"[^/?#]+"
_READ_PATHS = [
    re.compile(p)
    for p in (
        r"/version",
        r"/api",
        r"/apis",
        rf"/apis/{_SEGMENT}",
        r"/openapi/v2",
        r"/openapi/v3",
        rf"/openapi/v3/(api|apis/{_SEGMENT})/{_SEGMENT}",
        # list / get, cluster-wide or namespaced, core or grouped; the only subresource is log
        rf"/(api|apis/{_SEGMENT})/{_SEGMENT}",
        rf"/(api|apis/{_SEGMENT})/{_SEGMENT}/{_SEGMENT}(/{_SEGMENT})?",
        rf"/(api|apis/{_SEGMENT})/{_SEGMENT}/namespaces/{_SEGMENT}/{_SEGMENT}(/{_SEGMENT})?",
        rf"/api/v1/namespaces/{_SEGMENT}/pods/{_SEGMENT}/log",
    )
]
# The deprecated watch prefix (``/api/v1/watch/pods``) has the shape of a listing but streams.
_WATCH_PATH = re.compile(rf"/(api|apis/{_SEGMENT})/{_SEGMENT}/watch(/|$)")


def check_read_path(path: str) -> None:
    """Refuse any path that is not one of the read shapes above.

    The shapes allow at most one segment after an object's name, and only
    ``log`` under pods, so ``exec``, ``attach``, ``portforward``, ``proxy``,
    ``scale``, ``eviction`` and every other subresource cannot be expressed.
    """
    if not any(p.fullmatch(path) for p in _READ_PATHS) or _WATCH_PATH.match(path):
        raise WriteRefused(f"refusing to request {path!r}: not a read-only path assay uses")


# Query parameters that turn a read into a stream held open until the lookup's deadline
# (a watch, a followed log); no lookup assay makes sends one.
_STREAMING_QUERY = frozenset({"watch", "follow", "watchList"})


def check_read_query(path: str, query: dict[str, Any] | None) -> None:
    """Refuse a query that would make a read path stream (``?watch``, ``?follow``)."""
    streaming = sorted(_STREAMING_QUERY.intersection(query or {}))
    if streaming:
        raise WriteRefused(
            f"refusing to request {path!r} with {streaming[0]}: a stream, "
            "not a read-only path assay uses"
        )


def namespace_segment(namespace: str) -> str:
    """A namespace is an RFC 1123 label; anything else is refused before a request is built."""
    if not is_dns1123_label(namespace):
        raise BackendError(
            "bad_request",
            f"{namespace!r} is not a valid Kubernetes namespace name "
            "(lowercase letters, digits and '-', at most 63)",
        )
    return namespace


def path_segment(value: str, what: str) -> str:
    """Quote one name for a URL path; refuse names that could change the path's shape.

    ``/`` and ``%`` are refused, not quoted: the API server decodes the path before
    routing it (Go's ``URL.Path``), so ``node-1%2Fproxy`` would reach the node proxy
    subresource. No Kubernetes name holds either (client-go's
    ``IsValidPathSegmentName`` refuses them the same way).
    """
    if not value or value in {".", ".."} or len(value) > 253 or "/" in value or "%" in value:
        raise BackendError("bad_request", f"{what} {value!r} is not a valid Kubernetes name")
    return quote(value, safe="")


# --- the transport ---------------------------------------------------------------------


class _Transient(Exception):
    """A failure worth another try; ``retry_after`` is the server's hint in seconds."""

    def __init__(self, kind: str, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.kind = kind  # "timeout" or "unavailable"
        self.detail = detail
        self.retry_after = retry_after


class _WaitHonouringRetryAfter:
    """Exponential backoff with jitter, but never shorter than the server's Retry-After."""

    def __init__(self) -> None:
        self._backoff = wait_random_exponential(multiplier=0.2, max=5.0)

    def __call__(self, retry_state: RetryCallState) -> float:
        backoff = float(self._backoff(retry_state))
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None else None
        hint = getattr(error, "retry_after", None)
        return max(backoff, min(hint, MAX_RETRY_AFTER_SECONDS)) if hint else backoff


def _refuse_non_get(api_client: Any) -> None:
    """Wrap the client's REST layer so that only GET can ever leave the process."""
    rest_client = api_client.rest_client
    original = rest_client.request

    def get_only(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if str(method).upper() != ALLOWED_METHOD:
            raise WriteRefused(f"refusing to send {method} {url}: assay only reads")
        return original(method, url, *args, **kwargs)

    rest_client.request = get_only


class GetOnlyTransport:
    """GET-only access to one API server, with timeouts, a QPS bucket and retries."""

    def __init__(
        self,
        api_client: Any,
        target_key: str,
        target_name: str,
        limits: TransportLimits,
        deadline: float | None = None,
    ) -> None:
        _refuse_non_get(api_client)
        self._client = api_client
        self.target_key = target_key
        self.target_name = target_name
        self.limits = limits
        self.deadline = deadline  # time.monotonic() instant the whole run must end by
        self._bucket = bucket_for(target_key, limits.qps)

    def close(self) -> None:
        self._client.close()

    def get_json(
        self, path: str, query: dict[str, Any] | None = None, *, action: str
    ) -> dict[str, Any]:
        body = self._get(path, query, "application/json", action)
        try:
            document = json.loads(body)
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
            return document
        except ValueError:
            raise BackendError(
                "unavailable",
                f"the API server of {self.target_name} sent something that is not JSON when "
                f"assay tried to {action}; check that the kubeconfig points at a Kubernetes API "
                "server",
            ) from None

    def get_text(self, path: str, query: dict[str, Any] | None = None, *, action: str) -> str:
        return self._get(path, query, "text/plain, */*", action).decode("utf-8", errors="replace")

    # -- internals -----------------------------------------------------------------------

    def _lookup_deadline(self) -> float:
        deadline = time.monotonic() + self.limits.retry_deadline
        return min(deadline, self.deadline) if self.deadline is not None else deadline

    def _get(self, path: str, query: dict[str, Any] | None, accept: str, action: str) -> bytes:
        check_read_path(path)
        check_read_query(path, query)
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v is not None]
        deadline = self._lookup_deadline()
        retrying = Retrying(
            retry=retry_if_exception_type(_Transient),
            wait=_WaitHonouringRetryAfter(),
            stop=stop_before_delay(max(0.0, deadline - time.monotonic())),
            reraise=True,
        )
        # Retries stop only for time, so a transient failure that gets out of them ran out of
        # the run's time when the run's deadline was the nearer one.
        out_of_time = self.deadline is not None and deadline == self.deadline
        try:
            return retrying(self._attempt, path, params, accept, action, deadline)
        except _Transient as exc:
            if exc.kind == "timeout":
                raise BackendError(
                    "timeout",
                    f"{self.target_name} did not answer in time while assay tried to "
                    f"{action} ({exc.detail}); try again later or narrow the lookup",
                    out_of_time=out_of_time,
                ) from None
            raise BackendError(
                "unavailable",
                f"{self.target_name} kept failing while assay tried to {action} "
                f"({exc.detail}); try again later",
                out_of_time=out_of_time,
            ) from None

    def _attempt(
        self, path: str, params: list[tuple[str, str]], accept: str, action: str, deadline: float
    ) -> bytes:
        import urllib3

        ensure_imported()
        from kubernetes.client.exceptions import ApiException

        if not self._bucket.acquire(deadline):
            raise _Transient("timeout", f"client-side rate limit of {self.limits.qps:g} req/s")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Transient("timeout", "the lookup's deadline passed")
        timeout = min(self.limits.request_timeout, remaining)
        method, url, headers, _body, _post = self._client.param_serialize(
            ALLOWED_METHOD,
            path,
            query_params=params,
            header_params={"Accept": accept},
            auth_settings=["BearerToken"],
        )
        response = None
        complete = False
        try:
            response = self._client.call_api(
                method, url, header_params=headers, _request_timeout=(timeout, timeout)
            )
            body = _read_body(response.response, deadline, action)
            complete = True
        except (urllib3.exceptions.TimeoutError, TimeoutError) as exc:
            raise _Transient("timeout", f"no answer within {timeout:.1f}s") from exc
        except (urllib3.exceptions.HTTPError, ConnectionError) as exc:
            raise _Transient("unavailable", f"connection failed: {type(exc).__name__}") from exc
        except ApiException as exc:  # the client reports TLS failures this way
            reason = str(exc.reason or exc).splitlines()[0]
            raise BackendError(
                "unavailable",
                f"could not open a secure connection to {self.target_name} ({reason}); "
                "check the certificate settings of the kubeconfig",
            ) from None
        finally:
            if response is not None:
                if not complete:  # the rest of an abandoned body must not answer the next request
                    response.response.close()
                response.response.release_conn()
        status = int(response.status)
        if 200 <= status < 300:
            return body
        self._raise_for_status(status, body, response.headers, action)
        raise AssertionError("unreachable")  # pragma: no cover

    def _raise_for_status(self, status: int, body: bytes, headers: Any, action: str) -> None:
        message = _status_message(body)
        if status in RETRYABLE_STATUSES:
            raise _Transient(
                "unavailable",
                f"HTTP {status}",
                retry_after=_retry_after(headers.get("Retry-After")),
            )
        if status == 401:
            raise BackendError(
                "forbidden",
                f"{self.target_name} rejected assay's credentials (401) while it tried "
                f"to {action}; refresh the credentials in the kubeconfig",
            )
        if status == 403:
            raise BackendError(
                "forbidden",
                f"the assay service account cannot {action}; grant it get/list on "
                "that resource if the predicate needs it",
            )
        if status == 404:
            raise BackendError("not_found", message or f"nothing found when trying to {action}")
        if status == 410:
            raise BackendError(
                "gone",
                f"the list expired on the server while assay tried to {action}; "
                "run the lookup again",
            )
        if status in (400, 422):
            raise BackendError(
                "bad_request", f"{message or f'HTTP {status}'} (while trying to {action})"
            )
        raise BackendError(
            "unsupported",
            f"the API server answered HTTP {status} when assay tried to {action}: {message}",
        )


def _read_body(raw: Any, deadline: float, action: str) -> bytes:
    """The body of a urllib3 response, read piece by piece within the deadline and the cap.

    Why not ``response.read()``: the read timeout bounds each wait for a byte, not
    the whole answer, so a server sending a byte every few seconds held the
    thread for as long as it liked, and a body that never ends was buffered
    until the worker ran out of memory. ``read1`` returns what one receive
    brought, so the deadline is looked at between receives.
    """
    chunks: list[bytes] = []
    size = 0
    while chunk := raw.read1(READ_CHUNK_BYTES):
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise BackendError(
                "unavailable",
                f"the API server's answer was larger than {MAX_RESPONSE_BYTES // 2**20} MiB "
                f"when assay tried to {action}; it was not read further",
            )
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise _Transient("timeout", "the answer was still arriving at the lookup's deadline")
    return b"".join(chunks)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _status_message(body: bytes) -> str:
    """The ``message`` of a Kubernetes Status body, or a short excerpt of whatever came back."""
    try:
        data = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", errors="replace").strip()
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])[:500]
    return ""


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
