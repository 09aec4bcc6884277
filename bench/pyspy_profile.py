"""Where a real worker's CPU goes, sampled by py-spy (used by bench_fleet's section (e)).

Why py-spy rather than cProfile: it samples the real ``assay worker`` process
(Celery, kombu and the thread pool included) and, with ``--native``, sees C
frames. cProfile cannot see either; in particular it cannot see CPython's cyclic
garbage collector, which py-spy found taking a third of a busy worker's GIL time
(fixed by ``workers.fleet.runtime.freeze_startup_heap``).

Why py-spy *launches* the worker: attaching to a running process needs ptrace
rights that a machine may not grant (this one did not), while a parent may
always trace its own child. Stopping the worker (SIGTERM to py-spy's child)
ends the recording, and py-spy then writes its file.

Why ``--gil``: only samples of a thread holding the GIL, i.e. the time that
limits one worker process; threads waiting on a socket are not counted. The
shares are of those samples; bench_fleet scales them to the worker's CPU per
evaluation measured without a profiler.

Which samples count: those of a worker serving, i.e. in Celery's event loop
(``asynloop``) or in a thread (the task pool's, litellm's logging), outside an
import. Start-up is left out: building the command line, importing, Celery's
boot steps, and the worker-ready handler (with the one full collection
``freeze_startup_heap`` makes on purpose). A stack with no Python frame cannot
be placed in time; it is kept, as its own row.

Attribution of one sample (one stack, root first):
- a garbage-collector frame anywhere -> "garbage collector";
- a native frame below the innermost Python frame from a library other than
  CPython's own (pydantic_core, tiktoken, OpenSSL, libc...) -> "other native";
- a stack with no Python frame at all -> "native, no Python frame";
- otherwise the component of the innermost Python frame's file
  (``fleet_profile.component_of``), C code of CPython itself (``_json`` aside)
  being charged to the Python code that called it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.fleet_profile import OTHER, component_of

GARBAGE_COLLECTOR = "garbage collector (CPython's cyclic GC)"
OTHER_NATIVE = "other native (pydantic_core, tiktoken, ssl, libc...)"
NO_PYTHON = "native, no Python frame (thread start/exit, unresolved)"
JSON = "JSON encode/decode"
# one frame as py-spy's raw format writes it: "name (location)", location "file:line" or a library
FRAME = re.compile(r"^(?P<name>.*) \((?P<location>[^()]*)\)$")
GC_FUNCTIONS = ("gc_collect_main", "gc_collect_with_callback", "gc_collect_generations")
# CPython's own native code: the shared library, the binary, its build tree, its lib-dynload
# modules (OpenSSL's bindings aside: their time is the TLS library's)
CPYTHON_NATIVE = re.compile(r"libpython|/python3(\.\d+)?$|/Python-\d|/Include/|/lib-dynload/")
OPENSSL_BINDINGS = ("_ssl", "_hashlib")
# start-up, wherever it runs: an import; Celery's worker-ready signal (whose handler loads
# litellm and makes the one full collection of freeze_startup_heap, from inside the event loop)
START_UP_FRAMES = ("_find_and_load ", "Worker.on_consumer_ready ")
# frames of a serving worker: Celery's event loop (main thread), and every other thread's start
SERVING_FRAMES = ("asynloop ", "Thread._bootstrap ")


def py_spy_path() -> str | None:
    """py-spy next to this interpreter (the venv's, from the ``bench`` extra), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def record_command(py_spy: str, output: Path, rate: int = 200) -> list[str]:
    """The argv prefix that runs a command under py-spy: GIL holders, native frames, children.

    ``--full-filenames`` keeps site-packages paths, which the component needles match.
    """
    return [
        py_spy, "record", "--gil", "--native", "--subprocesses", "--full-filenames",
        "--rate", str(rate), "--format", "raw", "--output", str(output), "--",
    ]  # fmt: skip


def stop_recording(recorder: subprocess.Popen[bytes], children: list[int]) -> None:
    """End the recorded processes so py-spy writes its file; kill it only if it hangs.

    SIGTERM goes to the worker (py-spy's child), not to py-spy, which would stop
    without writing what it sampled.
    """
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    try:
        recorder.wait(timeout=60)
    except subprocess.TimeoutExpired:
        recorder.kill()
        recorder.wait(timeout=10)


def read_raw(path: Path) -> Iterator[tuple[list[str], int]]:
    """(frames root first, samples) per line of py-spy's raw format: ``f1;f2;...;fn count``."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def parse_frame(frame: str) -> tuple[str, str, bool] | None:
    """(name, file or library, is Python) of one frame; None for py-spy's process label."""
    match = FRAME.match(frame)
    if match is None or frame.startswith("process "):
        return None
    name, location = match["name"], match["location"]
    file = re.sub(r":\d+$", "", location)
    is_python = file.endswith(".py") or file.startswith("<frozen ")
    return name, file, is_python


def component_of_stack(frames: list[str]) -> str:
    """The component one sample's time belongs to (rules in the module docstring)."""
    parsed = [p for p in (parse_frame(f) for f in frames) if p is not None]
    if any(name in GC_FUNCTIONS for name, _, _ in parsed):
        return GARBAGE_COLLECTOR
    python = [i for i, (_, _, is_python) in enumerate(parsed) if is_python]
    if not python:
        return NO_PYTHON
    for name, file, _ in parsed[python[-1] + 1 :]:
        if "_json" in file or name.startswith("encoder_") or name.startswith("scanner_"):
            return JSON
        if not CPYTHON_NATIVE.search(file) or any(b in file for b in OPENSSL_BINDINGS):
            return OTHER_NATIVE
    return component_of(parsed[python[-1]][1]) or OTHER


def is_serving(frames: list[str]) -> bool:
    """Whether a sample is of the worker serving (see the module docstring), not starting."""
    if any(frame.startswith(START_UP_FRAMES) for frame in frames):
        return False
    if component_of_stack(frames) == NO_PYTHON:
        return True
    return any(frame.startswith(SERVING_FRAMES) for frame in frames)


@dataclass
class Breakdown:
    samples: int  # GIL-holding samples of the worker serving
    left_out: int  # samples of start-up (imports, command line, boot steps) and shutdown
    shares: list[tuple[str, float]]  # component, fraction of ``samples``, largest first


def breakdown(path: Path) -> Breakdown:
    """Shares of the serving worker's samples per component, largest first."""
    totals: Counter[str] = Counter({GARBAGE_COLLECTOR: 0})  # a row even when it is gone
    left_out = 0
    for frames, count in read_raw(path):
        if is_serving(frames):
            totals[component_of_stack(frames)] += count
        else:
            left_out += count
    samples = sum(totals.values())
    shares = sorted(
        ((name, count / (samples or 1)) for name, count in totals.items()), key=lambda s: -s[1]
    )
    return Breakdown(samples, left_out, shares)
