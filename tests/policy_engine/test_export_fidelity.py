"""Exports keep meaning: an imported policy exported as admission policy matches the same
requests as its original, field by field (operations, subresources, resourceNames,
selectors, exclusions, matchPolicy, failurePolicy, conditions, variables, validations,
audit annotations, actions, params), or is refused with one sentence naming the field; a
probe over what the API server fills in after admission exports with Audit only."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from assay.testing.policy_corpus import engine_only, read_library
from schemas.policy import ImportedPolicy
from schemas.probe import ProbeLookup, ProbeRecord, ProposedProbe
from schemas.verdict import VerdictKind
from workers.policy_engine.admission_schema import problems
from workers.policy_engine.policies.documents import documents_from_text, read_files
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.probes.export import (
    NotExportable,
    export_policy,
    export_policy_documents,
    export_probe,
)
from workers.policy_engine.probes.export_policy import KYVERNO_OPERATIONS, VAP_SPEC_FIELDS

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "cel_corpus"
K8S = "1.33.0"

# Every field a VAP and its binding can say something with, none at its default.
VAP = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-privileged-debug}
spec:
  failurePolicy: Ignore
  matchConstraints:
    matchPolicy: Exact
    namespaceSelector:
      matchExpressions: [{key: env, operator: In, values: [prod]}]
    objectSelector: {matchLabels: {team: a}}
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [pods, pods/ephemeralcontainers]
        scope: Namespaced
    excludeResourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [pods]
        resourceNames: [debug]
  matchConditions:
    - {name: not-kube-system, expression: "object.metadata.namespace != 'kube-system'"}
  variables:
    - name: privileged
      expression: >-
        object.spec.containers.filter(c, c.?securityContext.?privileged.orValue(false))
          .map(c, c.name)
  validations:
    - expression: "size(variables.privileged) == 0"
      message: privileged containers
      messageExpression: "'privileged: ' + variables.privileged.join(', ')"
      reason: Forbidden
  auditAnnotations:
    - {key: privileged, valueExpression: "variables.privileged.join(',')"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-privileged-debug-web}
spec:
  policyName: no-privileged-debug
  matchResources:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [pods, pods/ephemeralcontainers]
        resourceNames: [web-0, web-1]
  validationActions: [Warn, Audit]
"""

CLUSTER_POLICY = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: no-exec-web}
spec:
  failurePolicy: Ignore
  rules:
    - name: no-exec
      match:
        any:
          - resources:
              kinds: [Pod, Pod/exec]
              operations: [CREATE, CONNECT]
              names: [web-0]
              namespaces: [prod]
              selector: {matchLabels: {app: web}}
      exclude:
        any:
          - resources: {kinds: [Pod], names: [debug], operations: [CREATE]}
      celPreconditions:
        - {name: has-containers, expression: "has(object.spec.containers)"}
      validate:
        failureAction: Enforce
        cel:
          expressions:
            - expression: "object.spec.containers.all(c, c.image != 'busybox')"
              message: no busybox
          auditAnnotations:
            - {key: images, valueExpression: "object.spec.containers.map(c, c.image).join(',')"}
"""

ANY_OPERATION = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: team-label}
spec:
  emitWarning: true
  rules:
    - name: team
      match:
        any:
          - resources: {kinds: [ConfigMap]}
      validate:
        failureAction: Audit
        cel:
          expressions: [{expression: "has(object.metadata.labels)", message: no labels}]
"""

NAMESPACED_VALIDATING_POLICY = """
apiVersion: policies.kyverno.io/v1
kind: NamespacedValidatingPolicy
metadata: {name: replicas, namespace: team-a}
spec:
  failurePolicy: Ignore
  matchConstraints:
    resourceRules:
      - apiGroups: [apps]
        apiVersions: [v1]
        operations: [UPDATE]
        resources: [deployments, deployments/scale]
  validations:
    - {expression: "object.spec.replicas <= 10", message: at most 10}
  auditAnnotations:
    - {key: replicas, valueExpression: "string(object.spec.replicas)"}
"""


def _imported(text: str) -> list[ImportedPolicy]:
    policies, refusals = import_documents(documents_from_text(text, "policy.yaml"))
    assert refusals == []
    return policies


def _one(text: str) -> ImportedPolicy:
    (policy,) = _imported(text)
    return policy


