"""A policy the engines judge differently, for the translation tests: the API server reads a
field written as null as absent (``has()`` is false), Kyverno reads it as present, so a VAP
checking ``has(object.spec.replicas)`` and its Kyverno translation disagree on a Deployment
whose ``replicas`` is null."""

from __future__ import annotations

NULL_SENSITIVE = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replicas-set}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [apps]
        apiVersions: [v1]
        operations: [CREATE, UPDATE]
        resources: [deployments]
  validations:
    - {expression: "has(object.spec.replicas)", message: replicas must be set}
"""


def deployment(name: str, replicas: object) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": []}},
        },
    }
