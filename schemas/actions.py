"""Planner actions: the only things a model may say to the engine.

Both transports parse into these models. In JSON mode the model returns a
``PlannerResponse`` object; in tool-calling mode every action arrives as a tool
call, and :func:`action_from_tool_call` / :func:`action_to_tool_call` are the
one mapping between the two shapes (the engine and the scripted model both use
them, so they cannot disagree).

A ``COMMAND`` names a tool; which tools exist depends on the run, so the check
is made against ``context={"tools": {...}}`` passed to ``model_validate``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from schemas.probe import MODEL_PROBE_FIELDS, ModelProbe
from schemas.verdict import VerdictKind

# Tool names under which the non-COMMAND actions travel in tool-calling mode.
ACTION_TOOL_NAMES: dict[str, str] = {
    "think": "THOUGHT",
    "wait": "WAIT",
    "done": "DONE",
    "error": "ERROR",
}
_TOOL_FOR_ACTION = {v: k for k, v in ACTION_TOOL_NAMES.items()}
REASON_FIELD = "reason"


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Thought(_Action):
    """Reasoning the model wants on record; costs an iteration, runs nothing."""

    action: Literal["THOUGHT"] = "THOUGHT"
    thought: str = Field(min_length=1, max_length=8000)


class Command(_Action):
    """Run one read-only tool offered to this run."""

    action: Literal["COMMAND"] = "COMMAND"
    tool: str = Field(min_length=1, max_length=64)
    arguments: dict[str, Any] = Field(default_factory=dict)
    reason: str = Field(default="", max_length=2000)

    @field_validator("tool")
    @classmethod
    def _tool_is_offered(cls, tool: str, info: ValidationInfo) -> str:
        offered = (info.context or {}).get("tools")
        if offered is not None and tool not in offered:
            names = ", ".join(sorted(offered)) or "none"
            raise ValueError(f"unknown tool {tool!r}; the tools offered are: {names}")
        return tool


class Wait(_Action):
    """Come back later: after ``seconds`` or at ``until`` (exactly one)."""

    action: Literal["WAIT"] = "WAIT"
    seconds: float | None = Field(default=None, gt=0, le=366 * 24 * 3600)
    until: datetime | None = None
    reason: str = Field(default="", max_length=2000)

    @model_validator(mode="after")
    def _exactly_one(self) -> Wait:
        if (self.seconds is None) == (self.until is None):
            raise ValueError("WAIT needs exactly one of 'seconds' or 'until'")
        if self.until is not None and self.until.tzinfo is None:
            raise ValueError("WAIT 'until' must carry a time zone, e.g. 2027-01-01T00:00:00Z")
        return self


class EvidenceRef(_Action):
    """A citation of a lookup this run made, by its step number."""

    step: int = Field(ge=0, description="The step number of the COMMAND whose output is cited.")
    excerpt: str = Field(min_length=1, max_length=2000)


class Done(_Action):
    """The final answer. For a query, ``true`` means the question was answered."""

    action: Literal["DONE"] = "DONE"
    verdict: VerdictKind
    explanation: str = Field(min_length=1, max_length=8000)
    evidence: list[EvidenceRef] = Field(default_factory=list, max_length=50)
    findings: list[str] = Field(default_factory=list, max_length=200)
    probe: ModelProbe | None = Field(
        default=None,
        description="Optional, with a true or false check verdict: read-only lookups and a "
        "boolean CEL expression over the objects they return that reproduces this verdict. "
        "The engine runs it itself and keeps it only if it agrees.",
    )
    _probe_dropped: str | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _drop_invalid_probe(cls, data: Any, handler: ModelWrapValidatorHandler[Done]) -> Done:
        """A probe is optional: one that is no valid probe of a model's (too long, a wrong
        shape, a field of imported policies such as ``origin``) is dropped with its reason,
        never the DONE it came with. Asking the model again cost the verdict (issue 31): it
        stands on its evidence."""
        proposal = data.get("probe") if isinstance(data, dict) else None
        if proposal is None:
            return handler(data)
        problem = _probe_problem(proposal)
        if problem is None:
            return handler(data)
        done = handler({**data, "probe": None})
        done._probe_dropped = problem
        return done

    @property
    def probe_dropped(self) -> str | None:
        """Why the probe this DONE carried was dropped (None: it had none, or it was valid)."""
        return self._probe_dropped


def _probe_problem(proposal: Any) -> str | None:
    """Why ``proposal`` is no probe a model may propose (a :class:`ModelProbe`); None when it
    is one."""
    if isinstance(proposal, dict):
        if proposal.get("origin") is not None:
            return "origin is set by `assay probe import` only, never by a model"
        imported = sorted(set(proposal) - MODEL_PROBE_FIELDS)
        if imported:
            return (
                f"{', '.join(imported)}: not part of a model's probe (lookups, scope, "
                "expression, when_true, when_false)"
            )
    try:
        ModelProbe.model_validate(proposal)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'probe'}: {error['msg']}"
            for error in exc.errors()[:3]
        ]
        return "; ".join(problems)[:1000]
    return None


class Error(_Action):
    """The model gives up; always ends the run as cannot_determine."""

    action: Literal["ERROR"] = "ERROR"
    message: str = Field(min_length=1, max_length=4000)


PlannerAction = Annotated[
    Thought | Command | Wait | Done | Error,
    Field(discriminator="action"),
]


class PlannerResponse(BaseModel):
    """What the model returns each step in JSON mode: exactly one action."""

    model_config = ConfigDict(extra="forbid")

    action: PlannerAction


def action_to_tool_call(
    action: Thought | Command | Wait | Done | Error,
) -> tuple[str, dict[str, Any]]:
    """The tool call that carries ``action`` in tool-calling mode."""
    if isinstance(action, Command):
        args = dict(action.arguments)
        if action.reason:
            args[REASON_FIELD] = action.reason
        return action.tool, args
    payload = action.model_dump(mode="json", exclude={"action"}, exclude_none=True)
    return _TOOL_FOR_ACTION[action.action], payload


def action_from_tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The raw action dict for a tool call; validate it with ``PlannerResponse``."""
    if name in ACTION_TOOL_NAMES:
        return {"action": ACTION_TOOL_NAMES[name], **arguments}
    args = dict(arguments)
    reason = args.pop(REASON_FIELD, "")
    return {
        "action": "COMMAND",
        "tool": name,
        "arguments": args,
        "reason": reason if isinstance(reason, str) else str(reason),
    }
