"""An imported policy as admission policies, field by field from the documents it was
imported from (``ImportedPolicy.documents``): what its own engine admits, it admits.

* **ValidatingAdmissionPolicy**: its spec and its binding's, as written (operations,
  subresources, ``resourceNames``, selectors, ``excludeResourceRules``, ``matchPolicy``,
  ``failurePolicy``, match conditions, variables, validations, ``auditAnnotations``,
  ``paramKind``, the binding's ``paramRef``, ``matchResources`` and actions), with its
  params object.
* **Kyverno ValidatingPolicy**: as a VAP, its spec (the two share it) and a binding with its
  ``validationActions`` (Kyverno's default ``Deny`` when it names none); a
  NamespacedValidatingPolicy judges its namespace's objects only (a namespace selector on
  its name, rules of scope ``Namespaced``); the pod-controller policies Kyverno derives are
  written out. As a ValidatingPolicy it is written as it is.
* **Kyverno ClusterPolicy**: one policy per ``validate.cel`` rule (and per ``match.any``
  entry), as Kyverno's own VAP generator reads a rule: each resource description's kinds
  with its ``operations`` (Kyverno's default for a validate rule: every operation), its
  subresources (``Pod/exec``; a Pod also ``pods/ephemeralcontainers``, which Kyverno's
  webhook matches for every Pod rule), names as ``resourceNames``, namespaces and selectors;
  ``celPreconditions`` and the webhook's ``matchConditions`` as match conditions;
  ``failurePolicy``; ``failureAction`` (``Enforce``: Deny, ``Audit``: Audit, and Warn with
  ``emitWarning``); a rule's ``paramKind`` and ``paramRef`` on the policy and its binding.
* **Gatekeeper**: the template's CEL with the constraint's match, bound to the constraint
  as params (as Gatekeeper's own generated VAPs are), for ``CREATE`` and ``UPDATE`` (the
  operations Gatekeeper's webhook admits by default), its ``enforcementAction`` as actions
  and the source's ``failurePolicy`` (Gatekeeper's default ``Fail``).

Whatever has no counterpart in the target format is refused (:class:`NotExportable`) with
one sentence naming the field and why; nothing is dropped or widened silently.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from schemas.policy import ImportedPolicy, KindRef, PolicyRule, ResourceFilter
from workers.engine.toolsets.backend import ResourceInfo
from workers.policy_engine.admission_schema import (
    AuditAnnotation,
    BindingSpec,
    Evaluation,
    KyvernoSpec,
    MatchCondition,
    ParamKind,
    ParamRef,
    PolicySpec,
    wire_names,
    written,
)
from workers.policy_engine.cel.lib import overloads
from workers.policy_engine.cel.programs import EXCEPTIONS_VARIABLE
from workers.policy_engine.cel.syntax.nodes import Call, Ident, Node, walk
from workers.policy_engine.cel.syntax.parser import CelSyntaxError, parse
from workers.policy_engine.cel.syntax.reads import references
from workers.policy_engine.policies.common import as_map, parsed, parsed_list
from workers.policy_engine.policies.documents import name_of, namespace_of
from workers.policy_engine.probes.export_draft import (
    CREATE_UPDATE,
    Draft,
    Kinds,
    NotExportable,
    both,
    is_pattern,
    namespace_names_selector,
    namespace_selector,
    pattern_condition,
    rules_for,
    selector,
    validation,
)

ExportFormat = str  # "vap" or "kyverno" (export.py's ExportFormat)
# the fields a VAP spec has (the model's PolicySpec): a ValidatingPolicy's, of these, are its VAP's
VAP_SPEC_FIELDS = wire_names(PolicySpec)
# Kyverno's default operations for a validate rule's webhook (a resource description that
# names none): every operation.
KYVERNO_OPERATIONS = ["CREATE", "UPDATE", "DELETE", "CONNECT"]
_KYVERNO_ACTIONS = {"enforce": ["Deny"], "audit": ["Audit"]}
_GATEKEEPER_ACTIONS = {"deny": "Deny", "dryrun": "Audit", "warn": "Warn"}
_POD_CONTROLLER_RESOURCES = {
    "DaemonSet": "daemonsets",
    "Deployment": "deployments",
    "Job": "jobs",
    "StatefulSet": "statefulsets",
    "ReplicaSet": "replicasets",
    "CronJob": "cronjobs",
}


def policy_drafts(policy: ImportedPolicy, fmt: ExportFormat, kinds: Kinds) -> list[Draft]:
    """The admission policies ``policy`` becomes in ``fmt`` (module docstring)."""
    if not policy.documents:
        raise NotExportable("it was stored without the documents it came from: import it again")
    _refuse_kyverno_extras(policy, fmt)
    if policy.format == "vap":
        return [_vap_draft(policy, kinds)]
    if policy.format == "kyverno-validatingpolicy":
        return _validating_policy_drafts(policy, fmt, kinds)
    if policy.format == "kyverno-clusterpolicy":
        return _cluster_policy_drafts(policy, fmt, kinds)
    return _gatekeeper_drafts(policy, kinds)


_KYVERNO_READS = frozenset({"resource", "globalContext"})
# Kyverno's libraries of pure functions (cel/lib/kyverno_hash.py, kyverno_json.py,
# kyverno_image.py, kyverno_yaml.py, kyverno_math.py, kyverno_time.py, kyverno_gzip.py,
# kyverno_transform.py, kyverno_x509.py), by the names a policy calls them: a
# ValidatingAdmissionPolicy has none.
_PURE_LIBRARIES = ["kyverno_hash", "kyverno_json", "kyverno_image", "kyverno_yaml", "kyverno_math",
                   "kyverno_time", "kyverno_gzip", "kyverno_transform", "kyverno_x509"]  # fmt: skip
_KYVERNO_FUNCTIONS = frozenset(o.function for o in overloads(_PURE_LIBRARIES) if not o.member)


def _kyverno_functions(root: Node) -> set[str]:
    """The Kyverno library functions an expression calls (``image``, ``hash.md5``)."""
    found = set()
    for node in walk(root):
        if not isinstance(node, Call):
            continue
        if node.target is None and node.function in _KYVERNO_FUNCTIONS:
            found.add(node.function)
        elif isinstance(node.target, Ident):
            named = f"{node.target.name}.{node.function}"
            if named in _KYVERNO_FUNCTIONS:
                found.add(named)
    return found


def _refuse_kyverno_extras(policy: ImportedPolicy, fmt: ExportFormat) -> None:
    """What a Kyverno policy was imported with that an export would lose: its
    PolicyExceptions and GlobalContextEntries (documents of their own, not written), and,
    for a ValidatingAdmissionPolicy, its reads of other objects (``resource.*``,
    ``globalContext``), of ``exceptions``, and its calls of Kyverno's libraries of pure
    functions (hash, json, image, yaml, math, time, gzip, transform, x509), which only
    Kyverno has."""
    plural = {"GlobalContextEntry": "GlobalContextEntries", "PolicyException": "PolicyExceptions"}
    extras = sorted({plural[k] for d in policy.documents[1:] if (k := d.get("kind")) in plural})
    if extras:
        raise NotExportable(
            f"it was imported with Kyverno {' and '.join(extras)}, which an export does not "
            "carry: without them the exported policy would judge otherwise"
        )
    if fmt != "vap" or policy.format != "kyverno-validatingpolicy":
        return
    for rule in policy.rules:
        if any(v.name == EXCEPTIONS_VARIABLE for v in rule.variables):
            raise NotExportable(
                f"rule {rule.name} reads Kyverno's exceptions (what its PolicyExceptions "
                "grant), which a ValidatingAdmissionPolicy has not"
            )
        for text in rule.expressions():
            try:
                tree = parse(text)
            except CelSyntaxError:
                continue
            calls = sorted(_kyverno_functions(tree.root))
            if calls:
                raise NotExportable(
                    f"rule {rule.name} calls {', '.join(calls)} of Kyverno's own CEL "
                    "libraries, which a ValidatingAdmissionPolicy has not"
                )
            found = {r.root for r in references(tree.root)} & _KYVERNO_READS
            if found:
                raise NotExportable(
                    f"rule {rule.name} reads other objects through Kyverno's "
                    f"{' and '.join(sorted(found))} library, which a ValidatingAdmissionPolicy "
                    "has not"
                )


def _annotations(policy: ImportedPolicy) -> dict[str, str]:
    return {"assay.dev/policy": policy.predicate, "assay.dev/format": policy.format}


def _map(value: Any, what: str) -> dict[str, Any]:
    """A mapping of a part the admission model does not cover (a ClusterPolicy's rules, a
    Gatekeeper template), as the importers read it, refused as an export is."""
    return as_map(value, what, NotExportable)


def _as_written(shape: type[BaseModel], value: Any, what: str) -> dict[str, Any]:
    """An admission-API part of a stored document, read through the admission model as its
    engine reads it and given back as written ({} for none). A policy stored by an earlier
    import may hold what the model refuses (a field it does not know): its export is then
    refused with the model's reason, never written without the field."""
    part = parsed(shape, value, what, NotExportable)
    return written(part) if part is not None else {}


