"""What to evaluate, against which cluster, under which limits.

A request is a plain value: it is queued on Celery, stored in Redis and sent
over HTTP as JSON, so one worker can serve many clusters and models.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.budget import PROFILES, Budget, ProfileName
from schemas.ids import ID_PATTERN, BatchId, RunId, ScheduleId
from schemas.ids import check_id as valid_id
from schemas.notify import SinkName
from schemas.probe import ProbeMode

EvaluationKind = Literal["check", "query"]
ToolsetName = Literal["kubernetes", "shell"]


def _default_toolsets() -> list[ToolsetName]:
    return ["kubernetes"]


MAX_TEXT_LENGTH = 4000
MAX_PATH_LENGTH = 4096
MAX_CONTEXT_LENGTH = 256


def _printable(value: str, what: str) -> str:
    """Refuse control characters: a target name ends up in keys, logs and tables."""
    if not value.isprintable():
        raise ValueError(f"the {what} contains a control character; remove it")
    return value


class SnapshotTarget(BaseModel):
    """A folder of captured Kubernetes objects (see examples/snapshots)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["snapshot"] = "snapshot"
    path: str = Field(min_length=1, max_length=MAX_PATH_LENGTH)

    @field_validator("path")
    @classmethod
    def _plain_path(cls, path: str) -> str:
        return _printable(path, "snapshot path")

    @property
    def name(self) -> str:
        return f"snapshot:{self.path.rstrip('/').rsplit('/', 1)[-1]}"


def target_names(target: str) -> list[str]:
    """The stored target names a filter may mean: as given, then a bare name as a snapshot.

    Snapshot targets are stored as ``snapshot:NAME`` (the folder's name) and
    contexts by their name, so ``prod-eu`` finds a context ``prod-eu`` or,
    failing that, the snapshot folder ``prod-eu``. Every target filter (CLI,
    client, API, notifier sinks) reads a name this way.
    """
    if ":" in target:
        return [target]
    return [target, f"snapshot:{target}"]


class ContextTarget(BaseModel):
    """A kubeconfig context; ``kubeconfig`` None means the settings' / default kubeconfig."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["context"] = "context"
    context: str = Field(min_length=1, max_length=MAX_CONTEXT_LENGTH)
    kubeconfig: str | None = None

    @field_validator("context")
    @classmethod
    def _plain_context(cls, context: str) -> str:
        return _printable(context, "context name")

    @property
    def name(self) -> str:
        return self.context


class InClusterTarget(BaseModel):
    """The cluster this process runs in, through its service account."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["in_cluster"] = "in_cluster"

    @property
    def name(self) -> str:
        return "in-cluster"


Target = Annotated[SnapshotTarget | ContextTarget | InClusterTarget, Field(discriminator="type")]


def new_run_id() -> str:
    return uuid.uuid4().hex


def default_check_id(kind: str, text: str, target_name: str) -> str:
    """Same predicate on the same target is the same check, so history accumulates."""
    digest = hashlib.sha256(f"{kind}\x00{' '.join(text.split())}\x00{target_name}".encode())
    return f"chk-{digest.hexdigest()[:16]}"


class EvaluationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: EvaluationKind = "check"
    text: str = Field(min_length=1, max_length=MAX_TEXT_LENGTH)
    target: Target
    toolsets: list[ToolsetName] = Field(default_factory=_default_toolsets, min_length=1)
    profile: ProfileName = "fast"
    budget: Budget = Field(default_factory=Budget)
    model: str | None = Field(default=None, description="litellm model name; None = settings.")
    api_base: str | None = Field(default=None, description="Model endpoint; None = settings.")
    run_id: RunId = Field(default_factory=new_run_id)
    check_id: str = Field(
        default="",
        max_length=128,
        description="Groups runs of one check: 1 to 128 characters from A-Z a-z 0-9 . _ -, "
        "starting with a letter or digit; empty = derived from kind, text and target.",
        json_schema_extra={"pattern": "^$|" + ID_PATTERN},
    )
    batch_id: BatchId | None = None
    schedule_id: ScheduleId | None = None
    scheduled_at: datetime | None = Field(
        default=None,
        description="The schedule instant this run fired for (schedule runs only): its UTC "
        "day is the day the run's spend counts toward.",
    )
    probe: ProbeMode = Field(
        default="auto",
        description="auto: re-run the check's accepted probe when it has one, else the model; "
        "off: always the model; only: the probe or cannot_determine, never the model.",
    )
    not_before: datetime | None = Field(
        default=None, description="Do not start before this instant (deferred evaluation)."
    )
    notify: list[SinkName] = Field(
        default_factory=list,
        max_length=20,
        description="Notify routes: sinks that hear this check's verdict changes (a change this "
        "run makes) whatever their own check and target filters say.",
    )
    declared_by: str | None = Field(
        default=None,
        max_length=80,
        pattern=r"^(check|schedule)/[A-Za-z0-9][A-Za-z0-9 ._:/-]*$",
        description="The declared object this run evaluates, 'schedule/NAME' or 'check/NAME' "
        "(PolicyReports and JUnit name it); None for a check submitted on its own.",
    )
    submitted_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @field_validator("check_id")
    @classmethod
    def _check_id_alphabet(cls, value: str) -> str:
        return value and valid_id(value, "check_id")

    @model_validator(mode="after")
    def _defaults(self) -> EvaluationRequest:
        if not self.text.strip():
            raise ValueError("the predicate text is empty")
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r}")
        if not self.check_id:
            self.check_id = default_check_id(self.kind, self.text, self.target.name)
        if self.not_before is not None and self.not_before.tzinfo is None:
            raise ValueError("not_before must carry a time zone, e.g. 2027-01-01T00:00:00Z")
        if self.scheduled_at is not None and self.scheduled_at.tzinfo is None:
            raise ValueError("scheduled_at must carry a time zone, e.g. 2027-01-01T00:00:00Z")
        return self
