"""Running a suite: one attempt per (case, arm, repeat), many at once, within the run's caps.

Attempts wait on the model, so they run on a thread pool (``concurrency``
at a time). The token and cost caps cover the whole run of the model under
test: before each attempt starts, the spending so far is compared with the
caps, and once one is reached no further attempt starts; the ones already
running finish and the report says the run is partial. An attempt never
raises: whatever goes wrong becomes a ``cannot_determine`` attempt with the
reason on record, as it would in the engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from assay.eval import seam
from assay.eval.baseline import MAX_BASELINE_TOKENS, baseline_messages, parse_baseline
from assay.eval.suite import SuiteCase
from schemas.budget import Budget, resolve_budget
from schemas.eval import Arm, Attempt
from schemas.report import RunReport
from schemas.settings import AssaySettings
from schemas.verdict import Usage, VerdictKind


@dataclass(frozen=True)
class Task:
    case: SuiteCase
    arm: Arm
    repeat: int


def plan(cases: Iterable[SuiteCase], arms: list[Arm], repeat: int) -> list[Task]:
    """Every attempt in the order they start: repeat by repeat, case by case, arm by arm.

    Repeat-major order means a run cut short by a cap has answered each case
    once before it answers any twice, and each case's arms run side by side.
    """
    cases = list(cases)
    return [
        Task(case, arm, number) for number in range(1, repeat + 1) for case in cases for arm in arms
    ]


# ----------------------------------------------------------------------------- one attempt


def attempt(task: Task, settings: AssaySettings, budget: Budget) -> Attempt:
    """Run one task against the model ``settings`` names; never raises."""
    try:
        if task.arm == "no_tools":
            return _baseline_attempt(task, settings, budget)
        return _engine_attempt(task, settings, budget)
    except Exception as exc:  # a harness bug must not stop the run or pass as an answer
        return _attempt(task, VerdictKind.CANNOT_DETERMINE, reason=f"internal error: {exc!r}")


def _engine_attempt(task: Task, settings: AssaySettings, budget: Budget) -> Attempt:
    report = seam.run_check(task.case.case.predicate, task.case.snapshot, settings, budget)
    verdict = report.verdict
    if verdict is None:  # only a deferred WAIT has none, and eval never allows deferral
        return _attempt(task, VerdictKind.CANNOT_DETERMINE, reason=f"run ended {report.status}")
    return _attempt(
        task,
        verdict.verdict,
        reason=verdict.reason,
        iterations=verdict.iterations,
        usage=verdict.usage,
        duration_seconds=verdict.duration_seconds,
        run_id=verdict.run_id,
        probe_accepted=probe_outcome(report),
    )


def _baseline_attempt(task: Task, settings: AssaySettings, budget: Budget) -> Attempt:
    timeout = resolve_budget(settings.profile, budget).timeout_seconds or 60.0
    messages = baseline_messages(task.case.case.predicate, task.case.target_name)
    user = f"eval-{task.case.id}-{task.repeat}"
    reply = seam.ask_once(
        messages, settings, user=user, max_tokens=MAX_BASELINE_TOKENS, timeout_seconds=timeout
    )
    reason: str | None
    if reply.error is not None:
        verdict, reason = VerdictKind.CANNOT_DETERMINE, f"the model call failed: {reply.error}"
    else:
        verdict, reason = parse_baseline(reply.text)
    return _attempt(
        task,
        verdict,
        reason=reason,
        iterations=1,
        usage=reply.usage,
        duration_seconds=round(reply.seconds, 4),
    )


def _attempt(task: Task, verdict: VerdictKind, **fields: Any) -> Attempt:
    label = task.case.case.label
    return Attempt(
        case_id=task.case.id,
        category=task.case.case.category,
        label=label,
        arm=task.arm,
        repeat=task.repeat,
        verdict=verdict,
        correct=verdict == label,
        **fields,
    )


def probe_outcome(report: RunReport) -> bool | None:
    """Whether the run's verdict carried an accepted probe; None when it carried none.

    Probes are a later addition to the verdict; this reads whatever shape they
    take defensively (a bool, or a mapping with ``accepted`` or a ``status``)
    and treats anything else as "no probe information".
    """
    for holder in (report.verdict, report):
        probe = getattr(holder, "probe", None)
        if probe is None:
            continue
        if hasattr(probe, "model_dump"):
            probe = probe.model_dump(mode="json")
        if isinstance(probe, bool):
            return probe
        if isinstance(probe, dict):
            for key in ("accepted", "agreed", "agrees"):
                if isinstance(probe.get(key), bool):
                    return bool(probe[key])
            status = probe.get("status")
            if isinstance(status, str):
                return status.lower() in {"accepted", "agreed", "agrees", "compiled"}
    return None


# ----------------------------------------------------------------------------- many attempts


@dataclass
class Spending:
    """What the model under test has used so far, shared by the worker threads.

    The cost is known only while every attempt that used tokens reported a
    cost; one unpriced attempt makes the total (and the cost cap) unknown.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, usage: Usage) -> None:
        with self._lock:
            self.prompt_tokens += usage.prompt_tokens
            self.completion_tokens += usage.completion_tokens
            self.tokens += usage.total_tokens
            if usage.cost_usd is not None:
                self.cost_usd += usage.cost_usd
            elif usage.total_tokens:
                self.cost_known = False

    def as_usage(self) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            total_tokens=self.tokens,
            cost_usd=round(self.cost_usd, 6) if self.cost_known else None,
        )


