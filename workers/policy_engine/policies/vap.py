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

from collections.abc import Callable
from datetime import datetime
from typing import Any

from schemas.policy import ImportedPolicy, LabelSelector, ParamSource, PolicyRule, cel_texts
from workers.policy_engine import admission_schema
from workers.policy_engine.admission_schema import (
    BindingSpec,
    ParamRef,
    PolicySpec,
    ReadError,
    Reading,
)
from workers.policy_engine.policies.common import (
    Unsupported,
    conditions_of,
    judges_creations,
    label_selector,
    parsed,
    refusal_in,
    validations_of,
    vap_exclusions,
    vap_match_filter,
    variables_of,
)
from workers.policy_engine.policies.documents import SourcedDocument, name_of, namespace_of

FORMAT = "vap"


def import_vap(
    policy: SourcedDocument,
    bindings: list[SourcedDocument],
    others: list[SourcedDocument],
    now: datetime,
) -> list[ImportedPolicy]:
    """The policy once per binding (or once on its own, with no binding in the files)."""
    spec = parsed(PolicySpec, policy.document.get("spec"), "spec") or PolicySpec()
    if spec.param_kind is not None and not bindings:
        raise Unsupported(
            "it takes params (paramKind) and no binding in the files says which params object"
        )
    constraints = spec.match_constraints
    if constraints is None or not constraints.resource_rules:
        raise Unsupported("its matchConstraints name no resourceRules, so no kind is judged")
    base = vap_match_filter(constraints, "spec.matchConstraints")
    creates = judges_creations(constraints)
    exclude = vap_exclusions(constraints, "spec.matchConstraints")
    variables = variables_of(spec.variables, "spec.variables")
    conditions = conditions_of(spec.match_conditions, "spec.matchConditions")
    validations = validations_of(spec.validations, "spec.validations")
    if not validations:
        raise Unsupported("it has no validations (audit annotations only), so it judges nothing")
    name = name_of(policy.document)
    plans: list[SourcedDocument | None] = list(bindings) or [None]
    out = []
    for binding in plans:
        bspec = _binding_spec(binding) if binding is not None else None
        params, param_docs, param_source = _params(spec, binding, bspec, others)
        given = params is not None or param_source is not None
        expressions = cel_texts(variables, conditions, validations)
        refusal = refusal_in(expressions, params_given=given, creates=creates)
        if refusal:
            raise Unsupported(refusal)
        terms = [base] if base is not None else []
        excluded = exclude  # the policy's own; a binding's are added for its policy alone
        actions: list[str] = []
        documents: list[dict[str, Any]] = [policy.document]
        if binding is not None and bspec is not None:
            extra = vap_match_filter(bspec.match_resources, "binding spec.matchResources")
            if extra is not None:
                terms.append(extra)
            excluded = exclude + vap_exclusions(
                bspec.match_resources, "binding spec.matchResources"
            )
            actions = list(bspec.validation_actions)
            documents = [policy.document, binding.document, *param_docs]
        rule = PolicyRule(
            name=name,
            match=[terms],
            exclude=excluded,
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


def _binding_spec(binding: SourcedDocument) -> BindingSpec:
    spec = parsed(BindingSpec, binding.document.get("spec"), "binding spec")
    if spec is None:
        raise Unsupported(f"its binding {name_of(binding.document)} has no spec")
    return spec


def _params(
    spec: PolicySpec,
    binding: SourcedDocument | None,
    bspec: BindingSpec | None,
    others: list[SourcedDocument],
) -> tuple[Any, list[dict[str, Any]], ParamSource | None]:
    """The params a binding names: (the object, [it], None) from the files; (None, [],
    the source) to read from the target; (None, [], None) without paramKind (a binding's
    paramRef is then ignored, as Kubernetes ignores it)."""
    kind = spec.param_kind
    if kind is None:
        return None, [], None
    assert binding is not None and bspec is not None  # checked by the caller
    ref = bspec.param_ref
    if ref is None or not ref.model_fields_set:
        raise Unsupported(
            f"it takes params ({kind.kind}) and its binding {name_of(binding.document)} "
            "names no paramRef"
        )
    if bool(ref.name) == (ref.selector is not None):
        raise Unsupported(
            f"its binding {name_of(binding.document)}'s paramRef sets "
            f"{'both' if ref.name else 'neither'} of name and selector (exactly one)"
        )
    action = ref.parameter_not_found_action or "Deny"
    failure = spec.failure_policy or "Fail"
    selector = label_selector(ref.selector, "paramRef.selector")
    picks = picker(ref)
    candidates = [
        other
        for other in others
        if other.document.get("kind") == kind.kind
        and other.document.get("apiVersion") == kind.api_version
        and picks(other)
    ]
    if not candidates:  # not in the files: read from the target on every run
        source = ParamSource(
            api_version=kind.api_version,
            kind=kind.kind,
            name=ref.name or None,
            namespace=ref.namespace or None,
            selector=None if ref.name else (selector or LabelSelector()),
            not_found_action=action,
            failure_policy=failure,
        )
        return None, [], source
    if len(candidates) > 1:
        raise Unsupported(
            f"its paramRef selects {len(candidates)} params objects in the files; assay binds "
            "one from the files: name it in the binding, or leave them to the cluster"
        )
    return candidates[0].document, [candidates[0].document], None


def picker(ref: ParamRef) -> Callable[[SourcedDocument], bool]:
    """Whether a binding's ``paramRef`` picks a document (of the policy's paramKind): in its
    namespace, if it names one; then by its name, or else by its selector (none: every
    object). Unsupported for a selector the API server would refuse."""
    selector = None if ref.name else label_selector(ref.selector, "paramRef.selector")

    def picks(doc: SourcedDocument) -> bool:
        if ref.namespace and namespace_of(doc.document) != ref.namespace:
            return False
        if ref.name:
            return name_of(doc.document) == ref.name
        metadata = doc.document.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, dict) else None
        return selector is None or selector.matches(labels if isinstance(labels, dict) else {})

    return picks


def binding_spec(binding: SourcedDocument) -> BindingSpec | None:
    """A binding's spec as the model reads it; None when it is not of that shape (the
    import of its policy says why)."""
    try:
        return admission_schema.read(
            BindingSpec, binding.document.get("spec"), Reading.ENGINE, "binding spec"
        )
    except ReadError:
        return None


def binding_policy(binding: SourcedDocument) -> str:
    """The policy a binding binds."""
    spec = binding_spec(binding)
    return spec.policy_name if spec is not None else ""
