"""A worker's first live runs start on many threads at once: the kubernetes client, imported
lazily, must come up for every one of them (its modules import one another in a cycle, and
Python's per-module import locks report a deadlock to one of two threads meeting there)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.kubeconfig_support import kubeconfig_text

KUBECONFIG = kubeconfig_text("east", server="https://127.0.0.1:1")

# Each thread does what a live run's first steps do: build the backend (kubernetes.client and
# kubernetes.config), resolve a context glob (kubernetes.config), touch the transport's error
# type (kubernetes.client.exceptions). All in a fresh interpreter, so nothing is imported yet.
FIRST_RUNS = """\
import sys, threading
from schemas.request import ContextTarget
from schemas.settings import AssaySettings
from workers.engine.toolsets.live_backend import LiveBackend
from workers.fleet.targets import context_targets

kubeconfig = sys.argv[1]
failures = []
barrier = threading.Barrier(12)

def build():
    barrier.wait()
    try:
        target = ContextTarget(context="east", kubeconfig=kubeconfig)
        LiveBackend.from_target(target, AssaySettings())
    except Exception as exc:
        failures.append(repr(exc))

def glob():
    barrier.wait()
    try:
        list(context_targets("ea*", kubeconfig))
    except Exception as exc:
        failures.append(repr(exc))

threads = [threading.Thread(target=build if i % 2 else glob) for i in range(12)]
for t in threads: t.start()
for t in threads: t.join()
print("\\n".join(failures))
sys.exit(1 if failures else 0)
"""


def test_concurrent_first_live_runs_all_get_the_client(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(KUBECONFIG)
    for _attempt in range(4):
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(FIRST_RUNS), str(kubeconfig)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert done.returncode == 0, done.stdout + done.stderr[-2000:]
