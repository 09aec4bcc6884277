"""Verdicts and the exit-code contract that CI jobs and alerts gate on."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from schemas.request import EvaluationRequest

from schemas.exit_codes import (
    EXIT_CODES,
    EXIT_EXPIRED,
    EXIT_PENDING,
    EXIT_UNKNOWN,
    EXIT_USAGE,
    VerdictKind,
)

__all__ = [
    "EXIT_CODES",
    "EXIT_EXPIRED",
    "EXIT_PENDING",
    "EXIT_UNKNOWN",
    "EXIT_USAGE",
    "Evidence",
    "Usage",
    "Verdict",
    "VerdictKind",
]


class Usage(BaseModel):
    """Token usage as the model provider reported it; cost only when the price is known."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None

    def __add__(self, other: Usage) -> Usage:
        cost: float | None
        if self.cost_usd is None and other.cost_usd is None:
            cost = None
        else:
            cost = (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cost_usd=cost,
        )


class Evidence(BaseModel):
    """One lookup the run actually made and what in its output supports the verdict."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0, description="Index of the run step whose tool output is cited.")
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    ok: bool = Field(description="Whether that lookup succeeded.")
    excerpt: str = Field(
        description="What in the output supports the verdict, as the model cited it."
    )
    verified: bool = Field(
        default=False,
        description="The engine found the excerpt in the output this lookup returned to the "
        "model (whitespace-normalised, case-sensitive).",
    )
    structured: bool = Field(
        default=False,
        description="The excerpt lies in structured fields of an object a get or describe "
        "returned, not in free text (log lines, messages, annotations, ConfigMap data, prose). "
        "Determined for checks under the strict profile only (false elsewhere).",
    )


class Verdict(BaseModel):
    """The answer to one run. ``exit_code`` always agrees with ``verdict``."""

    model_config = ConfigDict(extra="forbid")

    verdict: VerdictKind
    exit_code: int
    explanation: str
    evidence: list[Evidence] = Field(default_factory=list)
    findings: list[str] = Field(default_factory=list, description="Query answers, one per line.")
    evidence_verified: bool = Field(
        default=False,
        description="The engine's own check passed: at least one citation is a successful lookup "
        "of this run and every cited excerpt occurs in the output its lookup returned. Always "
        "true for a true or false verdict.",
    )
    confirmed: bool | None = Field(
        default=None,
        description="strict profile, checks only: whether the fresh-context confirmation "
        "accepted the planner's true (a true verdict there always has true); None when no "
        "confirmation was asked.",
    )
    reason: str | None = Field(
        default=None,
        description="Why the run ended without a model verdict (budget, deadline, error).",
    )
    budget_exhausted: str | None = Field(
        default=None,
        description="Which budget ran out: iterations, tokens, deadline or cost (the run's "
        "own), or spend_ceiling (a ceiling over many runs stopped a model call: a schedule's "
        "day, a batch, the fleet's hour or day; the reason names it).",
    )
    wake_at: datetime | None = Field(
        default=None, description="Instant a WAIT asked for, when the run could not wait inline."
    )
    source: Literal["model", "probe"] = Field(
        default="model",
        description="Where the verdict came from: the model's run, or an accepted probe "
        "re-run without the model (0 tokens).",
    )
    probe_version: int | None = Field(
        default=None,
        description="The probe version that gave (source probe) or agreed with (source model) "
        "this verdict, when one did.",
    )
    iterations: int = 0
    usage: Usage = Field(default_factory=Usage)
    duration_seconds: float = 0.0
    model: str
    profile: str
    kind: str = "check"
    run_id: str
    check_id: str
    target: str
    started_at: datetime
    finished_at: datetime

    @classmethod
    def of_request(
        cls,
        request: EvaluationRequest,
        verdict: VerdictKind,
        explanation: str,
        *,
        model: str,
        started_at: datetime,
        finished_at: datetime,
        **fields: Any,
    ) -> Verdict:
        """A verdict on ``request``, naming its run, check, target, profile and kind the one
        way, whichever path (model, probe, policy, a give-up) reached it."""
        return cls(
            verdict=verdict,
            explanation=explanation,
            model=model,
            profile=request.profile,
            kind=request.kind,
            run_id=request.run_id,
            check_id=request.check_id,
            target=request.target.name,
            started_at=started_at,
            finished_at=finished_at,
            **fields,
        )

    @model_validator(mode="before")
    @classmethod
    def _fill_exit_code(cls, data: Any) -> Any:
        if isinstance(data, dict) and "verdict" in data and "exit_code" not in data:
            data = {**data, "exit_code": EXIT_CODES[VerdictKind(data["verdict"])]}
        return data

    @model_validator(mode="after")
    def _exit_code_matches(self) -> Verdict:
        if self.exit_code != EXIT_CODES[self.verdict]:
            raise ValueError(
                f"exit_code {self.exit_code} does not match verdict {self.verdict.value}"
            )
        return self
