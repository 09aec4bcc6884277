"""Gatekeeper ConstraintTemplates with ``K8sNativeValidation`` code, one imported policy per
constraint of the template found in the files.

The template holds the CEL (its ``K8sNativeValidation`` source: variables, validations and
match conditions, as a ValidatingAdmissionPolicy's); a constraint says which objects it
judges (``spec.match``) and with which parameters (``spec.parameters``). As Gatekeeper
does, the constraint is bound as ``params`` and two variables come first:
``variables.params`` (the constraint's parameters, or null) and ``variables.anyObject``
(the object judged: a stored object always has one). Each imported policy takes the
constraint's name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from schemas.policy import ImportedPolicy, KindRef, PolicyRule, ResourceFilter, cel_texts
from schemas.probe import ProbeVariable
from workers.policy_engine.admission_schema import MatchCondition, Validation, Variable
from workers.policy_engine.policies.common import (
    Unsupported,
    as_list,
    as_map,
    conditions_of,
    label_selector,
    parsed_list,
    refusal_in,
    validations_of,
    variables_of,
)
from workers.policy_engine.policies.documents import SourcedDocument, name_of

ENGINE = "K8sNativeValidation"
CONSTRAINTS_GROUP = "constraints.gatekeeper.sh"
PARAMS_VARIABLE = ProbeVariable(
    name="params",
    expression="has(params.spec) && has(params.spec.parameters) ? params.spec.parameters : null",
)
ANY_OBJECT_VARIABLE = ProbeVariable(name="anyObject", expression="object")
RESERVED_VARIABLES = frozenset({"params", "anyObject"})
_ACTIONS = {"deny": "Deny", "dryrun": "Audit", "warn": "Warn"}


def template_kind(template: SourcedDocument) -> str:
    """The constraint kind a template defines."""
    crd = as_map(as_map(template.document.get("spec"), "spec").get("crd"), "spec.crd")
    names = as_map(as_map(crd.get("spec"), "spec.crd.spec").get("names"), "names")
    return str(names.get("kind") or "")


def import_template(
    template: SourcedDocument, constraints: list[SourcedDocument], now: datetime
) -> list[ImportedPolicy]:
    """One imported policy per constraint; Unsupported when there is none, or no CEL."""
    source = _cel_source(template)
    name = name_of(template.document)
    if not constraints:
        raise Unsupported(
            f"no {template_kind(template) or 'constraint'} constraint of it is in the files "
            "(a constraint says which objects it judges and with which parameters)"
        )
    variables = variables_of(
        parsed_list(Variable, source.get("variables"), "source.variables"), "source.variables"
    )
    clash = RESERVED_VARIABLES & {v.name for v in variables}
    if clash:
        raise Unsupported(f"it defines the variables {sorted(clash)}, which Gatekeeper reserves")
    raw_conditions = source.get("matchCondition", source.get("matchConditions"))
    conditions = conditions_of(
        parsed_list(MatchCondition, raw_conditions, "source.matchConditions"),
        "source.matchConditions",
    )
    validations = validations_of(
        parsed_list(Validation, source.get("validations"), "source.validations"),
        "source.validations",
    )
    if not validations:
        raise Unsupported("its K8sNativeValidation source has no validations")
    refusal = refusal_in(cel_texts(variables, conditions, validations), params_given=True)
    if refusal:
        raise Unsupported(refusal)
    out = []
    for constraint in constraints:
        spec = as_map(constraint.document.get("spec"), "constraint spec")
        rule = PolicyRule(
            name=name,
            match=[[_match(spec.get("match"), f"constraint {name_of(constraint.document)}")]],
            match_conditions=conditions,
            variables=[PARAMS_VARIABLE, ANY_OBJECT_VARIABLE, *variables],
            validations=validations,
        )
        action = str(spec.get("enforcementAction") or "deny").lower()
        out.append(
            ImportedPolicy(
                name=name_of(constraint.document),
                format="gatekeeper",
                policy_name=name,
                source=template.source,
                imported_at=now,
                rules=[rule],
                params=constraint.document,
                validation_actions=[_ACTIONS.get(action, action)],
                documents=[template.document, constraint.document],
            )
        )
    return out


def _cel_source(template: SourcedDocument) -> dict[str, Any]:
    targets = as_list(as_map(template.document.get("spec"), "spec").get("targets"), "targets")
    if len(targets) != 1:
        raise Unsupported(f"it has {len(targets)} targets; Gatekeeper allows one")
    for code in as_list(as_map(targets[0], "target").get("code"), "target.code"):
        code = as_map(code, "code")
        if code.get("engine") == ENGINE:
            return as_map(code.get("source"), "code.source")
    raise Unsupported(f"it has no {ENGINE} code (Rego only), so there is no CEL to import")


def _match(value: Any, what: str) -> ResourceFilter:
    match = as_map(value, f"{what} spec.match")
    unknown = set(match) - {
        "kinds", "scope", "namespaces", "excludedNamespaces", "labelSelector",
        "namespaceSelector", "name", "source",
    }  # fmt: skip
    if unknown:
        raise Unsupported(f"{what} matches on {sorted(unknown)}, which this import does not")
    if match.get("source") not in (None, "", "All", "Original"):
        raise Unsupported(f"{what} matches {match.get('source')} objects only")
    kinds: list[KindRef] = []
    for entry in as_list(match.get("kinds"), f"{what} kinds"):
        entry = as_map(entry, f"{what} kinds[]")
        groups = [str(g) for g in as_list(entry.get("apiGroups"), "apiGroups")] or ["*"]
        for kind in as_list(entry.get("kinds"), "kinds"):
            if kind == "*" or "*" in str(kind):
                raise Unsupported(f"{what} matches every kind ('*'); name the kinds it judges")
            kinds += [KindRef(group=group, name=str(kind)) for group in groups]
    if not kinds:
        raise Unsupported(f"{what} names no kinds, so it would judge every kind; name them")
    scope = str(match.get("scope") or "*")
    if scope not in ("*", "Namespaced", "Cluster"):
        raise Unsupported(f"{what} has the scope {scope!r}")
    namespaces = [str(n) for n in as_list(match.get("namespaces"), f"{what} namespaces")]
    return ResourceFilter(
        kinds=kinds,
        names=[str(match["name"])] if match.get("name") else None,
        namespaces=namespaces or None,
        excluded_namespaces=[
            str(n) for n in as_list(match.get("excludedNamespaces"), f"{what} excludedNamespaces")
        ],
        namespace_selector=label_selector(
            match.get("namespaceSelector"), f"{what} namespaceSelector"
        ),
        object_selector=label_selector(match.get("labelSelector"), f"{what} labelSelector"),
        scope=scope,
    )
