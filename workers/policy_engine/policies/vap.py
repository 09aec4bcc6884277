"""A ValidatingAdmissionPolicy with its bindings (and params object) as imported policies.

One imported policy per binding: the policy's ``matchConstraints`` and the binding's
``matchResources`` together say which objects it judges, the binding's ``paramRef`` which
params it is bound with, and its ``validationActions`` what a failure would do at admission.
Params are read as Kubernetes reads them: a ``paramRef`` is ignored when the policy has no
``paramKind``; the params object is taken from the files when they hold the one it names,
else read from the target cluster on every run (``ParamSource``, policies/params.py).
A policy with one binding in the files (or none: then its own constraints alone apply)
takes the policy's name; with several, each takes its binding's name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from schemas.policy import ImportedPolicy, LabelSelector, ParamSource, PolicyRule
from workers.policy_engine.policies.common import (
    Unsupported,
    as_list,
    as_map,
    conditions_of,
    judges_creations,
    label_selector,
    refusal_in,
    validations_of,
    vap_exclusions,
    vap_match_filter,
    variables_of,
)
from workers.policy_engine.policies.documents import SourcedDocument, name_of

FORMAT = "vap"


def import_vap(
    policy: SourcedDocument,
    bindings: list[SourcedDocument],
    others: list[SourcedDocument],
    now: datetime,
) -> list[ImportedPolicy]:
    """The policy once per binding (or once on its own, with no binding in the files)."""
    spec = as_map(policy.document.get("spec"), "spec")
    unknown = set(spec) - {
        "paramKind", "matchConstraints", "validations", "failurePolicy", "auditAnnotations",
        "matchConditions", "variables",
    }  # fmt: skip
    if unknown:
        raise Unsupported(f"its spec has fields this import does not know: {sorted(unknown)}")
    if spec.get("paramKind") and not bindings:
        raise Unsupported(
            "it takes params (paramKind) and no binding in the files says which params object"
        )
    constraints = as_map(spec.get("matchConstraints"), "spec.matchConstraints")
    if not constraints.get("resourceRules"):
        raise Unsupported("its matchConstraints name no resourceRules, so no kind is judged")
    base = vap_match_filter(constraints, "spec.matchConstraints")
    creates = judges_creations(constraints)
    exclude = vap_exclusions(constraints, "spec.matchConstraints")
    variables = variables_of(spec.get("variables"), "spec.variables")
    conditions = conditions_of(spec.get("matchConditions"), "spec.matchConditions")
    validations = validations_of(spec.get("validations"), "spec.validations")
    if not validations:
        raise Unsupported("it has no validations (audit annotations only), so it judges nothing")
    name = name_of(policy.document)
    plans: list[SourcedDocument | None] = list(bindings) or [None]
    out = []
    for binding in plans:
        params, param_docs, param_source = _params(spec, binding, others)
        expressions = [v.expression for v in variables] + [c.expression for c in conditions]
        for validation in validations:
            expressions.append(validation.expression)
            if validation.message_expression:
                expressions.append(validation.message_expression)
        given = params is not None or param_source is not None
        refusal = refusal_in(expressions, params_given=given, creates=creates)
        if refusal:
            raise Unsupported(refusal)
        terms = [base] if base is not None else []
        actions: list[str] = []
        documents: list[dict[str, Any]] = [policy.document]
        if binding is not None:
            bspec = as_map(binding.document.get("spec"), "binding spec")
            extra = vap_match_filter(bspec.get("matchResources"), "binding spec.matchResources")
            if extra is not None:
                terms.append(extra)
            exclude = exclude + vap_exclusions(
                bspec.get("matchResources"), "binding spec.matchResources"
            )
            actions = [str(a) for a in as_list(bspec.get("validationActions"), "actions")]
            documents = [policy.document, binding.document, *param_docs]
        rule = PolicyRule(
            name=name,
            match=[terms],
            exclude=exclude,
            match_conditions=conditions,
            variables=variables,
            validations=validations,
        )
        own_name = name if len(plans) == 1 else name_of(binding.document if binding else None)
        out.append(
            ImportedPolicy(
                name=own_name,
                format=FORMAT,
                policy_name=name,
                source=policy.source,
                imported_at=now,
                rules=[rule],
                params=params,
                param_source=param_source,
                validation_actions=actions,
                documents=documents,
            )
        )
    return out


def _params(
    spec: dict[str, Any], binding: SourcedDocument | None, others: list[SourcedDocument]
) -> tuple[Any, list[dict[str, Any]], ParamSource | None]:
    """The params a binding names: (the object, [it], None) from the files; (None, [],
    the source) to read from the target; (None, [], None) without paramKind (a binding's
    paramRef is then ignored, as Kubernetes ignores it)."""
    param_kind = spec.get("paramKind")
    if not param_kind:
        return None, [], None
    kind = as_map(param_kind, "spec.paramKind")
    assert binding is not None  # checked by the caller
    ref = as_map(as_map(binding.document.get("spec"), "binding spec").get("paramRef"), "paramRef")
    if not ref:
        raise Unsupported(
            f"it takes params ({kind.get('kind')}) and its binding {name_of(binding.document)} "
            "names no paramRef"
        )
    if bool(ref.get("name")) == (ref.get("selector") is not None):
        raise Unsupported(
            f"its binding {name_of(binding.document)}'s paramRef sets "
            f"{'both' if ref.get('name') else 'neither'} of name and selector (exactly one)"
        )
    action = str(ref.get("parameterNotFoundAction") or "Deny")
    if action not in ("Allow", "Deny"):
        raise Unsupported(f"its paramRef's parameterNotFoundAction {action!r} is not Allow or Deny")
    failure = str(spec.get("failurePolicy") or "Fail")
    if failure not in ("Fail", "Ignore"):
        raise Unsupported(f"its failurePolicy {failure!r} is not Fail or Ignore")
    candidates = [
        other
        for other in others
        if other.document.get("kind") == kind.get("kind")
        and other.document.get("apiVersion") == kind.get("apiVersion")
    ]
    namespace = ref.get("namespace")
    if namespace:
        candidates = [c for c in candidates if _namespace(c) == namespace]
    selector = label_selector(ref.get("selector"), "paramRef.selector")
    if ref.get("name"):
        candidates = [c for c in candidates if name_of(c.document) == ref["name"]]
    else:
        candidates = [
            c
            for c in candidates
            if selector is None
            or selector.matches((c.document.get("metadata") or {}).get("labels") or {})
        ]
    if not candidates:  # not in the files: read from the target on every run
        source = ParamSource(
            api_version=str(kind.get("apiVersion") or ""),
            kind=str(kind.get("kind") or ""),
            name=str(ref["name"]) if ref.get("name") else None,
            namespace=str(namespace) if namespace else None,
            selector=None if ref.get("name") else (selector or LabelSelector()),
            not_found_action="Allow" if action == "Allow" else "Deny",
            failure_policy="Ignore" if failure == "Ignore" else "Fail",
        )
        return None, [], source
    if len(candidates) > 1:
        raise Unsupported(
            f"its paramRef selects {len(candidates)} params objects in the files; assay binds "
            "one from the files: name it in the binding, or leave them to the cluster"
        )
    return candidates[0].document, [candidates[0].document], None


def _namespace(doc: SourcedDocument) -> str | None:
    meta = doc.document.get("metadata") or {}
    return meta.get("namespace") if isinstance(meta, dict) else None


def binding_policy(binding: SourcedDocument) -> str:
    """The policy a binding binds."""
    return str(as_map(binding.document.get("spec"), "binding spec").get("policyName") or "")
