"""Scheduling of eval attempts: concurrency, the first attempt of an arm alone, the caps."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from assay.eval.runner import Caps, Spending, Task, plan, run_tasks
from assay.eval.suite import SuiteCase
from schemas.eval import Attempt, Case
from schemas.verdict import Usage, VerdictKind

SNAPSHOT = Path(__file__).resolve().parents[2] / "examples" / "eval" / "snapshots" / "shop-00"


def cases(count: int) -> list[SuiteCase]:
    return [
        SuiteCase(
            Case(
                id=f"c{i}",
                category="x",
                predicate=f"predicate {i}",
                snapshot=".",
                label=VerdictKind.CANNOT_DETERMINE,
                why="test",
            ),
            SNAPSHOT,
            SNAPSHOT,
        )
        for i in range(count)
    ]


class Recorder:
    """A stand-in for the model call: sleeps, and records when each attempt ran."""

    def __init__(self, tokens: int = 0) -> None:
        self.tokens = tokens
        self.spans: dict[tuple[str, str, int], tuple[float, float]] = {}
        self.lock = threading.Lock()

    def __call__(self, task: Task) -> Attempt:
        began = time.monotonic()
        time.sleep(0.05)
        with self.lock:
            self.spans[(task.case.id, task.arm, task.repeat)] = (began, time.monotonic())
        return Attempt(
            case_id=task.case.id,
            category="x",
            label=task.case.case.label,
            arm=task.arm,
            repeat=task.repeat,
            verdict=VerdictKind.CANNOT_DETERMINE,
            correct=True,
            usage=Usage(total_tokens=self.tokens),
        )


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_the_first_attempt_of_each_arm_runs_alone_then_the_rest_run_concurrently() -> None:
    """litellm finishes importing itself inside the first call; threads must not share that."""
    recorder = Recorder()
    tasks = plan(cases(8), ["engine", "no_tools"], 1)
    outcome = run_tasks(tasks, recorder, concurrency=4)
    assert len(outcome.attempts) == 16 and outcome.skipped == 0
    for first in (("c0", "engine", 1), ("c0", "no_tools", 1)):
        others = [span for key, span in recorder.spans.items() if key != first]
        assert not any(overlaps(recorder.spans[first], span) for span in others), first
    later = [span for key, span in recorder.spans.items() if key[0] != "c0"]
    assert any(overlaps(a, b) for i, a in enumerate(later) for b in later[i + 1 :])


def test_no_attempt_starts_once_the_token_cap_is_reached() -> None:
    recorder = Recorder(tokens=100)
    spent = Spending()
    tasks = plan(cases(20), ["engine"], 1)
    outcome = run_tasks(tasks, recorder, concurrency=3, caps=Caps(tokens=250), spent=spent)
    # Started while under 250: the first alone (0), then up to three at once (100, ...).
    assert 3 <= len(outcome.attempts) <= 5
    assert outcome.skipped == 20 - len(outcome.attempts)
    assert outcome.stopped is not None and "token cap of 250" in outcome.stopped
    assert spent.tokens == 100 * len(outcome.attempts)


def test_a_runner_that_raises_still_yields_a_cannot_determine_attempt() -> None:
    def broken(task: Task) -> Attempt:
        raise RuntimeError("boom")

    outcome = run_tasks(plan(cases(2), ["engine"], 1), broken, concurrency=2)
    assert [a.verdict for a in outcome.attempts] == [VerdictKind.CANNOT_DETERMINE] * 2
    assert all("internal error: RuntimeError('boom')" in (a.reason or "") for a in outcome.attempts)
