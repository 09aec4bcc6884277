"""``assay ARGV`` run in the test's own process, as a user's shell would see it."""

from __future__ import annotations

import pytest


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``assay ARGV``; ``main`` always ends in SystemExit."""
    from assay.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err
