"""`assay api`: serve the HTTP API with uvicorn.

FastAPI, uvicorn and redis are imported inside the command so ``assay --help``
stays fast. The API needs a Redis (``ASSAY_REDIS_URL``): it reads the same
verdict store the workers write and sends evaluations to the same broker.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/test_cli_check.py keeps the engine out).
from typing import Annotated

import typer

from schemas.verdict import EXIT_USAGE


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
    from schemas.settings import load_settings
    from workers.core.logs import configure_logging

    settings = load_settings(api_host=host, api_port=port)
    configure_logging(settings)
    if settings.redis_url is None:
        typer.echo(
            "assay api needs a Redis: set ASSAY_REDIS_URL (for example redis://127.0.0.1:6379/0).",
            err=True,
        )
        raise typer.Exit(EXIT_USAGE)
    if not settings.api_tokens and settings.api_tokens_file is None:
        typer.echo(
            "warning: no API tokens are configured (ASSAY_API_TOKENS or ASSAY_API_TOKENS_FILE); "
            "every /v1 request will be refused.",
            err=True,
        )
    from workers.core.tracing import configure_tracing

    configure_tracing(settings)
    if settings.metrics_port:
        # Unauthenticated metrics on their own port (like workers and schedulers), for
        # annotation-based scraping; /metrics on the API port needs a read token.
        from workers.core.metrics import start_metrics_server

        start_metrics_server(settings.metrics_port)
    app = create_app(settings)
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


def register(app: typer.Typer) -> None:
    app.command("api")(api)