def _valid(documents: list[dict[str, Any]]) -> None:
    for document in documents:
        if document["apiVersion"].startswith("admissionregistration"):
            kubernetes_validate.validate(document, K8S, strict=True)
        assert problems(document) == []


def _one_sentence(message: str) -> None:
    assert message and ". " not in message.rstrip("."), message


def test_a_vap_exports_as_itself_field_by_field() -> None:
    original, original_binding = list(yaml.safe_load_all(VAP))
    policy, binding = export_policy_documents(_one(VAP), "vap")
    _valid([policy, binding])
    assert policy["spec"] == original["spec"]
    assert binding["metadata"]["name"] == "no-privileged-debug-web"
    assert binding["spec"] == original_binding["spec"]  # resourceNames, actions, as written


def test_a_vap_whose_binding_narrows_its_rules_is_not_a_validating_policy() -> None:
    with pytest.raises(NotExportable, match=r"spec\.matchResources\.resourceRules") as caught:
        export_policy_documents(_one(VAP), "kyverno")
    _one_sentence(str(caught.value))
    # without the binding's rules it is one: the binding's selectors join the policy's
    documents = list(yaml.safe_load_all(VAP))
    documents[1]["spec"]["matchResources"] = {"objectSelector": {"matchLabels": {"tier": "web"}}}
    text = yaml.safe_dump_all(documents)
    (kyverno,) = export_policy_documents(_one(text), "kyverno")
    assert problems(kyverno) == []
    constraints = kyverno["spec"]["matchConstraints"]
    assert constraints["objectSelector"] == {"matchLabels": {"team": "a", "tier": "web"}}
    assert constraints["resourceRules"] == documents[0]["spec"]["matchConstraints"]["resourceRules"]
    assert constraints["excludeResourceRules"][0]["resourceNames"] == ["debug"]
    assert constraints["matchPolicy"] == "Exact"
    assert kyverno["spec"]["validationActions"] == ["Warn", "Audit"]
    assert kyverno["spec"]["failurePolicy"] == "Ignore"
    assert kyverno["spec"]["auditAnnotations"] == documents[0]["spec"]["auditAnnotations"]
    assert kyverno["spec"]["autogen"] == {"podControllers": {"controllers": []}}  # as a VAP


def test_a_cluster_policy_rule_keeps_its_operations_subresources_and_names() -> None:
    policy, binding = export_policy_documents(_one(CLUSTER_POLICY), "vap")
    _valid([policy, binding])
    constraints = policy["spec"]["matchConstraints"]
    assert constraints["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "CONNECT"],
            "resources": ["pods", "pods/ephemeralcontainers", "pods/exec"],
            "resourceNames": ["web-0"],
        }
    ]
    assert constraints["excludeResourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "resourceNames": ["debug"],
        }
    ]
    assert constraints["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["prod"]}
        ]
    }
    assert constraints["objectSelector"] == {"matchLabels": {"app": "web"}}
    assert policy["spec"]["failurePolicy"] == "Ignore"
    assert policy["spec"]["matchConditions"] == [
        {"name": "has-containers", "expression": "has(object.spec.containers)"}
    ]
    assert policy["spec"]["auditAnnotations"][0]["key"] == "images"
    assert binding["spec"]["validationActions"] == ["Deny"]  # Enforce


def test_a_cluster_policy_rule_without_operations_admits_every_operation() -> None:
    policy, binding = export_policy_documents(_one(ANY_OPERATION), "vap")
    _valid([policy, binding])
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE", "UPDATE", "DELETE", "CONNECT"] == KYVERNO_OPERATIONS
    assert rule["resources"] == ["configmaps"]
    assert binding["spec"]["validationActions"] == ["Audit", "Warn"]  # Audit + emitWarning
    (kyverno,) = export_policy_documents(_one(ANY_OPERATION), "kyverno")
    assert kyverno["spec"]["matchConstraints"]["resourceRules"] == [rule]
    assert "evaluation" not in kyverno["spec"]
    # a policy Kyverno runs only at admission, or only in the background, stays so
    for field in ("admission", "background"):
        text = ANY_OPERATION.replace("emitWarning: true", f"emitWarning: true\n  {field}: false")
        (kyverno,) = export_policy_documents(_one(text), "kyverno")
        assert kyverno["spec"]["evaluation"] == {field: {"enabled": False}}
        assert problems(kyverno) == []


