"""The eval contract: a labelled suite of cases, and the report of one run of it.

A *case* is a predicate, a snapshot folder and the verdict a careful reader of
that snapshot must reach. ``assay eval`` runs every case through the engine
with the model under test and scores the verdicts against the labels; the
report holds every attempt, so a reader can recompute every figure.

Two shapes live here and nowhere else: the suite file a user writes
(:class:`SuiteFile`, documented in docs/eval.md) and the JSON report
(:class:`EvalReport`), both with generated JSON Schemas in ``schemas/json/``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.verdict import Usage, VerdictKind

REPORT_FORMAT = 1
CASE_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,79}$"
Arm = Literal["engine", "no_tools", "oracle"]
ARM_TITLES: dict[str, str] = {
    "engine": "engine (model with lookups)",
    "no_tools": "no-tools one-shot (same model)",
    "oracle": "scripted oracle (plumbing)",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ----------------------------------------------------------------------------- the suite


class EvidenceHint(_Strict):
    """A lookup that settles the case and text its output contains.

    The scripted oracle replays these (it must cite real evidence, like any
    model), and the suite's own test runs each one against the snapshot and
    checks the excerpt is there, so a label never rests on a fact that is not
    in the data.
    """

    tool: str = Field(min_length=1, description="A read-only tool: get, describe, logs, events...")
    arguments: dict[str, Any] = Field(default_factory=dict)
    excerpt: str = Field(
        min_length=1,
        max_length=500,
        description="Text that occurs in that lookup's output (compared whitespace-normalised).",
    )


class Case(_Strict):
    """One labelled predicate about one snapshot."""

    id: str = Field(pattern=CASE_ID_PATTERN, description="Unique in the suite.")
    category: str = Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,39}$", description="What the case exercises."
    )
    predicate: str = Field(min_length=1, max_length=1000)
    snapshot: str = Field(
        min_length=1, description="The snapshot folder, relative to the file naming the case."
    )
    label: VerdictKind = Field(description="The verdict a careful reader of the snapshot reaches.")
    why: str = Field(min_length=1, max_length=1000, description="Why the label is right.")
    evidence: list[EvidenceHint] = Field(
        default_factory=list,
        max_length=5,
        description="Lookups that settle it; required for a true or false label.",
    )

    @field_validator("label", mode="before")
    @classmethod
    def _yaml_booleans(cls, value: Any) -> Any:
        """``label: true`` in YAML is a boolean; it means the verdict ``true``."""
        if isinstance(value, bool):
            return "true" if value else "false"
        return value

    @field_validator("predicate")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if not value.strip() or "\n" in value.strip():
            raise ValueError("a predicate is one non-empty line")
        return value.strip()

    @model_validator(mode="after")
    def _decisive_labels_cite(self) -> Case:
        if self.label in (VerdictKind.TRUE, VerdictKind.FALSE) and not self.evidence:
            raise ValueError(
                f"case {self.id}: a {self.label.value} label needs at least one evidence lookup"
            )
        return self


class SuiteFile(_Strict):
    """One YAML file of a suite: a list of cases (a suite is one file or a folder of them)."""

    description: str = ""
    cases: list[Case] = Field(min_length=1)


# ----------------------------------------------------------------------------- the report


class Attempt(_Strict):
    """One case answered once by one arm."""

    case_id: str
    category: str
    label: VerdictKind
    arm: Arm
    repeat: int = Field(ge=1)
    verdict: VerdictKind
    correct: bool
    reason: str | None = Field(
        default=None, description="Why the attempt ended without the model's own verdict."
    )
    iterations: int = 0
    usage: Usage = Field(default_factory=Usage)
    duration_seconds: float = 0.0
    run_id: str | None = None
    probe_accepted: bool | None = Field(
        default=None, description="Whether the verdict carried an accepted probe; None: no probe."
    )


class CategoryMetrics(_Strict):
    attempts: int
    accuracy: float | None
    false_true_rate: float | None


class ArmMetrics(_Strict):
    """The figures of one arm; every rate is None when nothing it divides by was seen."""

    cases: int = Field(description="Distinct cases answered at least once.")
    attempts: int
    accuracy: float | None = Field(description="Share of attempts whose verdict is the label.")
    false_true_rate: float | None = Field(
        description="Of attempts whose label is not true, the share answered true (the headline)."
    )
    false_false_rate: float | None = Field(
        description="Of attempts whose label is not false, the share answered false."
    )
    cannot_determine_rate: float | None = Field(
        description="Share of attempts answered cannot_determine."
    )
    stability: float | None = Field(
        description="Of cases answered more than once, the share whose answers all agree."
    )
    tokens_per_case: float | None = Field(description="Mean total tokens per attempt.")
    cost_per_case_usd: float | None = Field(
        description="Mean cost per attempt; None when the model's price is unknown."
    )
    probe_compile_rate: float | None = Field(
        description="Of true/false attempts carrying probe information, the share accepted."
    )
    confusion: dict[str, dict[str, int]] = Field(
        description="label -> verdict -> attempts (all four verdicts, zeros included)."
    )
    by_category: dict[str, CategoryMetrics]


class ArmReport(_Strict):
    arm: Arm
    model: str
    metrics: ArmMetrics
    attempts: list[Attempt]


class SuiteInfo(_Strict):
    name: str
    path: str
    cases: int = Field(description="Cases selected for this run.")
    digest: str = Field(description="sha256 of the selected cases, to tell suites apart.")
    labels: dict[str, int]
    categories: dict[str, int]


class EvalReport(_Strict):
    """What ``assay eval`` writes: the run's settings, each arm's figures and every attempt."""

    format: int = REPORT_FORMAT
    suite: SuiteInfo
    model: str
    scripted: bool = Field(description="The model under test is a scripted replay, not an LLM.")
    profile: str
    repeat: int
    concurrency: int
    token_cap: int | None = None
    cost_cap_usd: float | None = None
    complete: bool = Field(description="Every planned attempt ran.")
    stopped: str | None = Field(default=None, description="Why the run stopped early.")
    skipped: int = Field(default=0, description="Attempts not started (cap reached, interrupted).")
    spent: Usage = Field(description="Tokens and cost of the model under test, all arms.")
    notes: list[str] = Field(default_factory=list)
    assay_version: str
    started_at: datetime
    finished_at: datetime
    arms: list[ArmReport]

    def arm(self, name: str) -> ArmReport | None:
        return next((arm for arm in self.arms if arm.arm == name), None)