def _resources(kinds: Kinds, constraints: dict[str, Any]) -> list[ResourceInfo]:
    out: list[ResourceInfo] = []
    for rule in constraints.get("resourceRules") or []:
        out += [r for r in kinds.of_rule(rule) if r not in out]
    return out


# -- ValidatingAdmissionPolicy ----------------------------------------------------------------


def _vap_draft(policy: ImportedPolicy, kinds: Kinds) -> Draft:
    document = policy.documents[0]
    spec = {"failurePolicy": "Fail", **_as_written(PolicySpec, document.get("spec"), "spec")}
    found = next(
        (d for d in policy.documents[1:] if d.get("kind") == "ValidatingAdmissionPolicyBinding"),
        None,
    )
    binding: dict[str, Any] = {}
    if found is not None:
        binding = _as_written(BindingSpec, found.get("spec"), "the binding's spec")
        binding.pop("policyName", None)
    params = policy.params if isinstance(policy.params, dict) and spec.get("paramKind") else None
    return Draft(
        name=name_of(document),
        annotations=_annotations(policy),
        resources=_resources(kinds, spec.get("matchConstraints") or {}),
        spec=spec,
        binding=binding,
        binding_name=name_of(found) if found is not None else None,
        params=params,
        pod_controllers=[],  # a VAP judges what it names: no pod-controller forms
    )


