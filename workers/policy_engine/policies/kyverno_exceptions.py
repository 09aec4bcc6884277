"""Kyverno PolicyExceptions, imported with the policy they exempt objects from.

Two kinds, as Kyverno applies them:

* ``policies.kyverno.io`` PolicyException (for ValidatingPolicies): ``policyRefs`` name the
  policies (by kind and name); an object is exempt when every one of ``matchConditions``
  holds for it (none: every object). Kyverno tries the exceptions in order before the
  policy's own match conditions, and an exempt object is reported as ``skip`` (or ``pass``
  with ``reportResult: pass``), never as a violation. Here each exception becomes a match
  condition placed first, ``!(c1 && c2 ...)``: an exempt object is not judged, an error in
  one before an exemption is found is the policy's error, and one after it is not reached,
  as in Kyverno's loop. A fine-grained exception (``images``, ``allowedValues``) exempts
  nothing: an object its conditions match is judged with its lists added to what the
  policy reads as ``exceptions.allowedImages`` / ``exceptions.allowedValues`` (empty lists
  when none matches, and for a policy without exceptions). Its place among the conditions
  keeps Kyverno's order of errors (a condition always true that errs as its conditions
  do: ``(c1 && c2 ...) ? true : true``); the lists are a variable of the policy's
  (:func:`grants_variable`), the one the CEL adapter reads ``exceptions`` as
  (cel/programs.py: ``EXCEPTIONS_VARIABLE``).
* ``kyverno.io`` PolicyException (``v2``, ``v2beta1``; for ClusterPolicy rules):
  ``exceptions[]`` name a policy (``NAMESPACE/NAME`` for a namespaced Policy) and its rules
  (wildcards allowed, pod-controller rules by their own ``autogen-`` names); ``match``
  (``any`` / ``all`` of resource descriptions) says which objects are exempt. Here each
  becomes a :class:`RuleException` of the rules it names (matching.py leaves the objects
  it selects unjudged, and the run reports them ``skip``).

Whatever of an exception assay cannot apply is refused, and the policy with it (imported
without it, the exempt objects would be reported failing): conditions that read
``exceptions`` or ``variables`` (Kyverno gives them to the policy only, after the
exceptions: it errs), JMESPath ``conditions``, Pod Security exemptions (``podSecurity``),
an exception that expires later (a check would go on applying it). An exception Kyverno
does not apply to stored objects (``background: false``, or one already expired) is not
applied, and is reported among the refusals with that reason, so nothing is dropped unsaid.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from schemas.policy import PolicyRule, ResourceFilter, RuleException
from schemas.probe import MAX_EXPRESSION_CHARS, ProbeCondition, ProbeVariable
from schemas.settings import AssaySettings
from workers.policy_engine.admission_schema import MatchCondition
from workers.policy_engine.cel.programs import EXCEPTIONS_VARIABLE, KYVERNO_EXCEPTIONS
from workers.policy_engine.cel.syntax.nodes import ListExpr, Literal
from workers.policy_engine.cel.syntax.reads import VARIABLES
from workers.policy_engine.cel.syntax.unparser import unparse
from workers.policy_engine.policies.common import Unsupported, as_list, as_map, parsed_list
from workers.policy_engine.policies.documents import SourcedDocument, name_of, namespace_of
from workers.policy_engine.policies.expressions import references

EXCEPTION_KIND = "PolicyException"
KYVERNO_GROUP = "kyverno.io"
POLICIES_GROUP = "policies.kyverno.io"
_CEL_FIELDS = frozenset({"policyRefs", "matchConditions", "images", "allowedValues",
                         "evaluationMode", "expiresAt", "properties", "reportResult"})  # fmt: skip
_RULE_FIELDS = frozenset({"exceptions", "match", "conditions", "podSecurity", "background"})
# a fine-grained exception's condition: always true, erring as the exception's conditions do
# (a value that is no boolean too, as Kyverno's match errs on it)
_GRANT_OPEN, _GRANT_CLOSE = "(\n", "\n) ? true : true"
# Kyverno's ``exceptions`` (its compiler's Exception struct): these two fields, no other
GRANT_FIELDS = ("allowedImages", "allowedValues")


@dataclass(frozen=True)
class Acceptance:
    """Which PolicyExceptions an import applies, as a Kyverno installation is configured.

    Kyverno applies none unless ``features.policyExceptions.enabled`` is set (its chart's
    default is off), and then only those in ``features.policyExceptions.namespace`` (``*``:
    any namespace; empty: none, Kyverno refuses to start its exception selector). assay
    applies every one by default: a team that imports exceptions runs Kyverno with them on.
    An exception this leaves out is reported among the refusals with the reason, never
    dropped unsaid."""

    enabled: bool = True
    namespace: str = "*"

    @classmethod
    def of(cls, settings: AssaySettings) -> Acceptance:
        return cls(settings.kyverno_policy_exceptions, settings.kyverno_policy_exceptions_namespace)

    def refusal(self, doc: SourcedDocument) -> str | None:
        """Why Kyverno, configured so, would not apply ``doc``; None when it would."""
        if not self.enabled:
            return (
                "PolicyExceptions are switched off for this import (as in a Kyverno whose "
                "features.policyExceptions.enabled is false, its chart's default), so it is "
                "not applied"
            )
        if self.namespace == "*":
            return None
        namespace = namespace_of(doc.document) or "default"
        if not self.namespace:
            return (
                "no namespace is accepted for PolicyExceptions (Kyverno's "
                "features.policyExceptions.namespace is empty), so it is not applied"
            )
        if namespace != self.namespace:
            return (
                f"it is in namespace {namespace!r}, and PolicyExceptions are accepted only "
                f"from {self.namespace!r} (as Kyverno's features.policyExceptions.namespace), "
                "so it is not applied"
            )
        return None


def is_exception(doc: SourcedDocument) -> bool:
    return doc.kind == EXCEPTION_KIND and doc.api_group in (KYVERNO_GROUP, POLICIES_GROUP)


@dataclass(frozen=True)
class Grant:
    """A fine-grained PolicyException of a ValidatingPolicy: an object its conditions
    (``when``, joined) match is judged with its ``images`` and ``values`` in ``exceptions``."""

    label: str
    when: str
    images: tuple[str, ...]
    values: tuple[str, ...]


@dataclass
class Applied:
    """What the exceptions of the files do to one policy: the exceptions applied (stored
    with it), those Kyverno would not apply to stored objects (document, why), and the
    fine-grained ones' grants, in order."""

    documents: list[SourcedDocument] = field(default_factory=list)
    not_applied: list[tuple[SourcedDocument, str]] = field(default_factory=list)
    grants: list[Grant] = field(default_factory=list)


