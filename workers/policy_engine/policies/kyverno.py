"""Kyverno policies as imported policies: ValidatingPolicy (``policies.kyverno.io``) and
ClusterPolicy / Policy (``kyverno.io``) rules that validate with CEL (``validate.cel``).

A ValidatingPolicy is a ValidatingAdmissionPolicy with Kyverno's additions; a ClusterPolicy
holds rules, each with its own match and exclude blocks (``any`` / ``all`` of resource
descriptions), CEL preconditions and CEL expressions. Both get Kyverno's pod-controller
rules (autogen.py) when Kyverno would derive them, and the PolicyExceptions of the files
that exempt objects from them (kyverno_exceptions.py). A ValidatingPolicy may read other
objects of its target (``resource.Get`` / ``resource.List`` / ``resource.ToGVR``) and
GlobalContextEntries that list them (``globalContext.Get``), imported with it or, when the
files do not define one, the target's own (cluster_reads.py serves them). A
ClusterPolicy rule's ``validate.cel.paramKind`` / ``paramRef`` is read from the target on
every run, as Kyverno reads it (params.py). What a
check of stored objects cannot honour is refused: JMESPath preconditions, context entries
(data from the cluster or a service), a global context entry of the files that calls a
service (it lives outside the cluster) or projects with a JMESPath function of Kyverno's own
(kyverno_jmespath.py), matching on who makes the request (subjects, roles), non-CEL
validation. A rule's ``allowExistingViolations`` is kept as Kyverno means it: it lets an
update through for an object that already violated, and a stored object is judged as if
created, where it changes nothing (Kyverno's background scan reports such an object too).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from schemas.policy import (
    ImportedPolicy,
    KindRef,
    LabelSelector,
    ParamSource,
    PolicyRule,
    ResourceFilter,
)
from schemas.probe import MAX_VARIABLES
from workers.policy_engine.admission_schema import (
    KyvernoSpec,
    MatchCondition,
    MatchResources,
    ParamKind,
    ParamRef,
    Validation,
    Variable,
)
from workers.policy_engine.cel.programs import KYVERNO_EXCEPTIONS
from workers.policy_engine.policies import autogen, kyverno_exceptions, kyverno_jmespath
from workers.policy_engine.policies.cluster_reads import API_CALL
from workers.policy_engine.policies.common import (
    ADMITTING_OPERATIONS,
    Unsupported,
    as_list,
    as_map,
    conditions_of,
    judges_creations,
    label_selector,
    parsed,
    parsed_list,
    refusal_in,
    validations_of,
    vap_exclusions,
    vap_match_filter,
    variables_of,
)
from workers.policy_engine.policies.documents import SourcedDocument, name_of
from workers.policy_engine.policies.expressions import literal_arguments, references
from workers.policy_engine.policies.kyverno_exceptions import Applied

VALIDATING_POLICY_KINDS = frozenset({"ValidatingPolicy", "NamespacedValidatingPolicy"})
CLUSTER_POLICY_KINDS = frozenset({"ClusterPolicy", "Policy"})
AUTOGEN_ANNOTATION = "pod-policies.kyverno.io/autogen-controllers"
ALL_CONTROLLERS = [
    "DaemonSet", "Deployment", "Job", "StatefulSet", "ReplicaSet", "ReplicationController",
    "CronJob",
]  # fmt: skip
_ACTIONS = {"enforce": "Deny", "audit": "Audit", "deny": "Deny", "warn": "Warn"}
_GLOBAL_CONTEXT_CALLS = frozenset({"Get", "get"})


def import_validating_policy(
    doc: SourcedDocument,
    now: datetime,
    exceptions: list[SourcedDocument] | None = None,
    entries: list[SourcedDocument] | None = None,
) -> tuple[ImportedPolicy, Applied]:
    """A ValidatingPolicy (or NamespacedValidatingPolicy), with its pod-controller rules, the
    PolicyExceptions of the files that name it, and the GlobalContextEntries it reads."""
    spec = parsed(KyvernoSpec, doc.document.get("spec"), "spec") or KyvernoSpec()
    mode = spec.evaluation.mode if spec.evaluation else None
    if mode not in (None, "Kubernetes"):
        raise Unsupported(f"it evaluates {mode} payloads, not Kubernetes objects")
    constraints = spec.match_constraints
    if constraints is None or not constraints.resource_rules:
        raise Unsupported("its matchConstraints name no resourceRules, so no kind is judged")
    term = vap_match_filter(constraints, "spec.matchConstraints")
    assert term is not None
    terms = [term, *_own_namespace(doc)]
    name = name_of(doc.document)
    rule = PolicyRule(
        name=name,
        match=[terms],
        exclude=vap_exclusions(constraints, "spec.matchConstraints"),
        match_conditions=conditions_of(spec.match_conditions, "spec.matchConditions"),
        variables=variables_of(spec.variables, "spec.variables"),
        validations=validations_of(spec.validations, "spec.validations"),
    )
    _refuse_expressions([rule], creates=judges_creations(constraints), kyverno_libraries=True)
    exempt, applied = kyverno_exceptions.validating_policy_conditions(doc, exceptions or [], now)
    for condition in exempt:  # an exception's conditions read what the policy may read
        refusal = refusal_in([condition.expression], params_given=False, kyverno_libraries=True)
        if refusal:
            raise Unsupported(f"its PolicyException {condition.exception}: {refusal}")
    read = _global_context_entries(
        [rule.model_copy(update={"match_conditions": [*exempt, *rule.match_conditions]})],
        entries or [],
    )
    rules = [rule, *_validating_policy_controllers(rule, constraints, spec)]
    if exempt:  # tried before the policy's own conditions, on every rule as written
        rules = [
            r.model_copy(update={"match_conditions": [*exempt, *r.match_conditions]}) for r in rules
        ]
    if applied.grants or _reads_exceptions(rule):  # Kyverno's exceptions, read as one variable
        if len(rule.variables) >= MAX_VARIABLES:
            raise Unsupported(
                f"it has {len(rule.variables)} variables, and assay holds {MAX_VARIABLES} "
                "with the one its PolicyExceptions' grants are read from"
            )
        granted = kyverno_exceptions.grants_variable(applied.grants)
        rules = [r.model_copy(update={"variables": [granted, *r.variables]}) for r in rules]
    actions = list(spec.validation_actions)
    policy = ImportedPolicy(
        name=name,
        format="kyverno-validatingpolicy",
        policy_name=name,
        source=doc.source,
        imported_at=now,
        rules=rules,
        validation_actions=actions,
        documents=[doc.document, *(d.document for d in [*read, *applied.documents])],
    )
    return policy, applied


def _global_context_entries(
    rules: list[PolicyRule], entries: list[SourcedDocument]
) -> list[SourcedDocument]:
    """The GlobalContextEntries of the files the rules read (``globalContext.Get('NAME',
    'PROJECTION')``); an entry the files do not define is read from the target at run time
    (cluster_reads.py). Unsupported for a name not written as a string, an entry of the
    files that calls a service (``apiCall``), or a projection whose JMESPath is not run
    here as Kyverno runs it."""
    by_name = {name_of(e.document): e for e in entries}
    read: list[SourcedDocument] = []
    for rule in rules:
        for expression in rule.expressions():
            for args in literal_arguments(expression, "globalContext", _GLOBAL_CONTEXT_CALLS):
                if not args or not isinstance(args[0], str):
                    raise Unsupported(
                        "it reads a global context entry named by a computed value, and only "
                        "entries named in the policy can be read"
                    )
                name = args[0]
                entry = by_name.get(name)
                if entry is None or entry in read:
                    continue
                spec = as_map(entry.document.get("spec"), f"GlobalContextEntry {name} spec")
                if spec.get("apiCall") or not spec.get("kubernetesResource"):
                    raise Unsupported(f"its global context entry {name!r} {API_CALL}")
                as_map(spec.get("kubernetesResource"), f"GlobalContextEntry {name}")
                for index, raw in enumerate(as_list(spec.get("projections"), "projections")):
                    projection = as_map(raw, f"GlobalContextEntry {name} projections[{index}]")
                    reason = kyverno_jmespath.problem(str(projection.get("jmesPath") or ""))
                    if reason:
                        shown = projection.get("name")
                        raise Unsupported(
                            f"its global context entry {name!r} projection {shown!r}: {reason}"
                        )
                read.append(entry)
    return read


def _reads_exceptions(rule: PolicyRule) -> bool:
    """Whether the rule reads Kyverno's ``exceptions`` (its PolicyExceptions' grants);
    Unsupported for any read of it but of its two fields (assay serves those only)."""
    found = False
    for expression in rule.expressions():
        for ref in references(expression):
            if ref.root != KYVERNO_EXCEPTIONS:
                continue
            if not ref.fields or ref.fields[0] not in kyverno_exceptions.GRANT_FIELDS:
                raise Unsupported(
                    f"it reads {ref.path}, and of Kyverno's exceptions assay serves only "
                    f"{' and '.join(kyverno_exceptions.GRANT_FIELDS)}"
                )
            found = True
    return found


def _validating_policy_controllers(
    rule: PolicyRule, constraints: MatchResources, spec: KyvernoSpec
) -> list[PolicyRule]:
    """Kyverno's pod-controller forms of a ValidatingPolicy: only for a policy on Pods alone
    (one resource rule, core v1 pods, no names, no object selector, no exclusions)."""
    rules = constraints.resource_rules
    if len(rules) != 1 or constraints.exclude_resource_rules:
        return []
    only = rules[0]
    if (
        only.api_groups != [""]
        or only.api_versions != ["v1"]
        or only.resources != ["pods"]
        or only.resource_names
        or label_selector(constraints.object_selector, "objectSelector") is not None
    ):
        return []
    pods = spec.autogen.pod_controllers if spec.autogen else None
    configured = None
    if pods is not None and "controllers" in pods.model_fields_set:
        configured = pods.controllers
    wanted = list(autogen.VALIDATING_POLICY_CONTROLLERS) if configured is None else configured
    kinds = [
        autogen.VALIDATING_POLICY_CONTROLLERS[c]
        for c in wanted
        if c in autogen.VALIDATING_POLICY_CONTROLLERS
    ]
    return autogen.controller_rules(
        rule, kinds, names=(f"{rule.name}-autogen-defaults", f"{rule.name}-autogen-cronjobs")
    )


def import_cluster_policy(
    doc: SourcedDocument, now: datetime, exceptions: list[SourcedDocument] | None = None
) -> tuple[ImportedPolicy, Applied]:
    """A ClusterPolicy (or namespaced Policy): its validate.cel rules, with their
    pod-controller forms and the PolicyExceptions of the files that name its rules."""
    spec = as_map(doc.document.get("spec"), "spec")
    own = _own_namespace(doc)
    rules: list[PolicyRule] = []
    descriptions: list[list[dict[str, Any]]] = []
    actions: set[str] = set()
    for index, raw in enumerate(as_list(spec.get("rules"), "spec.rules")):
        raw = as_map(raw, f"spec.rules[{index}]")
        validate = raw.get("validate")
        if validate is None:
            continue  # a mutate, generate or verifyImages rule judges nothing
        rule_name = str(raw.get("name") or f"rule-{index}")
        validate = as_map(validate, f"rule {rule_name} validate")
        if "cel" not in validate:
            raise Unsupported(
                f"rule {rule_name} validates with a pattern or deny conditions, not CEL, and "
                "only CEL rules can be imported"
            )
        rule, described = _cluster_policy_rule(raw, rule_name, validate, own)
        rules.append(rule)
        descriptions.append(described)
        action = validate.get("failureAction") or spec.get("validationFailureAction")
        if action:
            actions.add(_ACTIONS.get(str(action).lower(), str(action)))
    if not rules:
        raise Unsupported("it has no validate.cel rules")
    _refuse_expressions(rules)
    rules += _cluster_policy_controllers(doc, rules, descriptions)
    rules, applied = kyverno_exceptions.cluster_policy_exceptions(
        doc, rules, exceptions or [], exception_match
    )
    name = name_of(doc.document)
    policy = ImportedPolicy(
        name=name,
        format="kyverno-clusterpolicy",
        policy_name=name,
        source=doc.source,
        imported_at=now,
        rules=rules,
        validation_actions=sorted(actions),
        documents=[doc.document, *(d.document for d in applied.documents)],
    )
    return policy, applied


def exception_match(value: Any, what: str) -> list[list[ResourceFilter]]:
    """A kyverno.io PolicyException's ``match`` (``any`` / ``all`` of resource
    descriptions) as any-of (all-of) filter groups; none matches nothing."""
    block = as_map(value, what)
    unknown = set(block) - {"any", "all"}
    if unknown:
        raise Unsupported(f"{what} has {sorted(unknown)}, which an exception's match has not")
    groups, _ = _match_blocks(block, what, [])
    return groups


def _cluster_policy_rule(
    raw: dict[str, Any], name: str, validate: dict[str, Any], own: list[ResourceFilter]
) -> tuple[PolicyRule, list[dict[str, Any]]]:
    for field in ("context", "preconditions"):
        if raw.get(field):
            reason = {
                "context": "context entries (data read from the cluster or a service)",
                "preconditions": "JMESPath preconditions (write them as celPreconditions)",
            }[field]
            raise Unsupported(f"rule {name} uses {reason}")
    cel = as_map(validate.get("cel"), f"rule {name} validate.cel")
    match, described = _match_blocks(raw.get("match"), f"rule {name} match", own)
    exclude, excluded = _match_blocks(raw.get("exclude"), f"rule {name} exclude", [])
    if not match:
        raise Unsupported(f"rule {name} matches nothing")
    rule = PolicyRule(
        name=name,
        match=match,
        exclude=exclude,
        match_conditions=conditions_of(
            parsed_list(
                MatchCondition, raw.get("celPreconditions"), f"rule {name} celPreconditions"
            ),
            f"rule {name} celPreconditions",
        ),
        variables=variables_of(
            parsed_list(Variable, cel.get("variables"), f"rule {name} variables"),
            f"rule {name} variables",
        ),
        validations=validations_of(
            parsed_list(Validation, cel.get("expressions"), f"rule {name} expressions"),
            f"rule {name} expressions",
            validate.get("message"),
        ),
        param_source=_rule_params(cel, name),
    )
    if not rule.validations:
        raise Unsupported(f"rule {name} has no CEL expressions")
    return rule, described + excluded


def _rule_params(cel: dict[str, Any], rule: str) -> ParamSource | None:
    """A rule's params (``validate.cel.paramKind`` and ``paramRef``), read from the target
    as Kyverno reads them (params.py); None unless both are set, as Kyverno binds
    ``params`` only then (an expression reading them is then refused, as Kyverno cannot
    compile it). A ``name`` is looked up, and any ``selector`` beside it ignored, as Kyverno
    does; with neither, no object is selected."""
    if not cel.get("paramKind") or not cel.get("paramRef"):
        return None
    kind = parsed(ParamKind, cel["paramKind"], f"rule {rule} validate.cel.paramKind")
    ref = parsed(ParamRef, cel["paramRef"], f"rule {rule} validate.cel.paramRef")
    assert kind is not None and ref is not None
    if not kind.api_version or not kind.kind:
        raise Unsupported(f"rule {rule}'s paramKind names no apiVersion and kind")
    selector = label_selector(ref.selector, f"rule {rule} paramRef.selector")
    return ParamSource(
        api_version=kind.api_version,
        kind=kind.kind,
        name=ref.name or None,
        namespace=ref.namespace or None,
        selector=None if ref.name or ref.selector is None else selector or LabelSelector(),
        not_found_action="Deny" if ref.parameter_not_found_action == "Deny" else "Allow",
        reader="kyverno",
    )


def _match_blocks(
    value: Any, what: str, own: list[ResourceFilter]
) -> tuple[list[list[ResourceFilter]], list[dict[str, Any]]]:
    """A Kyverno match/exclude block as any-of (all-of) terms, and its resource descriptions
    (what autogen looks at)."""
    block = as_map(value, what)
    if not block:
        return [], []
    for field in ("subjects", "roles", "clusterRoles"):
        if block.get(field):
            raise Unsupported(f"{what} matches {field} (who makes the request)")
    groups: list[list[ResourceFilter]] = []
    described: list[dict[str, Any]] = []
    if block.get("resources"):
        resources = as_map(block.get("resources"), f"{what}.resources")
        groups.append([_description(resources, f"{what}.resources"), *own])
        described.append(resources)
    for entry in as_list(block.get("any"), f"{what}.any"):
        resources = _entry(entry, f"{what}.any[]")
        groups.append([_description(resources, f"{what}.any[]"), *own])
        described.append(resources)
    all_entries = as_list(block.get("all"), f"{what}.all")
    if all_entries:
        terms = []
        for entry in all_entries:
            resources = _entry(entry, f"{what}.all[]")
            terms.append(_description(resources, f"{what}.all[]"))
            described.append(resources)
        groups.append([*terms, *own])
    return groups, described


def _entry(entry: Any, what: str) -> dict[str, Any]:
    entry = as_map(entry, what)
    for field in ("subjects", "roles", "clusterRoles"):
        if entry.get(field):
            raise Unsupported(f"{what} matches {field} (who makes the request)")
    return as_map(entry.get("resources"), f"{what}.resources")


def _description(resources: dict[str, Any], what: str) -> ResourceFilter:
    """One Kyverno resource description as a filter term."""
    unknown = set(resources) - {
        "kinds", "name", "names", "namespaces", "selector", "namespaceSelector", "operations",
    }  # fmt: skip
    if unknown:
        raise Unsupported(f"{what} matches on {sorted(unknown)}, which this import does not")
    operations = [str(op) for op in as_list(resources.get("operations"), f"{what}.operations")]
    if operations and not ADMITTING_OPERATIONS & set(operations):
        raise Unsupported(f"{what} judges only {', '.join(operations)} requests")
    kinds = [_kind(str(kind), what) for kind in as_list(resources.get("kinds"), f"{what}.kinds")]
    names = [str(n) for n in as_list(resources.get("names"), f"{what}.names")]
    if resources.get("name"):
        names.append(str(resources["name"]))
    namespaces = [str(n) for n in as_list(resources.get("namespaces"), f"{what}.namespaces")]
    return ResourceFilter(
        kinds=[k for k in kinds if k is not None] or None,
        names=names or None,
        namespaces=namespaces or None,
        namespace_selector=label_selector(
            resources.get("namespaceSelector"), f"{what}.namespaceSelector"
        ),
        object_selector=label_selector(resources.get("selector"), f"{what}.selector"),
    )


def _kind(text: str, what: str) -> KindRef | None:
    """``Pod``, ``v1/Pod``, ``apps/v1/Deployment``; a subresource (``Pod/exec``) is None."""
    parts = text.split("/")
    if any(ch in parts[-1] for ch in "*?") or any(
        ch in part and part != "*" for part in parts[:-1] for ch in "*?"
    ):
        raise Unsupported(f"{what} names kinds by the pattern {text!r}; name the kinds")
    if len(parts) == 1:
        return KindRef(name=parts[0])
    if len(parts) == 2:
        if parts[1][:1].isupper():
            return KindRef(group="", version=parts[0], name=parts[1])
        return None  # Kind/subresource: a request on a subresource, not a stored object
    if len(parts) == 3 and parts[2][:1].isupper():
        return KindRef(group=parts[0], version=parts[1], name=parts[2])
    if len(parts) == 4:
        return None
    raise Unsupported(f"{what} names the kind {text!r} in a form this import does not read")


def _cluster_policy_controllers(
    doc: SourcedDocument, rules: list[PolicyRule], descriptions: list[list[dict[str, Any]]]
) -> list[PolicyRule]:
    """Kyverno's pod-controller rules of a ClusterPolicy, when it derives them: every rule's
    resource descriptions must be free of names, selectors and annotations and name Pod
    alone (or no Pod at all), and the autogen annotation must not say ``none``."""
    meta = doc.document.get("metadata") or {}
    annotation = ((meta.get("annotations") or {}) if isinstance(meta, dict) else {}).get(
        AUTOGEN_ANNOTATION
    )
    if annotation is not None and str(annotation).strip().lower() == "none":
        return []
    needed = False
    for described in descriptions:
        for resources in described:
            kinds = [str(k) for k in (resources.get("kinds") or [])]
            if resources.get("name") or resources.get("names") or resources.get("selector"):
                return []
            if len(kinds) > 1 and "Pod" in kinds:
                return []
            needed = needed or any(k in ("Pod", *ALL_CONTROLLERS) for k in kinds)
    if not needed:
        return []
    if annotation is None or str(annotation).strip().lower() == "all":
        controllers = list(ALL_CONTROLLERS)
    else:
        controllers = [
            c.strip() for c in str(annotation).split(",") if c.strip() in ALL_CONTROLLERS
        ]
    out: list[PolicyRule] = []
    for rule in rules:
        if not any(
            term.kinds and any(autogen.is_pod(k) for k in term.kinds)
            for group in rule.match
            for term in group
        ):
            continue
        out += autogen.controller_rules(
            rule,
            controllers,
            names=(f"autogen-{rule.name}", f"autogen-cronjob-{rule.name}"),
        )
    return out


def _own_namespace(doc: SourcedDocument) -> list[ResourceFilter]:
    """A namespaced policy (Policy, NamespacedValidatingPolicy) judges its namespace only."""
    if doc.kind not in ("Policy", "NamespacedValidatingPolicy"):
        return []
    meta = doc.document.get("metadata") or {}
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    if not namespace:
        raise Unsupported(f"a {doc.kind} is namespaced and this one names no namespace")
    return [ResourceFilter(namespaces=[str(namespace)])]


def _refuse_expressions(
    rules: list[PolicyRule], *, creates: bool = True, kyverno_libraries: bool = False
) -> None:
    """``creates``: the policy admits CREATE requests (else ``oldObject`` is refused);
    ``kyverno_libraries``: a ValidatingPolicy's CEL, which has Kyverno's resource and
    globalContext libraries (a ClusterPolicy's validate.cel is Kubernetes' own CEL)."""
    for rule in rules:
        refusal = refusal_in(
            rule.expressions(),
            params_given=rule.param_source is not None,
            creates=creates,
            kyverno_libraries=kyverno_libraries,
        )
        if refusal:
            raise Unsupported(f"rule {rule.name}: {refusal}" if len(rules) > 1 else refusal)