# -- Kyverno ValidatingPolicy -----------------------------------------------------------------


def _validating_policy_drafts(
    policy: ImportedPolicy, fmt: ExportFormat, kinds: Kinds
) -> list[Draft]:
    document = policy.documents[0]
    source = parsed(KyvernoSpec, document.get("spec"), "spec", NotExportable) or KyvernoSpec()
    shared = written(source)
    spec = {"failurePolicy": "Fail", **{k: v for k, v in shared.items() if k in VAP_SPEC_FIELDS}}
    constraints = spec.get("matchConstraints") or {}
    if document.get("kind") == "NamespacedValidatingPolicy":
        _own_namespace(constraints, namespace_of(document) or "")
    evaluation = source.evaluation or Evaluation()
    not_vap = None
    if evaluation.admission is not None and evaluation.admission.enabled is False:
        not_vap = (
            "its spec.evaluation.admission.enabled is false, so it never runs at admission, "
            "and a ValidatingAdmissionPolicy always does"
        )
    if evaluation.mode not in (None, "", "Kubernetes"):
        raise NotExportable(
            f"its spec.evaluation.mode is {evaluation.mode}: it judges payloads, not "
            "Kubernetes objects, so no admission policy says the same"
        )
    if fmt == "vap" and not_vap:
        raise NotExportable(not_vap)
    warnings = []
    if fmt == "vap" and shared.get("webhookConfiguration"):
        warnings.append(
            "its spec.webhookConfiguration (Kyverno's webhook timeout) has no counterpart: a "
            "ValidatingAdmissionPolicy runs inside the API server, without a webhook"
        )
    actions = list(source.validation_actions) or ["Deny"]
    kept: dict[str, Any] | None = copy.deepcopy(document)
    not_kyverno = None
    if document.get("kind") == "NamespacedValidatingPolicy":
        kept, not_kyverno = (
            None,
            (
                "it is a NamespacedValidatingPolicy, and this export writes Kyverno's cluster-wide "
                "ValidatingPolicy only"
            ),
        )
    base = Draft(
        name=name_of(document),
        annotations=_annotations(policy),
        resources=_resources(kinds, constraints),
        spec=spec,
        binding={"validationActions": actions},
        kyverno_document=kept,
        not_kyverno=not_kyverno,
        warnings=warnings,
    )
    drafts = [base]
    if fmt == "vap":
        drafts += [
            _controller_draft(base, rule, kinds) for rule in policy.rules if rule.pod_controllers
        ]
    return drafts


