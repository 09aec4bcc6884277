"""One admission policy to write, in the ValidatingAdmissionPolicy's own field names, and
the pieces every source of one shares: kinds resolved to API resources, label selectors,
name patterns.

A :class:`Draft` is the export's neutral form: the VAP spec and its binding's spec as the
API server reads them (``failurePolicy``, ``paramKind``, ``matchConstraints`` with its
``resourceRules`` (operations, resources and subresources, ``resourceNames``, scope),
``excludeResourceRules``, selectors and ``matchPolicy``, ``matchConditions``,
``variables``, ``validations``, ``auditAnnotations``; the binding's ``paramRef``,
``matchResources`` and ``validationActions``). export.py renders it as a VAP + binding, or
as a Kyverno ValidatingPolicy where the two say the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from schemas.kubernetes_metadata import NAMESPACE_NAME_LABEL, LabelSelector, SelectorError
from schemas.policy import KindRef, ResourceFilter
from workers.engine.toolsets.backend import BackendError, ClusterBackend, ResourceInfo
from workers.engine.toolsets.kinds import ResourceIndex, builtin_index
from workers.policy_engine.policies.matching import kind_matches

# What a ValidatingAdmissionPolicy's resource rule matches when it names no operations of
# its own: every admission policy written here names them, as the API requires.
CREATE_UPDATE = ["CREATE", "UPDATE"]


class NotExportable(ValueError):
    """The probe or policy cannot be exported as asked; the message says why."""


@dataclass
class Draft:
    """One admission policy: ``spec`` is a ValidatingAdmissionPolicy's spec, ``binding``
    its binding's spec without ``policyName`` (an empty ``validationActions`` is filled at
    rendering: the ``--action`` asked for, else ``default_actions``)."""

    name: str
    annotations: dict[str, str]
    resources: list[ResourceInfo]  # the kinds it judges (for the type check)
    spec: dict[str, Any]
    binding: dict[str, Any] = field(default_factory=dict)
    binding_name: str | None = None
    params: dict[str, Any] | None = None
    default_actions: list[str] = field(default_factory=lambda: ["Audit"])
    # Kyverno autogen controllers to write when rendered as a ValidatingPolicy on Pods
    # ([]: none); None leaves Kyverno's default
    pod_controllers: list[str] | None = None
    # a Kyverno ValidatingPolicy's own document, written as it is when exported as kyverno
    kyverno_document: dict[str, Any] | None = None
    # why it cannot be written as a Kyverno ValidatingPolicy (None: it can)
    not_kyverno: str | None = None
    # a Kyverno ValidatingPolicy's spec.evaluation, when it is not the default
    kyverno_evaluation: dict[str, Any] | None = None
    from_probe: bool = False
    warnings: list[str] = field(default_factory=list)


# -- kinds ------------------------------------------------------------------------------------


# Built-in kinds no stated release serves any more, which policies still name (Kyverno's
# deprecated-API checks match PodSecurityPolicy, removed in 1.25): an admission rule may
# name a resource the API server does not serve (it matches nothing there), so they are
# written as they were.
REMOVED_BUILTINS = (
    ResourceInfo("PodSecurityPolicy", "podsecuritypolicies", "policy", "v1beta1", False),
)


class Kinds:
    """Resolves a policy's kinds to served resources: built-in, or the target's."""

    def __init__(self, backend: ClusterBackend | None) -> None:
        self.backend = backend
        self.index = builtin_index()
        if backend is not None:
            try:
                self.index = ResourceIndex.builtin_with(backend.api_resources())
            except BackendError as exc:
                raise NotExportable(
                    f"the target's kinds could not be read: {exc.message}"
                ) from None

    def resolve(self, name: str) -> ResourceInfo:
        try:
            return self.index.resolve(name)
        except BackendError:
            if self.backend is not None:
                raise NotExportable(
                    f"the kind {name!r} is neither built in nor served by the target"
                ) from None
            raise NotExportable(
                f"the kind {name!r} is not a built-in kind, so its API group is unknown "
                "offline: give a snapshot or context that serves it"
            ) from None

    def of(self, ref: KindRef) -> ResourceInfo:
        matches = [r for r in self.index.resources if kind_matches(ref, r)]
        if matches:
            preferred = [r for r in matches if r.version == ref.version]
            return (preferred or matches)[0]
        if ref.group != "*" and ref.version != "*" and ref.name == ref.name.lower():
            # a resource the policy names fully (a VAP's rule): written as it is
            return ResourceInfo(ref.name, ref.name, ref.group, ref.version, True)
        removed = [r for r in REMOVED_BUILTINS if kind_matches(ref, r)]
        if removed:
            return removed[0]
        return self.resolve(ref.name if ref.group in ("*", "") else f"{ref.name}.{ref.group}")

    def of_rule(self, rule: dict[str, Any]) -> list[ResourceInfo]:
        """The resources a VAP resource rule judges whole (its subresources aside), for
        the type check; none for a wildcard."""
        out: list[ResourceInfo] = []
        for group in rule.get("apiGroups") or []:
            for version in rule.get("apiVersions") or []:
                for resource in rule.get("resources") or []:
                    if "/" in str(resource) or "*" in (group, version, resource):
                        continue
                    ref = KindRef(group=str(group), version=str(version), name=str(resource))
                    try:
                        found = self.of(ref)
                    except NotExportable:
                        found = ResourceInfo(ref.name, ref.name, ref.group, ref.version, True)
                    if found not in out:
                        out.append(found)
        return out


def rules_for(
    resources: list[ResourceInfo],
    names: list[str] | None,
    scope: str,
    operations: list[str],
    subresources: dict[str, list[str]] | None = None,
) -> list[dict[str, Any]]:
    """Resource rules for ``resources`` (one per API group and version), with
    ``subresources`` (per plural: ``{"pods": ["ephemeralcontainers"]}``) written beside
    their resource."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for resource in resources:
        plurals = grouped.setdefault((resource.group, resource.version), [])
        for entry in [resource.plural] + [
            f"{resource.plural}/{sub}" for sub in (subresources or {}).get(resource.plural, [])
        ]:
            if entry not in plurals:
                plurals.append(entry)
    rules = []
    for (group, version), plurals in grouped.items():
        rule: dict[str, Any] = {
            "apiGroups": [group],
            "apiVersions": [version],
            "operations": list(operations),
            "resources": plurals,
        }
        if names:
            rule["resourceNames"] = list(names)
        if scope != "*":
            rule["scope"] = scope
        rules.append(rule)
    return rules


