"""A real `assay api` process on a free port, for the API tests.

The server is the same command a user runs (``python -m assay.cli api``), with
its settings in ``ASSAY_*`` variables and its stdout/stderr (the JSON logs) in
a file the tests can read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from assay.redis_process import free_port

ROOT = Path(__file__).resolve().parent.parent
READ_TOKEN = "read-token-0123456789abcdef"
WRITE_TOKEN = "write-token-0123456789abcdef"
TOKENS = {READ_TOKEN: "read", WRITE_TOKEN: "write"}


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class ApiServer:
    redis_url: str
    log_path: Path
    settings: dict[str, str | None] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
        env.update(
            {
                "ASSAY_REDIS_URL": self.redis_url,
                "ASSAY_API_TOKENS": json.dumps(TOKENS),
                "ASSAY_LOG_FORMAT": "json",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                # snapshots from the checkout and temp folders; a test may set or drop it
                "ASSAY_SNAPSHOT_ROOTS": json.dumps([str(ROOT), tempfile.gettempdir()]),
            }
        )
        for key, value in self.settings.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def start(self, timeout: float = 30.0) -> ApiServer:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "assay.cli",
                "api",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            cwd=ROOT,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"assay api exited early:\n{self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"assay api did not answer within {timeout}s:\n{self.log_path.read_text()[-3000:]}"
        )

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_lines(self) -> list[dict[str, object]]:
        """The JSON log lines written so far (other lines are skipped)."""
        lines = []
        for raw in self.log_path.read_text().splitlines():
            try:
                parsed = json.loads(raw)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                lines.append(parsed)
        return lines