def _own_namespace(constraints: dict[str, Any], namespace: str) -> None:
    """A namespaced policy's objects: those of its own namespace (never a cluster-scoped
    object, which a namespace selector alone would let through)."""
    if not namespace:
        raise NotExportable("it is a NamespacedValidatingPolicy and names no namespace")
    constraints["namespaceSelector"] = both(
        constraints.get("namespaceSelector") or None, namespace_names_selector([namespace], "In")
    )
    for rule in constraints.get("resourceRules") or []:
        if rule.get("scope") == "Cluster":
            raise NotExportable(
                "a NamespacedValidatingPolicy's resource rule has scope Cluster, which its "
                "namespace never holds"
            )
        rule["scope"] = "Namespaced"


def _controller_draft(base: Draft, rule: PolicyRule, kinds: Kinds) -> Draft:
    """A pod-controller form Kyverno derives from a ValidatingPolicy on Pods, as its own
    VAP: the controllers' resources for the Pod rule's operations, the rewritten CEL."""
    if base.spec.get("auditAnnotations"):
        raise NotExportable(
            "its spec.auditAnnotations would need Kyverno's pod-controller rewrite too, which "
            "this export does not do: export it as kyverno"
        )
    constraints = copy.deepcopy(base.spec.get("matchConstraints") or {})
    pods_rule = (constraints.get("resourceRules") or [{}])[0]
    resources = [
        kinds.of(ref) for group in rule.match for term in group for ref in term.kinds or []
    ]
    constraints["resourceRules"] = rules_for(
        resources, None, str(pods_rule.get("scope") or "*"),
        list(pods_rule.get("operations") or CREATE_UPDATE),
    )  # fmt: skip
    spec = copy.deepcopy(base.spec)
    spec["matchConstraints"] = constraints
    _set_expressions(spec, rule)
    return Draft(
        name=f"{base.name}-{rule.name.rsplit('-', 1)[-1]}"[:253],
        annotations=base.annotations,
        resources=resources,
        spec=spec,
        binding=copy.deepcopy(base.binding),
        not_kyverno="Kyverno derives this pod-controller policy itself",
    )


def _set_expressions(
    spec: dict[str, Any], rule: PolicyRule, leading_conditions: Sequence[dict[str, str]] = ()
) -> None:
    """The rule's (rewritten) conditions, variables and validations, in the spec."""
    for key, value in (
        ("matchConditions", [*leading_conditions, *({"name": c.name, "expression": c.expression}
                                                    for c in rule.match_conditions)]),
        ("variables", [{"name": v.name, "expression": v.expression} for v in rule.variables]),
        ("validations", [validation(v.expression, v.message, v.message_expression, v.reason)
                         for v in rule.validations]),
    ):  # fmt: skip
        if value:
            spec[key] = value
        else:
            spec.pop(key, None)


# -- Kyverno ClusterPolicy --------------------------------------------------------------------


