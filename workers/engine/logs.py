"""structlog configuration shared by the CLI, the workers and the scheduler.

Logs go to stderr (stdout belongs to verdicts and JSON output): JSON lines when
stderr is not a terminal or ``log_format=json`` (what a log pipeline wants),
a readable console rendering on a terminal. Every line of a run carries its
``run_id`` / ``check_id`` / ``batch_id`` through :func:`bind_run`. Every field
of every line passes the credential patterns of the secret scrubber
(:func:`scrub_secrets`) before it is rendered.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO, cast

import structlog

from schemas.settings import AssaySettings
from workers.engine.toolsets.redaction import PATTERNS


def configure_logging(settings: AssaySettings) -> None:
    """Configure structlog once per process from the settings."""
    level = logging.getLevelName(settings.log_level.upper())
    if not isinstance(level, int):
        level = logging.INFO
    use_json = settings.log_format == "json" or (
        settings.log_format == "auto" and not sys.stderr.isatty()
    )
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            scrub_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=False,
    )


class _CurrentStderr:
    """The process's stderr as it is at each write, not when logging was configured: the CLI
    run in-process (tests, ``assay.cli.main`` from another program) swaps ``sys.stderr`` for
    a while, and a logger holding the swapped-out file would write to it after it closed."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def scrub_secrets(logger: Any, method: str, event_dict: Any) -> Any:
    """A structlog processor: credential-shaped text (DSN passwords, ``password=...``) removed.

    Fields are copied, never scrubbed in place: they may be the caller's own objects.
    """
    return PATTERNS.scrubbed_copy(dict(event_dict))


def bind_run(
    logger: Any,
    *,
    run_id: str,
    check_id: str | None = None,
    batch_id: str | None = None,
) -> Any:
    """``logger`` with the run's identifiers on every line it writes."""
    ids = {"run_id": run_id, "check_id": check_id, "batch_id": batch_id}
    return logger.bind(**{key: value for key, value in ids.items() if value})
