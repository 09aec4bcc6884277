"""Export a per-object probe, or an imported policy, as admission policy: a
ValidatingAdmissionPolicy (+ binding, + params object) or a Kyverno ValidatingPolicy.

Two sources, one path:

* a check's probe (``ProbeRecord``): only scope ``each_object`` with ``when_true: "true"``
  says something about each object on its own, which is what an admission policy checks;
  its lookup's kind becomes the resource rule, its namespace and ``key=value`` / set-based
  label selector the binding's (or the policy's) selectors; a field selector has no
  admission counterpart;
* an imported policy (``ImportedPolicy``): each rule (and each of its match groups) becomes
  a policy, with its variables, match conditions, validations and messages kept as such,
  its params (a VAP's params object, a Gatekeeper constraint) as ``paramKind`` +
  ``paramRef`` + the params object.

Kinds are resolved to API group, version and resource from the built-in kinds
(workers/core/toolsets/kinds.py) or, for custom resources, from a target's discovery (live)
or its CustomResourceDefinitions (snapshot), when one is given.

Nothing is written that the API server would refuse: every export is checked before it is
returned, and refused (:class:`NotExportable`, with the reasons) when a document breaks the
API's rules (admission_schema.py), an expression does not compile in Kubernetes' CEL
environment, reads ``params`` without ``paramKind`` or ``variables`` in a match condition,
or reads a field the kind's schema does not have (kind_schemas.py).

The default action of a probe's export is ``Audit`` (watch before blocking); an imported
policy keeps its own actions unless one is given. Nothing here talks to a cluster beyond
discovery and schemas: it prints YAML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from schemas.policy import ImportedPolicy, KindRef, LabelSelector, PolicyRule, ResourceFilter
from schemas.probe import ProbeRecord
from workers.core.policies.expressions import references
from workers.core.policies.matching import kind_matches
from workers.core.policies.probes import as_created
from workers.core.probes.admission_schema import KYVERNO_API_VERSION, VAP_API_VERSION, problems
from workers.core.probes.cel import CelError, Expression
from workers.core.probes.kind_schemas import undefined_path
from workers.core.toolsets.backend import BackendError, ClusterBackend, ResourceInfo
from workers.core.toolsets.kinds import ResourceIndex, builtin_index

ExportFormat = Literal["vap", "kyverno"]
Action = Literal["Audit", "Deny", "Warn"]
_NAME_CHARS = re.compile(r"[^a-z0-9-]+")
_SET_TERM = re.compile(r"^\s*([A-Za-z0-9][-A-Za-z0-9_./]*)\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EQUALITY_TERM = re.compile(
    r"^\s*([A-Za-z0-9][-A-Za-z0-9_./]*)\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)\s*$"
)
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*([A-Za-z0-9][-A-Za-z0-9_./]*)\s*$")
_GATEKEEPER_PARAMS_VERSION = "constraints.gatekeeper.sh/v1beta1"
MANAGED_BY = {"app.kubernetes.io/managed-by": "assay"}


class NotExportable(ValueError):
    """The probe or policy cannot be exported as asked; the message says why."""


@dataclass
class _Draft:
    """One admission policy to write, in the admission API's own field names."""

    name: str
    annotations: dict[str, str]
    resources: list[ResourceInfo]  # the kinds it judges (for the type check)
    resource_rules: list[dict[str, Any]]
    exclude_rules: list[dict[str, Any]] = field(default_factory=list)
    namespace_selector: dict[str, Any] | None = None
    object_selector: dict[str, Any] | None = None
    extra_match: dict[str, Any] | None = None  # the binding's matchResources (VAP)
    match_conditions: list[dict[str, str]] = field(default_factory=list)
    variables: list[dict[str, str]] = field(default_factory=list)
    validations: list[dict[str, Any]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    param_kind: dict[str, str] | None = None
    param_ref: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    binding_name: str | None = None
    pod_controllers: list[str] | None = None  # Kyverno autogen controllers; [] = none


# -- kinds ------------------------------------------------------------------------------------


# Built-in kinds no stated release serves any more, which policies still name (Kyverno's
# deprecated-API checks match PodSecurityPolicy, removed in 1.25): an admission rule may
# name a resource the API server does not serve (it matches nothing there), so they are
# written as they were.
REMOVED_BUILTINS = (
    ResourceInfo("PodSecurityPolicy", "podsecuritypolicies", "policy", "v1beta1", False),
)


class _Kinds:
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


def _rules_for(
    resources: list[ResourceInfo], names: list[str] | None, scope: str
) -> list[dict[str, Any]]:
    grouped: dict[tuple[str, str], list[str]] = {}
    for resource in resources:
        plurals = grouped.setdefault((resource.group, resource.version), [])
        if resource.plural not in plurals:
            plurals.append(resource.plural)
    rules = []
    for (group, version), plurals in grouped.items():
        rule: dict[str, Any] = {
            "apiGroups": [group],
            "apiVersions": [version],
            "operations": ["CREATE", "UPDATE"],
            "resources": plurals,
        }
        if names:
            rule["resourceNames"] = names
        if scope != "*":
            rule["scope"] = scope
        rules.append(rule)
    return rules


# -- selectors --------------------------------------------------------------------------------


def selector_from_text(selector: str | None) -> dict[str, Any] | None:
    """A label selector's text (``a=b,tier in (x,y),!canary``) as a LabelSelector object."""
    if not selector or not selector.strip():
        return None
    labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for term in _split_terms(selector):
        if match := _SET_TERM.match(term):
            values = sorted({v.strip() for v in match.group(3).split(",") if v.strip()})
            operator = "In" if match.group(2) == "in" else "NotIn"
            expressions.append({"key": match.group(1), "operator": operator, "values": values})
        elif match := _EQUALITY_TERM.match(term):
            key, op, value = match.groups()
            if op == "!=":
                expressions.append({"key": key, "operator": "NotIn", "values": [value]})
            elif labels.get(key, value) != value:
                raise NotExportable(f"the label selector {selector!r} asks {key} for two values")
            else:
                labels[key] = value
        elif match := _EXISTS_TERM.match(term):
            operator = "DoesNotExist" if match.group(1) else "Exists"
            expressions.append({"key": match.group(2), "operator": operator})
        else:
            raise NotExportable(
                f"the label selector {selector!r} has a term that is not a label term"
            )
    out: dict[str, Any] = {}
    if labels:
        out["matchLabels"] = labels
    if expressions:
        out["matchExpressions"] = expressions
    return out


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    return [t for t in [*terms, current] if t.strip()]


def _selector(value: LabelSelector | None) -> dict[str, Any] | None:
    if value is None or value.empty:
        return None
    out: dict[str, Any] = {}
    if value.match_labels:
        out["matchLabels"] = dict(value.match_labels)
    if value.match_expressions:
        out["matchExpressions"] = [
            {"key": t.key, "operator": t.operator, **({"values": t.values} if t.values else {})}
            for t in value.match_expressions
        ]
    return out


def _and(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two label selectors that must both hold, as one."""
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


def _namespace_selector(term: ResourceFilter) -> dict[str, Any] | None:
    """A term's exact namespace names and exclusions, and its namespace selector, as one
    namespace selector (patterns are left to :func:`_pattern_condition`)."""
    key = "kubernetes.io/metadata.name"
    expressions: list[dict[str, Any]] = []
    for names, operator in ((term.namespaces, "In"), (term.excluded_namespaces or None, "NotIn")):
        if names is None or any(_is_pattern(name) for name in names):
            continue
        expressions.append({"key": key, "operator": operator, "values": sorted(names)})
    named = {"matchExpressions": expressions} if expressions else None
    return _and(named, _selector(term.namespace_selector))


def _is_pattern(name: str) -> bool:
    return any(ch in name for ch in "*?[")


def _glob(pattern: str) -> str:
    """A name pattern (``*`` and ``?``) as an anchored RE2 expression."""
    if "[" in pattern:
        raise NotExportable(f"the name pattern {pattern!r} uses brackets, which it does not export")
    body = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return f"^{body}$"


def _any_of(value: str, patterns: list[str]) -> str:
    tests = [
        f"{value} == {_cel_string(p)}" if not _is_pattern(p)
        else f"{value}.matches({_cel_string(_glob(p))})"
        for p in patterns
    ]  # fmt: skip
    return "(" + " || ".join(tests) + ")"


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _pattern_condition(term: ResourceFilter, resource_namespaced: bool) -> str | None:
    """What a term matches by name patterns (Kyverno's and Gatekeeper's ``*`` / ``?``), as
    a match condition: an admission policy's selectors match exact names only."""
    parts: list[str] = []
    namespace = "object.metadata.namespace"
    if resource_namespaced and term.namespaces and any(_is_pattern(n) for n in term.namespaces):
        parts.append(_any_of(namespace, term.namespaces))
    excluded = [n for n in term.excluded_namespaces if _is_pattern(n)]
    if resource_namespaced and excluded:
        parts.append("!" + _any_of(namespace, excluded))
    if term.names and any(_is_pattern(n) for n in term.names):
        parts.append(_any_of("object.metadata.name", term.names))
    return " && ".join(parts) if parts else None


# -- drafts from a probe ----------------------------------------------------------------------


def _probe_draft(record: ProbeRecord, predicate: str | None, kinds: _Kinds) -> _Draft:
    probe = record.probe
    if probe.scope != "each_object":
        raise NotExportable(
            "only a probe of scope each_object (one expression per object) is an admission policy"
        )
    if probe.when_true != "true":
        raise NotExportable(
            "the probe's expression being true means the predicate is false; an admission "
            "policy needs the expression to hold for every admitted object"
        )
    args = probe.lookups[0].args
    if args.get("field_selector"):
        raise NotExportable("a field selector has no admission-policy counterpart")
    resource = kinds.resolve(str(args.get("kind", "")))
    extra: dict[str, Any] = {}
    namespace = args.get("namespace")
    if namespace and str(namespace).strip().lower() not in {"all", "*", ""} and resource.namespaced:
        extra["namespaceSelector"] = {
            "matchLabels": {"kubernetes.io/metadata.name": str(namespace)}
        }
    labels = selector_from_text(args.get("label_selector"))
    if labels:
        extra["objectSelector"] = labels
    message = f"assay check {record.check_id} (probe v{record.version})"
    if predicate:
        message += f": {predicate}"
    message = " ".join(message.split())[:1000]
    if probe.expression is not None:
        validations = [{"expression": probe.expression, "message": message}]
    else:
        validations = [_validation(v.expression, v.message, v.message_expression, v.reason)
                       for v in probe.validations]  # fmt: skip
    name = _NAME_CHARS.sub("-", f"assay-{record.check_id}-v{record.version}".lower()).strip("-")
    return _Draft(
        name=name[:253],
        annotations={
            "assay.dev/check-id": record.check_id,
            "assay.dev/probe-version": str(record.version),
            "assay.dev/compiled-by-run": record.compiled_by_run,
        },
        resources=[resource],
        resource_rules=_rules_for([resource], None, "*"),
        extra_match=extra or None,
        match_conditions=[
            {"name": c.name, "expression": c.expression} for c in probe.match_conditions
        ],
        variables=[{"name": v.name, "expression": v.expression} for v in probe.variables],
        validations=validations,
        pod_controllers=[],
    )


def _validation(
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


# -- drafts from an imported policy ----------------------------------------------------------


def _policy_drafts(policy: ImportedPolicy, fmt: ExportFormat, kinds: _Kinds) -> list[_Draft]:
    rules = [r for r in policy.rules if not (fmt == "kyverno" and r.pod_controllers)]
    plans = [(rule, group) for rule in rules for group in rule.match]
    drafts = []
    for number, (rule, group) in enumerate(plans):
        base = policy.policy_name if policy.format != "gatekeeper" else policy.name
        name = base if len(plans) == 1 else f"{base}-{number + 1}"
        drafts.append(_rule_draft(policy, rule, group, name, fmt, kinds))
    return drafts


def _rule_draft(
    policy: ImportedPolicy,
    rule: PolicyRule,
    group: list[ResourceFilter],
    name: str,
    fmt: ExportFormat,
    kinds: _Kinds,
) -> _Draft:
    primary = next((t for t in group if t.kinds), None)
    if primary is None or primary.kinds is None:
        raise NotExportable(f"rule {rule.name} names no kinds")
    resources = [kinds.of(ref) for ref in primary.kinds]
    namespaced = all(r.namespaced for r in resources)
    conditions = [
        {"name": f"assay-match-{number}", "expression": text}
        for number, text in enumerate(
            filter(None, (_pattern_condition(t, namespaced) for t in group)), start=1
        )
    ]
    names = None if primary.names and any(_is_pattern(n) for n in primary.names) else primary.names
    namespace_selector = _namespace_selector(primary)
    object_selector = _selector(primary.object_selector)
    extra: dict[str, Any] = {}
    for term in group:
        if term is primary:
            continue
        if term.kinds is not None and term.kinds != primary.kinds:
            extra_resources = {kinds.of(ref).plural for ref in term.kinds}
            if not {r.plural for r in resources} <= extra_resources:
                raise NotExportable(f"rule {rule.name} narrows its kinds in two places")
        if term.names and not any(_is_pattern(n) for n in term.names):
            raise NotExportable(f"rule {rule.name} names objects in a second match term")
        if fmt == "vap" and policy.format == "vap":
            _merge_into(extra, "namespaceSelector", _namespace_selector(term))
            _merge_into(extra, "objectSelector", _selector(term.object_selector))
        else:
            namespace_selector = _and(namespace_selector, _namespace_selector(term))
            object_selector = _and(object_selector, _selector(term.object_selector))
    exclude_rules: list[dict[str, Any]] = []
    for excluded in rule.exclude:
        only = excluded[0] if len(excluded) == 1 else None
        if only is not None and _namespaces_only(only, primary):
            # excluded namespaces (for every kind it judges): a namespace selector's NotIn
            assert only.namespaces is not None
            namespace_selector = _and(
                namespace_selector,
                _namespace_selector(ResourceFilter(excluded_namespaces=only.namespaces)),
            )
            continue
        if only is None or not only.kinds or _narrows(only):
            raise NotExportable(
                f"rule {rule.name} excludes objects by more than kind, name or namespace, "
                "which a policy's excludeResourceRules cannot express"
            )
        exclude_rules += _rules_for([kinds.of(ref) for ref in only.kinds], only.names, "*")
    draft = _Draft(
        name=name[:253],
        annotations={"assay.dev/policy": policy.predicate, "assay.dev/format": policy.format},
        resources=resources,
        resource_rules=_rules_for(resources, names, primary.scope),
        exclude_rules=exclude_rules,
        namespace_selector=namespace_selector,
        object_selector=object_selector,
        extra_match=extra or None,
        match_conditions=conditions
        + [{"name": c.name, "expression": c.expression} for c in rule.match_conditions],
        variables=[{"name": v.name, "expression": v.expression} for v in rule.variables],
        validations=[
            _validation(v.expression, v.message, v.message_expression, v.reason)
            for v in rule.validations
        ],
        actions=list(policy.validation_actions),
        pod_controllers=_controllers(policy, rule),
    )
    _params(policy, draft)
    return draft


def _namespaces_only(term: ResourceFilter, primary: ResourceFilter) -> bool:
    """An exclusion of namespaces by name, for every kind the rule judges."""
    return bool(
        term.namespaces
        and not term.names
        and not term.excluded_namespaces
        and term.namespace_selector is None
        and term.object_selector is None
        and term.scope == "*"
        and (term.kinds is None or term.kinds == primary.kinds)
    )


def _narrows(term: ResourceFilter) -> bool:
    return bool(
        term.namespaces
        or term.excluded_namespaces
        or term.namespace_selector
        or term.object_selector
        or term.scope != "*"
    )


def _merge_into(target: dict[str, Any], key: str, selector: dict[str, Any] | None) -> None:
    if selector:
        target[key] = _and(target.get(key), selector)


def _controllers(policy: ImportedPolicy, rule: PolicyRule) -> list[str]:
    """The Kyverno autogen controllers that reproduce the rule's pod-controller forms."""
    plural = {
        "DaemonSet": "daemonsets",
        "Deployment": "deployments",
        "Job": "jobs",
        "StatefulSet": "statefulsets",
        "ReplicaSet": "replicasets",
        "CronJob": "cronjobs",
    }
    out: list[str] = []
    for derived in policy.rules:
        if derived.pod_controllers != rule.name:
            continue
        for group in derived.match:
            for term in group:
                for ref in term.kinds or []:
                    name = plural.get(ref.name)
                    if name and name not in out:
                        out.append(name)
    return sorted(out)


def _params(policy: ImportedPolicy, draft: _Draft) -> None:
    """The params a policy was imported with, as paramKind + paramRef + the params object."""
    params = policy.params
    if params is None:
        return
    if not isinstance(params, dict):
        raise NotExportable("its params are not an object")
    meta = params.get("metadata") if isinstance(params.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    if policy.format == "gatekeeper":
        api_version = str(params.get("apiVersion") or _GATEKEEPER_PARAMS_VERSION)
    else:
        api_version = str(params.get("apiVersion") or "")
    draft.param_kind = {"apiVersion": api_version, "kind": str(params.get("kind") or "")}
    draft.param_ref = {"name": str(meta.get("name") or ""), "parameterNotFoundAction": "Deny"}
    if meta.get("namespace"):
        draft.param_ref["namespace"] = str(meta["namespace"])
    draft.params = params
    for document in policy.documents[1:2]:
        meta = document.get("metadata")
        if document.get("kind") == "ValidatingAdmissionPolicyBinding" and isinstance(meta, dict):
            draft.binding_name = str(meta.get("name") or "") or None


# -- rendering --------------------------------------------------------------------------------


def _constraints(draft: _Draft, *, with_selectors: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"resourceRules": draft.resource_rules}
    if draft.exclude_rules:
        out["excludeResourceRules"] = draft.exclude_rules
    if with_selectors and draft.namespace_selector:
        out["namespaceSelector"] = draft.namespace_selector
    if with_selectors and draft.object_selector:
        out["objectSelector"] = draft.object_selector
    return out


def _actions(draft: _Draft, action: Action | None) -> list[str]:
    if action is not None:
        return [action]
    kept = [a for a in draft.actions if a in ("Deny", "Warn", "Audit")]
    if {"Deny", "Warn"} <= set(kept):
        kept.remove("Warn")
    return kept or ["Audit"]


def _render_vap(draft: _Draft, action: Action | None) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {"failurePolicy": "Fail"}
    if draft.param_kind:
        spec["paramKind"] = draft.param_kind
    spec["matchConstraints"] = _constraints(draft, with_selectors=True)
    if draft.match_conditions:
        spec["matchConditions"] = draft.match_conditions
    if draft.variables:
        spec["variables"] = draft.variables
    spec["validations"] = draft.validations
    metadata = {"name": draft.name, "labels": dict(MANAGED_BY), "annotations": draft.annotations}
    binding_spec: dict[str, Any] = {"policyName": draft.name}
    if draft.param_ref:
        binding_spec["paramRef"] = draft.param_ref
    if draft.extra_match:
        binding_spec["matchResources"] = draft.extra_match
    binding_spec["validationActions"] = _actions(draft, action)
    documents = [
        {"apiVersion": VAP_API_VERSION, "kind": "ValidatingAdmissionPolicy",
         "metadata": metadata, "spec": spec},
        {"apiVersion": VAP_API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": (draft.binding_name or f"{draft.name}-binding")[:253],
                      "labels": dict(MANAGED_BY)},
         "spec": binding_spec},
    ]  # fmt: skip
    if draft.params is not None:
        documents.append(draft.params)
    return documents


def _render_kyverno(draft: _Draft, action: Action | None) -> list[dict[str, Any]]:
    if draft.params is not None:
        raise NotExportable(
            "it takes params, and a Kyverno ValidatingPolicy has no params: export it as vap"
        )
    constraints = _constraints(draft, with_selectors=True)
    if draft.extra_match:
        constraints["namespaceSelector"] = _and(
            constraints.get("namespaceSelector"), draft.extra_match.get("namespaceSelector")
        )
        constraints["objectSelector"] = _and(
            constraints.get("objectSelector"), draft.extra_match.get("objectSelector")
        )
        constraints = {k: v for k, v in constraints.items() if v}
    spec: dict[str, Any] = {"validationActions": _actions(draft, action)}
    pods_only = draft.resource_rules == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
         "resources": ["pods"]}
    ]  # fmt: skip
    if pods_only and draft.pod_controllers is not None:
        spec["autogen"] = {"podControllers": {"controllers": draft.pod_controllers}}
    spec["matchConstraints"] = constraints
    if draft.match_conditions:
        spec["matchConditions"] = draft.match_conditions
    if draft.variables:
        spec["variables"] = draft.variables
    spec["validations"] = draft.validations
    metadata = {"name": draft.name, "labels": dict(MANAGED_BY), "annotations": draft.annotations}
    return [{"apiVersion": KYVERNO_API_VERSION, "kind": "ValidatingPolicy",
             "metadata": metadata, "spec": spec}]  # fmt: skip


# -- checks -----------------------------------------------------------------------------------


def _check(draft: _Draft, documents: list[dict[str, Any]], backend: ClusterBackend | None) -> None:
    """NotExportable with every reason the API server would refuse the documents."""
    reasons: list[str] = []
    for document in documents:
        reasons += problems(document)
    reasons += _compile_problems(draft)
    reasons += _type_problems(draft, backend)
    if reasons:
        shown = "; ".join(dict.fromkeys(reasons))
        raise NotExportable(f"the API server would refuse it: {shown}")


def _compile_problems(draft: _Draft) -> list[str]:
    variables = [(v["name"], v["expression"]) for v in draft.variables]
    found: list[str] = []
    checks: list[tuple[str, str, bool]] = [(f"variable {v['name']}", v["expression"], True)
                                           for v in draft.variables]  # fmt: skip
    checks += [(f"match condition {c['name']}", c["expression"], False)
               for c in draft.match_conditions]  # fmt: skip
    for number, validation in enumerate(draft.validations):
        checks.append((f"validation {number}", validation["expression"], True))
        if validation.get("messageExpression"):
            checks.append(
                (f"the message of validation {number}", validation["messageExpression"], True)
            )
    for what, text, may_read_variables in checks:
        roots = {ref.root for ref in references(text)}
        if "params" in roots and draft.param_kind is None:
            found.append(f"{what} reads params, and the policy takes none (no paramKind)")
        if "variables" in roots and not may_read_variables:
            found.append(f"{what} reads variables, which a match condition cannot")
        try:  # the API server declares `request`; its operation compiles as a string
            known = [(name, as_created(source)) for name, source in variables]
            # each variable is checked on its own (above): one read here is a declared
            # name, as the API server compiles it, not its definition bound around the text
            declared = {name: None for name, _ in known} if may_read_variables else {}
            Expression(
                as_created(text),
                known if may_read_variables else (),
                what=what,
                constants=declared,
            )
        except CelError as exc:
            found.append(str(exc))
    return found


def _type_problems(draft: _Draft, backend: ClusterBackend | None) -> list[str]:
    """Field paths read from ``object`` (or a variable that is ``object``) that the kind's
    schema does not have."""
    aliases = {v["name"] for v in draft.variables if v["expression"].strip() == "object"}
    texts = [v["expression"] for v in draft.variables] + [
        c["expression"] for c in draft.match_conditions
    ]
    for validation in draft.validations:
        texts.append(validation["expression"])
        if validation.get("messageExpression"):
            texts.append(validation["messageExpression"])
    paths: set[tuple[str, ...]] = set()
    for text in texts:
        for ref in references(text):
            if ref.root == "object":
                fields = ref.fields[:-1] if ref.called else ref.fields
            elif ref.root == "variables" and ref.fields[:1] and ref.fields[0] in aliases:
                fields = ref.fields[1:-1] if ref.called else ref.fields[1:]
            else:
                continue
            if fields:
                paths.add(tuple(fields))
    # A path one of the kinds has is the policy's to guard (the API server only warns about
    # it for the others, in the policy's status); one that none of them has never works.
    found = []
    kinds = [r for r in draft.resources if r.kind != r.plural]  # plural only: no schema known
    for path in sorted(paths):
        missing = [undefined_path(resource, path, backend) for resource in kinds]
        if kinds and all(m is not None for m in missing):
            names = ", ".join(sorted({r.kind for r in kinds}))
            found.append(f"{names} has no field {missing[0]} (read as object.{'.'.join(path)})")
    return found


# -- public -----------------------------------------------------------------------------------


def export_documents(
    record: ProbeRecord,
    fmt: ExportFormat,
    *,
    predicate: str | None = None,
    action: Action = "Audit",
    backend: ClusterBackend | None = None,
) -> list[dict[str, Any]]:
    """The policy documents for a check's probe; NotExportable when it has no such form or
    the API server would refuse it. ``backend``: a target to resolve custom kinds on (and
    to read their schemas from)."""
    draft = _probe_draft(record, predicate, _Kinds(backend))
    documents = _render(draft, fmt, action)
    _check(draft, documents, backend)
    return documents


def export_policy_documents(
    policy: ImportedPolicy,
    fmt: ExportFormat,
    *,
    action: Action | None = None,
    backend: ClusterBackend | None = None,
) -> list[dict[str, Any]]:
    """The admission policies of an imported policy (one per rule and match group; the
    pod-controller rules Kyverno derives itself are left to it)."""
    out: list[dict[str, Any]] = []
    for draft in _policy_drafts(policy, fmt, _Kinds(backend)):
        documents = _render(draft, fmt, action)
        _check(draft, documents, backend)
        out += documents
    return out


def _render(draft: _Draft, fmt: ExportFormat, action: Action | None) -> list[dict[str, Any]]:
    return _render_vap(draft, action) if fmt == "vap" else _render_kyverno(draft, action)


def to_yaml(documents: list[dict[str, Any]]) -> str:
    import yaml

    return "---\n".join(yaml.safe_dump(doc, sort_keys=False) for doc in documents)


def export_yaml(
    record: ProbeRecord,
    fmt: ExportFormat,
    *,
    predicate: str | None = None,
    action: Action = "Audit",
    backend: ClusterBackend | None = None,
) -> str:
    return to_yaml(
        export_documents(record, fmt, predicate=predicate, action=action, backend=backend)
    )


def export_policy_yaml(
    policy: ImportedPolicy,
    fmt: ExportFormat,
    *,
    action: Action | None = None,
    backend: ClusterBackend | None = None,
) -> str:
    return to_yaml(export_policy_documents(policy, fmt, action=action, backend=backend))
