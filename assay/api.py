"""The HTTP API: FastAPI app factory, operational endpoints, and the OpenAPI file.

Routes under ``/v1`` live in ``assay/api_v1.py`` and are thin over the fleet's
store and client and the scheduler's schedule CRUD; this module assembles the
app: settings, tokens, the body-size limit, per-request logs and metrics, and
``/healthz``, ``/readyz``, ``/metrics``.

``python -m assay.api --write-openapi`` regenerates ``assay/openapi.json``;
``--check-openapi`` exits 1 when the committed file is stale (a test runs it).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis
import structlog
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.routing import APIRoute
from kombu import Connection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from assay.api_auth import ReadAccess, TokenTable
from assay.api_errors import ApiError, BodySizeLimit, install_error_handlers
from assay.api_models import DOCUMENTS_TOO_LARGE, ErrorBody, Health, Readiness
from assay.api_v1 import router as v1_router
from assay.api_wiring import Services, register_scrape_collectors
from schemas.settings import AssaySettings, load_settings
from workers.engine import metrics
from workers.fleet.broker import broker_url, is_redis_url, sentinel_options

OPENAPI_PATH = Path(__file__).with_name("openapi.json")
API_VERSION = "1"
READY_TIMEOUT_SECONDS = 2.0
_log = structlog.get_logger("assay.api")

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or invalid bearer token."},
    413: {"model": ErrorBody, "description": "Request body over the size limit."},
    422: {"model": ErrorBody, "description": "The request failed validation."},
    400: {"model": ErrorBody, "description": "The body is not valid JSON."},
}


def document_routes(*routers: APIRouter) -> frozenset[tuple[str, str]]:
    """(method, path) of every route that publishes the documents limit as its 413: what the
    document says of a route's size limit is what the body limit enforces."""
    return frozenset(
        (method, route.path)
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute) and route.responses.get(413) is DOCUMENTS_TOO_LARGE
        for method in route.methods or ()
    )


