"""Export a per-object probe, or an imported policy, as admission policy: a
ValidatingAdmissionPolicy (+ binding, + params object) or a Kyverno ValidatingPolicy.

Two sources, one path (a :class:`~workers.policy_engine.probes.export_draft.Draft`, the VAP's own
fields, rendered in either format):

* a check's probe (``ProbeRecord``): only scope ``each_object`` with ``when_true: "true"``
  says something about each object on its own, which is what an admission policy checks;
  its lookup's kind becomes the resource rule (``CREATE`` and ``UPDATE``: every object the
  check would see is created or updated first), its namespace and ``key=value`` /
  set-based label selector the binding's (or the policy's) selectors; a field selector has
  no admission counterpart;
* an imported policy (``ImportedPolicy``): field by field from the documents it was
  imported from, as its own engine admits (export_policy.py): operations, subresources,
  ``resourceNames``, selectors, exclusions, ``matchPolicy``, ``failurePolicy``, match
  conditions, variables, validations, messages, ``auditAnnotations``, params and actions
  as the original, or refused with the field and the reason.

A probe (or policy) that reads what the API server fills in after admission (``status``,
``metadata.uid``, ``creationTimestamp``, ``resourceVersion``, ``generation``,
``managedFields``, ...) is exported with a warning and only ``Audit`` for a probe (a
``--action Deny`` or ``Warn`` is refused): at admission a new object has none of it, so a
``Deny`` rule written from a check of stored objects would block every new object. An
imported policy keeps the actions its own engine applied to those fields at admission, and
is never raised to ``Deny``/``Warn`` by ``--action``.

Nothing is written that the API server would refuse: every export is checked before it is
returned, and refused (:class:`NotExportable`, with the reasons) when a document breaks the
API's rules (admission_schema.py), an expression does not compile in Kubernetes' CEL
environment, reads ``params`` without ``paramKind`` or ``variables`` in a match condition,
or reads a field the kind's schema does not have (kind_schemas.py).

Nothing here talks to a cluster beyond discovery and schemas: it prints YAML.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from schemas.policy import ImportedPolicy
from schemas.probe import ProbeRecord
from workers.engine.toolsets.backend import ClusterBackend
from workers.policy_engine.admission_schema import (
    KYVERNO_API_VERSION,
    VAP_API_VERSION,
    problems,
)
from workers.policy_engine.cel.programs import EXCEPTIONS_VARIABLE, CelError, Expression
from workers.policy_engine.policies.expressions import references
from workers.policy_engine.probes.export_draft import (
    CREATE_UPDATE,
    NAMESPACE_NAME_LABEL,
    Draft,
    Kinds,
    NotExportable,
    both,
    rules_for,
    selector_from_text,
    validation,
)
from workers.policy_engine.probes.export_policy import policy_drafts
from workers.policy_engine.probes.kind_schemas import undefined_path

__all__ = [
    "AFTER_ADMISSION",
    "Action",
    "ExportFormat",
    "Exported",
    "NotExportable",
    "after_admission_reads",
    "export_documents",
    "export_policy",
    "export_policy_documents",
    "export_policy_yaml",
    "export_probe",
    "export_yaml",
    "selector_from_text",
    "to_yaml",
]

ExportFormat = Literal["vap", "kyverno"]
Action = Literal["Audit", "Deny", "Warn"]
_NAME_CHARS = re.compile(r"[^a-z0-9-]+")
MANAGED_BY = {"app.kubernetes.io/managed-by": "assay"}
# What the API server (or a controller, through it) writes after an object is admitted: at
# admission a new object has none of it (or a value the server replaces).
AFTER_ADMISSION: tuple[tuple[str, ...], ...] = (
    ("status",),
    ("metadata", "uid"),
    ("metadata", "creationTimestamp"),
    ("metadata", "resourceVersion"),
    ("metadata", "generation"),
    ("metadata", "managedFields"),
    ("metadata", "deletionTimestamp"),
    ("metadata", "deletionGracePeriodSeconds"),
    ("metadata", "selfLink"),
)
_VAP_SPEC_ORDER = (
    "failurePolicy", "paramKind", "matchConstraints", "matchConditions", "variables",
    "validations", "auditAnnotations",
)  # fmt: skip
_SERVER_METADATA = frozenset(
    {"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
     "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "finalizers"}
)  # fmt: skip


@dataclass(frozen=True)
class Exported:
    """The documents of an export, and what a reader must know about them."""

    documents: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)

    def yaml(self) -> str:
        return to_yaml(self.documents, self.warnings)


# -- drafts from a probe ----------------------------------------------------------------------


def _probe_draft(record: ProbeRecord, predicate: str | None, kinds: Kinds) -> Draft:
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
        extra["namespaceSelector"] = {"matchLabels": {NAMESPACE_NAME_LABEL: str(namespace)}}
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
        validations = [validation(v.expression, v.message, v.message_expression, v.reason)
                       for v in probe.validations]  # fmt: skip
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": rules_for([resource], None, "*", CREATE_UPDATE)},
    }
    if probe.match_conditions:
        spec["matchConditions"] = [
            {"name": c.name, "expression": c.expression} for c in probe.match_conditions
        ]
    if probe.variables:
        spec["variables"] = [{"name": v.name, "expression": v.expression} for v in probe.variables]
    spec["validations"] = validations
    name = _NAME_CHARS.sub("-", f"assay-{record.check_id}-v{record.version}".lower()).strip("-")
    return Draft(
        name=name[:253],
        annotations={
            "assay.dev/check-id": record.check_id,
            "assay.dev/probe-version": str(record.version),
            "assay.dev/compiled-by-run": record.compiled_by_run,
        },
        resources=[resource],
        spec=spec,
        binding={"matchResources": extra} if extra else {},
        pod_controllers=[],
        from_probe=True,
    )


# -- what the API server fills in after admission ---------------------------------------------


def _texts(spec: dict[str, Any]) -> Iterable[str]:
    for item in spec.get("variables") or []:
        yield str(item.get("expression") or "")
    for item in spec.get("matchConditions") or []:
        yield str(item.get("expression") or "")
    for item in spec.get("validations") or []:
        yield str(item.get("expression") or "")
        if item.get("messageExpression"):
            yield str(item["messageExpression"])
    for item in spec.get("auditAnnotations") or []:
        yield str(item.get("valueExpression") or "")


def _object_paths(spec: dict[str, Any]) -> set[tuple[str, ...]]:
    """Field paths read from ``object`` (or a variable that is ``object``, as Gatekeeper's
    ``anyObject``)."""
    aliases = {
        str(v.get("name")) for v in spec.get("variables") or []
        if str(v.get("expression") or "").strip() == "object"
    }  # fmt: skip
    paths: set[tuple[str, ...]] = set()
    for text in _texts(spec):
        for ref in references(text):
            if ref.root == "object":
                fields = ref.fields[:-1] if ref.called else ref.fields
            elif ref.root == "variables" and ref.fields[:1] and ref.fields[0] in aliases:
                fields = ref.fields[1:-1] if ref.called else ref.fields[1:]
            else:
                continue
            if fields:
                paths.add(tuple(fields))
    return paths


def after_admission_reads(spec: dict[str, Any]) -> list[str]:
    """The fields an admission policy's spec reads that the API server fills in after
    admission (``object.status``, ``object.metadata.uid``, ...), as ``object.`` paths."""
    found = set()
    for path in _object_paths(spec):
        for prefix in AFTER_ADMISSION:
            if path[: len(prefix)] == prefix:
                found.add("object." + ".".join(prefix))
    return sorted(found)


def _actions(draft: Draft, action: Action | None) -> list[str]:
    """The binding's actions: the ones asked for, else the source's; a probe that reads
    what admission does not have yet is Audit only (module docstring)."""
    reads = after_admission_reads(draft.spec)
    own = [str(a) for a in draft.binding.get("validationActions") or []] or draft.default_actions
    if not reads:
        return [action] if action is not None else own
    shown = ", ".join(reads)
    if action in ("Deny", "Warn") and (draft.from_probe or action not in own):
        raise NotExportable(
            f"it reads {shown}, which the API server fills in after admission (a new object "
            f"has none of it), so --action {action} would judge objects before those fields "
            "exist: export it with Audit"
        )
    if draft.from_probe:
        draft.warnings.append(
            f"it reads {shown}, which the API server fills in after admission: exported with "
            "Audit only (it reports, never blocks), since every new object would fail it"
        )
        return ["Audit"]
    draft.warnings.append(
        f"it reads {shown}, which the API server fills in after admission: its own actions "
        f"({', '.join(own)}) are kept, as its engine applied them at admission"
    )
    return [action] if action is not None else own


def _audit_status_updates(draft: Draft) -> None:
    """A probe that reads ``status``: its rules match the status subresource too, so the
    audit follows the status as controllers write it."""
    if not draft.from_probe or "object.status" not in after_admission_reads(draft.spec):
        return
    for rule in draft.spec["matchConstraints"]["resourceRules"]:
        plain = [r for r in rule["resources"] if "/" not in r]
        rule["resources"] = [*plain, *(f"{r}/status" for r in plain)]


# -- rendering --------------------------------------------------------------------------------


def _metadata(draft: Draft, original: dict[str, Any] | None = None) -> dict[str, Any]:
    kept = copy.deepcopy(original) if original else {}
    for key in _SERVER_METADATA:
        kept.pop(key, None)
    kept["name"] = draft.name
    kept["labels"] = {**(kept.get("labels") or {}), **MANAGED_BY}
    kept["annotations"] = {**(kept.get("annotations") or {}), **draft.annotations}
    return kept


def _render_vap(draft: Draft, actions: list[str]) -> list[dict[str, Any]]:
    spec = {key: draft.spec[key] for key in _VAP_SPEC_ORDER if key in draft.spec}
    binding_spec: dict[str, Any] = {"policyName": draft.name}
    for key in ("paramRef", "matchResources"):
        if key in draft.binding:
            binding_spec[key] = draft.binding[key]
    binding_spec["validationActions"] = actions
    documents = [
        {"apiVersion": VAP_API_VERSION, "kind": "ValidatingAdmissionPolicy",
         "metadata": _metadata(draft), "spec": spec},
        {"apiVersion": VAP_API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": (draft.binding_name or f"{draft.name}-binding")[:253],
                      "labels": dict(MANAGED_BY)},
         "spec": binding_spec},
    ]  # fmt: skip
    if draft.params is not None:
        documents.append(draft.params)
    return documents


def _render_kyverno(
    draft: Draft, actions: list[str], action: Action | None
) -> list[dict[str, Any]]:
    if draft.not_kyverno:
        raise NotExportable(draft.not_kyverno)
    if draft.kyverno_document is not None:  # a ValidatingPolicy: as it is
        document = copy.deepcopy(draft.kyverno_document)
        document["apiVersion"] = KYVERNO_API_VERSION
        document["metadata"] = _metadata(draft, document.get("metadata"))
        document.pop("status", None)
        if action is not None:
            document["spec"]["validationActions"] = actions
        return [document]
    if draft.params is not None or "paramKind" in draft.spec:
        raise NotExportable(
            "it takes params (spec.paramKind), and a Kyverno ValidatingPolicy has no params: "
            "export it as vap"
        )
    constraints = copy.deepcopy(draft.spec["matchConstraints"])
    bound = draft.binding.get("matchResources") or {}
    for key in ("resourceRules", "excludeResourceRules"):
        if bound.get(key):
            raise NotExportable(
                f"its binding's spec.matchResources.{key} narrow the policy's own rules, and "
                "a Kyverno ValidatingPolicy has no binding to say so: export it as vap"
            )
    for key in ("namespaceSelector", "objectSelector"):
        merged = both(constraints.get(key) or None, bound.get(key) or None)
        if merged:
            constraints[key] = merged
    spec: dict[str, Any] = {"validationActions": actions}
    if draft.spec.get("failurePolicy"):
        spec["failurePolicy"] = draft.spec["failurePolicy"]
    if draft.kyverno_evaluation:
        spec["evaluation"] = draft.kyverno_evaluation
    on_pods = any(
        "pods" in (rule.get("resources") or []) for rule in constraints.get("resourceRules") or []
    )
    if on_pods and draft.pod_controllers is not None:
        spec["autogen"] = {"podControllers": {"controllers": draft.pod_controllers}}
    spec["matchConstraints"] = constraints
    for key in ("matchConditions", "variables", "validations", "auditAnnotations"):
        if draft.spec.get(key):
            spec[key] = draft.spec[key]
    return [{"apiVersion": KYVERNO_API_VERSION, "kind": "ValidatingPolicy",
             "metadata": _metadata(draft), "spec": spec}]  # fmt: skip


# -- checks -----------------------------------------------------------------------------------


def _check(draft: Draft, documents: list[dict[str, Any]], backend: ClusterBackend | None) -> None:
    """NotExportable with every reason the API server would refuse the documents."""
    reasons: list[str] = []
    for document in documents:
        reasons += problems(document)
    # Kyverno's ValidatingPolicy has its PolicyExceptions' grants (`exceptions`) too
    kyverno = any(
        d.get("kind") in ("ValidatingPolicy", "NamespacedValidatingPolicy")
        and str(d.get("apiVersion") or "").startswith("policies.kyverno.io/")
        for d in documents
    )
    reasons += _compile_problems(draft.spec, kyverno_exceptions=kyverno)
    reasons += _type_problems(draft, backend)
    if reasons:
        shown = "; ".join(dict.fromkeys(reasons))
        raise NotExportable(f"the API server would refuse it: {shown}")


def _compile_problems(spec: dict[str, Any], *, kyverno_exceptions: bool = False) -> list[str]:
    """``kyverno_exceptions``: the spec is a Kyverno ValidatingPolicy's, whose expressions
    may read ``exceptions`` (cel/programs.py: EXCEPTIONS_VARIABLE)."""
    variables = [
        (str(v.get("name")), str(v.get("expression"))) for v in spec.get("variables") or []
    ]
    granted = [(EXCEPTIONS_VARIABLE, "{}")] if kyverno_exceptions else []
    takes_params = bool(spec.get("paramKind"))
    found: list[str] = []
    checks: list[tuple[str, str, bool]] = [(f"variable {name}", text, True)
                                           for name, text in variables]  # fmt: skip
    checks += [(f"match condition {c.get('name')}", str(c.get("expression")), False)
               for c in spec.get("matchConditions") or []]  # fmt: skip
    for number, item in enumerate(spec.get("validations") or []):
        checks.append((f"validation {number}", str(item.get("expression")), True))
        if item.get("messageExpression"):
            checks.append((f"the message of validation {number}", item["messageExpression"], True))
    for item in spec.get("auditAnnotations") or []:
        checks.append(
            (f"audit annotation {item.get('key')}", str(item.get("valueExpression")), True)
        )
    for what, text, may_read_variables in checks:
        roots = {ref.root for ref in references(text)}
        if "params" in roots and not takes_params:
            found.append(f"{what} reads params, and the policy takes none (no paramKind)")
        if "variables" in roots and not may_read_variables:
            found.append(f"{what} reads variables, which a match condition cannot")
        try:  # the API server declares `request`, `oldObject`, `namespaceObject`: so does assay
            known = [*granted, *variables] if may_read_variables else granted
            # each variable is checked on its own (above): one read here is a declared
            # name, as the API server compiles it, not its definition bound around the text
            declared = {name: None for name, _ in known}
            Expression(text, known, what=what, constants=declared)
        except CelError as exc:
            found.append(str(exc))
    return found


def _type_problems(draft: Draft, backend: ClusterBackend | None) -> list[str]:
    """Field paths read from ``object`` (or a variable that is ``object``) that the kind's
    schema does not have."""
    # A path one of the kinds has is the policy's to guard (the API server only warns about
    # it for the others, in the policy's status); one that none of them has never works.
    found = []
    kinds = [r for r in draft.resources if r.kind != r.plural]  # plural only: no schema known
    for path in sorted(_object_paths(draft.spec)):
        missing = [undefined_path(resource, path, backend) for resource in kinds]
        if kinds and all(m is not None for m in missing):
            names = ", ".join(sorted({r.kind for r in kinds}))
            found.append(f"{names} has no field {missing[0]} (read as object.{'.'.join(path)})")
    return found


# -- public -----------------------------------------------------------------------------------


def _export(
    drafts: list[Draft], fmt: ExportFormat, action: Action | None, backend: ClusterBackend | None
) -> Exported:
    documents: list[dict[str, Any]] = []
    warnings: list[str] = []
    for draft in drafts:
        actions = _actions(draft, action)
        _audit_status_updates(draft)
        rendered = (
            _render_vap(draft, actions) if fmt == "vap" else _render_kyverno(draft, actions, action)
        )
        _check(draft, rendered, backend)
        documents += rendered
        warnings += [w for w in draft.warnings if w not in warnings]
    return Exported(documents, warnings)


def export_probe(
    record: ProbeRecord,
    fmt: ExportFormat,
    *,
    predicate: str | None = None,
    action: Action | None = None,
    backend: ClusterBackend | None = None,
) -> Exported:
    """The policy documents for a check's probe; NotExportable when it has no such form or
    the API server would refuse it. ``backend``: a target to resolve custom kinds on (and
    to read their schemas from). Without ``action``: Audit."""
    return _export([_probe_draft(record, predicate, Kinds(backend))], fmt, action, backend)


def export_policy(
    policy: ImportedPolicy,
    fmt: ExportFormat,
    *,
    action: Action | None = None,
    backend: ClusterBackend | None = None,
) -> Exported:
    """The admission policies of an imported policy, field by field (export_policy.py);
    without ``action`` each keeps its own engine's actions."""
    return _export(policy_drafts(policy, fmt, Kinds(backend)), fmt, action, backend)