def _cluster_policy_drafts(policy: ImportedPolicy, fmt: ExportFormat, kinds: Kinds) -> list[Draft]:
    document = policy.documents[0]
    spec = _map(document.get("spec"), "spec")
    raw_rules = {
        str(_map(r, "a rule").get("name")): r
        for r in spec.get("rules") or []
        if isinstance(r, dict)
    }
    if spec.get("validationFailureActionOverrides"):
        raise NotExportable(
            "its spec.validationFailureActionOverrides sets actions per namespace, and an "
            "admission policy's binding has one set of actions"
        )
    if spec.get("applyRules") == "One" and len(raw_rules) > 1:
        raise NotExportable(
            "its spec.applyRules is One (only the first matching rule applies), and separate "
            "admission policies all apply"
        )
    if spec.get("admission") is False and fmt == "vap":
        raise NotExportable(
            "its spec.admission is false, so it never runs at admission, and a "
            "ValidatingAdmissionPolicy always does"
        )
    webhook = _map(spec.get("webhookConfiguration"), "spec.webhookConfiguration")
    unknown = sorted(set(webhook) - {"matchConditions", "timeoutSeconds", "failurePolicy"})
    if unknown:
        raise NotExportable(
            f"its spec.webhookConfiguration has {', '.join(unknown)}, which this export does "
            "not know how to keep"
        )
    failure = webhook.get("failurePolicy") or spec.get("failurePolicy") or "Fail"
    extra_conditions = [
        written(c)
        for c in parsed_list(
            MatchCondition, webhook.get("matchConditions"),
            "spec.webhookConfiguration.matchConditions", NotExportable,
        )
    ]  # fmt: skip
    warnings = []
    if webhook.get("timeoutSeconds") or spec.get("webhookTimeoutSeconds"):
        warnings.append(
            "its webhook timeout has no counterpart: an admission policy runs inside the API "
            "server, without a webhook"
        )
    rules = [r for r in policy.rules if not (fmt == "kyverno" and r.pod_controllers)]
    plans = [(rule, number, group) for rule in rules for number, group in enumerate(rule.match)]
    drafts = []
    for index, (rule, number, group) in enumerate(plans):
        raw = _map(raw_rules.get(rule.pod_controllers or rule.name), f"rule {rule.name}")
        if not raw:
            raise NotExportable(f"rule {rule.name} is not in the document it came from")
        validate = _map(raw.get("validate"), f"rule {rule.name} validate")
        if validate.get("failureActionOverrides"):
            raise NotExportable(
                f"rule {rule.name} sets validate.failureActionOverrides per namespace, and an "
                "admission policy's binding has one set of actions"
            )
        action = str(validate.get("failureAction") or spec.get("validationFailureAction")
                     or "Audit").lower()  # fmt: skip
        if action not in _KYVERNO_ACTIONS:
            raise NotExportable(
                f"rule {rule.name}'s failure action {action!r} is not Enforce or Audit"
            )
        actions = list(_KYVERNO_ACTIONS[action])
        if action == "audit" and spec.get("emitWarning"):
            actions.append("Warn")
        descriptions = _kyverno_groups(raw.get("match"), f"rule {rule.name} match")
        exclusions = _kyverno_groups(raw.get("exclude"), f"rule {rule.name} exclude")
        cel = _map(validate.get("cel"), f"rule {rule.name} validate.cel")
        name = policy.policy_name if len(plans) == 1 else f"{policy.policy_name}-{index + 1}"
        group_descriptions = descriptions[number]
        draft = _rule_draft(
            policy, rule, group, name, kinds,
            operations=_shared_operations(group_descriptions, rule.name),
            subresources=None if rule.pod_controllers else _subresources(group_descriptions, kinds),
            exclude_operations=[_shared_operations(d, rule.name) for d in exclusions],
        )  # fmt: skip
        draft.spec["failurePolicy"] = failure
        draft.spec["matchConditions"] = draft.spec.get("matchConditions", []) + extra_conditions
        if not draft.spec["matchConditions"]:
            del draft.spec["matchConditions"]
        annotations = parsed_list(
            AuditAnnotation, cel.get("auditAnnotations"),
            f"rule {rule.name} validate.cel.auditAnnotations", NotExportable,
        )  # fmt: skip
        if annotations:
            draft.spec["auditAnnotations"] = [written(a) for a in annotations]
        draft.binding = {"validationActions": actions}
        if rule.param_source is not None:
            _rule_params(cel, rule, draft)
        draft.pod_controllers = _controllers(policy, rule)
        draft.warnings = list(warnings)
        evaluation = {
            key: {"enabled": False} for key in ("admission", "background") if spec.get(key) is False
        }
        draft.kyverno_evaluation = evaluation or None
        if document.get("kind") == "Policy":
            _namespaced_only(draft.spec["matchConstraints"], rule.name)
        drafts.append(draft)
    return drafts


