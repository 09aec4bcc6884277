"""Run a private redis-server: for `assay up` (embedded local mode) and the tests.

It listens on 127.0.0.1 on a free port (or, given ``socket_path``, on that unix
socket only), keeps its data in its own folder, and is stopped by whoever started
it; nothing here touches a Redis it did not start. ``own_session`` (`assay up`) starts
it in a session of its own, so a Ctrl-C in the terminal reaches only the `assay up`
that started it, which stops it last, after the processes that use it, instead of the
terminal's SIGINT killing it under them.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisNotInstalled(RuntimeError):
    pass


@dataclass
class RedisProcess:
    data_dir: Path
    port: int = field(default_factory=free_port)
    appendonly: bool = True
    socket_path: Path | None = None
    own_session: bool = False
    extra_args: tuple[str, ...] = ()  # more redis-server options (a test's cluster mode)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.socket_path is not None:
            return f"unix://{self.socket_path}?db=0"
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisProcess:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisNotInstalled(
                "redis-server is not on PATH: install it (apt-get install redis-server) "
                "or set ASSAY_REDIS_URL to a Redis you run"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        listen = ["--port", str(self.port), "--bind", "127.0.0.1"]
        if self.socket_path is not None:
            listen = ["--port", "0", "--unixsocket", str(self.socket_path)]
            listen += ["--unixsocketperm", "700"]
        args = [
            binary,
            *listen,
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--maxmemory-policy",
            "noeviction",
            "--protected-mode",
            "yes",
            "--logfile",
            str(self.data_dir / "redis.log"),
            *self.extra_args,
        ]
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=self.own_session,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self.data_dir / "redis.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {tail}")
            if self._answers_ping():
                return self
            time.sleep(0.05)
        self.stop()
        where = self.socket_path or f"port {self.port}"
        raise RuntimeError(f"redis-server did not answer on {where} within {timeout}s")

    def _answers_ping(self) -> bool:
        try:
            if self.socket_path is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(0.2)
                sock.connect(str(self.socket_path))
            else:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=0.2)
            with sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, kill: bool = False) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self) -> None:
        """Stop and start again on the same port and data (AOF keeps what was written)."""
        self.stop()
        self.start()
