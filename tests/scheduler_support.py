"""Helpers for the scheduler's process tests: replica processes and the broker queue."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tests.fleet_support import ROOT


def start_scheduler(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """A real `assay scheduler` replica process, logging to ``log_path``."""
    log = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "assay.cli", "scheduler"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def queued_messages(client: Any, queue: str) -> list[dict[str, Any]]:
    """The ``assay.evaluate`` messages waiting on a Redis broker queue nobody consumes.

    Each is ``{"task_id", "request", "kwargs"}`` decoded from kombu's envelope.
    """
    out = []
    for raw in client.lrange(queue, 0, -1):
        envelope = json.loads(raw)
        args, kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        out.append({"task_id": envelope["headers"]["id"], "request": args[0], "kwargs": kwargs})
    return out


def duplicates(task_ids: list[str]) -> int:
    return sum(count - 1 for count in Counter(task_ids).values() if count > 1)