def _rule_params(cel: dict[str, Any], policy_rule: PolicyRule, draft: Draft) -> None:
    """A rule's ``paramKind`` on the policy and ``paramRef`` on its binding, as Kyverno's own
    generator writes them, where the API server reads them as Kyverno does: a named object
    with ``Deny`` (a missing one: Kyverno's rule error, the API server's denial), a selector
    (none selected: both admit, so ``Allow`` when unset) unless a precondition reads params
    (with several selected, Kyverno skips an object when the first listed fails a
    precondition; the API server judges it under each)."""
    rule = policy_rule.name
    ref = _as_written(ParamRef, cel.get("paramRef"), f"rule {rule} validate.cel.paramRef")
    action = ref.get("parameterNotFoundAction")
    if ref.get("name"):
        if action != "Deny":
            raise NotExportable(
                f"rule {rule}'s paramRef names its params object with parameterNotFoundAction "
                f"{action or 'unset'}: Kyverno reports a missing one as an error, and the API "
                "server would admit every object"
            )
        ref.pop("selector", None)  # beside a name, Kyverno ignores it
    elif ref.get("selector") is None:
        raise NotExportable(
            f"rule {rule}'s paramRef has neither name nor selector, and a binding's paramRef "
            "needs exactly one"
        )
    else:
        ref["parameterNotFoundAction"] = action or "Allow"
        if any(_reads_params(c.expression) for c in policy_rule.match_conditions):
            raise NotExportable(
                f"rule {rule}'s preconditions read params its paramRef selects: with several "
                "selected, Kyverno skips an object the first listed exempts, and the API "
                "server judges it under every one"
            )
    kind = _as_written(ParamKind, cel.get("paramKind"), f"rule {rule} validate.cel.paramKind")
    draft.spec = {"failurePolicy": draft.spec.pop("failurePolicy"), "paramKind": kind,
                  **draft.spec}  # fmt: skip
    draft.binding["paramRef"] = ref


def _reads_params(expression: str) -> bool:
    try:
        return any(ref.root == "params" for ref in references(parse(expression).root))
    except CelSyntaxError:
        return True  # unread: assume it does


def _namespaced_only(constraints: dict[str, Any], rule: str) -> None:
    """A namespaced Policy judges its namespace's objects, never a cluster-scoped one (which
    a namespace selector alone would let through)."""
    for resource_rule in constraints.get("resourceRules") or []:
        if resource_rule.get("scope") == "Cluster":
            raise NotExportable(
                f"rule {rule} of a namespaced Policy matches cluster-scoped objects"
            )
        resource_rule["scope"] = "Namespaced"


def _kyverno_groups(value: Any, what: str) -> list[list[dict[str, Any]]]:
    """A match or exclude block's resource descriptions, one list per group, in the order
    the importer makes its groups (``resources``, each ``any`` entry, ``all`` as one)."""
    block = _map(value, what)
    groups: list[list[dict[str, Any]]] = []
    if block.get("resources"):
        groups.append([_map(block["resources"], f"{what}.resources")])
    for entry in block.get("any") or []:
        groups.append([_map(_map(entry, f"{what}.any[]").get("resources"), f"{what}.any[]")])
    entries = block.get("all") or []
    if entries:
        groups.append([_map(_map(e, f"{what}.all[]").get("resources"), f"{what}.all[]")
                       for e in entries])  # fmt: skip
    return groups


