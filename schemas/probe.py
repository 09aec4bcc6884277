"""Probes: the deterministic part of a verdict, as a contract (issue 11).

A probe is a few read-only lookups (the planner's own ``get`` / ``describe`` /
``events`` tools, with arguments) and one boolean CEL expression over what they
returned as *objects* (never the rendered text the model read), plus the verdict
each value of the expression stands for. The model proposes one with its
``DONE``; the engine runs it itself and keeps it only when it reproduces the
verdict on the same state (workers/core/probes/compile.py). An accepted probe then
re-evaluates its check for 0 model tokens (workers/fleet/probe_rerun.py).

What the expression sees (docs/probes.md):

* ``scope: "results"``: ``results`` is a list with one entry per lookup, in order:
  a listing (no ``name``) is the list of objects, a named ``get`` / ``describe``
  is the object, ``events`` is the list of events;
* ``scope: "each_object"``: exactly one listing; the expression is evaluated per
  object with ``object`` bound to it, and the probe's value is true only when it
  is true for every object (false on the first object where it is false). This
  is the shape a ValidatingAdmissionPolicy or a Kyverno policy can enforce, so
  only such probes are exportable.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.budget import PROFILES, ProfileName
from schemas.verdict import VerdictKind

ProbeTool = Literal["get", "describe", "events"]
ProbeScope = Literal["results", "each_object"]
ProbeMode = Literal["auto", "off", "only"]
ProbeStatus = Literal["accepted", "rejected", "failed"]
DecisiveVerdict = Literal["true", "false"]

MAX_LOOKUPS = 8
MAX_EXPRESSION_CHARS = 4000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProbeLookup(_Strict):
    """One read-only lookup, with the same arguments the planner's tool takes."""

    tool: ProbeTool
    args: dict[str, Any] = Field(default_factory=dict)


class ProposedProbe(_Strict):
    """What a model proposes with a true/false DONE: lookups, a CEL expression, the mapping."""

    lookups: list[ProbeLookup] = Field(min_length=1, max_length=MAX_LOOKUPS)
    expression: str = Field(
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
        description="A boolean CEL expression over `results` (scope results) or `object` "
        "(scope each_object). See docs/probes.md for the supported subset.",
    )
    scope: ProbeScope = "results"
    when_true: DecisiveVerdict = Field(
        default="true", description="The verdict when the expression is true."
    )
    when_false: DecisiveVerdict = Field(
        default="false", description="The verdict when the expression is false."
    )

    @model_validator(mode="after")
    def _shape(self) -> ProposedProbe:
        if self.when_true == self.when_false:
            raise ValueError("when_true and when_false must differ")
        if self.scope == "each_object":
            only = self.lookups[0] if len(self.lookups) == 1 else None
            if only is None or only.tool != "get" or only.args.get("name"):
                raise ValueError("scope each_object needs exactly one get lookup without a name")
        return self

    def verdict_for(self, value: bool) -> VerdictKind:
        return VerdictKind(self.when_true if value else self.when_false)


class ObjectRef(_Strict):
    """An object a probe read, by kind, namespace and name."""

    kind: str
    name: str
    namespace: str | None = None


class ProbeRun(_Strict):
    """One evaluation of a probe: its value and verdict, or why it could not run.

    ``verdict`` is set only when every lookup succeeded and the expression gave a
    boolean; anything else leaves it None and says why in ``error``.
    """

    value: bool | None = None
    verdict: VerdictKind | None = None
    error: str | None = None
    budget_exhausted: Literal["deadline"] | None = Field(
        default=None,
        description="deadline: the run's time budget ran out before the probe finished, so it "
        "gave no verdict (a re-run then ends cannot_determine; the model is not asked).",
    )
    objects_read: int = 0
    objects: list[ObjectRef] = Field(
        default_factory=list, description="Objects the lookups returned (capped)."
    )
    fields: list[str] = Field(default_factory=list, description="Field paths the expression reads.")
    deciding: list[ObjectRef] = Field(
        default_factory=list,
        description="each_object: the objects for which the expression was false (capped).",
    )
    duration_seconds: float = 0.0


class ProbeOutcome(_Strict):
    """What the engine did with a proposed probe in one run (part of the report)."""

    status: ProbeStatus
    reason: str
    probe: ProposedProbe
    run: ProbeRun
    version: int | None = Field(default=None, description="Stored version, once stored.")


class ProbeRecord(_Strict):
    """A probe stored with its check: versioned, which run compiled it, how it has agreed."""

    check_id: str
    version: int = Field(ge=1)
    probe: ProposedProbe
    compiled_by_run: str
    compiled_at: datetime
    compiled_verdict: VerdictKind
    last_verdict: VerdictKind | None = None
    last_run_at: datetime | None = None
    last_validated_at: datetime
    runs_since_validation: int = 0
    agreements: int = 0
    disagreements: int = 0
    active: bool = True
    retired_reason: str | None = None
    predicate: str | None = Field(
        default=None,
        description="The predicate it was compiled for, whitespace-normalised: a probe answers "
        "that predicate only (a check id may be reused for a reworded check). None: stored "
        "before this was recorded, so it answers none.",
    )
    profile: ProfileName | None = Field(
        default=None,
        description="The profile of the run that compiled it: one compiled without strict's "
        "fresh-context confirmation does not answer a strict run.",
    )

    sensitivity_checked: bool = Field(
        default=False,
        description="Accepted after the engine found objects under which it gives the other "
        "verdict (its value depends on what it reads). False: stored before that check "
        "existed, so it answers none until the model compiles the check again.",
    )

    def answers(self, text: str, profile: ProfileName) -> bool:
        """Whether this probe may answer ``text`` under ``profile`` in place of the model."""
        if self.predicate is None or self.profile is None or not self.sensitivity_checked:
            return False
        if self.predicate != normalised_predicate(text):
            return False
        return PROFILES[self.profile].confirm_true or not PROFILES[profile].confirm_true


def normalised_predicate(text: str) -> str:
    """``text`` with whitespace runs as single spaces: how a probe's predicate is compared."""
    return " ".join(text.split())


class AgreementEntry(_Strict):
    """One comparison of a probe's verdict with the model's (agreement history)."""

    run_id: str
    at: datetime
    version: int
    probe_verdict: VerdictKind | None
    model_verdict: VerdictKind
    agreed: bool
    why: Literal["compile", "revalidate", "flip", "fallback"]