# -- selectors --------------------------------------------------------------------------------


def selector_from_text(selector: str | None) -> dict[str, Any] | None:
    """A label selector's text (``a=b,tier in (x,y),!canary``) as a LabelSelector object;
    one that cannot select anything (``a=b,a=c``) is refused, not written."""
    try:
        parsed = LabelSelector.from_text(selector)
    except SelectorError as exc:
        raise NotExportable(f"the label selector {selector!r} cannot be read: {exc}") from exc
    if contradiction := parsed.contradiction():
        raise NotExportable(f"the label selector {selector!r} {contradiction}")
    return parsed.to_api() or None


def selector(value: LabelSelector | None) -> dict[str, Any] | None:
    return None if value is None else value.to_api() or None


def both(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two label selectors that must both hold, as one (an empty one selects everything)."""
    if not first or not second:
        return first or second
    labels = dict(first.get("matchLabels") or {})
    for key, value in (second.get("matchLabels") or {}).items():
        if labels.get(key, value) != value:
            raise NotExportable(f"two of its selectors ask the label {key} for different values")
        labels[key] = value
    out: dict[str, Any] = {}
    if labels:
        out["matchLabels"] = labels
    expressions = [*(first.get("matchExpressions") or []), *(second.get("matchExpressions") or [])]
    if expressions:
        out["matchExpressions"] = expressions
    return out


def namespace_names_selector(names: list[str], operator: str) -> dict[str, Any]:
    """Namespaces by exact name, as the label every namespace carries."""
    return {
        "matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": operator, "values": sorted(set(names))}
        ]
    }


def namespace_selector(term: ResourceFilter) -> dict[str, Any] | None:
    """A term's exact namespace names and exclusions, and its namespace selector, as one
    namespace selector (patterns are left to :func:`pattern_condition`)."""
    named: dict[str, Any] | None = None
    for names, operator in ((term.namespaces, "In"), (term.excluded_namespaces or None, "NotIn")):
        if names is None or any(is_pattern(name) for name in names):
            continue
        named = both(named, namespace_names_selector(names, operator))
    return both(named, selector(term.namespace_selector))


def is_pattern(name: str) -> bool:
    return any(ch in name for ch in "*?[")


def _glob(pattern: str) -> str:
    """A name pattern (``*`` and ``?``) as an anchored RE2 expression."""
    if "[" in pattern:
        raise NotExportable(f"the name pattern {pattern!r} uses brackets, which it does not export")
    body = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return f"^{body}$"


def _any_of(value: str, patterns: list[str]) -> str:
    tests = [
        f"{value} == {cel_string(p)}" if not is_pattern(p)
        else f"{value}.matches({cel_string(_glob(p))})"
        for p in patterns
    ]  # fmt: skip
    return "(" + " || ".join(tests) + ")"


def cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def pattern_condition(term: ResourceFilter, resource_namespaced: bool) -> str | None:
    """What a term matches by name patterns (Kyverno's and Gatekeeper's ``*`` / ``?``), as
    a match condition: an admission policy's selectors match exact names only."""
    parts: list[str] = []
    namespace = "object.metadata.namespace"
    if resource_namespaced and term.namespaces and any(is_pattern(n) for n in term.namespaces):
        parts.append(_any_of(namespace, term.namespaces))
    excluded = [n for n in term.excluded_namespaces if is_pattern(n)]
    if resource_namespaced and excluded:
        parts.append("!" + _any_of(namespace, excluded))
    if term.names and any(is_pattern(n) for n in term.names):
        parts.append(_any_of("object.metadata.name", term.names))
    return " && ".join(parts) if parts else None


def validation(
    expression: str, message: str | None, message_expression: str | None, reason: str | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"expression": expression}
    if message:
        out["message"] = " ".join(message.split())
    if message_expression:
        out["messageExpression"] = message_expression
    if reason:
        out["reason"] = reason
    return out
