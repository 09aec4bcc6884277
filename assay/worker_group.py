"""`assay worker --processes N`: several Celery worker processes under one command.

Why: a worker process runs Python one thread at a time (the GIL). An
evaluation spends most of its wall time waiting on the model, which threads
overlap well, but it also costs CPU (mostly litellm's per-call work: about
5 ms per model call, see bench/bench_fleet.py), so one process cannot finish
more evaluations per second than one core allows, however many threads it has.
Celery's prefork pool cannot run threads inside its children, so the way to use
every core and keep many runs per process is whole worker processes, each with
its own threads pool and node name. This module starts them, forwards the
signals a supervisor sends (a warm shutdown stays warm: each process finishes
or requeues its runs), and stops the rest when one of them exits on its own.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
STOP_GRACE_SECONDS = 60.0


def node_name(index: int, hostname: str | None) -> str:
    """Celery node name of process ``index``: distinct per process, ``%h`` is the host."""
    if hostname:
        name, _, host = hostname.partition("@")
        return f"{name}-{index}@{host or '%h'}"
    return f"assay-{index}@%h"


def child_commands(
    processes: int,
    *,
    concurrency: int,
    pool: str,
    loglevel: str,
    hostname: str | None = None,
    cpu_affinity: str = "off",
) -> list[list[str]]:
    """The `assay worker` command line of each process (one process each, own node name).

    Each knows its index, which ``cpu_affinity`` (workers/fleet/cpu_affinity.py)
    turns into a CPU of its own.
    """
    return [
        [
            sys.executable,
            "-m",
            "assay.cli",
            "worker",
            "--processes",
            "1",
            "--concurrency",
            str(concurrency),
            "--pool",
            pool,
            "--loglevel",
            loglevel,
            "--hostname",
            node_name(index, hostname),
            "--cpu-affinity",
            cpu_affinity,
            "--process-index",
            str(index),
        ]
        for index in range(processes)
    ]


class WorkerGroup:
    """Worker processes started together and stopped together."""

    def __init__(self, commands: Sequence[Sequence[str]], env: dict[str, str]) -> None:
        self.commands = [list(command) for command in commands]
        self.env = env
        self.processes: list[subprocess.Popen[bytes]] = []
        self._stopping = False

    def start(self) -> WorkerGroup:
        for command in self.commands:
            # Own session: a Ctrl-C in the terminal reaches the group once, through
            # us; a second SIGINT would turn Celery's warm shutdown into a cold one.
            self.processes.append(subprocess.Popen(command, env=self.env, start_new_session=True))
        return self

    def signal_all(self, signum: int) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signum)

    def wait(self, poll_seconds: float = 0.5) -> int:
        """Block until every process has exited; returns the worst exit code."""
        while True:
            codes = [process.poll() for process in self.processes]
            if all(code is not None for code in codes):
                return max((abs(code) for code in codes if code is not None), default=0)
            if not self._stopping and any(code is not None for code in codes):
                # One worker left on its own (crash, fatal error): take the rest down too,
                # so whatever supervises `assay worker` sees it and restarts the whole group.
                self._stopping = True
                self.signal_all(signal.SIGTERM)
            time.sleep(poll_seconds)

    def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        """Warm-stop every process; kill what is still running after ``grace_seconds``."""
        self._stopping = True
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def run_worker_group(commands: Sequence[Sequence[str]], env: dict[str, str]) -> int:
    """Run the processes in the foreground until they exit; returns the worst exit code."""
    group = WorkerGroup(commands, env)

    def forward(signum: int, _frame: FrameType | None) -> None:
        group._stopping = True
        group.signal_all(signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
    try:
        group.start()
        return group.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if any(process.poll() is None for process in group.processes):
            group.stop()