def _label_of(document: dict[str, Any]) -> str:
    """``NAMESPACE/NAME`` (or ``NAME``): how an exception is named in conditions and reports."""
    namespace, name = namespace_of(document), name_of(document) or "(no name)"
    return f"{namespace}/{name}" if namespace else name


def _label(doc: SourcedDocument) -> str:
    return _label_of(doc.document)


def _expired(doc: SourcedDocument, expires: Any, now: datetime) -> bool:
    """True when the exception has expired; Unsupported when it expires later."""
    try:
        at = datetime.fromisoformat(str(expires).replace("Z", "+00:00"))
    except ValueError:
        raise Unsupported(
            f"its PolicyException {_label(doc)} has an expiresAt that is not a date-time"
        ) from None
    if at.tzinfo is None:
        raise Unsupported(f"its PolicyException {_label(doc)} has an expiresAt without a zone")
    if at <= now:
        return True
    raise Unsupported(
        f"its PolicyException {_label(doc)} expires at {expires}, and a check would go on "
        "applying it after that"
    )


def validating_policy_conditions(
    policy: SourcedDocument, exceptions: list[SourcedDocument], now: datetime
) -> tuple[list[ProbeCondition], Applied]:
    """The match conditions (first, in order) that leave out the objects ``exceptions``
    exempt from the ValidatingPolicy ``policy``; Unsupported for one that cannot be applied."""
    name, kind = name_of(policy.document), policy.kind
    applied = Applied()
    conditions: list[ProbeCondition] = []
    for doc in exceptions:
        if doc.api_group != POLICIES_GROUP:
            continue
        spec = as_map(doc.document.get("spec"), f"PolicyException {_label(doc)} spec")
        refs = [as_map(r, "policyRefs[]") for r in as_list(spec.get("policyRefs"), "policyRefs")]
        if not any(r.get("name") == name and r.get("kind") == kind for r in refs):
            continue
        label = _label(doc)
        unknown = sorted(set(spec) - _CEL_FIELDS)
        if unknown:
            raise Unsupported(
                f"its PolicyException {label} has {unknown}, which assay cannot apply"
            )
        images = _strings(spec.get("images"), f"its PolicyException {label} images")
        values = _strings(spec.get("allowedValues"), f"its PolicyException {label} allowedValues")
        if spec.get("evaluationMode") not in (None, "", "Kubernetes"):
            raise Unsupported(
                f"its PolicyException {label} is for {spec.get('evaluationMode')} payloads"
            )
        if spec.get("expiresAt") and _expired(doc, spec["expiresAt"], now):
            applied.not_applied.append(
                (doc, f"it expired at {spec['expiresAt']}, so Kyverno no longer applies it")
            )
            continue
        applied.documents.append(doc)
        parts = []
        what = f"PolicyException {label} matchConditions"
        for item in parsed_list(MatchCondition, spec.get("matchConditions"), what):
            if not item.expression.strip():
                raise Unsupported(f"its PolicyException {label} has a condition without expression")
            _refuse_inputs(item.expression, label)
            parts.append(f"(\n{item.expression.strip()}\n)")
        # no condition: every object is exempt (or granted)
        when = " && ".join(parts) if parts else "true"
        expression = f"!(\n{when}\n)"
        if images or values:  # Kyverno: an exception with either grants, never exempts
            applied.grants.append(Grant(label, when, images, values))
            expression = f"{_GRANT_OPEN}{when}{_GRANT_CLOSE}"
        conditions.append(
            ProbeCondition(name=f"exception-{label}"[:63], expression=expression, exception=label)
        )
    return conditions, applied


