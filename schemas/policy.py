"""Imported admission policies: checks whose probe is a policy a team already has (issue 31).

``assay probe import FILE...`` reads ValidatingAdmissionPolicies (with their bindings),
Kyverno ValidatingPolicies and ClusterPolicies with ``validate.cel``, and Gatekeeper
ConstraintTemplates with ``K8sNativeValidation`` (with their constraints), and stores each
as an :class:`ImportedPolicy`: format-neutral rules (which objects, which CEL) that the
fleet turns into probes per kind at run time (workers/policy_engine/policies/).

An imported policy is a check like any other. Its predicate names it::

    policy:NAME          one policy, by name (see ImportedPolicy.name)
    policy-set:NAME      every policy of a set (``assay probe import --set NAME``)

so ``assay batch``, ``assay schedule add``, the API and the Python client run it with the
predicate alone, and its verdicts have history, change events and alerts as every check's.
Such a check never asks a model: it is answered by its probes, or it is cannot_determine.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from schemas.kubernetes_metadata import LabelSelector
from schemas.probe import (
    ProbeCondition,
    ProbeFormat,
    ProbeRun,
    ProbeValidation,
    ProbeVariable,
    ProbeViolation,
)
from schemas.verdict import VerdictKind

POLICY_PREFIX = "policy:"
POLICY_SET_PREFIX = "policy-set:"
# A Kubernetes object name (DNS subdomain), lower case: what every policy's id is made of.
POLICY_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
SET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,62}[a-z0-9])?$"
MAX_RULES = 16  # rules of one policy (a Kyverno ClusterPolicy's, with their pod-controller forms)
MAX_SET_POLICIES = 1000

_POLICY_NAME = re.compile(POLICY_NAME_PATTERN)
_SET_NAME = re.compile(SET_NAME_PATTERN)
PolicyScope = Literal["*", "Namespaced", "Cluster"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KindRef(_Strict):
    """A kind as a policy names it: an API group and version (``*``: any) and either a
    resource (``deployments``, as a ValidatingAdmissionPolicy writes it) or a kind
    (``Deployment``, as Kyverno and Gatekeeper write it)."""

    group: str = "*"
    version: str = "*"
    name: str = Field(min_length=1, max_length=253)

    def describe(self) -> str:
        group = "" if self.group in ("", "*") else f".{self.group}"
        return f"{self.name}{group}"


class ResourceFilter(_Strict):
    """Which objects one match term selects; every given part must hold.

    ``names``, ``namespaces`` and ``excluded_namespaces`` are patterns (``*`` and ``?``
    wildcards, as Kyverno and Gatekeeper allow; a plain name matches itself).
    """

    kinds: list[KindRef] | None = Field(
        default=None, description="None: any kind (a term that only narrows another)."
    )
    names: list[str] | None = None
    namespaces: list[str] | None = None
    excluded_namespaces: list[str] = Field(default_factory=list)
    namespace_selector: LabelSelector | None = None
    object_selector: LabelSelector | None = None
    scope: PolicyScope = "*"

    def matches_namespace_name(self, namespace: str | None) -> bool:
        """The name-pattern parts of the term, for an object in ``namespace`` (None: a
        cluster-scoped object, which namespace patterns never select)."""
        if self.namespaces is not None and (
            namespace is None or not _any_pattern(self.namespaces, namespace)
        ):
            return False
        return not (
            namespace is not None
            and self.excluded_namespaces
            and _any_pattern(self.excluded_namespaces, namespace)
        )

    def matches_name(self, name: str) -> bool:
        return self.names is None or _any_pattern(self.names, name)


def _any_pattern(patterns: list[str], value: str) -> bool:
    return any(fnmatch.fnmatchcase(value, pattern) for pattern in patterns)


class RuleException(_Strict):
    """A Kyverno PolicyException (``kyverno.io``) as it applies to one rule: the objects its
    ``match`` selects (any-of groups of all-of terms) are exempt from the rule."""

    name: str = Field(min_length=1, max_length=512, description="Its namespace/name.")
    match: list[list[ResourceFilter]] = Field(min_length=1, max_length=16)


class ParamSource(_Strict):
    """Where a rule's params come from on the target cluster, read from the target's listing
    of that kind on every run: a ValidatingAdmissionPolicy binding's ``paramRef`` (for the
    policy's ``paramKind``), read as the API server reads it at admission, or a Kyverno
    ClusterPolicy rule's ``validate.cel.paramKind`` / ``paramRef``, read as Kyverno reads it."""

    api_version: str = Field(min_length=1, max_length=317, description="paramKind.apiVersion")
    kind: str = Field(min_length=1, max_length=253, description="paramKind.kind")
    name: str | None = Field(default=None, description="paramRef.name (one object).")
    namespace: str | None = Field(
        default=None,
        description="paramRef.namespace; unset for a namespaced kind: the judged object's own "
        "namespace.",
    )
    selector: LabelSelector | None = Field(
        default=None,
        description="paramRef.selector (every object it selects; the policy must hold for "
        "each); empty selects every object of the kind. With neither name nor selector "
        "(Kyverno only) no object is selected.",
    )
    not_found_action: Literal["Allow", "Deny"] = Field(
        default="Deny",
        description="paramRef.parameterNotFoundAction: with no params object, Allow admits; "
        "Deny applies the failure policy (Kyverno: reports the rule as an error).",
    )
    failure_policy: Literal["Fail", "Ignore"] = Field(
        default="Fail", description="The policy's failurePolicy (what Deny applies)."
    )
    reader: Literal["kubernetes", "kyverno"] = Field(
        default="kubernetes",
        description="Who reads them: the API server (a binding's paramRef), or Kyverno (a "
        "ClusterPolicy rule's), which reports the rule as an error, giving no verdict, when "
        "a named object is missing or none is selected with Deny, and admits when none is "
        "selected otherwise.",
    )


