"""A schedule: one predicate evaluated periodically against one or more targets.

A schedule fires on a cron expression read in an IANA time zone, or every N
seconds; each fire becomes one evaluation per target. Targets given as a glob
(kubeconfig contexts or snapshot folders) are resolved when the schedule fires,
so a cluster added to the kubeconfig later is picked up without editing it.

The interval floor (``settings.min_interval_seconds``) is not a property of the
model: a stored schedule must stay readable if an operator raises the floor, so
the floor is checked when a schedule is created or changed
(:meth:`Schedule.check_interval_floor`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.budget import PROFILES, UNATTENDED_PROFILE, Budget, ProfileName
from schemas.cadence import STORED, STORED_FIELDS, PublishedCron, PublishedZone, cron_fires
from schemas.ids import ScheduleId
from schemas.notify import SinkName
from schemas.probe import ProbeMode
from schemas.request import (
    CONTEXT_GLOB_FORMAT,
    MAX_TEXT_LENGTH,
    MODEL_NAME_FORMAT,
    SNAPSHOT_PATH_FORMAT,
    VISIBLE_TEXT,
    EvaluationKind,
    ShownContextName,
    ShownName,
    blank,
)
from schemas.spend import SpendCeiling

MisfirePolicy = Literal["skip", "run_once"]
MAX_JITTER_SECONDS = 3600.0


def new_schedule_id() -> str:
    return f"sch-{uuid.uuid4().hex[:12]}"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def publish_one_kind_of_target(schema: dict[str, Any]) -> None:
    """Publish "exactly one kind of target" as a ``oneOf``: non-empty ``contexts``, a
    ``context_glob`` string, or non-empty ``snapshots`` (what ``_exactly_one_kind`` checks)."""
    schema["oneOf"] = [
        {"required": ["contexts"], "properties": {"contexts": {"minItems": 1}}},
        {"required": ["context_glob"], "properties": {"context_glob": {"type": "string"}}},
        {"required": ["snapshots"], "properties": {"snapshots": {"minItems": 1}}},
    ]


class ScheduleTargets(BaseModel):
    """Where a schedule's predicate is evaluated: exactly one kind of target.

    ``contexts`` are exact kubeconfig context names; ``context_glob`` and the
    entries of ``snapshots`` may hold glob patterns and are expanded per fire.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=publish_one_kind_of_target)

    contexts: list[ShownContextName] = Field(default_factory=list, max_length=1000)
    context_glob: Annotated[ShownName, Field(json_schema_extra=CONTEXT_GLOB_FORMAT)] | None = Field(
        default=None, min_length=1
    )
    snapshots: list[Annotated[ShownName, Field(json_schema_extra=SNAPSHOT_PATH_FORMAT)]] = Field(
        default_factory=list, max_length=1000
    )
    kubeconfig: str | None = Field(
        default=None, description="kubeconfig for contexts; None = the settings' kubeconfig."
    )

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> ScheduleTargets:
        given = [bool(self.contexts), self.context_glob is not None, bool(self.snapshots)]
        if sum(given) != 1:
            raise ValueError(
                "a schedule needs exactly one kind of target: contexts, a context glob or snapshots"
            )
        return self

    def describe(self) -> str:
        if self.context_glob is not None:
            return f"contexts matching {self.context_glob!r}"
        if self.contexts:
            return "contexts " + ", ".join(self.contexts)
        return "snapshots " + ", ".join(self.snapshots)


class ScheduleFire(BaseModel):
    """The last fire of a schedule: which instant, when it was enqueued, which runs."""

    model_config = ConfigDict(extra="forbid")

    scheduled_at: datetime
    fired_at: datetime
    missed: int = Field(default=0, ge=0, description="Instants folded into this fire (run_once).")
    runs: dict[str, str] = Field(
        default_factory=dict, description="Target name -> run id of this fire."
    )
    checks: dict[str, str] = Field(
        default_factory=dict, description="Target name -> check id of this fire."
    )


# Each field's rules, once: the stored schedule and the API's bodies (assay/api_models.py)
# declare their fields with these, so a bound or a format cannot differ between them.
SCHEDULE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._:/-]*$"
MAX_INTERVAL_SECONDS = 366 * 24 * 3600
MAX_NOTIFY_ROUTES = 20
ScheduleName = Annotated[str, Field(min_length=1, max_length=100, pattern=SCHEDULE_NAME_PATTERN)]
PredicateText = Annotated[
    str, Field(min_length=1, max_length=MAX_TEXT_LENGTH, json_schema_extra=VISIBLE_TEXT)
]
# The published rules (schemas/cadence.py): a pattern croniter takes and fires on, the tzdata zones.
CronExpression = PublishedCron
TimeZoneName = PublishedZone
IntervalSeconds = Annotated[float, Field(gt=0, le=MAX_INTERVAL_SECONDS)]
JitterSeconds = Annotated[float, Field(ge=0, le=MAX_JITTER_SECONDS)]
NotifyRoutes = Annotated[
    list[SinkName],
    Field(
        max_length=MAX_NOTIFY_ROUTES,
        description="Notify routes: sinks that hear the verdict changes of this schedule's "
        "checks whatever their own check and target filters say.",
    ),
]


