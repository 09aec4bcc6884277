"""What the fleet's store hands back: run states, check summaries, changes, batches.

These are the values the CLI, the Python client and the HTTP API read out of the
verdict store, so they are contract models like the verdict itself: one shape
whether a caller reads them in-process or over HTTP.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from schemas.report import RunStatus
from schemas.request import EvaluationRequest
from schemas.spend import ScopeSpend
from schemas.verdict import VerdictKind

BATCH_COUNTERS: tuple[str, ...] = (
    "pending",
    VerdictKind.TRUE.value,
    VerdictKind.FALSE.value,
    VerdictKind.POORLY_POSED.value,
    VerdictKind.CANNOT_DETERMINE.value,
)


class SubmitReceipt(BaseModel):
    """What `assay submit` prints: enough to fetch the verdict later."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    check_id: str
    target: str
    batch_id: str | None = None
    not_before: datetime | None = Field(
        default=None,
        description="When a deferred run is due (UTC); null when it was queued to run now.",
    )

    @classmethod
    def of(cls, request: EvaluationRequest, not_before: datetime | None = None) -> SubmitReceipt:
        """The receipt for ``request`` as submitted now (queued, or held until ``not_before``)."""
        return cls(
            run_id=request.run_id,
            check_id=request.check_id,
            target=request.target.name,
            batch_id=request.batch_id,
            not_before=not_before,
        )


class RunProgress(BaseModel):
    """Where one run is, before (or without) reading its whole report."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    check_id: str
    target: str
    status: RunStatus
    attempts: int = Field(default=0, description="Deliveries of this run to a worker so far.")
    batch_id: str | None = None
    queued_at: datetime | None = None
    updated_at: datetime | None = None
    wake_at: datetime | None = None
    verdict: VerdictKind | None = None


class CheckSummary(BaseModel):
    """One row of `assay checks`: a check and its latest verdict."""

    model_config = ConfigDict(extra="forbid")

    check_id: str
    kind: str
    text: str
    target: str
    verdict: VerdictKind
    exit_code: int
    run_id: str
    finished_at: datetime
    changed_at: datetime | None = Field(
        default=None, description="When the verdict last differed from the one before it."
    )
    previous_verdict: VerdictKind | None = None
    notify: list[str] = Field(
        default_factory=list,
        description="Notify routes of the run behind the latest verdict (sinks that hear this "
        "check's changes whatever their own filters say).",
    )


class VerdictChange(BaseModel):
    """A check whose verdict differs from its previous one (first verdicts are not changes)."""

    model_config = ConfigDict(extra="forbid")

    check_id: str
    run_id: str
    target: str
    from_verdict: VerdictKind
    to_verdict: VerdictKind
    at: datetime
    notify: list[str] = Field(
        default_factory=list,
        description="Notify routes of the run that made the change: sinks that hear it "
        "whatever their own check and target filters say.",
    )


class BatchStatus(BaseModel):
    """The live tally of one batch; ``done`` once every enqueued run has a verdict.

    A batch whose fan-out stopped before every target was submitted (the broker failed,
    the target listing raised, the submitter was interrupted or killed) is sealed
    ``incomplete``: ``total`` counts the runs registered, it is ``done`` once they have
    verdicts, and it never reads as all true.
    """

    model_config = ConfigDict(extra="forbid")

    batch_id: str
    kind: str
    text: str
    created_at: datetime
    total: int = Field(description="Targets enqueued so far (final once ``sealed``).")
    sealed: bool = Field(description="Fan-out finished: no more targets will be added.")
    pending: int
    true: int
    false: int
    poorly_posed: int
    cannot_determine: int
    done: bool
    finished_at: datetime | None = None
    not_before: datetime | None = Field(
        default=None,
        description="When the batch's runs are due (UTC), for a batch held until the instant "
        "its predicate opens with; null when its runs were queued to run now.",
    )
    incomplete: bool = Field(
        default=False,
        description="The fan-out stopped before every target was submitted: ``total`` counts "
        "only the runs registered, the targets after them never ran. Such a batch finishes "
        "with the runs it has, and never counts as all true.",
    )
    stop_reason: str | None = Field(
        default=None, description="Why the fan-out of an incomplete batch stopped, in words."
    )
    spend: ScopeSpend | None = Field(
        default=None,
        description="What the batch's runs spent so far, and its ceilings (when it has any).",
    )


class BatchResult(BaseModel):
    """One target's line in a batch; ``verdict`` None while that run is pending."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    check_id: str
    target: str
    verdict: VerdictKind | None = None
    exit_code: int | None = None
    explanation: str | None = None
