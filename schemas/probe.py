"""Probes: the deterministic part of a verdict, as a contract (issue 11).

A probe is a few read-only lookups (the planner's own ``get`` / ``describe`` /
``events`` tools, with arguments) and one boolean CEL expression over what they
returned as *objects* (never the rendered text the model read), plus the verdict
each value of the expression stands for. The model proposes one with its
``DONE``; the engine runs it itself and keeps it only when it reproduces the
verdict on the same state (workers/policy_engine/probes/acceptance.py). An accepted probe then
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

A probe may also carry what a ValidatingAdmissionPolicy has (issue 31): ``variables``
(named sub-expressions, read as ``variables.NAME``, evaluated lazily), ``validations``
(each with its message) in place of the one ``expression``, ``match_conditions`` (which
objects are judged at all), ``params`` (bound as ``params``), and, for probes that came
from ``assay probe import`` only (``origin`` set by the importer, never by a model),
``empty_result: "pass"`` (admission semantics: nothing to violate).

A model proposes a :class:`ModelProbe`: lookups, scope, one expression and the mapping,
nothing of the imported policies' shape. It is all a model is shown of probes (the
``done`` tool's schema and JSON mode's response format are generated from it) and all
the engine accepts from one; :meth:`ModelProbe.as_probe` makes it a :class:`ProposedProbe`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from schemas.budget import PROFILES, ProfileName
from schemas.verdict import VerdictKind

ProbeTool = Literal["get", "describe", "events"]
ProbeScope = Literal["results", "each_object"]
ProbeMode = Literal["auto", "off", "only"]
PROBE_MODE_HELP = (
    "auto: re-run the check's accepted probe (0 model tokens) when it has one, else the "
    "model; off: always the model; only: the probe or cannot_determine, never the model."
)
ProbeStatus = Literal["accepted", "rejected", "failed"]
DecisiveVerdict = Literal["true", "false"]

MAX_LOOKUPS = 8
MAX_EXPRESSION_CHARS = 4000  # per expression (the main one, each variable, validation, ...)
MAX_VARIABLES = 32
MAX_VALIDATIONS = 64
MAX_MATCH_CONDITIONS = 64  # as a ValidatingAdmissionPolicy's matchConditions
MAX_PROBE_CHARS = 65_536  # every expression and message of one probe together
MAX_VIOLATIONS = 100  # violations kept in a ProbeRun (violations_total counts them all)
MAX_OBJECTS_JUDGED = 50_000  # objects one probe run may read, so judge (runner.MAX_OBJECTS)
CEL_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
ProbeFormat = Literal["vap", "kyverno-validatingpolicy", "kyverno-clusterpolicy", "gatekeeper"]
EmptyResult = Literal["no_verdict", "pass"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProbeLookup(_Strict):
    """One read-only lookup, with the same arguments the planner's tool takes."""

    tool: ProbeTool
    args: dict[str, Any] = Field(default_factory=dict)


class ProbeVariable(_Strict):
    """A named sub-expression, read as ``variables.NAME`` (a ValidatingAdmissionPolicy's
    ``variables``): evaluated only when read, at most once per evaluation; it may read the
    variables listed before it."""

    name: str = Field(pattern=CEL_IDENTIFIER, max_length=63)
    expression: str = Field(min_length=1, max_length=MAX_EXPRESSION_CHARS)


class ProbeValidation(_Strict):
    """One validation of scope each_object: an object passes when every one is true."""

    expression: str = Field(min_length=1, max_length=MAX_EXPRESSION_CHARS)
    message: str | None = Field(default=None, max_length=1024)
    message_expression: str | None = Field(
        default=None,
        max_length=MAX_EXPRESSION_CHARS,
        description="A CEL expression giving the message (a string); when it fails or gives "
        "no string, `message` is used, then `failed expression: EXPRESSION`.",
    )
    reason: str | None = Field(default=None, max_length=128)


class ProbeCondition(_Strict):
    """A match condition (scope each_object): an object is judged only when every one is
    true. An error in one leaves the object undecided, so the probe gives no value."""

    name: str = Field(min_length=1, max_length=63)
    expression: str = Field(min_length=1, max_length=MAX_EXPRESSION_CHARS)
    exception: str | None = Field(
        default=None,
        max_length=512,
        description="Set by import for a Kyverno PolicyException (its namespace/name): an "
        "object this condition is false for is exempt, reported `skip` as Kyverno reports it.",
    )


