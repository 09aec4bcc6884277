"""One eval run, end to end: the model under test, its arms, the oracle, the caps, the report.

The model under test is a real model (any litellm name, optionally at an
``api_base``), a scripted replay (``--scripted FILE``) or the scripted
oracle itself (``--oracle``). Scripted servers are started here, in-process,
and stopped when the run ends; the engine reaches them through litellm like
any OpenAI-compatible endpoint.

Arms: ``engine`` (the model with lookups, through the real engine),
``no_tools`` (the same model asked once without lookups) and ``oracle`` (the
scripted oracle through the engine; plumbing, not a model). The caps cover
the model under test only: the oracle costs nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from assay.eval import seam
from assay.eval.oracle import oracle_script
from assay.eval.report import build_report
from assay.eval.runner import Caps, Outcome, Spending, Task, attempt, plan, run_tasks
from assay.eval.suite import Suite
from assay.testing.scripted_model import SCRIPTED_MODEL_NAME, ScriptedModel
from schemas.budget import Budget
from schemas.eval import Arm, Attempt, EvalReport
from schemas.settings import AssaySettings


@dataclass(frozen=True)
class EvalPlan:
    suite: Suite
    settings: AssaySettings
    budget: Budget
    repeat: int = 1
    concurrency: int = 4
    caps: Caps = field(default_factory=Caps)
    baseline: bool = True
    oracle_arm: bool = True
    scripted: Path | None = None
    oracle_as_model: bool = False

    @property
    def is_scripted(self) -> bool:
        return self.scripted is not None or self.oracle_as_model

    @property
    def model_label(self) -> str:
        if self.oracle_as_model:
            return "scripted:oracle"
        if self.scripted is not None:
            return f"scripted:{self.scripted.name}"
        return self.settings.model or "(none)"

    def arms(self) -> list[Arm]:
        return ["engine", "no_tools"] if self.baseline else ["engine"]

    def totals(self) -> dict[str, int]:
        cases = len(self.suite.cases)
        totals: dict[str, int] = {arm: cases * self.repeat for arm in self.arms()}
        if self.oracle_arm and not self.oracle_as_model:
            totals["oracle"] = cases
        return totals


def cost_cap_note(plan_: EvalPlan) -> str | None:
    """Why the cost cap cannot be enforced (the model has no known price), or None."""

    if plan_.caps.cost_usd is None:
        return None
    if plan_.is_scripted or not seam.price_known(plan_.settings):
        return (
            f"the cost cap was not checked: litellm has no price for model "
            f"{plan_.model_label}, so its cost is unknown (use --token-cap)"
        )
    return None


def _scripted_settings(settings: AssaySettings, server: ScriptedModel) -> AssaySettings:
    return settings.model_copy(
        update={"model": SCRIPTED_MODEL_NAME, "api_base": server.url, "api_key": None}
    )


def run_eval(plan_: EvalPlan, on_done: Callable[[Attempt], None] | None = None) -> EvalReport:
    """Run every planned attempt and return the report (partial when a cap stopped it)."""
    started_at = datetime.now(UTC)
    notes: list[str] = []
    arms: dict[str, tuple[str, list[Attempt]]] = {}
    spent = Spending()
    with contextlib.ExitStack() as stack:
        oracle: ScriptedModel | None = None
        if plan_.oracle_as_model or plan_.oracle_arm:
            oracle = stack.enter_context(ScriptedModel(oracle_script(plan_.suite)))
        if plan_.oracle_as_model:
            assert oracle is not None
            settings = _scripted_settings(plan_.settings, oracle)
        elif plan_.scripted is not None:
            server = stack.enter_context(ScriptedModel(plan_.scripted))
            settings = _scripted_settings(plan_.settings, server)
        else:
            settings = plan_.settings
        if (note := cost_cap_note(plan_)) is not None:
            notes.append(note)

        if plan_.oracle_arm and not plan_.oracle_as_model:
            assert oracle is not None
            oracle_settings = _scripted_settings(plan_.settings, oracle)
            outcome = _run(plan(plan_.suite.cases, ["oracle"], 1), oracle_settings, plan_, on_done)
            arms["oracle"] = ("scripted:oracle", outcome.attempts)
            wrong = sorted(a.case_id for a in outcome.attempts if not a.correct)
            if wrong:
                shown = ", ".join(wrong[:10]) + (" ..." if len(wrong) > 10 else "")
                notes.append(
                    f"the scripted oracle got {len(wrong)} of {len(outcome.attempts)} cases wrong "
                    f"({shown}): the suite and the engine disagree (run `assay eval "
                    "--check-suite`), so read the other figures with care"
                )

        tasks = plan(plan_.suite.cases, plan_.arms(), plan_.repeat)
        outcome = _run(tasks, settings, plan_, on_done, caps=plan_.caps, spent=spent)
        for arm in plan_.arms():
            arms[arm] = (plan_.model_label, [a for a in outcome.attempts if a.arm == arm])
        arms = {name: arms[name] for name in ("engine", "no_tools", "oracle") if name in arms}

    return build_report(
        suite=plan_.suite,
        model=plan_.model_label,
        scripted=plan_.is_scripted,
        profile=plan_.settings.profile,
        repeat=plan_.repeat,
        concurrency=plan_.concurrency,
        arms=arms,
        spent=spent.as_usage(),
        started_at=started_at,
        finished_at=datetime.now(UTC),
        skipped=outcome.skipped,
        stopped=outcome.stopped,
        token_cap=plan_.caps.tokens,
        cost_cap_usd=plan_.caps.cost_usd,
        notes=notes,
        assay_version=version("assay"),
    )


def _run(
    tasks: list[Task],
    settings: AssaySettings,
    plan_: EvalPlan,
    on_done: Callable[[Attempt], None] | None,
    *,
    caps: Caps | None = None,
    spent: Spending | None = None,
) -> Outcome:
    return run_tasks(
        tasks,
        lambda task: attempt(task, settings, plan_.budget),
        concurrency=plan_.concurrency,
        caps=caps,
        spent=spent,
        on_done=on_done,
    )
