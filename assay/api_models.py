"""Bodies the HTTP API accepts and the few it returns that ``schemas`` does not define.

Request bodies are the same fields as the contract models (and are turned into
them, so every rule of ``schemas`` applies), minus what a remote caller must
not choose: the model endpoint (``api_base``: the API key would follow it) and
a kubeconfig path (a kubeconfig can run programs through exec credential
plugins). Responses reuse ``schemas`` models wherever one exists.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SkipValidation,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict
from pydantic_core import PydanticCustomError

from schemas.budget import Budget, ProfileName
from schemas.cadence import PublishedCron, PublishedZone
from schemas.declarative import MAX_SOURCE_LENGTH, NO_KUBECONFIG, ServerDocument
from schemas.fleet import BatchResult, CheckSummary, RunProgress, VerdictChange
from schemas.ids import CheckId, RunId
from schemas.kubernetes_metadata import LABEL_VALUE_PATTERN
from schemas.numbers import integral
from schemas.policy import SET_NAME_PATTERN, ImportedPolicy
from schemas.probe import PROBE_MODE_HELP, AgreementEntry, ProbeMode, ProbeRecord
from schemas.report import RunReport
from schemas.request import (
    CONTEXT_GLOB_FORMAT,
    MAX_API_PATH_LENGTH,
    MAX_TEXT_LENGTH,
    MODEL_NAME_FORMAT,
    SHOWN_NAME_PATTERN,
    SNAPSHOT_PATH_FORMAT,
    VISIBLE_TEXT,
    ContextTarget,
    EvaluationKind,
    InClusterTarget,
    SnapshotPattern,
    SnapshotTarget,
    Target,
    ToolsetName,
)
from schemas.schedule import (
    IntervalSeconds,
    JitterSeconds,
    MisfirePolicy,
    NotifyRoutes,
    PredicateText,
    Schedule,
    ScheduleName,
    ScheduleTargets,
)
from schemas.settings import AssaySettings
from schemas.spend import ScopeSpend, SpendCeiling
from schemas.verdict import Verdict


def _default_toolsets() -> list[ToolsetName]:
    return ["kubernetes"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Request(_Body):
    """A request body, read as its JSON Schema says: no number from a string or a boolean,
    no boolean from a number (pydantic's lax mode would take them, the schema does not)."""

    model_config = ConfigDict(strict=True)


class ApiBudget(Budget):
    """The contract's budget, read strictly (see ``_Request``)."""

    model_config = ConfigDict(strict=True)

    _integral = field_validator("max_iterations", "max_tokens", mode="before")(integral)


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
    413: {
        "model": ErrorBody,
        "description": "The body is larger than ASSAY_API_MAX_BODY_BYTES (64 KiB by default).",
    },
}
# The routes that take files' worth of documents declare this 413, and the body limit
# (assay/api.py) gives exactly the routes declaring it the documents limit.
DOCUMENTS_TOO_LARGE: dict[str, Any] = {
    "model": ErrorBody,
    "description": "The body is larger than ASSAY_API_MAX_DOCUMENTS_BODY_BYTES (8 MiB by default).",
}
DOCUMENT_WRITE_ERRORS: dict[int | str, dict[str, Any]] = {**WRITE_ERRORS, 413: DOCUMENTS_TOO_LARGE}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such id."}
}
# What the server's state decides, not the request's shape (docs/api.md, "Errors"): something
# the request names that this server does not have is a 404, one its state cannot serve a 409.
OUTSIDE_ROOTS = "a snapshot path outside the server's snapshot roots (snapshot_outside_roots)"
UNROUTABLE = "a model no provider routes (unroutable_model)"
KEY_MISSING = "The model's provider wants an API key no live worker holds (model_key_missing)"


def state_refusals(not_here: str, conflict: str | None = None) -> dict[int | str, dict[str, Any]]:
    """The 404 (and 409) an operation documents for what only the server's state can judge."""
    answers: dict[int | str, dict[str, Any]] = {
        404: {"model": ErrorBody, "description": not_here[:1].upper() + not_here[1:] + "."}
    }
    if conflict is not None:
        answers[409] = {"model": ErrorBody, "description": conflict + "."}
    return answers


EXPIRED: dict[int | str, dict[str, Any]] = {
    410: {
        "model": ErrorBody,
        "description": "The run is known, but its report is no longer kept (report_expired).",
    }
}


