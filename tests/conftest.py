"""Shared fixtures. Every external part is real and private to the test run:
a redis-server on a free port in a temp dir, never the machine's own Redis."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# Never let a test reach a model price list on the internet.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
for _var in list(os.environ):
    if _var.startswith("ASSAY_"):
        del os.environ[_var]

from assay.redis_process import RedisProcess  # noqa: E402

if TYPE_CHECKING:
    from tests.sentinel_support import SentinelBroker

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# The tests read snapshots from the checkout and from their temp folders; tests of
# the snapshot roots themselves set or remove this (docs/fleet.md, "Snapshot roots").
TEST_SNAPSHOT_ROOTS = json.dumps([str(ROOT), tempfile.gettempdir()])
os.environ["ASSAY_SNAPSHOT_ROOTS"] = TEST_SNAPSHOT_ROOTS


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(data_dir=tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisProcess) -> Iterator[str]:
    """A clean logical database of the test's own redis-server."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()  # our own server, started above: safe to flush
    yield redis_server.url
    client.close()


@pytest.fixture
def sentinel_broker(tmp_path: Path) -> Iterator[SentinelBroker]:
    """A redis-server for the broker with a real sentinel watching it (``sentinel://``)."""
    from tests.sentinel_support import watched_broker

    with watched_broker(tmp_path) as broker:
        yield broker
