"""The reliability suite's session: one ledger, its table at the end, and a failed session
when any must-be-zero count is not 0 (see ledger.py and docs/threat-model.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from assay.redis_process import RedisProcess
from tests.api_support import ApiServer
from tests.boundary_support import dump_keys
from tests.fleet_support import make_snapshots
from tests.reliability.ledger import LEDGER, Ledger

# The default slice (part of scripts/test.sh, a few minutes) and the full run
# (RELIABILITY_FULL=1 .venv/bin/python -m pytest tests/reliability): more hypothesis examples,
# every profile on the live-backend matrix, and the cases that wait out retry windows.
FULL = os.environ.get("RELIABILITY_FULL") == "1"
EXAMPLES = 200 if FULL else 30
full_only = pytest.mark.skipif(not FULL, reason="full reliability run only (RELIABILITY_FULL=1)")


@pytest.fixture(scope="session")
def ledger() -> Ledger:
    return LEDGER


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not LEDGER.cases:
        return
    terminalreporter.section("reliability summary")
    terminalreporter.write_line(LEDGER.table())
    for note in LEDGER.notes:
        terminalreporter.write_line("")
        terminalreporter.write_line(note)
    terminalreporter.write_line("")
    violations = LEDGER.violations()
    for title, count in violations.items():
        terminalreporter.write_line(f"FAILED: {title}: {count} (must be 0)", red=True)
    if not violations:
        terminalreporter.write_line("every must-be-zero count is 0", green=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if LEDGER.violations() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# --------------------------------------------------------------------------- a real API process

API_PREFIX = "rel"  # the suite's keys in the session's redis-server: rel:*, rel.evaluations
API_QUEUE = f"{API_PREFIX}.evaluations"


@pytest.fixture(scope="session")
def api_roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The only snapshot root the suite's API accepts: two snapshots and a symlink to /etc."""
    root = tmp_path_factory.mktemp("rel-roots") / "snaps"
    make_snapshots(root, 2)
    (root / "to-etc").symlink_to("/etc")
    return root


@pytest.fixture(scope="session")
def api(
    redis_server: RedisProcess, api_roots: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """A real `assay api` process (write and read tokens) on the session's redis-server."""
    server = ApiServer(
        redis_server.url,
        tmp_path_factory.mktemp("rel-api") / "api.log",
        settings={
            "ASSAY_KEY_PREFIX": API_PREFIX,
            "ASSAY_SNAPSHOT_ROOTS": json.dumps([str(api_roots)]),
        },
    ).start()
    yield server
    server.stop()


@dataclass
class StoreWatch:
    """What the suite's API keeps in Redis, to prove a refused request stored nothing."""

    client: redis.Redis

    def state(self) -> tuple[dict[str, tuple[str, Any]], int]:
        return dump_keys(self.client, API_PREFIX), self.client.llen(API_QUEUE)


@pytest.fixture(scope="session")
def store_watch(redis_server: RedisProcess) -> Iterator[StoreWatch]:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield StoreWatch(client)
    client.close()