def links_to(parameter: str, pointer: str, *operation_ids: str) -> dict[str, Any]:
    """OpenAPI ``links`` of an answer: which operations take the id at ``pointer`` in its body
    as their ``parameter`` (a client, or a fuzzer's stateful phase, follows them)."""
    value = f"$response.body#{pointer}"
    return {
        "links": {op: {"operationId": op, "parameters": {parameter: value}} for op in operation_ids}
    }


RUN_OPERATIONS = ("get_run_v1_runs__run_id__get",)
CHECK_OPERATIONS = (
    "get_check_v1_checks__check_id__get",
    "get_check_history_v1_checks__check_id__history_get",
    "get_probe_v1_checks__check_id__probe_get",
    "export_probe_v1_checks__check_id__probe_export_get",
    "test_probe_v1_checks__check_id__probe_test_post",
    "drop_probe_v1_checks__check_id__probe_delete",
)
BATCH_OPERATIONS = (
    "get_batch_v1_batches__batch_id__get",
    "get_batch_results_v1_batches__batch_id__results_get",
)
SCHEDULE_OPERATIONS = (
    "get_schedule_v1_schedules__schedule_id__get",
    "update_schedule_v1_schedules__schedule_id__patch",
    "pause_schedule_v1_schedules__schedule_id__pause_post",
    "resume_schedule_v1_schedules__schedule_id__resume_post",
    "delete_schedule_v1_schedules__schedule_id__delete",
)


# An instant as JSON Schema's ``date-time`` format means it (RFC 3339: a date, ``T``, a time
# and ``Z`` or an offset); pydantic alone would also take a number as a Unix time.
RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$",
    re.IGNORECASE,
)


def _rfc3339_instant(value: object) -> object:
    if isinstance(value, str) and RFC3339.fullmatch(value):
        return datetime.fromisoformat(value.upper())  # a day out of range: ValueError, a 422
    raise ValueError("give an RFC 3339 instant with a zone, e.g. 2027-01-01T00:00:00Z")


Rfc3339Instant = Annotated[datetime, BeforeValidator(_rfc3339_instant)]


# --- targets a remote caller may name ------------------------------------------------------------


def _no_kubeconfig(value: object) -> None:
    """Refuse a kubeconfig over HTTP; the error type is the API's stable error code."""
    if value is not None:
        raise PydanticCustomError("kubeconfig_not_allowed", NO_KUBECONFIG)


_SERVER_KUBECONFIG = "Always null over HTTP: contexts come from the server's kubeconfig."


class ServerContextTarget(ContextTarget):
    """A context of the server's kubeconfig (a kubeconfig can run programs through exec
    credential plugins, so a caller cannot name one)."""

    kubeconfig: None = Field(default=None, description=_SERVER_KUBECONFIG)

    @field_validator("kubeconfig", mode="before")
    @classmethod
    def _refuse_kubeconfig(cls, value: object) -> None:
        _no_kubeconfig(value)


class ServerSnapshotTarget(SnapshotTarget):
    """A snapshot folder under the server's snapshot roots (a relative path is read from the
    server's working directory). At most 1024 characters, so that the resolved path the run
    is queued with still fits the contract's 4096."""

    path: str = Field(
        min_length=1,
        max_length=MAX_API_PATH_LENGTH,
        json_schema_extra={"pattern": SHOWN_NAME_PATTERN, **SNAPSHOT_PATH_FORMAT},
    )


ApiTarget = Annotated[
    ServerSnapshotTarget | ServerContextTarget | InClusterTarget, Field(discriminator="type")
]


def contract_target(target: SnapshotTarget | ContextTarget | InClusterTarget) -> Target:
    """``target`` as the contract's own model (a ``ServerContextTarget`` as a plain one)."""
    if isinstance(target, ContextTarget):
        return ContextTarget(context=target.context)
    return target


class ServerScheduleTargets(ScheduleTargets):
    """A schedule's targets as a remote caller may name them: no kubeconfig of its own, and
    snapshot patterns without '..'."""

    snapshots: list[SnapshotPattern] = Field(default_factory=list, max_length=1000)
    kubeconfig: None = Field(default=None, description=_SERVER_KUBECONFIG)

    @field_validator("kubeconfig", mode="before")
    @classmethod
    def _refuse_kubeconfig(cls, value: object) -> None:
        _no_kubeconfig(value)


