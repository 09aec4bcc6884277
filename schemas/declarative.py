"""Checks and schedules as files: the documents `assay apply` reads and `assay get` writes.

One YAML document per object, shaped like a Kubernetes object so the tools a team
already has (editors with JSON Schema, linters, review in git) work on them::

    apiVersion: assay.dev/v1alpha1
    kind: Schedule                      # or Check
    metadata:
      name: nightly-replicas
      labels: {team: platform}
    spec:
      predicate: every Deployment in namespace prod has at least 2 ready replicas
      targets: {contexts: [prod-eu, prod-us]}
      cron: "0 2 * * *"
      timeZone: Europe/Berlin
      notify: [pager]

A ``Schedule`` is a stored schedule (what `assay schedule add` makes); a ``Check`` is
a named check evaluated once on each of its targets whenever applying it creates or
changes it. The spec holds what the CLI and the API accept for them, in camelCase;
``schemas/json/apply_document.schema.json`` is this module's JSON Schema, for editors.

Durations are written as on the command line (``15m``, ``1h30m``, or seconds as a
number). ``metadata.labels`` are the user's, except :data:`SOURCE_LABEL`, which
`assay apply` manages: it records which source created an object, and ``--prune``
deletes only objects carrying its own source (a label given in a file is ignored).

A schedule's ``spec.ceilings`` are its spend ceilings per UTC day (``Schedule.spend``);
``spec.policy`` names (or imports) an admission policy to run instead of a predicate
(the predicate ``policy:NAME`` / ``policy-set:NAME``, schemas/policy.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from schemas.budget import Budget, ProfileName
from schemas.cadence import PublishedCron, PublishedZone
from schemas.durations import (
    DURATION_PATTERN,
    DurationError,
    bounded_duration_pattern,
    parse_duration,
)
from schemas.kubernetes_metadata import LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN
from schemas.notify import SinkName
from schemas.numbers import integral
from schemas.policy import POLICY_NAME_PATTERN, POLICY_PREFIX, POLICY_SET_PREFIX, SET_NAME_PATTERN
from schemas.probe import PROBE_MODE_HELP, ProbeMode
from schemas.request import (
    CONTEXT_GLOB_FORMAT,
    MAX_API_PATH_LENGTH,
    MAX_TEXT_LENGTH,
    SNAPSHOT_PATH_FORMAT,
    VISIBLE_TEXT,
    EvaluationKind,
    ShownContextName,
    ShownName,
    SnapshotPattern,
    blank,
)
from schemas.schedule import (
    MAX_INTERVAL_SECONDS,
    MAX_JITTER_SECONDS,
    MisfirePolicy,
    Schedule,
    ScheduleTargets,
    format_duration,
    publish_one_kind_of_target,
)
from schemas.spend import (
    MAX_CEILING_COST_USD,
    MAX_CEILING_TOKENS,
    MIN_CEILING_COST_USD,
    MIN_CEILING_TOKENS,
    SpendCeiling,
)

API_VERSION = "assay.dev/v1alpha1"
SOURCE_LABEL = "assay.dev/source"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
MAX_SOURCE_LENGTH = 63

ObjectName = Annotated[
    str,
    StringConstraints(pattern=NAME_PATTERN),
    Field(
        description="1 to 63 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit."
    ),
]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN, max_length=253)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE_PATTERN)]
Duration = Annotated[
    str | float,
    Field(
        description="A duration like 90s, 15m, 1h30m or 1d, or seconds as a number.",
        json_schema_extra={"pattern": DURATION_PATTERN},
    ),
]


def duration_seconds(value: str | float) -> float:
    """Seconds of a spec duration (``ValueError`` with a readable message)."""
    if isinstance(value, bool):
        raise ValueError("a duration is text like 15m or a number of seconds, not true/false")
    if isinstance(value, int | float):
        if value <= 0:
            raise ValueError(f"duration {value} must be longer than zero")
        return float(value)
    try:
        return parse_duration(value)
    except DurationError as exc:
        raise ValueError(str(exc)) from None


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
    )


def _label_rules(schema: dict[str, Any]) -> None:
    """Publish a label key's rules for every key (``propertyNames``), not only for the keys
    that match them (``patternProperties`` left any other key free)."""
    labels: Any = schema["properties"]["labels"]
    (key_pattern, value), *_ = labels.pop("patternProperties").items()
    labels["propertyNames"] = {**labels.get("propertyNames", {}), "pattern": key_pattern}
    labels["additionalProperties"] = value


class Metadata(_Spec):
    model_config = ConfigDict(json_schema_extra=_label_rules)

    name: ObjectName
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description=f"Your labels. {SOURCE_LABEL} is set by `assay apply` (which source "
        "created the object) and ignored when given in a file.",
    )


def _string(name: str) -> dict[str, Any]:
    """The schema of "``name`` is given, and not as null"."""
    return {"required": [name], "properties": {name: {"type": "string"}}}


def _camel_branch(branch: dict[str, Any]) -> dict[str, Any]:
    return {
        "required": [to_camel(name) for name in branch.get("required", [])],
        "properties": {to_camel(k): v for k, v in branch.get("properties", {}).items()},
    }


def _one_kind_of_target(schema: dict[str, Any]) -> None:
    """Publish "exactly one kind of target" (``_one_kind``) as the contract's targets publish
    it (schemas.schedule), in the documents' spelling (``contextGlob``)."""
    contract: dict[str, Any] = {}
    publish_one_kind_of_target(contract)
    schema["oneOf"] = [_camel_branch(branch) for branch in contract["oneOf"]]


