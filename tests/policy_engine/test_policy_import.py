"""`assay probe import`'s reading of admission policies: what each format becomes, and what is
refused with its reason (workers/policy_engine/policies/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.policy import ImportedPolicy, ImportRefusal, KindRef, policy_reference
from workers.policy_engine.policies.documents import UnreadableFile, documents_from_text, read_files
from workers.policy_engine.policies.importer import import_documents

VAP = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replicas}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
      - apiGroups: [apps]
        apiVersions: [v1]
        operations: [CREATE, UPDATE]
        resources: [deployments]
  matchConditions:
    - {name: not-paused, expression: "!has(object.spec.paused)"}
  variables:
    - {name: wanted, expression: "int(params.data.replicas)"}
  validations:
    - expression: "object.spec.replicas >= variables.wanted"
      messageExpression: "'fewer than ' + params.data.replicas + ' replicas'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replicas-prod}
spec:
  policyName: replicas
  validationActions: [Deny]
  paramRef: {name: replica-floor, namespace: params, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector: {matchLabels: {env: prod}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: replica-floor, namespace: params}
data: {replicas: "2"}
"""

GATEKEEPER = """
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: labels}
spec:
  crd: {spec: {names: {kind: NeedLabels}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      code:
        - engine: K8sNativeValidation
          source:
            validations:
              - expression: >-
                  variables.params.labels.all(l, l in variables.anyObject.metadata.labels)
        - engine: Rego
          source: {rego: "package labels"}
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: NeedLabels
metadata: {name: prod-labels}
spec:
  enforcementAction: warn
  match:
    kinds: [{apiGroups: ["apps", ""], kinds: [Deployment, Pod]}]
    namespaces: [prod]
    excludedNamespaces: ["kube-*"]
  parameters: {labels: [team]}
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: NeedLabels
metadata: {name: all-labels}
spec:
  match: {kinds: [{apiGroups: [""], kinds: [Namespace]}]}
  parameters: {labels: [owner]}
"""


def _import(text: str) -> tuple[list[ImportedPolicy], list[ImportRefusal]]:
    return import_documents(documents_from_text(text, "test.yaml"))


def _only(text: str) -> ImportedPolicy:
    policies, refusals = _import(text)
    assert refusals == [] and len(policies) == 1, refusals
    return policies[0]


def _refusal(text: str) -> str:
    policies, refusals = _import(text)
    assert policies == [] and len(refusals) == 1, (policies, refusals)
    return refusals[0].reason


def test_a_vap_with_its_binding_and_params_object_is_one_policy() -> None:
    policy = _only(VAP)
    assert policy.name == "replicas" and policy.format == "vap"
    assert policy.params == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "replica-floor", "namespace": "params"},
        "data": {"replicas": "2"},
    }
    assert policy.validation_actions == ["Deny"]
    (rule,) = policy.rules
    (group,) = rule.match
    constraints, binding = group  # the policy's constraints and the binding's, both must hold
    assert constraints.kinds == [KindRef(group="apps", version="v1", name="deployments")]
    assert binding.kinds is None and binding.namespace_selector is not None
    assert binding.namespace_selector.match_labels == {"env": "prod"}
    assert [c.name for c in rule.match_conditions] == ["not-paused"]
    assert [v.name for v in rule.variables] == ["wanted"]
    assert (
        rule.validations[0].message_expression
        == "'fewer than ' + params.data.replicas + ' replicas'"
    )
    assert len(policy.documents) == 3


SECOND_BINDING = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replicas-staging}
spec:
  policyName: replicas
  validationActions: [Audit]
  paramRef: {name: replica-floor, namespace: params, parameterNotFoundAction: Deny}