class EvaluationSubmission(_Request):
    """One evaluation to queue: a check (true/false) or a query (findings)."""

    kind: EvaluationKind = "check"
    text: str = Field(
        min_length=1,
        max_length=MAX_TEXT_LENGTH,
        description="The predicate.",
        json_schema_extra=VISIBLE_TEXT,
    )
    target: ApiTarget
    toolsets: list[ToolsetName] = Field(default_factory=_default_toolsets, min_length=1)
    profile: ProfileName = "fast"
    budget: ApiBudget = Field(default_factory=ApiBudget)
    model: str | None = Field(
        default=None,
        max_length=200,
        description="litellm model name; None = server default.",
        json_schema_extra=MODEL_NAME_FORMAT,
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
    not_before: Rfc3339Instant | None = Field(
        default=None, description="Do not start before this instant (with a time zone)."
    )
    probe: ProbeMode = Field(
        default="auto",
        description=PROBE_MODE_HELP,
    )


# A batch or a schedule runs unattended: the server's unattended profile unless it names one
# (AssaySettings.unattended_profile), as `assay batch`, `schedule add` and `apply` do.
_UNATTENDED_PROFILE_HELP = (
    "smoke, fast or strict; null or left out: the server's ASSAY_PROFILE when it is set, "
    "else strict."
)


_BATCH_TARGETS = AssaySettings.model_fields["api_max_batch_targets"].default


def _targets_or_context_glob(schema: dict[str, Any]) -> None:
    """Publish "exactly one of ``targets`` and ``context_glob``" as a ``oneOf``."""
    schema["oneOf"] = [
        {"required": ["targets"], "properties": {"targets": {"type": "array"}}},
        {"required": ["context_glob"], "properties": {"context_glob": {"type": "string"}}},
    ]


class BatchSubmission(_Request):
    """One predicate over many targets: listed, or the server kubeconfig's contexts matching
    a glob (exactly one of the two). The server caps how many (``api_max_batch_targets``)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_targets_or_context_glob)

    kind: EvaluationKind = "check"
    text: str = Field(min_length=1, max_length=MAX_TEXT_LENGTH, json_schema_extra=VISIBLE_TEXT)
    targets: list[ApiTarget] | None = Field(
        default=None,
        min_length=1,
        max_length=_BATCH_TARGETS,
        description="At most the server's ASSAY_API_MAX_BATCH_TARGETS (1,000 by default).",
    )
    context_glob: str | None = Field(
        default=None,
        min_length=1,
        max_length=300,
        description="e.g. 'prod-*'; it must match a context of the server's kubeconfig.",
        json_schema_extra=CONTEXT_GLOB_FORMAT,
    )
    toolsets: list[ToolsetName] = Field(default_factory=_default_toolsets, min_length=1)
    profile: ProfileName | None = Field(default=None, description=_UNATTENDED_PROFILE_HELP)
    budget: ApiBudget = Field(default_factory=ApiBudget)
    model: str | None = Field(default=None, max_length=200, json_schema_extra=MODEL_NAME_FORMAT)
    probe: ProbeMode = Field(
        default="auto",
        description=PROBE_MODE_HELP,
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


def _cron_or_interval(schema: dict[str, Any]) -> None:
    """Publish "exactly one of ``cron`` and ``interval_seconds``" as a ``oneOf``."""
    schema["oneOf"] = [
        {"required": ["cron"], "properties": {"cron": {"type": "string"}}},
        {"required": ["interval_seconds"], "properties": {"interval_seconds": {"type": "number"}}},
    ]


# The interval floor is a server setting (ASSAY_MIN_INTERVAL_SECONDS); the schema publishes
# its default, and a server set otherwise answers 422 ``interval_too_short`` below its own.
_INTERVAL_FLOOR: JsonDict = {"minimum": AssaySettings.model_fields["min_interval_seconds"].default}
_INTERVAL_HELP = (
    "Seconds between fires: at least the server's ASSAY_MIN_INTERVAL_SECONDS (60 by default)."
)
_IntervalSeconds = Annotated[
    IntervalSeconds | None, Field(description=_INTERVAL_HELP, json_schema_extra=_INTERVAL_FLOOR)
]


class ScheduleCreate(_Request):
    """A new schedule; the server picks its id and sets timestamps and the revision.
    Exactly one of ``cron`` and ``interval_seconds``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cron_or_interval)

    name: ScheduleName
    predicate: PredicateText
    kind: EvaluationKind = "check"
    targets: ServerScheduleTargets
    cron: PublishedCron | None = None
    timezone: PublishedZone = "UTC"
    interval_seconds: _IntervalSeconds = None
    profile: ProfileName | None = Field(default=None, description=_UNATTENDED_PROFILE_HELP)
    budget: ApiBudget = Field(default_factory=ApiBudget)
    model: str | None = Field(default=None, max_length=200, json_schema_extra=MODEL_NAME_FORMAT)
    enabled: bool = True
    misfire: MisfirePolicy = "skip"
    jitter_seconds: JitterSeconds = 0.0
    probe: ProbeMode = Field(
        default="auto",
        description=PROBE_MODE_HELP,
    )
    notify: NotifyRoutes = Field(default_factory=list)
    spend: SpendCeiling | None = Field(
        default=None,
        description="Token and cost ceilings per UTC day over the schedule's runs; None = "
        "the fleet's default (spend_schedule_*).",
    )