def test_a_namespaced_validating_policy_judges_its_namespace_only() -> None:
    original = yaml.safe_load(NAMESPACED_VALIDATING_POLICY)
    policy, binding = export_policy_documents(_one(NAMESPACED_VALIDATING_POLICY), "vap")
    _valid([policy, binding])
    constraints = policy["spec"]["matchConstraints"]
    (rule,) = constraints["resourceRules"]
    assert rule == {**original["spec"]["matchConstraints"]["resourceRules"][0],
                    "scope": "Namespaced"}  # fmt: skip
    assert constraints["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}
    ]
    for key in ("failurePolicy", "validations", "auditAnnotations"):
        assert policy["spec"][key] == original["spec"][key]
    assert binding["spec"]["validationActions"] == ["Deny"]  # Kyverno's default


def _gatekeeper() -> ImportedPolicy:
    template = CORPUS / "gatekeeper-host-network" / "template.yaml"
    samples = sorted((CORPUS / "gatekeeper-host-network" / "samples").rglob("constraint.yaml"))
    policies, refusals = import_documents(read_files([template, samples[0]]))
    assert refusals == [] and len(policies) == 1
    return policies[0]


def test_a_gatekeeper_constraint_exports_as_gatekeeper_binds_it() -> None:
    gatekeeper = _gatekeeper()
    policy, binding, params = export_policy_documents(gatekeeper, "vap")
    _valid([policy, binding])
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        assert rule["operations"] == ["CREATE", "UPDATE"]  # Gatekeeper's webhook's
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["paramKind"]["kind"] == params["kind"]
    assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Allow"
    assert params == gatekeeper.documents[-1]


REFUSALS = [
    ("validationFailureActionOverrides", CLUSTER_POLICY,
     lambda d: d["spec"].update(validationFailureActionOverrides=[
         {"action": "Audit", "namespaces": ["dev"]}])),
    ("failureActionOverrides", CLUSTER_POLICY,
     lambda d: d["spec"]["rules"][0]["validate"].update(failureActionOverrides=[
         {"action": "Audit", "namespaces": ["dev"]}])),
    ("applyRules", CLUSTER_POLICY,
     lambda d: d["spec"].update(applyRules="One", rules=[
         d["spec"]["rules"][0], {**d["spec"]["rules"][0], "name": "again"}])),
    ("spec.admission", CLUSTER_POLICY, lambda d: d["spec"].update(admission=False)),
    ("spec.evaluation.admission.enabled", NAMESPACED_VALIDATING_POLICY,
     lambda d: d["spec"].update(evaluation={"admission": {"enabled": False}})),
    ("auditAnnotations", NAMESPACED_VALIDATING_POLICY.replace(
        "apps]", "'']").replace("deployments, deployments/scale", "pods").replace(
        "NamespacedValidatingPolicy", "ValidatingPolicy").replace("object.spec.replicas", "1"),
     lambda d: None),
]  # fmt: skip


