"""Helpers shared by the fleet tests: requests, finished reports, worker processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from schemas.budget import Budget, resolve_budget
from schemas.report import RunReport
from schemas.request import EvaluationRequest, SnapshotTarget
from schemas.verdict import Verdict, VerdictKind

ROOT = Path(__file__).resolve().parent.parent
# The fleet tests' scripted models answer without a confirmer, so their batches ask for
# `fast`: a batch names no profile runs `strict` (schemas.budget.UNATTENDED_PROFILE), whose
# `true` a confirmer must confirm. What these tests check is the fleet, not the profile.
NO_CONFIRMER_PROFILE = "fast"
VENV_BIN = Path(sys.executable).parent


def snapshot_request(
    text: str = "every Deployment in namespace prod has at least 2 ready replicas",
    path: str = "examples/snapshots/prod-eu",
    **fields: object,
) -> EvaluationRequest:
    return EvaluationRequest.model_validate(
        {"text": text, "target": SnapshotTarget(path=path), **fields}
    )


def finished_report(
    request: EvaluationRequest,
    verdict: VerdictKind | str,
    *,
    finished_at: datetime | None = None,
    explanation: str = "scripted outcome",
) -> RunReport:
    """A finished run report as the engine would return it (no steps needed by the store)."""
    finished = finished_at or datetime.now(UTC)
    verdict_kind = VerdictKind(verdict)
    return RunReport(
        run_id=request.run_id,
        check_id=request.check_id,
        status="done",
        request=request,
        budget=resolve_budget(request.profile, request.budget or Budget()),
        model="openai/scripted",
        verdict=Verdict.of_request(
            request,
            verdict_kind,
            explanation,
            model="openai/scripted",
            started_at=finished - timedelta(seconds=1),
            finished_at=finished,
            duration_seconds=1.0,
        ),
    )


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


TEST_SNAPSHOT_ROOTS = json.dumps([str(ROOT), tempfile.gettempdir()])


def worker_env(redis_url: str, **settings: str) -> dict[str, str]:
    """The environment of a worker subprocess: only ASSAY_* settings the test chose.

    Snapshots may come from the checkout and the temp folder unless the test
    sets ``snapshot_roots`` itself.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env["ASSAY_REDIS_URL"] = redis_url
    env["ASSAY_SNAPSHOT_ROOTS"] = TEST_SNAPSHOT_ROOTS
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["PYTHONPATH"] = str(ROOT)
    for key, value in settings.items():
        env[f"ASSAY_{key.upper()}"] = value
    return env


def start_worker(
    env: dict[str, str], log_path: Path, concurrency: int = 16
) -> subprocess.Popen[bytes]:
    """A real `celery worker` process on the project's Celery app, logging to ``log_path``."""
    log = log_path.open("ab")
    return subprocess.Popen(
        [
            str(VENV_BIN / "celery"),
            "-A",
            "workers.fleet.celery_app",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            str(concurrency),
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_process(process: subprocess.Popen[bytes], kill: bool = False) -> None:
    """Stop a process this test started (TERM, then KILL after 20 s)."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextmanager
def scripted_worker(
    redis_url: str, model_url: str, log_path: Path, concurrency: int = 16
) -> Iterator[subprocess.Popen[bytes]]:
    """A worker on the scripted model for one test; its log tail is printed if it ended badly."""
    process = start_worker(scripted_worker_env(redis_url, model_url), log_path, concurrency)
    try:
        yield process
    finally:
        stop_process(process)
        if process.returncode not in (0, -15):
            print(worker_log_tail(log_path))


DEPLOYMENT_YAML = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: prod
spec:
  replicas: 3
status:
  replicas: 3
  readyReplicas: {ready}
"""


def make_snapshots(root: Path, count: int, bad_every: int = 0) -> list[Path]:
    """``count`` tiny snapshot folders; every ``bad_every``-th holds an unready Deployment."""
    folders = []
    for index in range(count):
        folder = root / f"cluster-{index:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        bad = bad_every and index % bad_every == 0
        name = "web-bad" if bad else "web-ok"
        (folder / "deployments.yaml").write_text(
            DEPLOYMENT_YAML.format(name=name, ready=1 if bad else 3)
        )
        folders.append(folder)
    return folders


# What the fleet tests ask of the Deployments ``make_snapshots`` writes.
PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"


def three_step_script(delay: float = 0.0, hang_match: str | None = None) -> dict[str, object]:
    """A scripted planner: think, get Deployments, then DONE (false when it saw web-bad).

    ``hang_match``: predicates matching this regex get a model that never answers in time.
    """
    timing = {"delay": delay} if delay else {}
    scenarios: list[dict[str, object]] = []
    if hang_match:
        scenarios.append({"match": hang_match, "turns": [{"hang": 600}]})
    scenarios.append(
        {
            "turns": [
                {"action": {"action": "THOUGHT", "thought": "list the Deployments"}, **timing},
                {
                    "action": {
                        "action": "COMMAND",
                        "tool": "get",
                        "arguments": {"kind": "Deployment", "namespace": "prod"},
                    },
                    **timing,
                },
                {
                    "when": [
                        {
                            "if_contains": "web-bad",
                            "action": {
                                "action": "DONE",
                                "verdict": "false",
                                "explanation": "web-bad has 1 of 3 ready replicas",
                                "evidence": [{"step": 1, "excerpt": "web-bad"}],
                            },
                        },
                        {
                            "action": {
                                "action": "DONE",
                                "verdict": "true",
                                "explanation": "every Deployment is ready",
                                "evidence": [{"step": 1, "excerpt": "web-ok"}],
                            }
                        },
                    ],
                    **timing,
                },
            ]
        }
    )
    return {"scenarios": scenarios}


def scripted_worker_env(redis_url: str, model_url: str, **settings: str) -> dict[str, str]:
    """A worker environment pointed at the scripted model (never a real provider)."""
    return worker_env(
        redis_url,
        model="openai/scripted",
        api_base=model_url,
        api_key="scripted-no-key",
        log_format="json",
        **settings,
    )


def children_of(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux /proc: every thread's ``children``)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue  # the thread ended meanwhile
    return found


def worker_log_tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"