def _shared_operations(descriptions: list[dict[str, Any]], rule: str) -> list[str]:
    """The operations every description of a group admits (Kyverno's default: all)."""
    shared = list(KYVERNO_OPERATIONS)
    for description in descriptions:
        named = [str(op) for op in description.get("operations") or []]
        if named:
            shared = [op for op in shared if op in named]
    if not shared:
        raise NotExportable(
            f"rule {rule} matches descriptions that share no operation, so it matches no request"
        )
    return shared


def _subresources(descriptions: list[dict[str, Any]], kinds: Kinds) -> dict[str, list[str]]:
    """The subresources a group's kinds name (``Pod/exec``), and ``pods/ephemeralcontainers``
    for a Pod, per parent resource's plural."""
    out: dict[str, list[str]] = {}
    for description in descriptions:
        for text in description.get("kinds") or []:
            parts = str(text).split("/")
            kind, sub = None, None
            if len(parts) == 2 and not parts[1][:1].isupper():
                kind, sub = KindRef(name=parts[0]), parts[1]
            elif len(parts) == 3 and parts[1][:1].isupper():
                kind, sub = KindRef(group="", version=parts[0], name=parts[1]), parts[2]
            elif len(parts) == 4:
                kind, sub = KindRef(group=parts[0], version=parts[1], name=parts[2]), parts[3]
            elif parts[-1] == "Pod":
                kind, sub = KindRef(name="Pod"), "ephemeralcontainers"
            if kind is None or sub is None or "*" in sub:
                continue
            plural = kinds.of(kind).plural
            subs = out.setdefault(plural, [])
            if sub not in subs:
                subs.append(sub)
    return out


def _controllers(policy: ImportedPolicy, rule: PolicyRule) -> list[str]:
    """The Kyverno autogen controllers that reproduce the rule's pod-controller forms."""
    out: list[str] = []
    for derived in policy.rules:
        if derived.pod_controllers != rule.name:
            continue
        for group in derived.match:
            for term in group:
                for ref in term.kinds or []:
                    name = _POD_CONTROLLER_RESOURCES.get(ref.name)
                    if name and name not in out:
                        out.append(name)
    return sorted(out)


# -- a rule's match as resource rules and selectors ------------------------------------------


def _rule_draft(
    policy: ImportedPolicy,
    rule: PolicyRule,
    group: list[ResourceFilter],
    name: str,
    kinds: Kinds,
    *,
    operations: list[str],
    subresources: dict[str, list[str]] | None,
    exclude_operations: list[list[str]],
) -> Draft:
    """One match group of a rule (all of its terms must hold) as one policy."""
    primary = next((t for t in group if t.kinds), None)
    if primary is None or primary.kinds is None:
        raise NotExportable(f"rule {rule.name} names no kinds")
    resources = [kinds.of(ref) for ref in primary.kinds]
    namespaced = all(r.namespaced for r in resources)
    conditions = [
        {"name": f"assay-match-{number}", "expression": text}
        for number, text in enumerate(
            filter(None, (pattern_condition(t, namespaced) for t in group)), start=1
        )
    ]
    names = None if primary.names and any(is_pattern(n) for n in primary.names) else primary.names
    ns_selector = namespace_selector(primary)
    obj_selector = selector(primary.object_selector)
    for term in group:
        if term is primary:
            continue
        if term.kinds is not None and term.kinds != primary.kinds:
            extra_resources = {kinds.of(ref).plural for ref in term.kinds}
            if not {r.plural for r in resources} <= extra_resources:
                raise NotExportable(f"rule {rule.name} narrows its kinds in two places")
        if term.names and not any(is_pattern(n) for n in term.names):
            raise NotExportable(f"rule {rule.name} names objects in a second match term")
        ns_selector = both(ns_selector, namespace_selector(term))
        obj_selector = both(obj_selector, selector(term.object_selector))
    exclude_rules: list[dict[str, Any]] = []
    for number, excluded in enumerate(rule.exclude):
        only = excluded[0] if len(excluded) == 1 else None
        ops = exclude_operations[number] if number < len(exclude_operations) else operations
        if only is not None and _namespaces_only(only, primary):
            if not set(operations) <= set(ops):
                raise NotExportable(
                    f"rule {rule.name} excludes namespaces for some operations only, which a "
                    "namespace selector cannot say"
                )
            assert only.namespaces is not None
            ns_selector = both(
                ns_selector, namespace_selector(ResourceFilter(excluded_namespaces=only.namespaces))
            )
            continue
        if only is None or not only.kinds or _narrows(only):
            raise NotExportable(
                f"rule {rule.name} excludes objects by more than kind, name or namespace, "
                "which a policy's excludeResourceRules cannot express"
            )
        exclude_rules += rules_for([kinds.of(ref) for ref in only.kinds], only.names, "*", ops)
    constraints: dict[str, Any] = {
        "resourceRules": rules_for(resources, names, primary.scope, operations, subresources)
    }
    if exclude_rules:
        constraints["excludeResourceRules"] = exclude_rules
    if ns_selector:
        constraints["namespaceSelector"] = ns_selector
    if obj_selector:
        constraints["objectSelector"] = obj_selector
    spec: dict[str, Any] = {"failurePolicy": "Fail", "matchConstraints": constraints}
    _set_expressions(spec, rule, leading_conditions=conditions)
    return Draft(name=name[:253], annotations=_annotations(policy), resources=resources, spec=spec)


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


