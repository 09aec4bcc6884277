"""The reliability suite's session: one ledger, its table at the end, and a failed session
when any must-be-zero count is not 0 (see ledger.py and docs/threat-model.md)."""

from __future__ import annotations

import pytest

from tests.reliability.ledger import LEDGER, Ledger


@pytest.fixture(scope="session")
def ledger() -> Ledger:
    return LEDGER


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not LEDGER.cases:
        return
    terminalreporter.section("reliability summary")
    terminalreporter.write_line(LEDGER.table())
    violations = LEDGER.violations()
    if violations:
        terminalreporter.write_line(f"FAILED: counts that must be 0: {violations}", red=True)
    else:
        terminalreporter.write_line("every must-be-zero count is 0", green=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if LEDGER.violations() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