"""


def test_several_bindings_make_one_policy_each_named_by_its_binding() -> None:
    policies, refusals = _import(VAP + SECOND_BINDING)
    assert refusals == []
    assert sorted(p.name for p in policies) == ["replicas-prod", "replicas-staging"]


def test_a_bindings_exclusions_narrow_its_own_policy_only() -> None:
    """Each binding is its own policy: what one binding's matchResources leaves out is still
    judged under the next (left out there too, a violation would pass unseen)."""
    excluding = VAP.replace(
        "    namespaceSelector: {matchLabels: {env: prod}}\n",
        "    namespaceSelector: {matchLabels: {env: prod}}\n"
        "    excludeResourceRules:\n"
        "      - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE],\n"
        "         resources: [deployments], resourceNames: [legacy]}\n",
    )
    assert excluding != VAP
    policies, refusals = _import(excluding + SECOND_BINDING)
    assert refusals == []
    by_name = {p.name: p.rules[0] for p in policies}
    assert [names for group in by_name["replicas-prod"].exclude for f in group
            for names in [f.names]] == [["legacy"]]  # fmt: skip
    assert by_name["replicas-staging"].exclude == []


def test_params_not_in_the_files_are_read_from_the_target() -> None:
    without_params = VAP.rsplit("---", 1)[0]
    (policy,), refusals = _import(without_params)
    assert refusals == []
    assert policy.params is None and policy.param_source is not None
    assert policy.param_source.name == "replica-floor"
    assert policy.param_source.not_found_action == "Deny"


def test_a_gatekeeper_template_is_one_policy_per_constraint() -> None:
    policies, refusals = _import(GATEKEEPER)
    assert refusals == []
    by_name = {p.name: p for p in policies}
    assert set(by_name) == {"prod-labels", "all-labels"}
    prod = by_name["prod-labels"]
    assert prod.format == "gatekeeper" and prod.policy_name == "labels"
    assert prod.validation_actions == ["Warn"]
    params = prod.params
    assert isinstance(params, dict) and isinstance(params["spec"], dict)
    assert params["spec"]["parameters"] == {"labels": ["team"]}
    (rule,) = prod.rules
    # Gatekeeper's own variables come first: the constraint's parameters, and the object
    assert [v.name for v in rule.variables][:2] == ["params", "anyObject"]
    (term,) = rule.match[0]
    assert {(k.group, k.name) for k in term.kinds or []} == {
        ("apps", "Deployment"),
        ("", "Deployment"),
        ("apps", "Pod"),
        ("", "Pod"),
    }
    assert term.namespaces == ["prod"] and term.excluded_namespaces == ["kube-*"]


def test_a_template_without_its_constraint_or_without_cel_is_refused() -> None:
    template = GATEKEEPER.split("---")[0]
    assert "no NeedLabels constraint of it is in the files" in _refusal(template)
    rego_only = template.replace("engine: K8sNativeValidation", "engine: Other")
    assert (
        "no K8sNativeValidation code"
        in _import(rego_only + "---" + GATEKEEPER.split("---")[1])[1][0].reason
    )


KYVERNO_VP = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: no-root}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  validations:
    - expression: "object.spec.containers.all(c, c.?securityContext.?runAsUser.orValue(1) != 0)"
      message: no container runs as root
"""


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        # Kyverno's CRD holds the actions to Deny, Audit and Warn
        ("validationActions: [Audit]", "validationActions: [Block]", "validationActions.0"),
        # and a webhook configuration to its timeout
        (
            "validationActions: [Audit]",
            "validationActions: [Audit]\n  webhookConfiguration: {timeoutSeconds: 5, retries: 2}",
            "webhookConfiguration.retries",
        ),
    ],
)
def test_a_validating_policy_its_crd_refuses_is_refused_naming_the_field(
    old: str, new: str, field: str
) -> None:
    assert f"spec.{field}" in _refusal(KYVERNO_VP.replace(old, new))


def test_a_validating_policy_with_a_webhook_timeout_is_imported() -> None:
    text = KYVERNO_VP.replace(
        "validationActions: [Audit]",
        "validationActions: [Audit]\n  webhookConfiguration: {timeoutSeconds: 5}",
    )
    assert _only(text).validation_actions == ["Audit"]


def test_a_kyverno_validating_policy_on_pods_judges_their_controllers_too() -> None:
    policy = _only(KYVERNO_VP)
    assert policy.format == "kyverno-validatingpolicy"
    pods, controllers, cronjobs = policy.rules
    assert pods.pod_controllers is None
    assert controllers.pod_controllers == cronjobs.pod_controllers == "no-root"
    kinds = {k.name for term in controllers.match[0] for k in term.kinds or []}
    assert kinds == {"DaemonSet", "Deployment", "Job", "StatefulSet", "ReplicaSet"}
    assert controllers.validations[0].expression.startswith(
        "object.spec.template.spec.containers.all("
    )
    assert cronjobs.validations[0].expression.startswith(
        "object.spec.jobTemplate.spec.template.spec.containers.all("
    )
    assert controllers.validations[0].message == "no container runs as root"


def test_autogen_can_be_turned_off_and_is_not_applied_to_other_kinds() -> None:
    off = KYVERNO_VP.replace(
        "spec:\n  validationActions",
        "spec:\n  autogen: {podControllers: {controllers: []}}\n  validationActions",
    )
    assert len(_only(off).rules) == 1
    services = KYVERNO_VP.replace("resources: [pods]", "resources: [services]")
    assert len(_only(services).rules) == 1


CLUSTER_POLICY = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: labels}
spec:
  validationFailureAction: Enforce
  rules:
    - name: team-label
      match:
        any:
          - resources: {kinds: [Pod], namespaces: ["team-*"]}
      exclude:
        any:
          - resources: {namespaces: [team-sandbox]}
      celPreconditions:
        - {name: not-system, expression: "object.metadata.namespace != 'kube-system'"}
      validate:
        cel:
          expressions:
            - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
              message: pods carry a team label
    - name: mutate-something
      match: {any: [{resources: {kinds: [Pod]}}]}
      mutate: {patchStrategicMerge: {metadata: {labels: {a: b}}}}
