"""Helpers for the alerting tests: a recording HTTP receiver, a real Alertmanager process,
notifier processes, and verdict flips recorded through the store's real record path."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from assay.redis_process import free_port
from notifier.service import Notifier, http_client
from schemas.request import EvaluationRequest
from schemas.settings import AssaySettings
from schemas.verdict import VerdictKind
from tests.fleet_support import ROOT, finished_report, snapshot_request, wait_until
from workers.fleet.notify_feed import SinkFeed
from workers.fleet.store import VerdictStore

PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
HMAC_KEY = "test-hmac-key-5f0c2e9a"


# --- verdict flips through the store's record path ----------------------------------------------
def record(
    store: VerdictStore,
    verdict: VerdictKind | str,
    *,
    path: str = "examples/snapshots/prod-eu",
    text: str = PREDICATE,
    explanation: str = "scripted outcome",
) -> EvaluationRequest:
    """Register, start and finish one run of the check (text, path), as a worker does."""
    request = snapshot_request(text=text, path=path)
    store.register_run(request)
    store.begin_delivery(request)
    assert store.record_verdict(finished_report(request, verdict, explanation=explanation))
    return request


# --- a recording HTTP receiver -------------------------------------------------------------------
@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Records every POST; answers from ``statuses`` (or its path's list), then 200.

    ``hold_next()`` makes the next request wait, recorded, until ``release()``: the
    moment to SIGKILL a notifier "mid-delivery".
    """

    statuses: list[int] = field(default_factory=list)
    statuses_by_path: dict[str, list[int]] = field(default_factory=dict)
    delay: float = 0.0
    requests: list[Received] = field(default_factory=list)
    _hold: threading.Event | None = None
    _release: threading.Event | None = None
    _held: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver._lock:
                    queue = receiver.statuses_by_path.get(self.path, receiver.statuses)
                    status = queue.pop(0) if queue else 200
                    hold, receiver._hold = receiver._hold, None
                    receiver.requests.append(
                        Received(
                            self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            body,
                            status,
                        )
                    )
                if hold is not None:
                    receiver._held.set()
                    hold.wait(60)
                if receiver.delay:
                    time.sleep(receiver.delay)
                try:
                    self.send_response(status)
                    self.send_header("content-length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:  # the notifier was killed while we held its request
                    pass

            def log_message(self, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def hold_next(self) -> threading.Event:
        """The next request waits until ``release()``; returns an event set once it arrived."""
        with self._lock:
            self._hold = threading.Event()
            self._held.clear()
            self._release = self._hold
        return self._held

    def release(self) -> None:
        if self._release is not None:
            self._release.set()

    def on(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.path == path]


def verify_signature(request: Received, key: str = HMAC_KEY) -> bool:
    expected = "sha256=" + hmac.new(key.encode(), request.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(request.headers.get("x-assay-signature", ""), expected)


# --- a real Alertmanager ------------------------------------------------------------------------
ALERTMANAGER_BINARIES = ("prometheus-alertmanager", "alertmanager")


def alertmanager_binary() -> str:
    for name in ALERTMANAGER_BINARIES:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        "Alertmanager is not installed: `apt-get install prometheus-alertmanager` "
        "(scripts/install.sh does it when run as root)"
    )


@dataclass
class Alertmanager:
    """A private Alertmanager on a free port, routing every alert to ``webhook_url``."""

    data_dir: Path
    webhook_url: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Alertmanager:
        binary = alertmanager_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "route": {
                "receiver": "hook",
                "group_by": ["check_id", "target"],
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "hook",
                    "webhook_configs": [{"url": self.webhook_url, "send_resolved": True}],
                }
            ],
        }
        config_path = self.data_dir / "alertmanager.yml"
        config_path.write_text(yaml.safe_dump(config))
        log = (self.data_dir / "alertmanager.log").open("ab")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.path={self.data_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"alertmanager exited: {self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"alertmanager did not get ready: {self.log_tail()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log_tail(self) -> str:
        path = self.data_dir / "alertmanager.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def alerts(self, check_id: str) -> list[dict[str, Any]]:
        """Active alerts for the check, through the API (resolved ones are not listed)."""
        response = httpx.get(
            f"{self.url}/api/v2/alerts", params={"filter": f'check_id="{check_id}"'}, timeout=5
        )
        response.raise_for_status()
        return list(response.json())


def notifications(hook: Receiver, check_id: str) -> list[str]:
    """The statuses (firing / resolved) Alertmanager notified about ``check_id``, in order."""
    out = []
    for request in hook.on("/alertmanager"):
        payload = request.json()
        for alert in payload["alerts"]:
            if alert["labels"].get("check_id") == check_id:
                out.append(alert["status"])
    return out


# --- notifier processes -------------------------------------------------------------------------
def notifier_env(redis_url: str, sinks: dict[str, Any], **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env.update(
        {
            "ASSAY_REDIS_URL": redis_url,
            "ASSAY_NOTIFY_SINKS": json.dumps(sinks),
            "ASSAY_LOG_FORMAT": "json",
            "ASSAY_NOTIFY_CLAIM_IDLE_SECONDS": "2",
            "ASSAY_NOTIFY_RETRY_MAX_SECONDS": "0.3",
            "ASSAY_NOTIFY_TIMEOUT_SECONDS": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for key, value in settings.items():
        env[f"ASSAY_{key.upper()}"] = value
    return env


def start_notifier(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """A real `assay notify` process."""
    log = log_path.open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "assay.cli", "notify"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    return process


def wait_started(
    store: VerdictStore, sinks: list[str], process: subprocess.Popen[bytes], log: Path
) -> None:
    """Until every sink's consumer group exists (changes from then on reach it)."""

    def started() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"notifier exited: {log.read_text()[-3000:]}")
        return all(SinkFeed(store, sink, "probe").status("webhook").started for sink in sinks)

    assert wait_until(started, timeout=30), log.read_text()[-3000:]


def log_events(path: Path, event: str) -> list[dict[str, Any]]:
    lines = []
    for raw in path.read_text(errors="replace").splitlines():
        try:
            parsed = json.loads(raw)
        except ValueError:
            continue
        if isinstance(parsed, dict) and parsed.get("event") == event:
            lines.append(parsed)
    return lines


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    assert wait_until(predicate, timeout=timeout, interval=0.05), f"timed out waiting for {what}"


# --- a notifier replica in this process -------------------------------------------------------
LINK_BASE = "https://assay.example.com"


def webhook(url: str, **extra: Any) -> dict[str, Any]:
    """A webhook sink signed with the tests' HMAC key."""
    return {"type": "webhook", "url": url, "hmac_key": HMAC_KEY, **extra}


def settings_for(redis_url: str, sinks: dict[str, Any], **extra: Any) -> AssaySettings:
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "notify_sinks": sinks,
        "notify_claim_idle_seconds": 2,
        "notify_retry_max_seconds": 0.2,
        "notify_timeout_seconds": 2,
        "notify_run_link_base": LINK_BASE,
        **extra,
    }
    return AssaySettings(**values)


@contextmanager
def notifier_running(settings: AssaySettings) -> Iterator[VerdictStore]:
    store = VerdictStore.from_settings(settings)
    with http_client(settings) as http:
        notifier = Notifier(settings, store, http)
        stop = threading.Event()
        thread = threading.Thread(target=notifier.run, args=(stop,), daemon=True)
        thread.start()
        try:
            wait_for(
                lambda: all(w.feed.status("webhook").started for w in notifier.workers),
                10,
                "the sinks' groups",
            )
            yield store
        finally:
            stop.set()
            thread.join(15)
            assert not thread.is_alive(), "the notifier did not stop"