def export_documents(
    record: ProbeRecord,
    fmt: ExportFormat,
    *,
    predicate: str | None = None,
    action: Action | None = None,
    backend: ClusterBackend | None = None,
) -> list[dict[str, Any]]:
    return export_probe(record, fmt, predicate=predicate, action=action, backend=backend).documents


def export_policy_documents(
    policy: ImportedPolicy,
    fmt: ExportFormat,
    *,
    action: Action | None = None,
    backend: ClusterBackend | None = None,
) -> list[dict[str, Any]]:
    return export_policy(policy, fmt, action=action, backend=backend).documents


def to_yaml(documents: list[dict[str, Any]], warnings: Iterable[str] = ()) -> str:
    """The documents as YAML, each warning a comment line before them."""
    import yaml

    head = "".join(f"# warning: {' '.join(w.split())}\n" for w in warnings)
    return head + "---\n".join(yaml.safe_dump(doc, sort_keys=False) for doc in documents)


def export_yaml(
    record: ProbeRecord,
    fmt: ExportFormat,
    *,
    predicate: str | None = None,
    action: Action | None = None,
    backend: ClusterBackend | None = None,
) -> str:
    return export_probe(record, fmt, predicate=predicate, action=action, backend=backend).yaml()


def export_policy_yaml(
    policy: ImportedPolicy,
    fmt: ExportFormat,
    *,
    action: Action | None = None,
    backend: ClusterBackend | None = None,
) -> str:
    return export_policy(policy, fmt, action=action, backend=backend).yaml()
