"""Logging writes to the process's stderr as it is when a line is written: a command run
in-process (the CLI's own tests, ``assay.cli.main`` called from another program) swaps
``sys.stderr`` for a while, and every later line, a run's included, must still be written."""

from __future__ import annotations

import io
import sys

import pytest
import structlog

from schemas.settings import AssaySettings
from workers.engine.logs import configure_logging


def test_a_line_after_the_stderr_logging_was_configured_with_closed_goes_to_the_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    previous = structlog.get_config()
    borrowed, current = io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr(sys, "stderr", borrowed)
        configure_logging(AssaySettings(log_format="json", log_level="info"))
        borrowed.close()  # the in-process command is over; its stderr with it
        monkeypatch.setattr(sys, "stderr", current)
        structlog.get_logger("assay.test").info("run_started", run_id="r-1")
    finally:
        structlog.configure(**previous)
    assert '"event": "run_started"' in current.getvalue()
