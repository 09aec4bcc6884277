"""Bodies the HTTP API accepts and the few it returns that ``schemas`` does not define.

Request bodies are the same fields as the contract models (and are turned into
them, so every rule of ``schemas`` applies), minus what a remote caller must
not choose: the model endpoint (``api_base``: the API key would follow it) and
a kubeconfig path (a kubeconfig can run programs through exec credential
plugins). Responses reuse ``schemas`` models wherever one exists.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.budget import Budget, ProfileName
from schemas.declarative import LABEL_VALUE_PATTERN, MAX_SOURCE_LENGTH
from schemas.fleet import BatchResult, CheckSummary, RunProgress, VerdictChange
from schemas.ids import CheckId, RunId
from schemas.notify import SinkName
from schemas.policy import SET_NAME_PATTERN, ImportedPolicy
from schemas.probe import AgreementEntry, ProbeMode, ProbeRecord
from schemas.report import RunReport
from schemas.request import MAX_TEXT_LENGTH, EvaluationKind, Target, ToolsetName
from schemas.schedule import MisfirePolicy, Schedule, ScheduleTargets
from schemas.spend import ScopeSpend, SpendCeiling
from schemas.verdict import Verdict


def _default_toolsets() -> list[ToolsetName]:
    return ["kubernetes"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(_Body):
    code: str = Field(description="Stable, machine-readable cause; see docs/api.md.")
    message: str = Field(description="What happened and what to do next, for people.")
    details: list[dict[str, Any]] | None = Field(
        default=None, description="Per-field problems for validation errors."
    )


class ErrorBody(_Body):
    """The body of every error response."""

    error: ErrorDetail


# The error answers each kind of endpoint documents (its OpenAPI ``responses``).
AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or invalid bearer token."},
}
READ_ERRORS: dict[int | str, dict[str, Any]] = {
    **AUTH_ERRORS,
    422: {"model": ErrorBody, "description": "A parameter failed validation."},
    503: {"model": ErrorBody, "description": "Redis is unreachable."},
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **READ_ERRORS,
    400: {"model": ErrorBody, "description": "The body is not valid JSON."},
    403: {"model": ErrorBody, "description": "The token may only read."},
    413: {"model": ErrorBody, "description": "The body is larger than the limit."},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such id."}
}


class EvaluationSubmission(_Body):
    """One evaluation to queue: a check (true/false) or a query (findings)."""

    kind: EvaluationKind = "check"
    text: str = Field(min_length=1, max_length=MAX_TEXT_LENGTH, description="The predicate.")
    target: Target
    toolsets: list[ToolsetName] = Field(default_factory=_default_toolsets, min_length=1)
    profile: ProfileName = "fast"
    budget: Budget = Field(default_factory=Budget)
    model: str | None = Field(
        default=None, max_length=200, description="litellm model name; None = server default."
    )
    check_id: CheckId | None = Field(
        default=None,
        description="Group runs under this check id (1-128 of A-Z a-z 0-9 . _ -, no ':'); "
        "None = derived from kind, text and target.",
    )
    run_id: RunId | None = Field(
        default=None,
        description="Idempotency key (1-128 of A-Z a-z 0-9 . _ -, no ':'): resubmitting the "
        "same run id queues nothing new.",
    )
    not_before: datetime | None = Field(
        default=None, description="Do not start before this instant (with a time zone)."
    )
    probe: ProbeMode = Field(
        default="auto",
        description="auto: re-run the check's accepted probe (0 model tokens) when it has one; "
        "off: always the model; only: the probe or cannot_determine.",
    )


class BatchSubmission(_Body):
    """One predicate over many targets: listed, or the server kubeconfig's contexts matching
    a glob (exactly one of the two). The server caps how many (``api_max_batch_targets``)."""

    kind: EvaluationKind = "check"
    text: str = Field(min_length=1, max_length=MAX_TEXT_LENGTH)
    targets: list[Target] | None = Field(default=None, min_length=1)
    context_glob: str | None = Field(
        default=None, min_length=1, max_length=300, description="e.g. 'prod-*'."
    )
    toolsets: list[ToolsetName] = Field(default_factory=_default_toolsets, min_length=1)
    profile: ProfileName = "fast"
    budget: Budget = Field(default_factory=Budget)
    model: str | None = Field(default=None, max_length=200)
    probe: ProbeMode = Field(
        default="auto",
        description="auto: re-run the check's accepted probe (0 model tokens) when it has one; "
        "off: always the model; only: the probe or cannot_determine.",
    )
    spend: SpendCeiling | None = Field(
        default=None,
        description="Token and cost ceilings over all of the batch's runs; None = the "
        "fleet's default (spend_batch_*). A run a ceiling stops ends cannot_determine.",
    )

    @model_validator(mode="after")
    def _one_way_to_name_targets(self) -> BatchSubmission:
        if (self.targets is None) == (self.context_glob is None):
            raise ValueError("give exactly one of 'targets' or 'context_glob'")
        return self


class ScheduleCreate(_Body):
    """A new schedule; the server picks its id and sets timestamps and the revision."""

    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._:/-]*$")
    predicate: str = Field(min_length=1, max_length=MAX_TEXT_LENGTH)
    kind: EvaluationKind = "check"
    targets: ScheduleTargets
    cron: str | None = None
    timezone: str = "UTC"
    interval_seconds: float | None = Field(default=None, gt=0, le=366 * 24 * 3600)
    profile: ProfileName = "fast"
    budget: Budget = Field(default_factory=Budget)
    model: str | None = Field(default=None, max_length=200)
    enabled: bool = True
    misfire: MisfirePolicy = "skip"
    jitter_seconds: float = Field(default=0.0, ge=0, le=3600)
    probe: ProbeMode = Field(
        default="auto",
        description="auto: re-run the check's accepted probe (0 model tokens) when it has one; "
        "off: always the model; only: the probe or cannot_determine.",
    )
    notify: list[SinkName] = Field(
        default_factory=list,
        max_length=20,
        description="Notify routes: sinks that hear this schedule's verdict changes whatever "
        "their own check and target filters say.",
    )
    spend: SpendCeiling | None = Field(
        default=None,
        description="Token and cost ceilings per UTC day over the schedule's runs; None = "
        "the fleet's default (spend_schedule_*).",
    )


class ApplyBody(_Body):
    """Declarative checks and schedules to apply, as `assay apply -f` takes them: the
    documents as parsed JSON, or as YAML text (exactly one of the two)."""

    source: str = Field(
        min_length=1,
        max_length=MAX_SOURCE_LENGTH,
        pattern=LABEL_VALUE_PATTERN,
        description="Name of this set of documents, kept as label assay.dev/source on what "
        "it creates; prune removes only objects of this source.",
    )
    documents: list[dict[str, Any]] | None = Field(
        default=None, max_length=1000, description="Check and Schedule documents."
    )
    yaml: str | None = Field(
        default=None,
        max_length=4 * 1024 * 1024,
        description="The documents as YAML text (problems then name their line).",
    )
    prune: bool = Field(
        default=False,
        description="Delete checks and schedules an earlier apply of this source created and "
        "these documents no longer hold.",
    )
    dry_run: bool = Field(default=False, description="Answer what would change; apply nothing.")

    @model_validator(mode="after")
    def _one_form(self) -> ApplyBody:
        if (self.documents is None) == (self.yaml is None):
            raise ValueError("give exactly one of 'documents' or 'yaml'")
        return self


class AppliedObject(_Body):
    kind: Literal["Check", "Schedule"]
    name: str
    action: Literal["created", "configured", "unchanged", "pruned"]
    diff: str = Field(description="Unified diff of the object as stored and as declared.")
    runs: list[str] = Field(description="Runs queued (a check created or changed).")


class ApplyOutcome(_Body):
    source: str
    dry_run: bool
    changed: bool = Field(description="False: applying changed nothing.")
    summary: str
    changes: list[AppliedObject]


class DocumentList(_Body):
    documents: list[dict[str, Any]] = Field(description="What `apply` reads, by name.")


class ScheduleUpdate(_Body):
    """Fields to change; the ones left out keep their value. Setting ``cron`` clears the
    interval and the other way round; pause and resume have their own endpoints."""

    name: str | None = Field(
        default=None, min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._:/-]*$"
    )
    predicate: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT_LENGTH)
    kind: EvaluationKind | None = None
    targets: ScheduleTargets | None = None
    cron: str | None = None
    timezone: str | None = None
    interval_seconds: float | None = Field(default=None, gt=0, le=366 * 24 * 3600)
    profile: ProfileName | None = None
    budget: Budget | None = None
    model: str | None = Field(default=None, max_length=200)
    probe: ProbeMode | None = None
    misfire: MisfirePolicy | None = None
    jitter_seconds: float | None = Field(default=None, ge=0, le=3600)
    notify: list[SinkName] | None = Field(default=None, max_length=20)
    spend: SpendCeiling | None = Field(
        default=None, description="New ceilings per UTC day; null: back to the fleet's default."
    )


class ScheduleView(Schedule):
    """A schedule as the API shows it: the stored schedule plus when it fires next, and what
    it spent today."""

    next_fire_at: datetime | None = Field(
        default=None, description="When its timer is due; None while paused."
    )
    spend_today: ScopeSpend | None = Field(
        default=None,
        description="Its spend on the current UTC day: tokens, cost, the ceilings in force and "
        "what is left of them, and the fires skipped because a ceiling was reached.",
    )


class ScheduleList(_Body):
    schedules: list[ScheduleView]


class CheckList(_Body):
    checks: list[CheckSummary]


class ChangeList(_Body):
    changes: list[VerdictChange]


class VerdictHistory(_Body):
    check_id: str
    verdicts: list[Verdict] = Field(description="Newest first.")


class RunView(_Body):
    """A run as the API shows it: its state, and its report once a worker has written one."""

    run_id: str
    check_id: str
    target: str
    status: Literal["queued", "running", "waiting", "done"]
    attempts: int
    batch_id: str | None = None
    verdict: Verdict | None = None
    report: RunReport | None = None
    report_error: str | None = None  # why a stored report could not be read (it is kept)

    @classmethod
    def of(
        cls,
        state: RunProgress,
        report: RunReport | None,
        verdict: Verdict | None = None,
        report_error: str | None = None,
    ) -> RunView:
        """The one way a run is shown (API and `assay run --json` alike)."""
        return cls(
            report_error=report_error,
            run_id=state.run_id,
            check_id=state.check_id,
            target=state.target,
            status=state.status,
            attempts=state.attempts,
            batch_id=state.batch_id,
            verdict=verdict if verdict is not None else (report.verdict if report else None),
            report=report,
        )


class BatchResults(_Body):
    batch_id: str
    results: list[BatchResult]


class Health(_Body):
    status: Literal["ok"] = "ok"


class Readiness(_Body):
    status: Literal["ready", "not_ready"]
    checks: dict[str, str] = Field(description="Dependency -> 'ok' or why it failed.")


class ProbeView(_Body):
    """A check's stored probe, how it has agreed with the model, and its version numbers."""

    probe: ProbeRecord
    agreement: list[AgreementEntry] = Field(description="Oldest first, capped.")
    versions: list[int]


