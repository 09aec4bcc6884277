"""`assay api`: serve the HTTP API with uvicorn.

FastAPI, uvicorn and redis are imported inside the command so ``assay --help``
stays fast. The API finds its Redis like every other command: ``ASSAY_REDIS_URL``,
else a running ``assay up`` on this machine; it reads the same verdict store the
workers write and sends evaluations to the same broker.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/assay/test_cli_check.py keeps the engine out).
from typing import Annotated

import typer

from schemas.exit_codes import EXIT_INTERNAL


def api(
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to listen on (default: settings.api_host)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Port (default: settings.api_port, 8080)."),
    ] = None,
) -> None:
    """Serve the HTTP API (/v1, /healthz, /readyz, /metrics); see docs/api.md."""
    import uvicorn

    from assay.api import create_app
    from assay.commands.fleet_common import EXIT_UNAVAILABLE, fail
    from assay.commands.options import settings_or_usage
    from assay.local_mode import discover_redis_url
    from workers.engine.logs import configure_logging

    settings = settings_or_usage(api_host=host, api_port=port)  # invalid: one sentence, 64
    configure_logging(settings)
    url = discover_redis_url(settings)  # ASSAY_REDIS_URL, else a running `assay up`
    if url is None:
        fail(
            "no fleet is running here: start one with `assay up` in another terminal, "
            "or set ASSAY_REDIS_URL to your Redis",
            EXIT_UNAVAILABLE,
        )
    from workers.fleet.redis_client import probe, shown_url

    problem = probe(url)
    if problem is not None:  # serve anyway: /readyz says 503 until Redis answers
        typer.echo(
            f"assay: warning: Redis at {shown_url(url)} does not answer yet ({problem})", err=True
        )
    settings = settings.model_copy(update={"redis_url": url})
    if not settings.api_tokens and settings.api_tokens_file is None:
        typer.echo(
            "assay: warning: no API tokens are configured (ASSAY_API_TOKENS or "
            "ASSAY_API_TOKENS_FILE); every /v1 request will be refused.",
            err=True,
        )
    from workers.engine.tracing import configure_tracing

    _require_free(settings.api_host, settings.api_port, "--port / ASSAY_API_PORT")
    if settings.metrics_port:
        _require_free("0.0.0.0", settings.metrics_port, "ASSAY_METRICS_PORT")
    configure_tracing(settings)
    if settings.metrics_port:
        # Unauthenticated metrics on their own port (like workers and schedulers), for
        # annotation-based scraping; /metrics on the API port needs a read token.
        from workers.engine.metrics import start_metrics_server

        start_metrics_server(settings.metrics_port)
    app = create_app(settings)
    typer.echo(
        f"assay api listening on http://{settings.api_host}:{settings.api_port} "
        f"(redis {shown_url(url)}); Ctrl-C stops it",
        err=True,
    )
    try:
        uvicorn.run(
            app,
            host=settings.api_host,
            port=settings.api_port,
            access_log=False,  # the app logs one structured line per request itself
            log_config=None,
            proxy_headers=True,
            server_header=False,
            timeout_graceful_shutdown=10,
        )
    except SystemExit as exc:
        if exc.code == UVICORN_STARTUP_FAILURE:  # 3 is `cannot_determine` to a script
            fail("the API did not start (the reason is logged above)", EXIT_INTERNAL)
        raise


UVICORN_STARTUP_FAILURE = 3


def _require_free(host: str, port: int, setting: str) -> None:
    """Refuse a port something else listens on, with one sentence and 64, before saying
    "listening": uvicorn would log the bind error and exit 3, a verdict code here."""
    import socket

    from assay.commands.fleet_common import fail
    from schemas.exit_codes import EXIT_USAGE

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            fail(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}): another process "
                f"has it, or the address is wrong; choose another with {setting}",
                EXIT_USAGE,
            )


def register(app: typer.Typer) -> None:
    app.command("api")(api)