class TargetsSpec(_Spec):
    """Where the predicate is evaluated: exactly one of the three kinds of target."""

    model_config = ConfigDict(json_schema_extra=_one_kind_of_target)

    contexts: list[ShownContextName] = Field(
        default_factory=list, max_length=1000, description="kubeconfig context names."
    )
    context_glob: Annotated[ShownName, Field(json_schema_extra=CONTEXT_GLOB_FORMAT)] | None = Field(
        default=None,
        min_length=1,
        description="A context glob such as 'prod-*' (a schedule resolves it at each fire, a "
        "check when it is applied).",
    )
    snapshots: list[Annotated[ShownName, Field(json_schema_extra=SNAPSHOT_PATH_FORMAT)]] = Field(
        default_factory=list,
        max_length=1000,
        description="Snapshot folders or globs, under the snapshot roots.",
    )
    kubeconfig: str | None = Field(
        default=None, description="kubeconfig for contexts; none = the settings' kubeconfig."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> TargetsSpec:
        given = [bool(self.contexts), self.context_glob is not None, bool(self.snapshots)]
        if sum(given) != 1:
            raise ValueError("give exactly one kind of target: contexts, contextGlob or snapshots")
        self.as_schedule_targets()  # the schedule's own rules, so both say the same
        return self

    def as_schedule_targets(self) -> ScheduleTargets:
        return ScheduleTargets(
            contexts=self.contexts,
            context_glob=self.context_glob,
            snapshots=self.snapshots,
            kubeconfig=self.kubeconfig,
        )

    @classmethod
    def of(cls, targets: ScheduleTargets) -> TargetsSpec:
        return cls(
            contexts=targets.contexts,
            context_glob=targets.context_glob,
            snapshots=targets.snapshots,
            kubeconfig=targets.kubeconfig,
        )


class BudgetSpec(_Spec):
    """Per-run limits; what is left out comes from the profile (or the ASSAY_* settings).
    Numbers are strict: ``"5000"`` is text, not a limit (the loader reads ``5_000`` and
    ``+5000`` as text too: ``yaml_documents.StrictNumbersLoader``)."""

    max_iterations: StrictInt | None = Field(default=None, ge=1, le=200)
    max_tokens: StrictInt | None = Field(default=None, ge=100, le=10_000_000)
    timeout: Duration | None = Field(default=None, description="Wall-clock time per run.")
    max_cost_usd: StrictFloat | None = Field(default=None, gt=0)

    _integral = field_validator("max_iterations", "max_tokens", mode="before")(integral)

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            duration_seconds(value)
        return value

    def as_budget(self) -> Budget:
        return Budget(
            max_iterations=self.max_iterations,
            max_tokens=self.max_tokens,
            timeout_seconds=duration_seconds(self.timeout) if self.timeout is not None else None,
            max_cost_usd=self.max_cost_usd,
        )

    @classmethod
    def of(cls, budget: Budget) -> BudgetSpec:
        return cls(
            max_iterations=budget.max_iterations,
            max_tokens=budget.max_tokens,
            timeout=short_duration(budget.timeout_seconds),
            max_cost_usd=budget.max_cost_usd,
        )

    def is_empty(self) -> bool:
        return all(value is None for value in self.model_dump().values())


def short_duration(seconds: float | None) -> str | float | None:
    """``seconds`` as the spec writes it back: ``15m`` when whole seconds, else a number."""
    if seconds is None:
        return None
    if float(seconds).is_integer():
        from schemas.schedule import format_duration

        return format_duration(seconds)
    return seconds


def _one_way_to_a_policy(schema: dict[str, Any]) -> None:
    """Publish ``_one_way``: a name or a set (not both) and no file, or a file and no name."""
    schema["anyOf"] = [
        {"not": _string("file"), "oneOf": [_string("name"), _string("set")]},
        {**_string("file"), "not": _string("name")},
    ]


class PolicySpec(_Spec):
    """An imported admission policy as the check (no model: its probes answer it).

    ``name``: one policy already imported (``assay probe import``), ``set``: every policy of
    a set, ``file``: a file of policies (ValidatingAdmissionPolicy with its binding and
    params, Kyverno ValidatingPolicy or ClusterPolicy, Gatekeeper ConstraintTemplate with
    its constraint) imported when the document is applied, relative to the document's own
    file; several policies in the file need a ``set`` to be evaluated as one.
    """

    model_config = ConfigDict(json_schema_extra=_one_way_to_a_policy)

    name: str | None = Field(default=None, pattern=POLICY_NAME_PATTERN)
    set: str | None = Field(default=None, pattern=SET_NAME_PATTERN)
    file: str | None = Field(default=None, min_length=1, max_length=4096)

    @model_validator(mode="after")
    def _one_way(self) -> PolicySpec:
        if self.file is None and (self.name is None) == (self.set is None):
            raise ValueError("give the policy's name, a set, or a file to import")
        if self.file is not None and self.name is not None:
            raise ValueError("give the policy's name or a file to import, not both")
        return self

    def predicate(self, imported: list[str]) -> str:
        """What the fleet evaluates: ``policy:NAME`` or ``policy-set:SET``."""
        if self.set is not None:
            return POLICY_SET_PREFIX + self.set
        return POLICY_PREFIX + (self.name or imported[0])


def _evaluation_rules(schema: dict[str, Any]) -> None:
    """Publish ``_predicate_or_policy``: exactly one of the two, and a policy only checked."""
    policy = {"required": ["policy"], "properties": {"policy": {"type": "object"}}}
    schema["oneOf"] = [_string("predicate"), policy]
    query = {"required": ["evaluation"], "properties": {"evaluation": {"const": "query"}}}
    schema.setdefault("allOf", []).append({"not": {"allOf": [policy, query]}})


class _EvaluationSpec(_Spec):
    """What a check and a schedule both hold: what to evaluate, where, under which limits."""

    model_config = ConfigDict(json_schema_extra=_evaluation_rules)

    predicate: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT_LENGTH,
        description="The predicate (or, with evaluation: query, the question).",
        json_schema_extra=VISIBLE_TEXT,
    )
    policy: PolicySpec | None = Field(
        default=None,
        description="An imported admission policy (ValidatingAdmissionPolicy, Kyverno, "
        "Gatekeeper) instead of a predicate: answered by its probes, never by a model.",
    )
    evaluation: EvaluationKind = Field(
        default="check", description="check (true/false) or query (findings)."
    )
    targets: TargetsSpec
    profile: ProfileName | None = Field(
        default=None, description="smoke, fast or strict; none = the settings' profile."
    )
    model: str | None = Field(
        default=None, max_length=200, description="litellm model; none = the workers' model."
    )
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    probe: ProbeMode = Field(
        default="auto",
        description=PROBE_MODE_HELP,
    )
    notify: list[SinkName] = Field(
        default_factory=list,
        max_length=20,
        description="Notify routes: sinks (names from notify_sinks) that hear this object's "
        "verdict changes whatever their own check and target filters say.",
        json_schema_extra={"uniqueItems": True},
    )

    @field_validator("predicate")
    @classmethod
    def _predicate_not_blank(cls, text: str | None) -> str | None:
        if text is not None and blank(text):
            raise ValueError("the predicate text is empty")
        return text

    @field_validator("notify")
    @classmethod
    def _unique_routes(cls, routes: list[str]) -> list[str]:
        if len(set(routes)) != len(routes):
            raise ValueError("a sink is named twice in notify")
        return routes

    @model_validator(mode="after")
    def _predicate_or_policy(self) -> _EvaluationSpec:
        if (self.predicate is None) == (self.policy is None):
            raise ValueError("give exactly one of predicate and policy")
        if self.policy is not None and self.evaluation != "check":
            raise ValueError("a policy is a check; drop evaluation: query")
        return self


