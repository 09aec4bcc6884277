"""Verdicts and reports of the runs that ask no model: a probe re-run and an imported policy's
run. One builder, so both name the run, check, target, budget and times as a model run does
(:meth:`Verdict.of_request`, :meth:`RunReport.finished`), and differ only in what they found.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from schemas.report import RunReport
from schemas.request import EvaluationRequest
from schemas.verdict import Verdict, VerdictKind
from workers.engine.engine import EngineDeps, effective_budget


def zero_token_verdict(
    request: EvaluationRequest,
    kind: VerdictKind,
    explanation: str,
    *,
    model: str,
    duration: float = 0.0,
    **fields: Any,
) -> Verdict:
    """A verdict reached without a model call: no tokens, no steps; ``model`` names the path
    (``(probe)``, ``(policy)``) where a model run names its model."""
    now = datetime.now(UTC)
    return Verdict.of_request(
        request,
        kind,
        explanation,
        model=model,
        duration_seconds=round(duration, 6),
        started_at=now,
        finished_at=now,
        **fields,
    )


def zero_token_report(
    request: EvaluationRequest, deps: EngineDeps, verdict: Verdict, **fields: Any
) -> RunReport:
    """The finished report around ``verdict``, with the budget the run had."""
    return RunReport.finished(
        request,
        verdict,
        budget=effective_budget(request, deps.settings),
        model=verdict.model,
        **fields,
    )