class RequestLogAndMetrics:
    """One JSON log line and one metrics sample per request, labelled by route template.

    Handlers bind run / check / batch ids with ``structlog.contextvars``; they land on
    the request's log line because the binding lives in this request's context.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        request_id = headers.get(b"x-request-id", b"").decode("latin-1")[:64] or uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        status = 500
        start = time.perf_counter()
        logged = False

        def record() -> None:
            # The request's line and sample are written before the last byte of the
            # response goes out: a client that saw the whole answer finds its line in
            # the log (writing it after the handler returned raced the client's next read).
            nonlocal logged
            if logged:
                return
            logged = True
            elapsed = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            metrics.observe_api_request(route, scope.get("method", ""), status, elapsed)
            if route not in ("/healthz", "/readyz", "/metrics"):
                ids = (scope.get("state") or {}).get("log_ids") or {}
                _log.info(
                    "api_request",
                    **ids,
                    method=scope.get("method"),
                    route=route,
                    path=scope.get("path"),
                    status=status,
                    duration_ms=round(elapsed * 1000, 1),
                )

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                record()
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            record()  # no complete response was sent (the handler raised, or the client left)
            structlog.contextvars.clear_contextvars()


def _check_redis(url: str) -> str:
    """'ok' or why ``url`` did not answer PING within the readiness timeout."""

    client = redis.Redis.from_url(
        url, socket_timeout=READY_TIMEOUT_SECONDS, socket_connect_timeout=READY_TIMEOUT_SECONDS
    )
    try:
        client.ping()
    except Exception as exc:
        return f"unreachable: {type(exc).__name__}"
    finally:
        client.close()
    return "ok"


def _check_broker(settings: AssaySettings) -> str:
    """'ok' or why the Celery broker did not accept a connection (any kombu transport)."""
    url = broker_url(settings)
    if is_redis_url(url):
        return _check_redis(url)

    try:
        with Connection(
            url,
            connect_timeout=READY_TIMEOUT_SECONDS,
            # on Sentinel: the master's name, and the sentinels' own password and timeouts
            transport_options=sentinel_options(settings, READY_TIMEOUT_SECONDS),
        ) as conn:
            conn.ensure_connection(max_retries=1, timeout=READY_TIMEOUT_SECONDS)
    except Exception as exc:
        return f"unreachable: {type(exc).__name__}"
    return "ok"


def _add_operational_routes(app: FastAPI) -> None:
    @app.get("/healthz", response_model=Health, tags=["operations"])
    def healthz() -> Health:
        """The process is up and serving HTTP (no dependency is checked)."""
        return Health()

    @app.get(
        "/readyz",
        response_model=Readiness,
        tags=["operations"],
        responses={503: {"model": ErrorBody, "description": "Redis or the broker is unreachable."}},
    )
    def readyz(request: Request) -> Readiness:
        """Redis and the Celery broker both answer; 503 otherwise, so no traffic is routed here."""
        settings: AssaySettings = request.app.state.settings
        if settings.redis_url is None:
            raise ApiError(
                503,
                "not_configured",
                "No Redis is configured; set ASSAY_REDIS_URL for the API.",
            )
        checks = {
            "redis": _check_redis(settings.redis_url),
            "broker": _check_broker(settings),
        }
        failed = {name: why for name, why in checks.items() if why != "ok"}
        if failed:
            raise ApiError(
                503,
                "not_ready",
                "Not ready: "
                + ", ".join(f"{k} {v}" for k, v in failed.items())
                + "; check that Redis and the broker are running and reachable.",
                details=[{"dependency": k, "status": v} for k, v in checks.items()],
            )
        return Readiness(status="ready", checks=checks)

    @app.get(
        "/metrics",
        tags=["operations"],
        response_class=Response,
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
            401: ERROR_RESPONSES[401],
        },
    )
    def prometheus_metrics(scope: ReadAccess) -> Response:
        """Prometheus exposition: API requests, queue depth, scheduler timers, check verdicts."""
        body, content_type = metrics.render_latest()
        return Response(content=body, media_type=content_type)


def _register_collectors(settings: AssaySettings) -> None:
    """Queue depth and timers, read from Redis when Prometheus scrapes this process."""
    if settings.redis_url is None:
        return

    register_scrape_collectors(settings)


def create_app(settings: AssaySettings | None = None) -> FastAPI:
    """The API for ``settings`` (default: :func:`schemas.settings.load_settings`)."""

    settings = settings or load_settings()
    app = FastAPI(
        title="assay",
        version=API_VERSION,
        summary="Evaluate plain-language predicates about Kubernetes clusters.",
        description="Submit evaluations, read verdicts, run batches and manage schedules. "
        'Every error is `{"error": {"code", "message"}}`; see docs/api.md.',
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.tokens = TokenTable(settings.api_tokens, settings.api_tokens_file)
    app.state.services = Services(settings)
    install_error_handlers(app)
    _add_operational_routes(app)

    from assay.api_policies import router as policies_router
    from assay.api_probes import router as probes_router

    app.include_router(v1_router)
    app.include_router(probes_router)
    app.include_router(policies_router)
    app.add_middleware(
        BodySizeLimit,
        limit=settings.api_max_body_bytes,
        documents_limit=settings.api_max_documents_body_bytes,
        document_routes=document_routes(v1_router, probes_router, policies_router),
        grants_write=app.state.tokens.grants_write,
    )
    app.add_middleware(RequestLogAndMetrics)
    _register_collectors(settings)
    return app


def render_openapi() -> str:
    """The OpenAPI document, independent of any runtime setting."""

    app = create_app(AssaySettings(redis_url=None, api_tokens={}, api_tokens_file=None))
    return json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rendered = render_openapi()
    current = OPENAPI_PATH.read_text() if OPENAPI_PATH.exists() else None
    if "--check-openapi" in argv:
        if current != rendered:
            print(
                f"{OPENAPI_PATH} is out of date; run `python -m assay.api --write-openapi` "
                "and commit it",
                file=sys.stderr,
            )
            return 1
        return 0
    if "--write-openapi" in argv:
        OPENAPI_PATH.write_text(rendered)
        print(f"wrote {OPENAPI_PATH}")
        return 0
    print("usage: python -m assay.api --write-openapi | --check-openapi", file=sys.stderr)
    return 64


if __name__ == "__main__":
    raise SystemExit(main())