class CheckSpec(_EvaluationSpec):
    """A check evaluated once per target each time applying it creates or changes it."""


def _some_ceiling(schema: dict[str, Any]) -> None:
    """Publish ``_as_ceiling``: tokensPerDay, costPerDayUsd or both, not as null."""
    schema["anyOf"] = [
        {"required": ["tokensPerDay"], "properties": {"tokensPerDay": {"type": "integer"}}},
        {"required": ["costPerDayUsd"], "properties": {"costPerDayUsd": {"type": "number"}}},
    ]


class CeilingsSpec(_Spec):
    """A schedule's spend ceilings per UTC day over all its runs (docs/fleet.md, spend)."""

    model_config = ConfigDict(json_schema_extra=_some_ceiling)

    tokens_per_day: StrictInt | None = Field(
        default=None,
        ge=MIN_CEILING_TOKENS,
        le=MAX_CEILING_TOKENS,
        description="Most tokens (prompt + completion) per UTC day.",
    )
    cost_per_day_usd: StrictFloat | None = Field(
        default=None,
        ge=MIN_CEILING_COST_USD,
        le=MAX_CEILING_COST_USD,
        description="Most US dollars per UTC day (models whose price litellm knows), at "
        "least 0.000001.",
    )

    _integral = field_validator("tokens_per_day", mode="before")(integral)

    @model_validator(mode="after")
    def _as_ceiling(self) -> CeilingsSpec:
        if self.tokens_per_day is None and self.cost_per_day_usd is None:
            raise ValueError("give tokensPerDay, costPerDayUsd or both")
        self.as_spend()  # the ceiling's own rules (a whole number, finite, one of the two)
        return self

    def as_spend(self) -> SpendCeiling:
        return SpendCeiling(tokens=self.tokens_per_day, cost_usd=self.cost_per_day_usd)

    @classmethod
    def of(cls, ceiling: SpendCeiling) -> CeilingsSpec:
        return cls(tokens_per_day=ceiling.tokens, cost_per_day_usd=ceiling.cost_usd)


