"""Embedded local mode: a private Redis, a worker and the scheduler on one machine.

``assay up`` starts a :class:`LocalFleet` and writes where its Redis listens to
``{data_dir}/local.json``; other commands in other shells (``assay submit``,
``assay verdict`` ...) find it there when ``ASSAY_REDIS_URL`` is not set.
``assay demo`` starts one in a temporary folder and removes it afterwards.
Everything here is a subprocess this module started and stops again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from assay.redis_process import RedisProcess
from workers.fleet.redis_client import FleetNotConfigured

if TYPE_CHECKING:
    from schemas.settings import AssaySettings

STATE_FILE = "local.json"
STOP_GRACE_SECONDS = 20.0  # a worker's runs in flight may finish within this; then it is killed
STOP_ORDER = ("scheduler", "worker")  # signalled in this order; Redis stops after both


def state_path(settings: AssaySettings) -> Path:
    return Path(settings.data_dir) / STATE_FILE


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def discover_redis_url(settings: AssaySettings) -> str | None:
    """The fleet's Redis: ASSAY_REDIS_URL, else a running `assay up`, else None."""
    if settings.redis_url:
        return settings.redis_url
    path = state_path(settings)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not _pid_alive(int(state.get("pid", 0) or 0)):
        return None
    url = state.get("redis_url")
    return str(url) if url else None


def require_redis_url(settings: AssaySettings) -> str:
    url = discover_redis_url(settings)
    if url is None:
        raise FleetNotConfigured(
            "no fleet is running here: start one with `assay up` in another terminal, "
            "or set ASSAY_REDIS_URL to your Redis"
        )
    return url


def child_env(redis_url: str, **settings: str) -> dict[str, str]:
    """The environment for a worker or scheduler child: ours, pointed at ``redis_url``."""
    env = dict(os.environ)
    env["ASSAY_REDIS_URL"] = redis_url
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    for key, value in settings.items():
        env[f"ASSAY_{key.upper()}"] = value
    return env


@dataclass
class LocalFleet:
    """A private redis-server (unless ``redis_url`` is given), one worker, and the scheduler."""

    data_dir: Path
    redis_url: str | None = None
    concurrency: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    with_scheduler: bool = True
    log_dir: Path | None = None
    redis: RedisProcess | None = None
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self) -> LocalFleet:
        if self.redis_url is None:
            self.redis = RedisProcess(data_dir=self.data_dir / "redis", own_session=True).start()
            self.redis_url = self.redis.url
        env = child_env(self.redis_url, **self.extra_env)
        worker = [sys.executable, "-m", "assay.cli", "worker"]
        if self.concurrency:
            worker += ["--concurrency", str(self.concurrency)]
        self._spawn("worker", worker, env)
        if self.with_scheduler:
            self._spawn("scheduler", [sys.executable, "-m", "assay.cli", "scheduler"], env)
        return self

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        """Start a child in a session of its own: the terminal's Ctrl-C reaches `assay up`
        alone, which stops the children in order (a SIGINT of its own would turn a
        Celery worker's warm shutdown cold on the second press, and reach Redis too)."""
        log_dir = self.log_dir or self.data_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        with (log_dir / f"{name}.log").open("ab") as log:
            self.children[name] = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_until_ready(self, key_prefix: str, timeout: float) -> str | None:
        """Wait until the worker says it consumes the queue (``assay.worker_presence``);
        None then, else why not: a child that stopped, or the time that ran out."""
        from assay.worker_presence import read_fleet_models
        from workers.fleet.redis_client import connect

        assert self.redis_url is not None, "start() the fleet first"
        redis = connect(self.redis_url, retries=2)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if stopped := self.exited():
                    name, code = next(iter(stopped.items()))
                    return f"the {name} stopped with exit code {code}"
                if read_fleet_models(redis, key_prefix).ready:
                    return None
                time.sleep(0.2)
        finally:
            redis.close()
        return f"the worker was not ready within {timeout:g}s"

    def log_path(self, name: str) -> Path:
        return (self.log_dir or self.data_dir / "logs") / f"{name}.log"

    def exited(self) -> dict[str, int]:
        """Children that stopped on their own, with their exit codes."""
        return {
            name: code
            for name, child in self.children.items()
            if (code := child.poll()) is not None
        }

    def write_state(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {"redis_url": self.redis_url, "pid": os.getpid(), "started_at": time.time()}
        path.write_text(json.dumps(state))

    def stop(self, grace: float = STOP_GRACE_SECONDS, hurry: threading.Event | None = None) -> None:
        """Stop the scheduler and the worker, then Redis once both are gone.

        Both get SIGTERM at once (the scheduler first): the scheduler finishes its round,
        the worker its runs in flight (an idle one stops in about a second; a run it
        leaves unacknowledged is handed out again). What still runs after ``grace``
        seconds, or once ``hurry`` is set (a second Ctrl-C), is killed. Redis goes last,
        so no part loses it while stopping.
        """
        deadline = time.monotonic() + grace
        order = sorted(self.children, key=lambda n: STOP_ORDER.index(n) if n in STOP_ORDER else 0)
        for name in order:
            if self.children[name].poll() is None:
                self.children[name].send_signal(signal.SIGTERM)
        for name in order:
            child = self.children[name]
            while child.poll() is None:
                if (hurry is not None and hurry.is_set()) or time.monotonic() >= deadline:
                    child.kill()
                    child.wait(timeout=10)
                    break
                time.sleep(0.02)
        self.children.clear()
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