"""


def test_a_cluster_policy_imports_its_cel_rules_with_kyvernos_autogen_names() -> None:
    policy = _only(CLUSTER_POLICY)
    assert policy.format == "kyverno-clusterpolicy"
    assert policy.validation_actions == ["Deny"]
    assert [r.name for r in policy.rules] == [
        "team-label",
        "autogen-team-label",
        "autogen-cronjob-team-label",
    ]
    rule = policy.rules[0]
    assert rule.match[0][0].namespaces == ["team-*"]
    assert rule.exclude[0][0].namespaces == ["team-sandbox"]
    assert rule.match_conditions[0].name == "not-system"
    # object.metadata.namespace is the controller's, not rewritten into its template
    assert (
        policy.rules[1].match_conditions[0].expression
        == "object.metadata.namespace != 'kube-system'"
    )
    assert "object.spec.template.metadata.labels" in policy.rules[1].validations[0].expression


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            ("has(object.metadata.labels)", "request.options.fieldManager != ''"),
            "it reads request.options",
        ),
        (
            ("has(object.metadata.labels)", "request.userInfo.username != ''"),
            "it reads request.userInfo",
        ),
        (
            ("has(object.metadata.labels)", "authorizer.requestResource.check('get').allowed()"),
            "asks the authorizer",
        ),
        (
            ("has(object.metadata.labels)", "resource.Get('v1', 'configmaps', 'a', 'b') != null"),
            "Kyverno's resource library",
        ),
        (("has(object.metadata.labels)", "params.x == 1"), "no params object was given"),
        (
            ("kinds: [Pod], namespaces", "kinds: [Pod], operations: [DELETE], namespaces"),
            "judges only DELETE requests",
        ),
        (("kinds: [Pod], namespaces", "kinds: ['*'], namespaces"), "names kinds by the pattern"),
        (
            (
                "      celPreconditions:",
                "      preconditions: {any: [{key: a, operator: Equals, value: b}]}\n"
                "      celPreconditions:",
            ),
            "JMESPath preconditions",
        ),
        (
            (
                "          - resources: {namespaces: [team-sandbox]}",
                "          - subjects: [{kind: User, name: bob}]",
            ),
            "matches subjects (who makes the request)",
        ),
        (
            (
                "        cel:\n          expressions:",
                "        pattern: {metadata: {labels: {team: '?*'}}}\n"
                "        cel:\n          expressions:",
            ),
            None,
        ),
    ],
)
def test_what_a_stored_object_cannot_answer_is_refused_with_the_reason(
    change: tuple[str, str], reason: str | None
) -> None:
    old, new = change
    assert old in CLUSTER_POLICY
    text = CLUSTER_POLICY.replace(old, new, 1)
    if reason is None:  # a pattern beside CEL is still a CEL rule: imported
        assert _import(text)[0]
        return
    got = _refusal(text)
    assert reason in got, got
    assert got.startswith(("rule team-label", "it ")), got  # one sentence, saying where


ASKS_AUTHORIZER = "authorizer.requestResource.check('get').allowed()"
VAP_VALIDATION = """    - expression: "object.spec.replicas >= variables.wanted"
      messageExpression: "'fewer than ' + params.data.replicas + ' replicas'"
