"""Kyverno's fine-grained PolicyExceptions (``images``, ``allowedValues``) are served as
Kyverno serves them: a ValidatingPolicy reads ``exceptions.allowedImages`` and
``exceptions.allowedValues``, per object the lists of every exception whose conditions
match it, in order (empty lists when none does, and for a policy without exceptions). A
full exemption found leaves the object unjudged whatever the grants; an error in an
exception's condition before one is found is the policy's error for that object."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.policy import PolicyResult
from tests.cli_support import run_cli as run
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.run import run_policies
from workers.policy_engine.probes.export import NotExportable, export_policy_documents

# Pods add only the capabilities of the list, or those their PolicyExceptions grant their
# image; a policy reading exceptions in a variable, a match condition and its message too.
CAPABILITIES = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: capabilities}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  matchConditions:
    - name: not-waived
      expression: "!('WAIVED' in exceptions.allowedValues)"
  variables:
    - name: allowed
      expression: "['CHOWN', 'KILL']"
    - name: granted
      expression: "exceptions.allowedValues"
  validations:
    - expression: >-
        object.spec.containers.all(c,
          c.?securityContext.?capabilities.?add.orValue([]).all(cap,
            cap in variables.allowed ||
            (c.image in exceptions.allowedImages && cap in variables.granted)))
      messageExpression: "'granted: ' + exceptions.allowedValues.join(',')"
"""


def _grant(
    name: str, conditions: list[str], images: list[str] | None, values: list[str] | None
) -> str:
    spec: dict[str, Any] = {
        "policyRefs": [{"name": "capabilities", "kind": "ValidatingPolicy"}],
        "matchConditions": [
            {"name": f"c{number}", "expression": text} for number, text in enumerate(conditions)
        ],
    }
    if images is not None:
        spec["images"] = images
    if values is not None:
        spec["allowedValues"] = values
    document = {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "PolicyException",
        "metadata": {"name": name, "namespace": "kyverno"},
        "spec": spec,
    }
    return yaml.safe_dump(document)


IN_LAB = "object.metadata.namespace == 'lab'"
LAB_NGINX = _grant("lab-nginx", [IN_LAB], ["nginx:1.27"], ["NET_ADMIN"])


def _pod(name: str, namespace: str, image: str, add: list[str], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "containers": [
                {"name": "app", "image": image, "securityContext": {"capabilities": {"add": add}}}
            ]
        },
    }


def _deployment(name: str, namespace: str, image: str, add: list[str]) -> dict[str, Any]:
    pod = _pod(name, namespace, image, add)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod["spec"]},
        },
    }


OBJECTS = [
    _pod("plain", "shop", "nginx:1.27", ["CHOWN"]),  # the list allows it
    _pod("lab-web", "lab", "nginx:1.27", ["NET_ADMIN"]),  # granted: lab, its image
    _pod("lab-tool", "lab", "busybox:1", ["NET_ADMIN"]),  # lab, not its image
    _pod("shop-web", "shop", "nginx:1.27", ["NET_ADMIN"]),  # its image, not in lab
    _deployment("lab-app", "lab", "nginx:1.27", ["NET_ADMIN"]),  # Kyverno's pod-controller form
]


def _backend(folder: Path, objects: list[dict[str, Any]]) -> SnapshotBackend:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for number, obj in enumerate(objects):
        (folder / f"{number}.json").write_text(json.dumps(obj))
    return SnapshotBackend(folder)


def _run(tmp_path: Path, *texts: str, objects: list[dict[str, Any]] = OBJECTS) -> PolicyResult:
    policies, refusals = import_documents(documents_from_text("---\n".join(texts), "p.yaml"))
    assert refusals == [] and len(policies) == 1, refusals
    (result,), _ = run_policies(policies, _backend(tmp_path / "cluster", objects))
    return result


def _violations(result: PolicyResult) -> dict[str, str]:
    return {v.name: v.message for v in result.violations}


def test_a_fine_grained_exception_grants_its_lists_to_the_objects_it_matches(
    tmp_path: Path,
) -> None:
    result = _run(tmp_path, CAPABILITIES, LAB_NGINX)
    assert result.verdict == "false", result
    # lab-web and the lab Deployment are granted NET_ADMIN for nginx; shop-web's namespace
    # is not lab (no exception matches: empty lists), lab-tool's image is not granted
    assert _violations(result) == {"lab-tool": "granted: NET_ADMIN", "shop-web": "granted: "}
    assert result.judged_total == 5


def test_a_policy_reads_empty_lists_without_exceptions(tmp_path: Path) -> None:
    result = _run(tmp_path, CAPABILITIES)
    assert _violations(result) == {
        "lab-web": "granted: ",
        "lab-tool": "granted: ",
        "shop-web": "granted: ",
        "lab-app": "granted: ",
    }