def cel_texts(
    variables: Iterable[ProbeVariable],
    conditions: Iterable[ProbeCondition],
    validations: Iterable[ProbeValidation],
) -> list[str]:
    """Every CEL text of a rule, in the order its document holds them: variables, match
    conditions, then each validation's expression and its messageExpression. Every reader
    of a rule's CEL walks it in this one order, so the first refusal found is the same
    whether a rule is checked before it is built (an importer) or after (an export)."""
    texts = [v.expression for v in variables] + [c.expression for c in conditions]
    for validation in validations:
        texts.append(validation.expression)
        if validation.message_expression:
            texts.append(validation.message_expression)
    return texts


class PolicyRule(_Strict):
    """One rule of an imported policy: which objects it judges and the CEL that judges them.

    ``match`` is any-of (all-of terms): an object is judged when every term of at least one
    group selects it (a ValidatingAdmissionPolicy's constraints and its binding's are one
    group of two terms; Kyverno's ``match.any`` is one group per entry). ``exclude`` is the
    same shape; an object it selects is not judged.
    """

    name: str = Field(min_length=1, max_length=253)
    match: list[list[ResourceFilter]] = Field(min_length=1, max_length=16)
    exclude: list[list[ResourceFilter]] = Field(default_factory=list, max_length=16)
    match_conditions: list[ProbeCondition] = Field(default_factory=list)
    variables: list[ProbeVariable] = Field(default_factory=list)
    validations: list[ProbeValidation] = Field(min_length=1)
    pod_controllers: str | None = Field(
        default=None,
        description="Set on a rule Kyverno derives from a Pod rule for pod controllers "
        "(autogen): the original rule's name. Such a rule is not exported.",
    )
    exceptions: list[RuleException] = Field(
        default_factory=list,
        max_length=16,
        description="Kyverno PolicyExceptions (kyverno.io) naming this rule: an object one "
        "selects is exempt, not judged, reported `skip` as Kyverno reports it.",
    )
    param_source: ParamSource | None = Field(
        default=None,
        description="A Kyverno ClusterPolicy rule's params (validate.cel paramKind and "
        "paramRef), read from the target cluster on each run as Kyverno reads them.",
    )

    def expressions(self) -> list[str]:
        """Every CEL text of the rule (:func:`cel_texts`)."""
        return cel_texts(self.variables, self.match_conditions, self.validations)


class ImportedPolicy(_Strict):
    """An admission policy stored as a check: what ``policy:NAME`` runs."""

    name: str = Field(
        pattern=POLICY_NAME_PATTERN,
        description="The policy's id: the name of what puts it in effect (a "
        "ValidatingAdmissionPolicyBinding, else its policy; a Gatekeeper constraint; a Kyverno "
        "policy).",
    )
    format: ProbeFormat
    policy_name: str = Field(description="The policy object's (or ConstraintTemplate's) name.")
    source: str = Field(min_length=1, max_length=4096, description="A file path, or '-'.")
    imported_at: datetime
    rules: list[PolicyRule] = Field(min_length=1, max_length=MAX_RULES)
    params: JsonValue = Field(
        default=None,
        description="Bound as `params` (from the files: a ValidatingAdmissionPolicy's params "
        "object, a Gatekeeper constraint).",
    )
    param_source: ParamSource | None = Field(
        default=None,
        description="A ValidatingAdmissionPolicy binding's params read from the target "
        "cluster on each run (its paramRef names no object in the files).",
    )
    validation_actions: list[str] = Field(default_factory=list, max_length=8)
    documents: list[dict[str, JsonValue]] = Field(
        default_factory=list,
        description="The documents it was imported from (policy, binding, params object, "
        "constraint), as given: what `assay probe export` starts from.",
    )

    @property
    def predicate(self) -> str:
        return POLICY_PREFIX + self.name


NO_KIND = "(no kind)"
TEXT_REFUSED = "(text)"