"""


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        (  # a variable before a match condition
            [("int(params.data.replicas)", "request.options.fieldManager"),
             ("!has(object.spec.paused)", ASKS_AUTHORIZER)],
            "it reads request.options",
        ),
        (  # a match condition before a validation
            [("!has(object.spec.paused)", "request.userInfo.username != ''"),
             ("object.spec.replicas >= variables.wanted", ASKS_AUTHORIZER)],
            "it reads request.userInfo",
        ),
        (  # a validation's messageExpression before the next validation
            [(VAP_VALIDATION, VAP_VALIDATION.replace(
                "'fewer than ' + params.data.replicas + ' replicas'", "request.userInfo.username")
              + f'    - expression: "{ASKS_AUTHORIZER}"\n')],
            "it reads request.userInfo",
        ),
    ],
)  # fmt: skip
def test_of_two_refused_expressions_the_first_in_the_document_is_named(
    changes: list[tuple[str, str]], reason: str
) -> None:
    text = VAP
    for old, new in changes:
        assert old in text
        text = text.replace(old, new, 1)
    got = _refusal(text)
    assert reason in got, got


def test_a_pattern_rule_or_no_cel_at_all_is_refused() -> None:
    pattern = CLUSTER_POLICY.replace(
        "        cel:\n"
        "          expressions:\n"
        '            - expression: "has(object.metadata.labels) && '
        "'team' in object.metadata.labels\"\n"
        "              message: pods carry a team label\n",
        "        pattern: {metadata: {labels: {team: '?*'}}}\n",
    )
    assert "validates with a pattern or deny conditions, not CEL" in _refusal(pattern)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("resources: [deployments]", "resources: ['*']"), "matches every resource"),
        (("resources: [deployments]", "resources: [pods/exec]"), "names only subresources"),
        (("operations: [CREATE, UPDATE]", "operations: [CONNECT]"), "judges only CONNECT"),
        (  # names in a later rule narrowed the earlier rule's kinds to them: its objects unseen
            (
                "        resources: [deployments]\n",
                "        resources: [deployments]\n"
                "      - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], "
                "resources: [configmaps], resourceNames: [special]}\n",
            ),
            "names objects in some resource rules and not in others",
        ),
        (
            (
                "        resources: [deployments]\n",
                "        resources: [deployments]\n        resourceNames: [web]\n"
                "      - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], "
                "resources: [configmaps], resourceNames: [special]}\n",
            ),
            "names objects in some resource rules and not in others",
        ),
        (
            (
                '    - expression: "object.spec.replicas >= variables.wanted"\n'
                "      messageExpression: \"'fewer than ' + params.data.replicas + ' replicas'\"\n",
                "  auditAnnotations: [{key: a, valueExpression: \"'x'\"}]\n",
            ),
            "no validations",
        ),
    ],
)
def test_vap_shapes_that_judge_no_stored_object_are_refused(
    change: tuple[str, str], reason: str
) -> None:
    old, new = change
    assert old in VAP
    got = _refusal(VAP.replace(old, new, 1))
    assert reason in got, got


def test_documents_no_policy_uses_are_reported_not_dropped() -> None:
    binding = VAP.split("---")[1]
    policies, refusals = _import(
        binding + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"
    )
    assert policies == []
    reasons = {r.kind: r.reason for r in refusals}
    assert (
        "binds the policy 'replicas', which is not in the files"
        in reasons["ValidatingAdmissionPolicyBinding"]
    )
    assert "is not a policy this import reads" in reasons["Deployment"]


def test_two_policies_with_one_name_refuse_the_later() -> None:
    policies, refusals = _import(KYVERNO_VP + "---\n" + KYVERNO_VP)
    assert len(policies) == 1
    assert "already has this name" in refusals[0].reason


def test_files_are_read_together_and_unreadable_ones_named(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(VAP.split("---")[0])
    (tmp_path / "rest.yaml").write_text("---".join(VAP.split("---")[1:]))
    policies, refusals = import_documents(
        read_files([tmp_path / "policy.yaml", tmp_path / "rest.yaml"])
    )
    assert refusals == [] and policies[0].params is not None
    (tmp_path / "bad.yaml").write_text("a: [b\n")
    with pytest.raises(UnreadableFile, match=r"bad\.yaml is not YAML or JSON"):
        read_files([tmp_path / "bad.yaml"])
    with pytest.raises(UnreadableFile, match="cannot be read"):
        read_files([tmp_path / "missing.yaml"])


# Two anchors: a thousand values, then two thousand aliases of them (2,000,000 values from
# 10 KB of text); nine levels of ten ("billion laughs") hang the reader for hours.
ALIAS_BOMB = (
    "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n"
    "metadata:\n  name: bomb\n  annotations:\n"
    f"    a: &a [{', '.join(['x'] * 1000)}]\n"
    f"    b: [{', '.join(['*a'] * 2000)}]\n"
    "spec: {validations: [{expression: 'true'}]}\n"
)


@pytest.mark.parametrize(
    ("text", "why"),
    [(ALIAS_BOMB, "aliases expand past 1,000,000 values"), ("a: &a [*a]\n", "refers to itself")],
    ids=["expansion", "self-reference"],
)
def test_aliases_that_expand_without_bound_are_refused(text: str, why: str) -> None:
    with pytest.raises(UnreadableFile, match=f"bomb.yaml is not YAML or JSON.*{why}"):
        documents_from_text(text, "bomb.yaml")
    kept = "a: &a {x: 1}\nb: [*a, *a]\n"  # an alias as people use one still reads
    assert documents_from_text(kept, "ok.yaml")[0].document == {"a": {"x": 1}, "b": [{"x": 1}] * 2}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("policy:replicas", ("policy", "replicas")),
        ("  policy-set:baseline ", ("set", "baseline")),
        ("policy: replicas must hold", None),
        ("policy:Replicas", None),
        ("every pod has a policy:label", None),
    ],
)
def test_only_exact_references_name_a_policy(text: str, expected: tuple[str, str] | None) -> None:
    ref = policy_reference(text)
    assert (None if ref is None else (ref.kind, ref.name)) == expected