def _strings(value: Any, what: str) -> tuple[str, ...]:
    """A list of strings (Kyverno's ``[]string``); Unsupported for anything else."""
    items = as_list(value, what)
    if not all(isinstance(item, str) for item in items):
        raise Unsupported(f"{what} is not a list of strings")
    return tuple(items)


def _refuse_inputs(expression: str, label: str) -> None:
    """Unsupported for an exception's condition that reads ``exceptions`` or ``variables``:
    Kyverno evaluates the exceptions before it binds either (the condition errs there)."""
    for ref in references(expression):
        if ref.root in (KYVERNO_EXCEPTIONS, VARIABLES):
            raise Unsupported(
                f"its PolicyException {label} reads {ref.root} in a condition, which Kyverno "
                "gives only to the policy, after trying its exceptions (the condition errs)"
            )


def grants_variable(grants: list[Grant]) -> ProbeVariable:
    """The variable the policy's ``exceptions`` is read as (cel/programs.py): per object,
    the images and values of every fine-grained exception whose conditions match it, in
    order; empty lists with none. Evaluated only for an object that is judged, so after
    every exception's conditions were evaluated without error (their own match conditions
    come first), and when none exempted it."""

    def joined(field: str) -> str:
        parts = []
        for grant in grants:
            items = grant.images if field == "allowedImages" else grant.values
            if items:
                listed = unparse(ListExpr(tuple(Literal(item, "string") for item in items)))
                parts.append(f"((\n{grant.when}\n) ? {listed} : [])")
        return " + ".join(parts) or "[]"

    expression = "{" + ", ".join(f"'{f}': {joined(f)}" for f in GRANT_FIELDS) + "}"
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise Unsupported(
            f"its fine-grained PolicyExceptions ({', '.join(g.label for g in grants)}) grant "
            f"more than an expression of {MAX_EXPRESSION_CHARS} characters holds"
        )
    return ProbeVariable(name=EXCEPTIONS_VARIABLE, expression=expression)