class Schedule(BaseModel):
    """A periodic evaluation. Exactly one of ``cron`` and ``interval_seconds``."""

    model_config = ConfigDict(extra="forbid")

    id: ScheduleId = Field(default_factory=new_schedule_id)
    name: ScheduleName
    predicate: PredicateText
    kind: EvaluationKind = "check"
    targets: ScheduleTargets
    cron: CronExpression | None = None
    timezone: TimeZoneName = "UTC"
    interval_seconds: IntervalSeconds | None = None
    profile: ProfileName = Field(
        default=UNATTENDED_PROFILE, description="strict unless the schedule names another."
    )
    budget: Budget = Field(default_factory=Budget)
    model: str | None = Field(
        default=None,
        description="litellm model name; None = settings.",
        json_schema_extra=MODEL_NAME_FORMAT,
    )
    probe: ProbeMode = Field(
        default="auto",
        description="auto: fires re-run the check's accepted probe (0 model tokens) when it has "
        "one; off: always the model; only: the probe or cannot_determine (docs/probes.md).",
    )
    spend: SpendCeiling | None = Field(
        default=None,
        description="Token and cost ceilings per UTC day over all of this schedule's runs; "
        "None = the fleet's defaults (spend_schedule_*). A day whose ceiling is reached "
        "skips the schedule's fires until the next UTC day.",
    )
    enabled: bool = Field(default=True, description="False while paused.")
    misfire: MisfirePolicy = Field(
        default="skip",
        description="After downtime: skip = only the next future fire; "
        "run_once = one fire for all missed instants, then continue.",
    )
    jitter_seconds: JitterSeconds = 0.0
    notify: NotifyRoutes = Field(default_factory=list)
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels; assay.dev/source names the source `assay apply` created it from.",
    )
    created_at: datetime = Field(default_factory=_utcnow)
    updated_at: datetime = Field(default_factory=_utcnow)
    revision: int = Field(default=1, ge=1, description="Bumped on every change.")
    last_fire: ScheduleFire | None = None

    @field_validator("predicate")
    @classmethod
    def _predicate_not_blank(cls, text: str) -> str:
        if blank(text):
            raise ValueError("the predicate text is empty")
        return text

    @model_validator(mode="after")
    def _one_cadence(self) -> Schedule:
        if (self.cron is None) == (self.interval_seconds is None):
            raise ValueError("a schedule needs exactly one of a cron expression or an interval")
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r}")
        for stamp in (self.created_at, self.updated_at):
            if stamp.tzinfo is None:
                raise ValueError("schedule timestamps must carry a time zone")
        if self.cron is not None:
            cron_fires(self.cron)
        return self

    @property
    def paused(self) -> bool:
        return not self.enabled

    @classmethod
    def from_stored(cls, body: str | bytes) -> Schedule:
        """A schedule read back from the store: its cron and zone under the rules they were
        stored under (schemas/cadence.py, ``STORED``), so an older one still loads."""
        return cls.model_validate_json(body, context=STORED)

    @classmethod
    def with_changes(cls, data: dict[str, Any], changed: Iterable[str]) -> Schedule:
        """A stored schedule's fields ``data`` with the ``changed`` ones set anew: those are
        held to today's rules, the cron and zone it keeps to the rules they were stored
        under."""
        kept = STORED[STORED_FIELDS] - set(changed)
        return cls.model_validate(data, context={STORED_FIELDS: kept})

    def cadence(self) -> str:
        """How often it fires, as a person would write it."""
        if self.cron is not None:
            return f"cron {self.cron!r} ({self.timezone})"
        return f"every {format_duration(self.interval_seconds or 0)}"

    def check_interval_floor(self, min_interval_seconds: float) -> None:
        """Refuse an interval under the operator's floor (checked on create and change)."""
        if self.interval_seconds is not None and self.interval_seconds < min_interval_seconds:
            raise ValueError(
                f"interval {format_duration(self.interval_seconds)} is under the minimum of "
                f"{format_duration(min_interval_seconds)}; use a longer interval"
            )


# Set by the store, never by a person: identity, timestamps, the revision, the last fire.
MANAGED_FIELDS = frozenset({"id", "created_at", "updated_at", "revision", "last_fire"})
# What a change may set (``enabled`` is pause and resume, each with its own command).
CHANGEABLE_FIELDS = frozenset(Schedule.model_fields) - MANAGED_FIELDS - {"enabled"}


def format_duration(seconds: float) -> str:
    """``seconds`` as ``2h``, ``1h30m`` or ``45s``: how `--every` and `--in` durations are
    written (whole seconds, the fraction dropped)."""
    remaining = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if remaining >= size:
            parts.append(f"{remaining // size}{unit}")
            remaining %= size
    if remaining or not parts:
        parts.append(f"{remaining}s")
    return "".join(parts)