# -- Gatekeeper -------------------------------------------------------------------------------


def _gatekeeper_drafts(policy: ImportedPolicy, kinds: Kinds) -> list[Draft]:
    template, constraint = policy.documents[0], policy.documents[-1]
    source = _template_source(template)
    cspec = _map(constraint.get("spec"), "the constraint's spec")
    action = str(cspec.get("enforcementAction") or "deny").lower()
    if action not in _GATEKEEPER_ACTIONS:
        raise NotExportable(
            f"its constraint's spec.enforcementAction is {action!r}, which no "
            "validationActions say (deny, dryrun and warn do)"
        )
    drafts = []
    for rule in policy.rules:
        for group in rule.match:
            draft = _rule_draft(
                policy, rule, group, policy.name, kinds,
                operations=list(CREATE_UPDATE), subresources=None, exclude_operations=[],
            )  # fmt: skip
            draft.spec["failurePolicy"] = str(source.get("failurePolicy") or "Fail")
            _params(policy, draft)
            draft.binding["validationActions"] = [_GATEKEEPER_ACTIONS[action]]
            draft.not_kyverno = (
                "it takes params (the constraint), and a Kyverno ValidatingPolicy has no "
                "params: export it as vap"
            )
            drafts.append(draft)
    return drafts


def _template_source(template: dict[str, Any]) -> dict[str, Any]:
    targets = _map(template.get("spec"), "spec").get("targets") or []
    for code in (_map(targets[0], "target").get("code") or []) if targets else []:
        if isinstance(code, dict) and code.get("engine") == "K8sNativeValidation":
            return _map(code.get("source"), "code.source")
    return {}


def _params(policy: ImportedPolicy, draft: Draft) -> None:
    """The constraint a Gatekeeper policy is bound with, as paramKind + paramRef + the
    constraint itself (Gatekeeper's own generated VAPs bind it so)."""
    params = policy.params
    if not isinstance(params, dict):
        raise NotExportable("its params are not an object")
    meta = _map(params.get("metadata"), "the params' metadata")
    api_version = str(params.get("apiVersion") or "constraints.gatekeeper.sh/v1beta1")
    draft.spec = {"failurePolicy": draft.spec.pop("failurePolicy"),
                  "paramKind": {"apiVersion": api_version, "kind": str(params.get("kind") or "")},
                  **draft.spec}  # fmt: skip
    # as Gatekeeper binds it: a constraint that is gone enforces nothing
    ref: dict[str, Any] = {"name": str(meta.get("name") or ""), "parameterNotFoundAction": "Allow"}
    if meta.get("namespace"):
        ref["namespace"] = str(meta["namespace"])
    draft.binding["paramRef"] = ref
    draft.params = params