def shown(condition: ProbeCondition, documents: list[dict[str, Any]]) -> str:
    """How ``probe show`` writes an exception's match condition: as the exception writes
    it, and what a fine-grained one grants (read from its document, stored with the
    policy)."""
    text = condition.expression
    if not (text.startswith(_GRANT_OPEN) and text.endswith(_GRANT_CLOSE)):
        when = " ".join(text.removeprefix("!(").removesuffix(")").split())
        return f"exempt by PolicyException {condition.exception} when: {when}"
    when = " ".join(text.removeprefix(_GRANT_OPEN).removesuffix(_GRANT_CLOSE).split())
    spec: Any = {}
    for document in documents:
        if document.get("kind") == EXCEPTION_KIND and _label_of(document) == condition.exception:
            spec = document.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    granted = [
        f"to exceptions.{field} [{', '.join(str(i) for i in spec.get(key) or [])}]"
        for field, key in zip(GRANT_FIELDS, ("images", "allowedValues"), strict=True)
        if spec.get(key)
    ]
    added = " and ".join(granted) or "to exceptions"
    return f"PolicyException {condition.exception} adds {added} when: {when}"


def cluster_policy_exceptions(
    policy: SourcedDocument,
    rules: list[PolicyRule],
    exceptions: list[SourcedDocument],
    read_match: Callable[[Any, str], list[list[ResourceFilter]]],
) -> tuple[list[PolicyRule], Applied]:
    """``rules`` with the exceptions of ``exceptions`` that name them; Unsupported for an
    exception that cannot be applied. ``read_match``: a Kyverno match block as any-of
    (all-of) filter groups (the ClusterPolicy importer's own reading)."""
    namespace, name = namespace_of(policy.document), name_of(policy.document)
    key = f"{namespace}/{name}" if policy.kind == "Policy" and namespace else name
    applied = Applied()
    extra: dict[str, list[RuleException]] = {}
    for doc in exceptions:
        if doc.api_group != KYVERNO_GROUP:
            continue
        spec = as_map(doc.document.get("spec"), f"PolicyException {_label(doc)} spec")
        named: list[str] = []
        for entry in as_list(spec.get("exceptions"), "exceptions"):
            entry = as_map(entry, "exceptions[]")
            if entry.get("policyName") != key:
                continue
            patterns = [str(r) for r in as_list(entry.get("ruleNames"), "ruleNames")]
            named += [
                r.name for r in rules if any(fnmatch.fnmatchcase(r.name, p) for p in patterns)
            ]
        if not named:
            continue
        label = _label(doc)
        unknown = sorted(set(spec) - _RULE_FIELDS)
        if unknown:
            raise Unsupported(
                f"its PolicyException {label} has {unknown}, which assay cannot apply"
            )
        if spec.get("background") is False:
            applied.not_applied.append(
                (
                    doc,
                    "its background is false: Kyverno applies it at admission only, not to "
                    "stored objects, so the policy is imported without it",
                )
            )
            continue
        if spec.get("conditions"):
            raise Unsupported(
                f"its PolicyException {label} has JMESPath conditions, which assay cannot apply"
            )
        if spec.get("podSecurity"):
            raise Unsupported(
                f"its PolicyException {label} exempts Pod Security controls (podSecurity), "
                "which apply to podSecurity rules, not CEL"
            )
        applied.documents.append(doc)
        groups = read_match(spec.get("match"), f"PolicyException {label} match")
        if not groups:
            continue  # a match of neither any nor all selects nothing (Kyverno's too)
        if len(groups) > 16:
            raise Unsupported(f"its PolicyException {label} matches more groups than assay holds")
        for rule_name in named:
            extra.setdefault(rule_name, []).append(RuleException(name=label, match=groups))
    out = []
    for rule in rules:
        more = extra.get(rule.name) or []
        if more:
            if len(rule.exceptions) + len(more) > 16:
                raise Unsupported(f"rule {rule.name} has more exceptions than assay holds (16)")
            rule = rule.model_copy(update={"exceptions": [*rule.exceptions, *more]})
        out.append(rule)
    return out, applied
