"""Run one argv without a shell, bounded in time and output, and leave nothing behind.

The child gets its own session (so its whole process group can be killed),
stdin closed, a scrubbed environment and a fixed working directory. Output
(stdout and stderr, interleaved as written) is read as it arrives: the first
``output_limit_bytes`` are kept and the rest is counted and dropped, so a noisy
command cannot exhaust the worker's memory. At the deadline, or as soon as the
child itself exits, the whole process group is killed, so neither a hung
command nor a background grandchild outlives the call.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class RunOutcome:
    """What happened to one command.

    ``exit_code`` is ``None`` when it was killed at the deadline or when its
    status was lost (``status_lost``); never a made-up 0.
    """

    exit_code: int | None
    output: bytes
    total_output_bytes: int
    timed_out: bool
    duration_seconds: float
    status_lost: bool = False

    @property
    def truncated(self) -> bool:
        return self.total_output_bytes > len(self.output)


def scrubbed_environment(env_allow: Iterable[str]) -> dict[str, str]:
    """Only the allow-listed variables of this process, for the child.

    This is the one justified place outside ``schemas.settings`` that reads
    ``os.environ``: the child must inherit PATH, HOME, LANG ... and nothing else
    (no model keys, cloud tokens or ``ASSAY_*`` settings), and only the
    process environment holds those values.
    """
    return {name: os.environ[name] for name in env_allow if name in os.environ}


def resolve_program(program: str, env: dict[str, str]) -> str | None:
    """The absolute path ``program`` names, searched only in absolute PATH entries.

    Relative PATH entries (``.``, empty) are dropped so a file in the working
    directory can never stand in for the program the policy named.
    """
    if "/" in program:
        path = Path(program)
        return str(path) if path.is_absolute() and os.access(path, os.X_OK) else None
    search = os.pathsep.join(
        entry for entry in env.get("PATH", "").split(os.pathsep) if os.path.isabs(entry)
    )
    return shutil.which(program, path=search) if search else None


class _ChildStatus:
    """Whether the child has exited, asked without reaping it.

    Leaving the zombie unreaped keeps its pid (and so its process-group id)
    reserved, which makes the ``killpg`` that follows safe from pid reuse. If
    someone else reaped it (SIGCHLD ignored by the hosting process), the exit
    code is gone; ``lost`` records that so it is never reported as 0.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.lost = False

    def has_exited(self) -> bool:
        try:
            status = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            self.lost = True
            return True
        return status is not None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_argv(
    argv: list[str],
    executable: str,
    *,
    env: dict[str, str],
    cwd: Path,
    timeout_seconds: float,
    output_limit_bytes: int,
) -> RunOutcome:
    """Run ``argv`` (``argv[0]`` as the program sees it, ``executable`` what is executed)."""
    started = time.monotonic()
    deadline = started + timeout_seconds
    process = subprocess.Popen(
        argv,
        executable=executable,
        shell=False,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=env,
        start_new_session=True,
        close_fds=True,
    )
    assert process.stdout is not None  # stdout=PIPE above
    kept = bytearray()
    total = 0
    timed_out = False
    exited = False
    child = _ChildStatus(process.pid)
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout.fileno(), selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                if selector.select(timeout=min(remaining, _POLL_SECONDS)):
                    chunk = os.read(process.stdout.fileno(), 65536)
                    if not chunk:
                        break  # every writer closed the pipe
                    total += len(chunk)
                    if len(kept) < output_limit_bytes:
                        kept += chunk[: output_limit_bytes - len(kept)]
                elif not exited and child.has_exited():
                    # The child is done but something it started still holds the
                    # pipe: end those leftovers; EOF follows once they are gone.
                    exited = True
                    _kill_group(process.pid)
        while not timed_out and not child.has_exited():
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(_POLL_SECONDS / 5)
    finally:
        _kill_group(process.pid)
        process.wait()  # reaps; reads 0 if the status was lost, hence child.lost below
        process.stdout.close()
    return RunOutcome(
        exit_code=None if timed_out or child.lost else process.returncode,
        output=bytes(kept),
        total_output_bytes=total,
        timed_out=timed_out,
        duration_seconds=time.monotonic() - started,
        status_lost=child.lost and not timed_out,
    )
