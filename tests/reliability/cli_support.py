"""The real `assay` entry point (``assay.cli.main``) called in this process.

Same argument parsing, exit-code mapping (usage errors 64) and output as the
console script, without a new interpreter per case, so the suite can afford
hundreds of cases. ``tests.assay.test_cli_check.assay`` runs the console script in a
subprocess where the process boundary matters (logs, environment).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

from assay.cli import main


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str


def invoke(*args: str) -> CliResult:
    """``assay ARGS`` in-process: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code: int
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return CliResult(code, out.getvalue(), err.getvalue())


def outcome(code: int) -> str:
    """An exit code as the ledger names it."""
    names = {0: "true", 1: "false", 2: "poorly_posed", 3: "cannot_determine", 64: "usage (64)"}
    return names.get(code, f"exit {code}")
