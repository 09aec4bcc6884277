"""A planner's 1-hour WAIT, end to end: checkpointed, worker freed, resumed by the scheduler.

Real redis-server, a real `celery worker` (one thread, so "freed" is visible),
the scripted model over HTTP through litellm, and a real scheduler replica. The
hour is not waited out: the continuation timer's due instant is moved to now
in Redis, which is exactly what the passage of time would do to it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

from assay.client import Client
from assay.testing.scripted_model import ScriptedModel
from schemas.budget import Budget
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.fleet_support import (
    make_snapshots,
    scripted_worker_env,
    start_worker,
    stop_process,
    wait_until,
    worker_env,
    worker_log_tail,
)
from tests.scheduler_support import start_scheduler
from workers.fleet.timers import TimerStore, continuation_timer_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

USAGE = {"prompt_tokens": 100, "completion_tokens": 10}
SCRIPT = {
    "scenarios": [
        {
            "match": "rollout",
            "turns": [
                {
                    "action": {"action": "WAIT", "seconds": 3600, "reason": "let it roll"},
                    "usage": USAGE,
                },
                {
                    "action": {
                        "action": "COMMAND",
                        "tool": "get",
                        "arguments": {"kind": "Deployment", "namespace": "prod"},
                    },
                    "usage": USAGE,
                },
                {
                    "action": {
                        "action": "DONE",
                        "verdict": "true",
                        "explanation": "web-ok has 3 of 3 ready replicas",
                        "evidence": [{"step": 1, "excerpt": "web-ok"}],
                    },
                    "usage": USAGE,
                },
            ],
        },
        {
            "turns": [
                {
                    "action": {
                        "action": "COMMAND",
                        "tool": "get",
                        "arguments": {"kind": "Deployment", "namespace": "prod"},
                    }
                },
                {
                    "action": {
                        "action": "DONE",
                        "verdict": "false",
                        "explanation": "quick answer",
                        "evidence": [{"step": 0, "excerpt": "web-ok"}],
                    }
                },
            ]
        },
    ]
}


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel(SCRIPT) as scripted:
        yield scripted


@pytest.fixture
def worker(redis_url: str, model: ScriptedModel, tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "worker.log"
    process = start_worker(scripted_worker_env(redis_url, model.url), log, concurrency=1)
    yield log
    stop_process(process)


def test_an_hour_long_wait_is_parked_and_resumed_with_the_same_run_and_budget(
    redis_url: str, model: ScriptedModel, worker: Path, tmp_path: Path
) -> None:
    (snapshot,) = make_snapshots(tmp_path / "snaps", 1)
    raw = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    timers = TimerStore(raw, "assay")
    with Client(load_settings(redis_url=redis_url)) as fleet:
        waiting = fleet.submit(
            "within the hour the rollout of web is complete", snapshot=str(snapshot)
        )
        starved = fleet.submit(
            "after the wait the rollout is complete",
            snapshot=str(snapshot),
            budget=Budget(max_iterations=2),
        )

        def both_parked() -> bool:
            states = [fleet.run_state(r.run_id) for r in (waiting, starved)]
            return all(s is not None and s.status == "waiting" for s in states)

        assert wait_until(both_parked, timeout=90), worker_log_tail(worker)
        wake = timers.get(continuation_timer_id(waiting.run_id))
        assert wake is not None and wake.kind == "continuation"
        assert 3500 < wake.due - time.time() <= 3600
        assert raw.exists(f"assay:checkpoint:{waiting.run_id}")

        # the single worker thread is free: another evaluation runs to its verdict meanwhile
        other = fleet.submit("is anything there", snapshot=str(snapshot))
        assert fleet.wait(other.run_id, timeout=60).verdict == VerdictKind.FALSE
        assert fleet.store.run_verdict(waiting.run_id) is None

        # an hour passes: the continuation timers become due
        for receipt in (waiting, starved):
            entry = timers.get(continuation_timer_id(receipt.run_id))
            assert entry is not None
            timers.put(entry.model_copy(update={"due": time.time()}))
        scheduler_log = tmp_path / "scheduler.log"
        scheduler: subprocess.Popen[bytes] = start_scheduler(
            worker_env(redis_url, log_format="json"), scheduler_log
        )
        try:
            verdict = fleet.wait(waiting.run_id, timeout=90)
            starved_verdict = fleet.wait(starved.run_id, timeout=90)
        finally:
            stop_process(scheduler)

        assert verdict.run_id == waiting.run_id
        assert verdict.verdict == VerdictKind.TRUE
        assert verdict.iterations == 3  # WAIT + COMMAND + DONE, across both parts
        assert verdict.usage.prompt_tokens == 300 and verdict.usage.completion_tokens == 30
        report = fleet.run_report(waiting.run_id)
        assert report is not None
        assert [step.kind for step in report.steps] == ["WAIT", "COMMAND", "DONE"]
        assert fleet.store.history_length(waiting.check_id) == 1

        # the resumed conversation carried the first part: the WAIT and its result
        asked = model.requests_for(waiting.run_id)
        assert len(asked) == 3
        assert "waited until" in json.dumps(asked[1]["messages"])

        # the total budget covers all parts: 2 iterations = WAIT + COMMAND, then it is spent
        assert starved_verdict.verdict == VerdictKind.CANNOT_DETERMINE
        assert starved_verdict.budget_exhausted == "iterations"
        assert len(model.requests_for(starved.run_id)) == 2

        assert not raw.exists(f"assay:checkpoint:{waiting.run_id}")
        assert timers.counts() == (0, 0)