def _cadence_rules(schema: dict[str, Any]) -> None:
    """Publish ``_cadence`` (exactly one of cron and every; a time zone other than UTC only
    with cron) beside the rules of every evaluation."""
    _evaluation_rules(schema)
    every = {"required": ["every"], "properties": {"every": {"type": ["string", "number"]}}}
    utc = {"properties": {"timeZone": {"const": "UTC"}}}
    schema["allOf"] += [
        {"oneOf": [_string("cron"), every]},
        {"anyOf": [utc, _string("cron")]},
    ]


class ScheduleSpec(_EvaluationSpec):
    """A periodic evaluation: exactly one of ``cron`` and ``every``."""

    model_config = ConfigDict(json_schema_extra=_cadence_rules)

    cron: PublishedCron | None = Field(
        default=None, description="Five-field cron expression or @alias, read in timeZone."
    )
    every: Duration | None = Field(default=None, description="Fire at this interval instead.")
    time_zone: PublishedZone = Field(
        default="UTC", description="IANA zone the cron expression is read in."
    )
    misfire: MisfirePolicy = Field(
        default="skip",
        description="After scheduler downtime: skip (only the next future fire) or run_once.",
    )
    jitter: Duration | None = Field(
        default=None,
        description=f"Spread each fire by up to this (at most {MAX_JITTER_SECONDS:g}s).",
    )
    paused: bool = Field(default=False, description="True: stored, but does not fire.")
    ceilings: CeilingsSpec | None = Field(
        default=None,
        description="Spend ceilings per UTC day; none = the fleet's defaults. A day whose "
        "ceiling is reached skips the schedule's fires until the next UTC day.",
    )

    @field_validator("every", "jitter")
    @classmethod
    def _readable(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            duration_seconds(value)
        return value

    @model_validator(mode="after")
    def _cadence(self) -> ScheduleSpec:
        if (self.cron is None) == (self.every is None):
            raise ValueError("a schedule needs exactly one of cron or every")
        if self.time_zone != "UTC" and self.cron is None:
            raise ValueError("timeZone applies to cron only; intervals run in real time")
        return self


@dataclass(frozen=True)
class _SpecField:
    """One field of a stored schedule as a Schedule document writes it: the spec's name for
    it, and the conversions each way. ``from_schedule`` gets the whole schedule (a time zone
    is written only beside a cron expression); what equals the spec's default is left out of
    the document."""

    schedule: str
    spec: str
    to_schedule: Callable[[ScheduleSpec], Any]
    from_schedule: Callable[[Schedule], Any]


def _same(name: str, attr: str | None = None) -> _SpecField:
    """A field the spec and the schedule hold alike (under ``attr`` in the spec)."""
    spec = attr or name
    return _SpecField(name, spec, lambda s: getattr(s, spec), lambda sch: getattr(sch, name))


def _duration_or(value: str | float | None, default: float | None) -> float | None:
    return duration_seconds(value) if value is not None else default


# Every Schedule field a document declares, in the order `assay get -o yaml` writes them
# (name and labels are the metadata's; the predicate is the spec's predicate or policy).
SCHEDULE_SPEC_FIELDS: tuple[_SpecField, ...] = (
    _same("kind", "evaluation"),
    _SpecField(
        "targets", "targets", lambda s: s.targets.as_schedule_targets(),
        lambda sch: TargetsSpec.of(sch.targets),
    ),
    _same("cron"),
    _SpecField(
        "timezone", "time_zone", lambda s: s.time_zone,
        lambda sch: sch.timezone if sch.cron is not None else "UTC",
    ),
    _SpecField(
        "interval_seconds", "every", lambda s: _duration_or(s.every, None),
        lambda sch: short_duration(sch.interval_seconds),
    ),
    _same("profile"),
    _same("model"),
    _SpecField(
        "budget", "budget", lambda s: s.budget.as_budget(), lambda sch: BudgetSpec.of(sch.budget)
    ),
    _same("probe"),
    _SpecField("notify", "notify", lambda s: list(s.notify), lambda sch: list(sch.notify)),
    _same("misfire"),
    _SpecField(
        "jitter_seconds", "jitter", lambda s: _duration_or(s.jitter, 0.0),
        lambda sch: short_duration(sch.jitter_seconds) if sch.jitter_seconds else None,
    ),
    _SpecField("enabled", "paused", lambda s: not s.paused, lambda sch: not sch.enabled),
    _SpecField(
        "spend", "ceilings", lambda s: s.ceilings.as_spend() if s.ceilings is not None else None,
        lambda sch: CeilingsSpec.of(sch.spend) if sch.spend is not None else None,
    ),
)  # fmt: skip

# Where a Schedule field's problem is in a document (its spec field, or the metadata's name).
SCHEDULE_SPEC_LOCS: dict[str, tuple[str, ...]] = {
    "name": ("metadata", "name"),
    "predicate": ("spec", "predicate"),
    **{f.schedule: ("spec", to_camel(f.spec)) for f in SCHEDULE_SPEC_FIELDS},
}


def schedule_fields(spec: ScheduleSpec) -> dict[str, Any]:
    """The Schedule fields ``spec`` declares (the caller adds the name, labels and the
    predicate, and the profile of a spec that names none)."""
    return {f.schedule: f.to_schedule(spec) for f in SCHEDULE_SPEC_FIELDS}


def schedule_spec(schedule: Schedule) -> dict[str, Any]:
    """The spec fields of the document that declares ``schedule`` (by their document names,
    as JSON), after its predicate or policy: only what differs from the spec's defaults."""
    out: dict[str, Any] = {}
    for f in SCHEDULE_SPEC_FIELDS:
        value = f.from_schedule(schedule)
        if value == ScheduleSpec.model_fields[f.spec].get_default(call_default_factory=True):
            continue
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        out[to_camel(f.spec)] = value
    return out


class _Document(_Spec):
    api_version: Literal["assay.dev/v1alpha1"] = Field(
        alias="apiVersion", description="assay.dev/v1alpha1"
    )
    metadata: Metadata


class CheckDocument(_Document):
    kind: Literal["Check"]
    spec: CheckSpec


class ScheduleDocument(_Document):
    kind: Literal["Schedule"]
    spec: ScheduleSpec


Document = Annotated[CheckDocument | ScheduleDocument, Field(discriminator="kind")]
KINDS: dict[str, type[CheckDocument] | type[ScheduleDocument]] = {
    "Check": CheckDocument,
    "Schedule": ScheduleDocument,
}


# --- the documents over HTTP (POST /v1/apply) -----------------------------------------------
# The server's variant of each model, the one its published schema is generated from and its
# documents are validated with: what a remote caller may not choose (a kubeconfig path, a
# policy file to read) is refused by the model, and each bound the server checks later (the
# stored schedule's interval and jitter, a run's time budget, the resolved snapshot path) is a
# bound of the field, durations written in a form a pattern can bound.

NO_KUBECONFIG = (
    "a kubeconfig path cannot be chosen over HTTP; name a context from the server's "
    "kubeconfig instead"
)
NO_POLICY_FILE = (
    "a policy file cannot be read over HTTP; import it with `assay probe import` and give "
    "policy.name or policy.set"
)
# The interval floor a server has by default (ASSAY_MIN_INTERVAL_SECONDS).
DEFAULT_INTERVAL_FLOOR = 60.0
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600.0


# The bounds of each duration over HTTP, by its key (seconds, both included).
_DURATION_BOUNDS: dict[str, tuple[float, float]] = {
    "timeout": (0.001, MAX_TIMEOUT_SECONDS),
    "every": (DEFAULT_INTERVAL_FLOOR, MAX_INTERVAL_SECONDS),
    "jitter": (0.001, MAX_JITTER_SECONDS),
}


def _duration_help(minimum: float, maximum: float) -> str:
    low = format_duration(minimum) if minimum >= 1 else "more than 0s"
    return (
        f"must be a duration from {low} to {format_duration(maximum)}: seconds as a number, or "
        "whole units from the largest down, each once (90s, 15m, 1h30m, 2d, 1w)"
    )


# What each bounded duration over HTTP takes, by its key: the problem said when it is not one.
DURATION_HELP = {key: _duration_help(*bounds) for key, bounds in _DURATION_BOUNDS.items()}


def _bounded_duration(key: str, what: str) -> Any:
    """The duration ``key`` within its bounds: a number, or whole units largest first, each
    once (``90s``, ``1h30m``, ``2w``), as `assay get` writes them."""
    minimum, maximum = _DURATION_BOUNDS[key]
    pattern = bounded_duration_pattern(minimum, maximum)
    number = Annotated[StrictFloat, Field(ge=minimum, le=maximum, allow_inf_nan=False)]
    text = Annotated[str, StringConstraints(pattern=pattern)]
    return Annotated[text | number, Field(description=f"{what}; {DURATION_HELP[key]}.")]


def _refused(message: str) -> Callable[[Any, Any], None]:
    def refuse(cls: Any, value: object) -> None:
        if value is not None:
            raise ValueError(message)

    return refuse


class ServerTargetsSpec(TargetsSpec):
    """Targets over HTTP: contexts of the server's kubeconfig (no path of the caller's) and
    snapshot patterns without '..' and at most 1024 characters."""

    snapshots: list[Annotated[SnapshotPattern, Field(max_length=MAX_API_PATH_LENGTH)]] = Field(
        default_factory=list,
        max_length=1000,
        description="Snapshot folders or globs, under the API's snapshot roots.",
    )
    kubeconfig: None = Field(
        default=None, description="Always null over HTTP: contexts come from the server's."
    )

    _no_kubeconfig = field_validator("kubeconfig", mode="before")(_refused(NO_KUBECONFIG))


class ServerPolicySpec(PolicySpec):
    """A policy over HTTP: one already imported, by name or set (no file to read)."""

    file: None = Field(default=None, description="Always null over HTTP: import it first.")

    _no_file = field_validator("file", mode="before")(_refused(NO_POLICY_FILE))


if TYPE_CHECKING:  # each a str or a float, bounded as below
    _Timeout = str | float
    _Every = str | float
    _Jitter = str | float
else:
    _Timeout = _bounded_duration("timeout", "Wall-clock time per run")
    _Every = _bounded_duration("every", "Fire at this interval instead")
    _Jitter = _bounded_duration("jitter", "Spread each fire by up to this")


class ServerBudgetSpec(BudgetSpec):
    timeout: _Timeout | None = None


class ServerCheckSpec(CheckSpec):
    targets: ServerTargetsSpec
    policy: ServerPolicySpec | None = None
    budget: ServerBudgetSpec = Field(default_factory=ServerBudgetSpec)


class ServerScheduleSpec(ScheduleSpec):
    targets: ServerTargetsSpec
    policy: ServerPolicySpec | None = None
    budget: ServerBudgetSpec = Field(default_factory=ServerBudgetSpec)
    every: _Every | None = None
    jitter: _Jitter | None = None


class ServerCheckDocument(CheckDocument):
    spec: ServerCheckSpec


class ServerScheduleDocument(ScheduleDocument):
    spec: ServerScheduleSpec


ServerDocument = Annotated[
    ServerCheckDocument | ServerScheduleDocument, Field(discriminator="kind")
]


class CheckDefinition(BaseModel):
    """A declared check as stored: its spec, labels, and what its last evaluation queued.

    ``check_ids`` / ``runs`` map each target the check was evaluated on (the target's
    name) to the check id its verdicts are kept under and the run id queued for it the
    last time applying the check created or changed it.
    """

    model_config = ConfigDict(extra="forbid")

    name: ObjectName
    labels: dict[str, str] = Field(default_factory=dict)
    spec: CheckSpec
    revision: int = Field(default=1, ge=1, description="Bumped on every change.")
    created_at: datetime
    updated_at: datetime
    check_ids: dict[str, str] = Field(default_factory=dict)
    runs: dict[str, str] = Field(default_factory=dict)
