"""What to evaluate, against which cluster, under which limits.

A request is a plain value: it is queued on Celery, stored in Redis and sent
over HTTP as JSON, so one worker can serve many clusters and models.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict

from schemas.budget import PROFILES, Budget, ProfileName
from schemas.ids import ID_PATTERN, BatchId, RunId, ScheduleId
from schemas.ids import check_id as valid_id
from schemas.notify import SinkName
from schemas.probe import PROBE_MODE_HELP, ProbeMode

EvaluationKind = Literal["check", "query"]
ToolsetName = Literal["kubernetes", "shell"]


def _default_toolsets() -> list[ToolsetName]:
    return ["kubernetes"]


MAX_TEXT_LENGTH = 4000
MAX_PATH_LENGTH = 4096
MAX_CONTEXT_LENGTH = 256


# What a value means where only the server's state can judge it, as JSON Schema ``format``s
# (a validator that does not know a format accepts any string): a request is not malformed
# for naming a folder, context or model this server does not have, and is answered 404 or
# 409 (docs/api.md).
SNAPSHOT_PATH_FORMAT: JsonDict = {"format": "snapshot-path"}  # a folder (or glob) in the roots
CONTEXT_GLOB_FORMAT: JsonDict = {"format": "kubeconfig-context-glob"}  # the server's contexts
MODEL_NAME_FORMAT: JsonDict = {"format": "litellm-model"}  # a name litellm routes: provider/model

# A predicate holds a character that is not blank. Blank is what ``str.strip`` removes (which
# takes U+001C-U+001F and U+0085) and what ECMA-262's ``\s`` matches (which takes U+FEFF),
# spelled out so the published pattern and the server's check read the same characters.
_BLANK = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
VISIBLE_TEXT_PATTERN = rf"[^{_BLANK}]"
VISIBLE_TEXT: JsonDict = {"pattern": VISIBLE_TEXT_PATTERN}
_VISIBLE = re.compile(VISIBLE_TEXT_PATTERN)


def blank(text: str) -> bool:
    """True when ``text`` holds only blank characters (:data:`VISIBLE_TEXT_PATTERN`)."""
    return _VISIBLE.search(text) is None


# Characters a target name may not hold: it ends up in keys, logs and tables, where C0/C1
# controls, line and paragraph separators and invisible or bidirectional format
# marks would hide or disguise what is shown. One pattern is both what the published JSON
# Schema says and what the validators below check, so the two cannot disagree.
_HIDDEN = (
    r"\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069"
    r"\ufeff"
)
SHOWN_NAME_PATTERN = rf"^[^{_HIDDEN}]*[^\s{_HIDDEN}][^{_HIDDEN}]*$"
_SHOWN_NAME = re.compile(SHOWN_NAME_PATTERN)


def shown_name(value: str, what: str) -> str:
    """``value`` if it has a visible character and no hidden one (:data:`SHOWN_NAME_PATTERN`)."""
    if not _SHOWN_NAME.fullmatch(value):
        if not value.strip():
            raise ValueError(f"the {what} is empty; give a name")
        raise ValueError(f"the {what} contains a control or invisible character; remove it")
    return value


def _shown_target_name(value: str) -> str:
    return shown_name(value, "target name or pattern")


_SHOWN_NAME_RULES = (
    AfterValidator(_shown_target_name),
    Field(json_schema_extra={"pattern": SHOWN_NAME_PATTERN}),
)
ShownName = Annotated[str, *_SHOWN_NAME_RULES]
"""A schedule's context glob, or snapshot path or glob (see ``shown_name``)."""
ShownContextName = Annotated[str, Field(max_length=MAX_CONTEXT_LENGTH), *_SHOWN_NAME_RULES]
"""A schedule's kubeconfig context name (see ``shown_name``)."""

# A snapshot path or pattern over HTTP: at most 1024 characters, so that the resolved path a
# run is queued with still fits the contract's 4096.
MAX_API_PATH_LENGTH = 1024

