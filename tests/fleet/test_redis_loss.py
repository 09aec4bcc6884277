"""A worker and a scheduler whose Redis goes away: they say so at once and every N seconds
(``ASSAY_REDIS_OUTAGE_LOG_SECONDS``), say when it is back, and stop at once when asked.

Before: a worker whose Redis was gone took 25 s to stop (its presence key's delete sat
out the store client's half minute of retries), and a scheduler said nothing for 26 s
(each round sat in those retries), then one line per failed round. Real processes, a real
redis-server killed with SIGKILL and started again on the same port.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.redis_process import RedisProcess
from tests.alerting_support import log_events
from tests.fleet_support import ROOT, stop_process, wait_until, worker_env
from tests.scheduler_support import start_scheduler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OUTAGE = {"redis_outage_log_seconds": "1", "log_format": "json"}


def start_assay_worker(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """`assay worker` as a user starts it (its model never called here)."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "assay.cli", "worker", "--concurrency", "2"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def test_a_worker_says_its_redis_is_gone_and_stops_at_once(tmp_path: Path) -> None:
    server = RedisProcess(data_dir=tmp_path / "redis").start()
    env = worker_env(
        server.url, model="openai/scripted", api_base="http://127.0.0.1:9/v1", **OUTAGE
    )
    log = tmp_path / "worker.log"
    worker = start_assay_worker(env, log)
    try:
        assert wait_until(lambda: "ready." in log.read_text(errors="replace"), timeout=60), (
            log.read_text(errors="replace")[-3000:]
        )
        server.stop(kill=True)
        lost = time.monotonic()
        assert wait_until(lambda: "Connection to broker lost" in log.read_text(), timeout=5)
        assert wait_until(lambda: len(log_events(log, "redis_unreachable")) >= 3, timeout=15)
        said = log_events(log, "redis_unreachable")
        assert said[0]["down_seconds"] == 0.0 and float(said[2]["down_seconds"]) >= 1.5, said
        assert time.monotonic() - lost < 15
        server.start()  # the same port and data
        assert wait_until(lambda: log_events(log, "redis_reachable_again") != [], timeout=15)
        server.stop(kill=True)
        assert wait_until(lambda: len(log_events(log, "redis_unreachable")) > len(said), timeout=15)
        asked = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        took = time.monotonic() - asked
    finally:
        stop_process(worker)
        server.stop()
    assert worker.returncode == 0, log.read_text(errors="replace")[-3000:]
    assert took < 10, f"the worker took {took:.1f}s to stop without Redis"  # was 25 s
    assert "Traceback" not in log.read_text(errors="replace")


def test_a_scheduler_says_its_redis_is_gone_at_once_and_every_n_seconds(
    tmp_path: Path,
) -> None:
    server = RedisProcess(data_dir=tmp_path / "redis").start()
    env = worker_env(server.url, scheduler_tick_seconds="0.05", **OUTAGE)
    log = tmp_path / "scheduler.log"
    replica = start_scheduler(env, log)
    try:
        assert wait_until(lambda: log_events(log, "scheduler replica started") != [], timeout=60)
        server.stop(kill=True)
        lost = time.monotonic()
        assert wait_until(lambda: log_events(log, "redis_unreachable") != [], timeout=5)
        first = time.monotonic() - lost
        assert wait_until(lambda: len(log_events(log, "redis_unreachable")) >= 3, timeout=10)
        server.start()
        assert wait_until(lambda: log_events(log, "redis_reachable_again") != [], timeout=10)
        server.stop(kill=True)
        assert wait_until(lambda: len(log_events(log, "redis_unreachable")) >= 4, timeout=10)
        replica.send_signal(signal.SIGINT)  # rounds fail: one Ctrl-C stops it at once
        code = replica.wait(timeout=10)
    finally:
        stop_process(replica)
        server.stop()
    assert first < 5, f"the scheduler said so after {first:.1f}s"  # was 26 s
    said = log_events(log, "redis_unreachable")
    first_three = [float(entry["down_seconds"]) for entry in said[:3]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(first_three)]
    assert all(gap >= 0.9 for gap in gaps), said  # every N seconds, not every round
    assert code == 69, log.read_text()[-2000:]
    assert "scheduler tick failed" not in log.read_text()