MAX_APPLY_DOCUMENTS = 1000


class ApplyBody(_Request):
    """Declarative checks and schedules to apply, as `assay apply -f` reads them from files,
    sent as parsed documents (a YAML file converted to JSON: `yq -o=json`)."""

    source: str = Field(
        min_length=1,
        max_length=MAX_SOURCE_LENGTH,
        pattern=LABEL_VALUE_PATTERN,
        description="Name of this set of documents, kept as label assay.dev/source on what "
        "it creates; prune removes only objects of this source.",
    )
    # Published as the server's document models; validated by them in the apply itself
    # (assay.manifests.load_objects), whose 422 names each problem's document and field.
    documents: list[SkipValidation[ServerDocument]] = Field(
        max_length=MAX_APPLY_DOCUMENTS, description="Check and Schedule documents."
    )
    prune: bool = Field(
        default=False,
        description="Delete checks and schedules an earlier apply of this source created and "
        "these documents no longer hold.",
    )
    dry_run: bool = Field(default=False, description="Answer what would change; apply nothing.")


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


def _kept_when_left_out(schema: dict[str, Any]) -> None:
    """Publish the fields that take no null as such (no ``null`` branch, no ``default:
    null``: leaving one out keeps its value), and never both ``cron`` and
    ``interval_seconds``. In Python they are optional, None meaning "not sent"."""
    for name, field in schema.get("properties", {}).items():
        if name in _NULLABLE_CHANGES:
            continue
        field.pop("default", None)
        branches = [b for b in field.pop("anyOf", []) if b != {"type": "null"}]
        if len(branches) == 1:
            field.update({**branches[0], **field})
        elif branches:
            field["anyOf"] = branches
    schema["not"] = {"required": ["cron", "interval_seconds"]}


# null: back to the workers' model / to the fleet's default spend ceiling (what
# `assay schedule update --default-spend-ceiling` does).
_NULLABLE_CHANGES = frozenset({"model", "spend"})