# A schedule's snapshot folder or glob may not climb with '..' (the server refuses it whatever
# its roots, ``SnapshotRoots.confine_pattern``): published as a ``not`` ``pattern``.
PARENT_SEGMENT = r"(^|/)\.\.(/|$)"


def _no_parent_segment(pattern: str) -> str:
    if re.search(PARENT_SEGMENT, pattern):
        raise ValueError(
            f"the snapshot pattern {pattern!r} contains '..'; name the folders directly"
        )
    return pattern


SnapshotPattern = Annotated[
    ShownName,
    Field(json_schema_extra={**SNAPSHOT_PATH_FORMAT, "not": {"pattern": PARENT_SEGMENT}}),
    AfterValidator(_no_parent_segment),
]


def _type_is_required(schema: dict[str, Any]) -> None:
    """Publish ``type`` as required: the API tells targets apart by it (a discriminated
    union), while Python callers may leave it to its one possible value."""
    schema["required"] = ["type", *[name for name in schema.get("required", []) if name != "type"]]


class SnapshotTarget(BaseModel):
    """A folder of captured Kubernetes objects (see examples/snapshots)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_type_is_required)

    type: Literal["snapshot"] = "snapshot"
    path: str = Field(
        min_length=1,
        max_length=MAX_PATH_LENGTH,
        json_schema_extra={"pattern": SHOWN_NAME_PATTERN, **SNAPSHOT_PATH_FORMAT},
    )

    @field_validator("path")
    @classmethod
    def _plain_path(cls, path: str) -> str:
        return shown_name(path, "snapshot path")

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

    model_config = ConfigDict(extra="forbid", json_schema_extra=_type_is_required)

    type: Literal["context"] = "context"
    context: str = Field(
        min_length=1,
        max_length=MAX_CONTEXT_LENGTH,
        json_schema_extra={"pattern": SHOWN_NAME_PATTERN},
    )
    kubeconfig: str | None = None

    @field_validator("context")
    @classmethod
    def _plain_context(cls, context: str) -> str:
        return shown_name(context, "context name")

    @property
    def name(self) -> str:
        return self.context


class InClusterTarget(BaseModel):
    """The cluster this process runs in, through its service account."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_type_is_required)

    type: Literal["in_cluster"] = "in_cluster"

    @property
    def name(self) -> str:
        return "in-cluster"


Target = Annotated[SnapshotTarget | ContextTarget | InClusterTarget, Field(discriminator="type")]


def make_target(
    *,
    snapshot: str | None = None,
    context: str | None = None,
    kubeconfig: str | None = None,
) -> Target:
    """The target named by exactly one of ``snapshot`` (a folder) or ``context``."""
    if (snapshot is None) == (context is None):
        raise ValueError("name exactly one target: a snapshot folder or a kubeconfig context")
    if snapshot is not None:
        return SnapshotTarget(path=str(Path(snapshot).expanduser().resolve()))
    assert context is not None
    return ContextTarget(context=context, kubeconfig=kubeconfig)


def new_run_id() -> str:
    return uuid.uuid4().hex


def default_check_id(kind: str, text: str, target_name: str) -> str:
    """Same predicate on the same target is the same check, so history accumulates."""
    digest = hashlib.sha256(f"{kind}\x00{' '.join(text.split())}\x00{target_name}".encode())
    return f"chk-{digest.hexdigest()[:16]}"


class EvaluationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: EvaluationKind = "check"
    text: str = Field(min_length=1, max_length=MAX_TEXT_LENGTH, json_schema_extra=VISIBLE_TEXT)
    target: Target
    toolsets: list[ToolsetName] = Field(default_factory=_default_toolsets, min_length=1)
    profile: ProfileName = "fast"
    budget: Budget = Field(default_factory=Budget)
    model: str | None = Field(
        default=None,
        description="litellm model name; None = settings.",
        json_schema_extra=MODEL_NAME_FORMAT,
    )
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
        description=PROBE_MODE_HELP,
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
        if blank(self.text):
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