class ProbeTest(_Body):
    """Where to run a check's probe now (a snapshot under the server's roots, or a context),
    and for how long at most."""

    target: Target
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=7 * 24 * 3600,
        description="Seconds the probe may take; None: the check's time budget under the "
        "server's settings (ASSAY_TIMEOUT_SECONDS, else the check's profile's), which is also "
        "the most a caller may ask for. Past it the run has no verdict and "
        "budget_exhausted is deadline.",
    )


MAX_IMPORT_CHARS = 4 * 1024 * 1024


class PolicyImport(_Body):
    """Policy documents to import, as the files hold them (several YAML documents, Lists)."""

    documents: str = Field(
        min_length=1,
        max_length=MAX_IMPORT_CHARS,
        description="YAML or JSON text: ValidatingAdmissionPolicy (+ binding, + params object), "
        "Kyverno ValidatingPolicy or ClusterPolicy, Gatekeeper ConstraintTemplate + constraints.",
    )
    policy_set: str | None = Field(
        default=None,
        pattern=SET_NAME_PATTERN,
        description="Make the imported policies exactly the set policy-set:NAME.",
    )
    source: str = Field(default="-", max_length=4096, description="Named in refusals.")
    dry_run: bool = Field(default=False, description="Say what would be imported; store nothing.")


class PolicyList(_Body):
    """The imported policies, and each set with its policies' names."""

    policies: list[ImportedPolicy]
    sets: dict[str, list[str]]
