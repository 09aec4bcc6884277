"""Every HTTP error the API returns: one JSON shape, one stable code per cause.

A client branches on ``error.code`` (documented in docs/api.md), never on the
message. Bad input is always a 4xx with its own code; a 500 (``internal``)
means a real server fault and is logged with its traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_log = structlog.get_logger("assay.api")

# Stable codes for the errors Starlette raises on its own (routing, methods).
_STATUS_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    503: "unavailable",
}


class ApiError(Exception):
    """An error with an HTTP status, a stable code and a one-sentence message for people."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers


def error_body(
    code: str, message: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return {"error": error}


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    """Location and reason of each problem; the rejected input itself is not echoed back."""
    details = []
    for problem in exc.errors():
        loc = [str(part) for part in problem.get("loc", ())]
        message = str(problem.get("msg", "")).removeprefix("Value error, ")
        if problem.get("type") == "json_invalid":  # the reader's reason, not "JSON decode error"
            message = str((problem.get("ctx") or {}).get("error") or message)
        details.append({"loc": loc, "msg": message, "type": str(problem.get("type", ""))})
    return details


async def _on_api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(
        exc.status, exc.code, exc.message, details=exc.details, headers=exc.headers
    )


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = _validation_details(exc)
    broken = [d for d in details if d["type"] == "json_invalid"]
    if broken:
        return error_response(
            400,
            "invalid_json",
            f"The request body is not valid JSON ({broken[0]['msg']}); send a JSON object.",
            details=details,
        )
    first = details[0] if details else {"loc": [], "msg": "invalid input", "type": ""}
    where = ".".join(part for part in first["loc"] if part != "body") or "request"
    code = first["type"] if first["type"] in _CODES_FROM_VALIDATION else "validation_error"
    return error_response(
        422, code, f"{where}: {first['msg']}; fix the request and send it again.", details=details
    )


# Validation problems with a code of their own (the body models raise them by that name).
_CODES_FROM_VALIDATION = frozenset({"kubeconfig_not_allowed"})


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this request's path.

    Starlette answers 405 from the first route whose path matched, so its ``Allow``
    names that route's method alone; FastAPI makes one route per method, so
    ``GET`` and ``POST /v1/schedules`` are two routes and each would hide the other.
    Routers included without a prefix of their own (ours carry theirs) are searched too.
    """
    methods: set[str] = set()
    routes: list[object] = list(request.app.router.routes)
    while routes:
        route = routes.pop()
        included = getattr(route, "original_router", None)  # FastAPI's lazily included router
        if included is not None:
            routes.extend(included.routes)
        elif isinstance(route, BaseRoute) and route.matches(request.scope)[0] != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


async def _on_http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = getattr(exc, "code", None) or _STATUS_CODES.get(exc.status_code, "http_error")
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:
        allowed = allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        message = (
            f"{request.method} is not allowed on {request.url.path}; use {' or '.join(allowed)}."
        )
    else:
        message = {
            404: f"No endpoint at {request.url.path}; see /docs or docs/api.md for the routes.",
        }.get(exc.status_code, str(exc.detail))
    return error_response(exc.status_code, code, message, headers=headers or None)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    _log.exception("api_internal_error", path=request.url.path, method=request.method)
    return error_response(
        500, "internal", "The server failed on this request; it is logged, try again or report it."
    )


async def _on_redis_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """A 503 at once: Redis did not answer the quick check, or a command after retries.

    The log line says which Redis and why (its password masked); the body does not
    tell callers where the API's Redis lives.
    """
    _log.warning(
        "api_redis_unavailable", path=request.url.path, error=type(exc).__name__, reason=str(exc)
    )
    return error_response(
        503,
        "redis_unavailable",
        "Redis did not answer; try again shortly, and check Redis if it persists.",
        headers={"Retry-After": "5"},
    )


async def _on_runs_not_sent(request: Request, exc: Exception) -> JSONResponse:
    """A 503 that says what becomes of the runs: they are registered, so the caller must
    not take the failure for "nothing happened" (and must not be told where the broker is).
    """
    from workers.fleet.dispatch import RunsNotSent

    assert isinstance(exc, RunsNotSent)
    _log.warning(
        "api_broker_unavailable",
        path=request.url.path,
        broker=exc.broker,
        reason=exc.problem,
        runs=len(exc.run_ids),
    )
    return error_response(503, "broker_unavailable", exc.public_message)


def install_error_handlers(app: FastAPI) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    from workers.fleet.dispatch import RunsNotSent
    from workers.fleet.redis_client import RedisUnreachable

    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(RunsNotSent, _on_runs_not_sent)
    app.add_exception_handler(RedisUnreachable, _on_redis_unavailable)
    app.add_exception_handler(RedisConnectionError, _on_redis_unavailable)
    app.add_exception_handler(RedisTimeoutError, _on_redis_unavailable)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    app.add_exception_handler(Exception, _on_unexpected)


class BodySizeLimit:
    """Reject bodies over the route's limit with 413 before anything parses them.

    A declared ``Content-Length`` over the limit is refused at once; otherwise the
    body (at most the limit, so buffering it is bounded) is read here, counted,
    and handed on whole, so a chunked body that runs over is refused too. The routes in
    ``document_routes`` take files' worth of documents (a policy library, a folder of
    checks) and get ``documents_limit``, for a caller whose ``Authorization`` header
    ``grants_write`` (as the API server authenticates before it reads a body: no one else
    makes it hold megabytes); every other body is a request's few fields.
    """

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        documents_limit: int,
        document_routes: frozenset[tuple[str, str]],
        grants_write: Callable[[str | None], bool],
    ) -> None:
        self.app = app
        self.small_limit = limit
        self.documents_limit = documents_limit
        self.document_routes = document_routes
        self.grants_write = grants_write

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        limit, why = self.small_limit, ""
        if (scope.get("method", ""), scope.get("path", "")) in self.document_routes:
            authorization = headers.get(b"authorization")
            if self.grants_write(authorization.decode("latin-1") if authorization else None):
                limit = self.documents_limit
            else:
                why = f", the limit without a write token (with one, {self.documents_limit} bytes)"
        await self._limited(scope, receive, send, headers.get(b"content-length"), limit, why)

    async def _limited(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        declared: bytes | None,
        limit: int,
        why: str,
    ) -> None:
        if declared is not None:
            try:
                too_big = int(declared) > limit
            except ValueError:
                await self._reject(
                    scope,
                    receive,
                    send,
                    400,
                    "bad_request",
                    "Content-Length is not a number; send a valid header.",
                )
                return
            if too_big:
                await self._reject_too_large(scope, receive, send, limit, why)
                return

        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: let the app see it
                first: Message = message
                break
            body = message.get("body", b"")
            received += len(body)
            if received > limit:
                await self._reject_too_large(scope, receive, send, limit, why)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                first = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                break

        replayed = False

        async def replay_receive() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()

        await self.app(scope, replay_receive, send)

    async def _reject_too_large(
        self, scope: Scope, receive: Receive, send: Send, limit: int, why: str
    ) -> None:
        await self._reject(
            scope,
            receive,
            send,
            413,
            "body_too_large",
            f"The request body is larger than {limit} bytes{why}; send a smaller request.",
        )

    async def _reject(
        self, scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str
    ) -> None:
        response = error_response(status, code, message, headers={"Connection": "close"})
        await response(scope, receive, send)