@dataclass(frozen=True)
class Caps:
    tokens: int | None = None
    cost_usd: float | None = None

    def reached(self, spent: Spending) -> str | None:
        """Why no further attempt may start, or None."""
        if self.tokens is not None and spent.tokens >= self.tokens:
            return f"the token cap of {self.tokens:,} was reached ({spent.tokens:,} used)"
        if self.cost_usd is not None and spent.cost_known and spent.cost_usd >= self.cost_usd:
            return f"the cost cap of ${self.cost_usd:g} was reached (${spent.cost_usd:.4f} used)"
        return None


# Outcome.stopped when the user pressed Ctrl-C: the command still writes the partial
# report, then exits 130 (an interruption is never reported as a finished run).
INTERRUPTED = "interrupted (Ctrl-C)"


@dataclass
class Outcome:
    attempts: list[Attempt]
    skipped: int = 0
    stopped: str | None = None


class _InFlight:
    """How many attempts are running; the one loop that starts them waits on it."""

    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition()

    def wait_below(self, limit: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._count < limit)

    def start(self) -> None:
        with self._changed:
            self._count += 1

    def finish(self) -> None:
        with self._changed:
            self._count -= 1
            self._changed.notify_all()


def run_tasks(
    tasks: list[Task],
    run: Callable[[Task], Attempt],
    *,
    concurrency: int,
    caps: Caps | None = None,
    spent: Spending | None = None,
    on_done: Callable[[Attempt], None] | None = None,
) -> Outcome:
    """Run ``tasks`` ``concurrency`` at a time; stop starting new ones once a cap is reached.

    The first attempt of each arm runs alone: litellm imports parts of itself
    (its MCP client, for tool calls) inside the first ``completion()``, and
    threads making their first calls at once can see a half-imported module
    and fail. Ctrl-C stops starting tasks too: the running ones finish and
    the outcome is partial, so an interrupted run still leaves a report.
    """
    results: list[Attempt] = []
    results_lock = threading.Lock()
    outcome = Outcome(results)
    in_flight = _InFlight()

    def guarded(task: Task) -> Attempt:
        try:
            return run(task)
        except Exception as exc:  # the caller's runner failed: the attempt still counts
            return _attempt(task, VerdictKind.CANNOT_DETERMINE, reason=f"internal error: {exc!r}")

    def finished(future: Future[Attempt]) -> None:
        try:
            result = future.result()
            with results_lock:
                results.append(result)
            if spent is not None:
                spent.add(result.usage)  # before the slot frees, so the next start sees it
            if on_done is not None:
                on_done(result)
        finally:
            in_flight.finish()

    started = 0
    warmed: set[str] = set()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="eval") as pool:
        try:
            for task in tasks:
                alone = task.arm not in warmed
                in_flight.wait_below(1 if alone else concurrency)
                reason = caps.reached(spent) if caps is not None and spent is not None else None
                if reason is not None:
                    outcome.stopped = reason
                    break
                in_flight.start()
                pool.submit(guarded, task).add_done_callback(finished)
                started += 1
                if alone:
                    warmed.add(task.arm)
                    in_flight.wait_below(1)
        except KeyboardInterrupt:
            outcome.stopped = INTERRUPTED
    outcome.skipped = len(tasks) - started
    return outcome