class ImportRefusal(_Strict):
    """A document (or policy) that was not imported, and why, in one sentence."""

    source: str
    kind: str = Field(
        description=f"The document's kind; {NO_KIND!r} for a document without one, "
        f"{TEXT_REFUSED!r} for text that is not YAML or JSON or holds no document."
    )
    name: str
    reason: str


class ImportReport(_Strict):
    """What one import did: the policies stored (or, dry run, that would be), and the
    refusals. ``policy_set``: the set the imported policies now make up, if one was named."""

    imported: list[str] = Field(default_factory=list, description="Policy names.")
    replaced: list[str] = Field(default_factory=list, description="Names that existed before.")
    refused: list[ImportRefusal] = Field(default_factory=list)
    policy_set: str | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class PolicyReference:
    """What a ``policy:NAME`` or ``policy-set:NAME`` predicate names."""

    kind: Literal["policy", "set"]
    name: str

    @property
    def predicate(self) -> str:
        return (POLICY_PREFIX if self.kind == "policy" else POLICY_SET_PREFIX) + self.name


def policy_reference(text: str) -> PolicyReference | None:
    """The policy or set a predicate names, or None for any other predicate.

    Only the exact forms count (surrounding whitespace aside): ``policy:NAME`` and
    ``policy-set:NAME`` with NAME a lower-case DNS name. Anything else is a predicate for
    the model, so a sentence that merely starts with "policy:" is never mistaken for one.
    """
    stripped = text.strip()
    if stripped.startswith(POLICY_SET_PREFIX):
        name = stripped[len(POLICY_SET_PREFIX) :]
        return PolicyReference("set", name) if _SET_NAME.fullmatch(name) else None
    if stripped.startswith(POLICY_PREFIX):
        name = stripped[len(POLICY_PREFIX) :]
        return PolicyReference("policy", name) if _POLICY_NAME.fullmatch(name) else None
    return None


def valid_set_name(name: str) -> str:
    """``name`` if it can name a policy set, else ValueError saying what can."""
    if not _SET_NAME.fullmatch(name):
        raise ValueError(
            f"{name!r} cannot name a policy set: use 1 to 64 lower-case letters, digits, '-' "
            "and '.', starting and ending with a letter or digit"
        )
    return name


MAX_POLICY_VIOLATIONS = 100  # violations kept in a PolicyResult (violations_total counts all)


class PolicyViolation(ProbeViolation):
    """An object a policy judged false: which rule, and the policy's message."""

    rule: str


class PolicyProbeResult(_Strict):
    """One probe of a policy run: the rule, the kind and namespace it listed, its run."""

    rule: str
    kind: str
    namespace: str | None = None
    run: ProbeRun


class PolicyResult(_Strict):
    """An imported policy run on one target: its verdict and the objects that violate it.

    ``true``: every probe ran and no judged object violates the policy (including: nothing
    to judge). ``false``: at least one object violates it (each named, with the message).
    ``cannot_determine``: a probe could not run (``reason``) and nothing was found violating.
    """

    policy: str
    format: ProbeFormat
    verdict: VerdictKind
    reason: str | None = None
    judged_total: int = 0
    violations_total: int = 0
    violations: list[PolicyViolation] = Field(default_factory=list)
    objects_read: int = 0
    kinds_not_served: list[str] = Field(
        default_factory=list, description="Kinds it names that the target does not serve."
    )
    probes: list[PolicyProbeResult] = Field(default_factory=list)
    duration_seconds: float = 0.0
    policy_set: str | None = Field(
        default=None,
        description="The set whose run this was (None: the policy run on its own): a report "
        "shows the result only while the set still holds the policy.",
    )


class PolicySetEntry(_Strict):
    """One policy of a set run: its verdict, and the run that recorded it."""

    policy: str
    verdict: VerdictKind
    violations_total: int = 0
    run_id: str | None = None
    check_id: str | None = None
    reason: str | None = None


def policy_run_id(set_run_id: str, policy_name: str) -> str:
    """The run id of one policy's run inside the set run ``set_run_id``: derived from both,
    so a redelivered set run names the same runs (the store records each once), and a set
    run that repeated an earlier one names its own policies' runs."""
    digest = hashlib.sha256(f"{set_run_id}\x00{policy_name}".encode()).hexdigest()
    run_id = f"{set_run_id}.{digest[:12]}"
    return run_id if len(run_id) <= 128 else f"pol-{digest[:40]}"


class PolicySetResult(_Strict):
    """A policy set run on one target (``policy-set:NAME``): one entry per policy, and what
    the tick cost in listings."""

    policy_set: str
    policies: list[PolicySetEntry] = Field(default_factory=list)
    missing: list[str] = Field(
        default_factory=list, description="Members whose policy is no longer stored."
    )
    listings: int = Field(default=0, description="List requests the tick made (shared).")
    duration_seconds: float = 0.0
