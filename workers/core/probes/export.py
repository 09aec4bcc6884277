"""Export a per-object probe as admission policy: a ValidatingAdmissionPolicy (+ binding) or a
Kyverno ValidatingPolicy.

Only a probe of scope ``each_object`` whose expression being true means the predicate holds
(``when_true: "true"``) says something about each object on its own, which is what an
admission policy checks; any other probe is refused with the reason (:class:`NotExportable`).
Its lookup's kind becomes the policy's resource rule, its namespace a namespace selector,
and a label selector of ``key=value`` terms an object selector. A field selector has no
admission counterpart, so such probes are refused too.

The default action is ``Audit``: an exported probe reports before it blocks; pass
``action="Deny"`` once it has been watched. Nothing here talks to a cluster: it prints YAML.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from schemas.probe import ProbeRecord
from workers.core.toolsets.backend import BackendError
from workers.core.toolsets.kinds import builtin_index

ExportFormat = Literal["vap", "kyverno"]
Action = Literal["Audit", "Deny", "Warn"]
KYVERNO_API_VERSION = "policies.kyverno.io/v1"
VAP_API_VERSION = "admissionregistration.k8s.io/v1"
_LABEL_TERM = re.compile(r"^\s*([A-Za-z0-9][-A-Za-z0-9_./]*)\s*==?\s*([-A-Za-z0-9_.]*)\s*$")
_NAME_CHARS = re.compile(r"[^a-z0-9-]+")


class NotExportable(ValueError):
    """The probe cannot be expressed as a per-object admission policy; the message says why."""


def _policy_name(record: ProbeRecord) -> str:
    name = _NAME_CHARS.sub("-", f"assay-{record.check_id}-v{record.version}".lower()).strip("-")
    return name[:253]


def _labels(selector: str | None) -> dict[str, str] | None:
    if not selector:
        return None
    labels: dict[str, str] = {}
    for term in selector.split(","):
        match = _LABEL_TERM.match(term)
        if match is None:
            raise NotExportable(
                f"the label selector {selector!r} uses more than key=value terms, which the "
                "export does not translate"
            )
        labels[match.group(1)] = match.group(2)
    return labels


def _match(record: ProbeRecord) -> dict[str, Any]:
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
    kind = str(args.get("kind", ""))
    try:
        resource = builtin_index().resolve(kind)
    except BackendError:
        raise NotExportable(
            f"the kind {kind!r} is not a built-in kind, so its API group is unknown offline"
        ) from None
    constraints: dict[str, Any] = {
        "resourceRules": [
            {
                "apiGroups": [resource.group],
                "apiVersions": [resource.version],
                "operations": ["CREATE", "UPDATE"],
                "resources": [resource.plural],
            }
        ]
    }
    namespace = args.get("namespace")
    if namespace and str(namespace).strip().lower() not in {"all", "*", ""} and resource.namespaced:
        constraints["namespaceSelector"] = {
            "matchLabels": {"kubernetes.io/metadata.name": str(namespace)}
        }
    labels = _labels(args.get("label_selector"))
    if labels:
        constraints["objectSelector"] = {"matchLabels": labels}
    return constraints


def _validation(record: ProbeRecord, predicate: str | None) -> dict[str, Any]:
    message = f"assay check {record.check_id} (probe v{record.version})"
    if predicate:
        message += f": {predicate}"
    return {"expression": record.probe.summary(), "message": message[:1000]}


def export_documents(
    record: ProbeRecord,
    fmt: ExportFormat,
    *,
    predicate: str | None = None,
    action: Action = "Audit",
) -> list[dict[str, Any]]:
    """The policy documents for ``record``; NotExportable when the probe has no such form."""
    constraints = _match(record)
    name = _policy_name(record)
    labels = {"app.kubernetes.io/managed-by": "assay"}
    annotations = {
        "assay.dev/check-id": record.check_id,
        "assay.dev/probe-version": str(record.version),
        "assay.dev/compiled-by-run": record.compiled_by_run,
    }
    metadata = {"name": name, "labels": labels, "annotations": annotations}
    validation = _validation(record, predicate)
    if fmt == "kyverno":
        return [
            {
                "apiVersion": KYVERNO_API_VERSION,
                "kind": "ValidatingPolicy",
                "metadata": metadata,
                "spec": {
                    "validationActions": [action],
                    "matchConstraints": constraints,
                    "validations": [validation],
                },
            }
        ]
    match_resources = {k: v for k, v in constraints.items() if k != "resourceRules"}
    binding_spec: dict[str, Any] = {"policyName": name, "validationActions": [action]}
    if match_resources:
        binding_spec["matchResources"] = match_resources
    return [
        {
            "apiVersion": VAP_API_VERSION,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": metadata,
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": constraints["resourceRules"]},
                "validations": [validation],
            },
        },
        {
            "apiVersion": VAP_API_VERSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": f"{name}-binding"[:253], "labels": labels},
            "spec": binding_spec,
        },
    ]


def export_yaml(
    record: ProbeRecord,
    fmt: ExportFormat,
    *,
    predicate: str | None = None,
    action: Action = "Audit",
) -> str:
    import yaml

    documents = export_documents(record, fmt, predicate=predicate, action=action)
    return "---\n".join(yaml.safe_dump(doc, sort_keys=False) for doc in documents)
