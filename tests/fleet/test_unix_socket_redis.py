"""A fleet on a Redis reached over a unix socket (``ASSAY_REDIS_URL=unix:///PATH?db=0``).

Before: every fleet command crashed with a traceback (exit 70: redis-py's unix-socket
connection refuses the TCP keepalive option), and Celery could not use the URL as its
broker (kombu has no ``unix`` transport; its spelling is ``redis+socket://``). Here one
real redis-server listens on a socket only (no TCP port) and every part runs on it as a
user starts it: `assay up` (worker and scheduler), submit, a schedule fired by the
scheduler, `assay checks`, `assay api` and `assay notify`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from assay.redis_process import RedisProcess
from schemas.settings import AssaySettings
from tests.alerting_support import (
    Receiver,
    notifier_env,
    record,
    start_notifier,
    wait_for,
    wait_started,
    webhook,
)
from tests.api_support import READ_TOKEN, ApiServer, auth
from tests.assay.test_fleet_cli import assay
from tests.fleet_support import PREDICATE, ROOT, stop_process, wait_until
from workers.fleet.redis_client import connect
from workers.fleet.store import VerdictStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

DEMO_SCRIPT = str(ROOT / "examples" / "scripts" / "demo.yaml")


@pytest.fixture(scope="module")
def socket_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server listening on a unix socket only; its URL."""
    folder = Path(tempfile.mkdtemp(prefix="assay-sock-", dir="/tmp"))  # a socket path is short
    server = RedisProcess(
        data_dir=tmp_path_factory.mktemp("redis"),
        socket_path=folder / "redis.sock",
        appendonly=False,
    ).start()
    yield server.url
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet_env(
    socket_redis: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """`assay up --detach --scripted` on the socket Redis (a worker and a scheduler), and
    the environment a user's other shells have; `assay down` at the end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env.update(
        ASSAY_REDIS_URL=socket_redis,
        ASSAY_DATA_DIR=str(tmp_path_factory.mktemp("data")),
        ASSAY_SNAPSHOT_ROOTS=json.dumps([str(ROOT)]),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PYTHONPATH=str(ROOT),
    )
    up = assay("up", "--detach", "--scripted", DEMO_SCRIPT, env=env, timeout=150)
    assert up.returncode == 0, up.stdout + up.stderr
    yield env
    down = assay("down", env=env)
    assert down.returncode == 0, down.stderr


def test_cli_worker_and_scheduler_run_on_a_unix_socket_redis(fleet_env: dict[str, str]) -> None:
    waited = assay(
        "submit", PREDICATE, "--snapshot", "examples/snapshots/prod-eu", "--wait",
        "--wait-timeout", "90", env=fleet_env,
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    assert "TRUE" in waited.stdout

    added = assay(
        "schedule", "add", "staging", PREDICATE, "--every", "1h",
        "--snapshots", "examples/snapshots/staging-us", "--profile", "fast", env=fleet_env,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    fired = assay("schedule", "run-now", "staging", env=fleet_env)
    assert fired.returncode == 0, fired.stderr

    def staging_judged() -> bool:
        listed = assay("checks", "--json", env=fleet_env)
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        return any(r["target"] == "snapshot:staging-us" and r["verdict"] for r in rows)

    assert wait_until(staging_judged, timeout=90, interval=1.0), "the scheduler's fire ran"
    table = assay("checks", env=fleet_env)
    assert table.returncode == 0, table.stderr
    assert "FALSE" in table.stdout and "TRUE" in table.stdout


def test_the_api_and_the_notifier_run_on_a_unix_socket_redis(
    socket_redis: str, tmp_path: Path
) -> None:
    api = ApiServer(socket_redis, tmp_path / "api.log").start()
    try:
        ready = httpx.get(f"{api.url}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        listed = httpx.get(f"{api.url}/v1/checks", headers=auth(READ_TOKEN), timeout=10)
        assert listed.status_code == 200, listed.text
    finally:
        api.stop()

    store = VerdictStore.from_settings(AssaySettings(), client=connect(socket_redis))
    hooks = Receiver().start()
    notifier = start_notifier(
        notifier_env(socket_redis, {"ops": webhook(f"{hooks.url}/ops")}), tmp_path / "n.log"
    )
    try:
        wait_started(store, ["ops"], notifier, tmp_path / "n.log")
        text = "every Deployment in namespace sock has at least 2 ready replicas"
        record(store, "true", text=text)
        record(store, "false", text=text, explanation="web has 1 of 3 ready replicas")
        wait_for(lambda: len(hooks.on("/ops")) == 1, 30, "the webhook to hear of the change")
    finally:
        stop_process(notifier)
        hooks.stop()