@pytest.mark.parametrize(("field", "text", "change"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_what_has_no_counterpart_is_refused_naming_the_field(
    field: str, text: str, change: Any
) -> None:
    document = yaml.safe_load(text)
    change(document)
    policy = _one(yaml.safe_dump(document))
    with pytest.raises(NotExportable) as caught:
        export_policy_documents(policy, "vap")
    assert field in str(caught.value)
    _one_sentence(str(caught.value))


STORED_EARLIER = [
    # (which policy, which stored document, where the field sits, the field the model refuses)
    ("vap", 0, ("spec",), "surprise"),
    ("vap", 0, ("spec", "matchConstraints"), "surprise"),
    ("vap", 0, ("spec", "validations", 0), "severity"),
    ("vap", 1, ("spec",), "surprise"),
    ("vap", 1, ("spec", "matchResources"), "surprise"),
    ("validating-policy", 0, ("spec",), "surprise"),
    ("validating-policy", 0, ("spec", "evaluation"), "surprise"),
    ("cluster-policy", 0, ("spec", "rules", 0, "validate", "cel", "auditAnnotations", 0),
     "surprise"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("source", "index", "path", "field"),
    STORED_EARLIER,
    ids=[f"{s[0]}-{s[1]}-{'.'.join(map(str, s[2]))}" for s in STORED_EARLIER],
)
def test_a_stored_document_holding_what_the_model_refuses_is_refused_naming_it(
    source: str, index: int, path: tuple[Any, ...], field: str
) -> None:
    """A policy stored by an earlier import may hold a field the admission model does not
    know: its export is refused, naming the field, never written without it."""
    text = {
        "vap": VAP,
        "validating-policy": NAMESPACED_VALIDATING_POLICY.replace(
            "NamespacedValidatingPolicy", "ValidatingPolicy"
        ),
        "cluster-policy": CLUSTER_POLICY,
    }[source]
    policy = _one(text)
    documents = copy.deepcopy(policy.documents)
    target: Any = documents[index]
    for key in path:  # a block the document leaves out is written, holding the field
        target = target.setdefault(key, {}) if isinstance(target, dict) else target[key]
    target[field] = "kept?"
    stored = policy.model_copy(update={"documents": documents})
    for fmt in ("vap", "kyverno"):
        try:
            exported = export_policy_documents(stored, fmt)  # type: ignore[arg-type]
        except NotExportable as exc:
            assert field in str(exc), str(exc)
            _one_sentence(str(exc))
        else:
            pytest.fail(f"exported as {fmt} without {field}: {exported}")


def test_a_scoped_gatekeeper_action_is_refused_naming_the_field() -> None:
    gatekeeper = _gatekeeper()
    constraint = copy.deepcopy(gatekeeper.documents[-1])
    constraint["spec"]["enforcementAction"] = "scoped"
    scoped = gatekeeper.model_copy(update={"documents": [gatekeeper.documents[0], constraint]})
    with pytest.raises(NotExportable, match=r"spec\.enforcementAction is 'scoped'") as caught:
        export_policy_documents(scoped, "vap")
    _one_sentence(str(caught.value))


# -- the corpus: every policy's export matches what its original matches ---------------------


def _corpus_policies() -> list[ImportedPolicy]:
    sets = sorted({f.policy_files for f in read_library(CORPUS).fixtures})
    out: dict[str, ImportedPolicy] = {}
    for files in sets:
        policies, _ = import_documents(read_files([Path(file) for file in files]))
        out.update({p.name: p for p in policies})
    return list(out.values())


def _entries(match: dict[str, Any]) -> list[dict[str, Any]]:
    return list(match.get("any") or [{"resources": match.get("resources")}])


def _kyverno_operations(description: dict[str, Any]) -> list[str]:
    return [op for op in KYVERNO_OPERATIONS if op in (description.get("operations") or
                                                       KYVERNO_OPERATIONS)]  # fmt: skip


def test_every_corpus_export_matches_its_originals_requests_field_by_field() -> None:
    """Operations, resources and subresources, names, selectors and the rest of the match,
    compared with the original document itself (not through a round trip)."""
    compared = set()
    for policy in _corpus_policies():
        if engine_only(policy, "vap"):  # Kyverno's exceptions or reads: refused, and said so
            with pytest.raises(NotExportable, match="Kyverno"):
                export_policy_documents(policy, "vap")
            continue
        exported = export_policy_documents(policy, "vap")
        _valid([d for d in exported if d["kind"] != "ConfigMap"])
        policies = [d for d in exported if d["kind"] == "ValidatingAdmissionPolicy"]
        original = policy.documents[0]
        if policy.format in ("vap", "kyverno-validatingpolicy"):
            own = policies[0]["spec"]
            for key in VAP_SPEC_FIELDS:
                if key in original["spec"]:
                    assert own[key] == original["spec"][key], (policy.name, key)
        elif policy.format == "kyverno-clusterpolicy":
            rules = {r["name"]: r for r in original["spec"]["rules"]}
            for exported_policy in policies[: len([r for r in policy.rules
                                                   if not r.pod_controllers])]:  # fmt: skip
                constraints = exported_policy["spec"]["matchConstraints"]
                wanted = [
                    _kyverno_operations(entry["resources"])
                    for rule in rules.values()
                    for entry in _entries(rule["match"])
                ]
                for rule in constraints["resourceRules"]:
                    assert rule["operations"] in wanted, policy.name
                    if "pods" in rule["resources"]:  # as Kyverno's webhook matches a Pod rule
                        assert "pods/ephemeralcontainers" in rule["resources"]
        else:
            for rule in policies[0]["spec"]["matchConstraints"]["resourceRules"]:
                assert rule["operations"] == ["CREATE", "UPDATE"]
        compared.add(policy.format)
    assert compared == {"vap", "kyverno-validatingpolicy", "kyverno-clusterpolicy", "gatekeeper"}


# -- what the API server fills in after admission ---------------------------------------------


def _record(expression: str, kind: str = "deployments") -> ProbeRecord:
    now = datetime.now(UTC)
    probe = ProposedProbe(
        lookups=[ProbeLookup(tool="get", args={"kind": kind, "namespace": "prod"})],
        scope="each_object",
        expression=expression,
    )
    return ProbeRecord(
        check_id="chk-ready", version=1, probe=probe, compiled_by_run="r", compiled_at=now,
        compiled_verdict=VerdictKind.TRUE, last_validated_at=now,
    )  # fmt: skip


READY = "object.status.?readyReplicas.orValue(0) >= 2"


@pytest.mark.parametrize(
    ("expression", "read"),
    [
        (READY, "object.status"),
        ("object.metadata.?uid.orValue('') != ''", "object.metadata.uid"),
        ("has(object.metadata.creationTimestamp)", "object.metadata.creationTimestamp"),
        ("object.metadata.?generation.orValue(0) < 5", "object.metadata.generation"),
    ],
)
def test_a_probe_over_what_admission_has_not_yet_exports_audit_only(
    expression: str, read: str
) -> None:
    exported = export_probe(_record(expression), "vap")
    policy, binding = exported.documents
    _valid([policy, binding])
    assert binding["spec"]["validationActions"] == ["Audit"]
    assert any(read in w and "after admission" in w for w in exported.warnings)
    assert exported.yaml().startswith(f"# warning: it reads {read}")
    for action in ("Deny", "Warn"):
        with pytest.raises(NotExportable, match=f"--action {action}") as caught:
            export_probe(_record(expression), "vap", action=action)  # type: ignore[arg-type]
        _one_sentence(str(caught.value))
    (kyverno,) = export_probe(_record(expression), "kyverno").documents
    assert kyverno["spec"]["validationActions"] == ["Audit"]


def test_a_status_probe_also_audits_status_updates_and_a_spec_probe_may_deny() -> None:
    policy, _ = export_probe(_record(READY), "vap").documents
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["deployments", "deployments/status"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    spec_only = export_probe(_record("object.spec.replicas >= 2"), "vap", action="Deny")
    policy, binding = spec_only.documents
    assert spec_only.warnings == []
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["deployments"]


def test_an_imported_policy_over_the_status_keeps_its_own_actions_and_is_never_raised() -> None:
    text = ANY_OPERATION.replace("has(object.metadata.labels)", "has(object.metadata.uid)")
    policy = _one(text)
    exported = export_policy(policy, "vap")
    assert exported.documents[1]["spec"]["validationActions"] == ["Audit", "Warn"]
    assert any("object.metadata.uid" in w for w in exported.warnings)
    with pytest.raises(NotExportable, match="--action Deny"):
        export_policy(policy, "vap", action="Deny")


# -- the admission schema ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "reason"),
    [
        (["pods/*", "pods/exec"], "if 'pods/*' is present"),
        (["*/status", "pods/status"], "if '*/status' is present"),
        (["*/*", "pods"], "if '*/*' is present"),
        (["*", "pods"], "if '*' is present"),
    ],
)
def test_the_schema_refuses_what_the_api_server_refuses_in_resources(
    resources: list[str], reason: str
) -> None:
    policy, _ = export_policy_documents(_one(VAP), "vap")
    assert problems(policy) == []
    broken = copy.deepcopy(policy)
    broken["spec"]["matchConstraints"]["resourceRules"][0]["resources"] = resources
    assert any(reason in p for p in problems(broken)), problems(broken)
    allowed = copy.deepcopy(policy)
    allowed["spec"]["matchConstraints"]["resourceRules"][0]["resources"] = ["*", "pods/status"]
    assert problems(allowed) == []


def test_the_schema_refuses_an_audit_annotation_key_the_api_server_would() -> None:
    policy, _ = export_policy_documents(_one(VAP), "vap")
    broken = copy.deepcopy(policy)
    broken["spec"]["auditAnnotations"][0]["key"] = "not a key"
    assert any("audit annotation" in p for p in problems(broken)), problems(broken)