class ProbeOrigin(_Strict):
    """Where an imported probe came from (set by ``assay probe import``, never by a model)."""

    format: ProbeFormat
    name: str = Field(min_length=1, max_length=253)
    source: str = Field(min_length=1, max_length=4096, description="A file path, or '-'.")
    validation_actions: list[str] = Field(default_factory=list, max_length=8)


class ProposedProbe(_Strict):
    """Every probe that is judged and stored: lookups, a CEL expression, the mapping.

    A model's comes from a :class:`ModelProbe` (only those fields); an imported policy gives
    the same shape with ``validations`` (and perhaps variables, match conditions and params)
    in place of the one expression, and its ``origin``.
    """

    lookups: list[ProbeLookup] = Field(min_length=1, max_length=MAX_LOOKUPS)
    expression: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
        description="A boolean CEL expression over `results` (scope results) or `object` "
        "(scope each_object), in the Kubernetes CEL environment (docs/probes.md). Exactly one "
        "of `expression` and `validations`.",
    )
    variables: list[ProbeVariable] = Field(
        default_factory=list,
        max_length=MAX_VARIABLES,
        description="Named sub-expressions, read as `variables.NAME`; each may read earlier ones.",
    )
    validations: list[ProbeValidation] = Field(
        default_factory=list,
        max_length=MAX_VALIDATIONS,
        description="scope each_object: an object passes when every validation is true.",
    )
    match_conditions: list[ProbeCondition] = Field(
        default_factory=list,
        max_length=MAX_MATCH_CONDITIONS,
        description="scope each_object: only objects for which every condition is true are judged.",
    )
    params: JsonValue = Field(
        default=None, description="Bound as `params` when not null (an imported policy's)."
    )
    empty_result: EmptyResult = Field(
        default="no_verdict",
        description="scope each_object: what the probe gives when no object is judged. `pass` "
        "only for imported probes (origin set).",
    )
    origin: ProbeOrigin | None = Field(
        default=None, description="Set by `assay probe import` only; a model may not set it."
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
        _check_mapping_and_scope(self.when_true, self.when_false, self.scope, self.lookups)
        if (self.expression is None) == (not self.validations):
            raise ValueError("give exactly one of `expression` and `validations`")
        if self.scope != "each_object" and (
            self.validations or self.match_conditions or self.empty_result != "no_verdict"
        ):
            raise ValueError(
                "validations, match_conditions and empty_result need scope each_object"
            )
        if self.origin is None and any(c.exception for c in self.match_conditions):
            raise ValueError("a match condition's exception is for imported policies only")
        if self.empty_result == "pass" and self.origin is None:
            raise ValueError(
                "empty_result pass is for imported policies only: an empty listing is no "
                "evidence (a wrong namespace lists nothing)"
            )
        names = [variable.name for variable in self.variables]
        if len(set(names)) != len(names):
            raise ValueError("variable names must be unique")
        if sum(len(text) for text in self.texts()) > MAX_PROBE_CHARS:
            raise ValueError(f"the probe's expressions and messages exceed {MAX_PROBE_CHARS} chars")
        return self

    def verdict_for(self, value: bool) -> VerdictKind:
        return VerdictKind(self.when_true if value else self.when_false)

    def expressions(self) -> list[str]:
        """Every CEL expression of the probe: variables, conditions, the expression or the
        validations and their message expressions."""
        out = [variable.expression for variable in self.variables]
        out += [condition.expression for condition in self.match_conditions]
        out += [self.expression] if self.expression is not None else []
        for validation in self.validations:
            out.append(validation.expression)
            if validation.message_expression is not None:
                out.append(validation.message_expression)
        return out

    def texts(self) -> list[str]:
        """Every expression and message: what the probe's size limit counts."""
        return self.expressions() + [v.message or "" for v in self.validations]

    def summary(self) -> str:
        """The probe's expression, or its validations joined, for one line of text."""
        if self.expression is not None:
            return self.expression
        return " && ".join(f"({validation.expression})" for validation in self.validations)


def _check_mapping_and_scope(
    when_true: str, when_false: str, scope: ProbeScope, lookups: list[ProbeLookup]
) -> None:
    """The rules every probe keeps, a model's or an imported one (ValueError when broken)."""
    if when_true == when_false:
        raise ValueError("when_true and when_false must differ")
    if scope == "each_object":
        only = lookups[0] if len(lookups) == 1 else None
        if only is None or only.tool != "get" or only.args.get("name"):
            raise ValueError("scope each_object needs exactly one get lookup without a name")


# The probe a model may propose, and all it is shown of probes. Why a shape of its own: what a
# model is shown costs tokens on every call of every run, and the fields of imported policies
# are no use to it (``origin`` and ``empty_result: pass`` are refused from a model;
# ``validations``, ``match_conditions`` and ``params`` exist to carry an admission policy in).
# The ``done`` tool's schema is generated from this model and a model's probe is validated
# against it, so the model sees exactly what the engine accepts; anything else is dropped with
# its reason, never the DONE (schemas/actions.py). One expression says all ``variables`` would,
# so they are left out. The docstring and descriptions are the model's text: keep them short.
class ModelProbe(_Strict):
    """A re-check the engine runs itself: read-only lookups and one CEL expression over the
    objects they return."""

    lookups: list[ProbeLookup] = Field(min_length=1, max_length=MAX_LOOKUPS)
    scope: ProbeScope = Field(
        default="results",
        description="results: the expression reads `results`, one entry per lookup. "
        "each_object: it reads `object`, and must hold for every object of one get listing.",
    )
    expression: str = Field(
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
        description="A boolean CEL expression (Kubernetes' CEL) over the raw API objects.",
    )
    when_true: DecisiveVerdict = Field(
        default="true", description="The verdict when the expression is true."
    )
    when_false: DecisiveVerdict = Field(
        default="false", description="The verdict when the expression is false."
    )

    @model_validator(mode="after")
    def _shape(self) -> ModelProbe:
        _check_mapping_and_scope(self.when_true, self.when_false, self.scope, self.lookups)
        return self

    def as_probe(self) -> ProposedProbe:
        """The same probe in the contract every probe has (what is judged and stored)."""
        return ProposedProbe(
            lookups=self.lookups,
            expression=self.expression,
            scope=self.scope,
            when_true=self.when_true,
            when_false=self.when_false,
        )


MODEL_PROBE_FIELDS = frozenset(ModelProbe.model_fields)
"""The probe fields a model may give; the rest of ProposedProbe's are the importer's."""


class ObjectRef(_Strict):
    """An object a probe read, by kind, namespace and name."""

    kind: str
    name: str
    namespace: str | None = None


class ProbeViolation(ObjectRef):
    """An object an each_object probe judged false, with why (a validation's message)."""

    message: str = ""


class JudgedObject(ObjectRef):
    """An object an each_object probe judged, named as a PolicyReport result names it, and
    what the probe found: per-object reports are built from these, so an object is reported
    only when it was judged."""

    api_version: str | None = None
    uid: str | None = None
    passed: bool
    message: str | None = Field(default=None, description="Why it failed (failed objects).")
    exception: str | None = Field(
        default=None,
        description="The Kyverno PolicyException (namespace/name) that exempts it: not judged, "
        "reported `skip` as Kyverno reports it (`passed` is then true).",
    )


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
    violations: list[ProbeViolation] = Field(
        default_factory=list,
        description="each_object: objects judged false, each with its message (capped at "
        f"{MAX_VIOLATIONS}). An imported probe judges every object; a model's stops at the "
        "first false.",
    )
    violations_total: int = 0
    judged_total: int = Field(
        default=0, description="each_object: objects judged (those every match condition held)."
    )
    judged: list[JudgedObject] | None = Field(
        default=None,
        description="each_object, when the probe gave a value: every object it judged, in "
        "order, with its outcome (a model's probe stops at its first false object; an imported "
        f"policy's judges them all; at most {MAX_OBJECTS_JUDGED}). None: nothing was judged "
        "object by object (scope results, a run that failed).",
    )
    duration_seconds: float = 0.0


class ProbeOutcome(_Strict):
    """What the engine did with a proposed probe in one run (part of the report)."""

    status: ProbeStatus
    reason: str
    probe: ProposedProbe | None = Field(
        default=None,
        description="None: what the model proposed was no valid probe (the reason says why); "
        "it was dropped and the verdict stands on its evidence.",
    )
    run: ProbeRun = Field(default_factory=lambda: ProbeRun())
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