class ScheduleUpdate(_Request):
    """Fields to change; the ones left out keep their value. Only ``model`` (the workers'
    model again) and ``spend`` (the fleet's default ceiling again) take null; setting
    ``cron`` clears the interval and the other way round, so neither is ever sent as null.
    Pause and resume have their own endpoints."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_kept_when_left_out)

    # None means "not sent"; an explicit null is refused for every field but ``model`` and
    # ``spend`` (``model_fields_set`` tells a sent null from a field left out).
    name: ScheduleName | None = None
    predicate: PredicateText | None = None
    kind: EvaluationKind | None = None
    targets: ServerScheduleTargets | None = None
    cron: PublishedCron | None = None
    timezone: PublishedZone | None = None
    interval_seconds: _IntervalSeconds = None
    profile: ProfileName | None = None
    budget: ApiBudget | None = None
    model: str | None = Field(default=None, max_length=200, json_schema_extra=MODEL_NAME_FORMAT)
    probe: ProbeMode | None = None
    misfire: MisfirePolicy | None = None
    jitter_seconds: JitterSeconds | None = None
    notify: NotifyRoutes | None = None
    spend: SpendCeiling | None = Field(
        default=None, description="New ceilings per UTC day; null: back to the fleet's default."
    )

    @field_validator("*", mode="before")
    @classmethod
    def _null_only_for_model_and_spend(cls, value: object, info: ValidationInfo) -> object:
        if value is None and info.field_name not in _NULLABLE_CHANGES:
            raise ValueError(
                "null is not a value here: leave the field out to keep it (setting cron "
                "clears the interval and the other way round)"
            )
        return value

    @model_validator(mode="after")
    def _one_cadence(self) -> ScheduleUpdate:
        if {"cron", "interval_seconds"} <= self.model_fields_set:
            raise ValueError(
                "give cron or interval_seconds, not both: setting one clears the other"
            )
        return self


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


class ProbeTest(_Request):
    """Where to run a check's probe now (a snapshot under the server's roots, or a context),
    and for how long at most."""

    target: ApiTarget
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=7 * 24 * 3600,
        description="Seconds the probe may take at most; None: the check's time budget under "
        "the server's settings (ASSAY_TIMEOUT_SECONDS, else the check's profile's), which also "
        "caps a longer value. Past it the run has no verdict and budget_exhausted is deadline.",
    )


MAX_IMPORT_CHARS = 4 * 1024 * 1024


# YAML or JSON text: which strings hold policies only the server's reader can tell, so every
# string is a valid request, and text holding no policy is answered in `refused`.
POLICY_DOCUMENTS_FORMAT: JsonDict = {"format": "policy-documents"}


class PolicyImport(_Request):
    """Policy documents to import, as the files hold them (several YAML documents, Lists)."""

    documents: str = Field(
        min_length=1,
        max_length=MAX_IMPORT_CHARS,
        description="YAML or JSON text: ValidatingAdmissionPolicy (+ binding, + params object), "
        "Kyverno ValidatingPolicy or ClusterPolicy, Gatekeeper ConstraintTemplate + constraints. "
        "A document that is not an importable policy is answered in `refused`, and so is text "
        "that is not YAML or JSON or holds no document (kind `(text)`).",
        json_schema_extra=POLICY_DOCUMENTS_FORMAT,
    )
    policy_set: str | None = Field(
        default=None,
        pattern=SET_NAME_PATTERN,
        description="Make the imported policies exactly the set policy-set:NAME.",
    )
    source: str = Field(default="-", max_length=4096, description="Named in refusals.")
    dry_run: bool = Field(default=False, description="Say what would be imported; store nothing.")


class PolicyTranslationRequest(_Request):
    """Policies to translate into another engine's form, and what to prove it on."""

    documents: str = Field(
        min_length=1,
        max_length=MAX_IMPORT_CHARS,
        description="YAML or JSON text: the policies (a Gatekeeper ConstraintTemplate and its "
        "constraint, a Kyverno policy, a ValidatingAdmissionPolicy with its binding and params) "
        "and any objects to prove the translation on (every document that is not a policy). "
        "Text that is not YAML or JSON is answered in `refused`.",
        json_schema_extra=POLICY_DOCUMENTS_FORMAT,
    )
    to: Literal["vap", "kyverno"] = Field(
        default="vap", description="vap: ValidatingAdmissionPolicy; kyverno: ValidatingPolicy."
    )
    action: Literal["Audit", "Warn", "Deny"] | None = Field(
        default=None, description="The binding's action; None: each policy's own."
    )
    target: ApiTarget | None = Field(
        default=None,
        description="Prove it on every object of this target too, of a kind the policies judge.",
    )
    force: bool = Field(
        default=False, description="Answer the translation even when an object disagrees."
    )


class TranslatedObject(_Body):
    """An object judged by the original policies and by their translation."""

    kind: str
    namespace: str | None = None
    name: str
    original: Literal["allowed", "denied", "undetermined"]
    translation: Literal["allowed", "denied", "undetermined"]
    reason: str = ""


class PolicyTranslation(_Body):
    """A translation and its proof: ``documents`` (YAML) only when every object judged agrees,
    or when ``force`` asked for it; ``refused`` says why there is no translation or proof."""

    proven: bool = Field(description="Every object judged alike, none undetermined.")
    refused: str | None = Field(
        default=None,
        description="Why the policies were not translated or the translation not judged "
        "(a refused import, a field with no counterpart, nothing to prove it on, an "
        "unreadable target), in one sentence.",
    )
    documents: str | None = Field(default=None, description="The translation, as YAML.")
    warnings: list[str] = Field(default_factory=list)
    objects_judged: int = 0
    disagreements: list[TranslatedObject] = Field(
        default_factory=list, description="Objects judged differently, or not at all (100 at most)."
    )


class PolicyList(_Body):
    """The imported policies, and each set with its policies' names."""

    policies: list[ImportedPolicy]
    sets: dict[str, list[str]]
