"""Builders for the tests of imported Kyverno and admission policies: a cluster written as a
snapshot folder, the objects it holds, policy texts
of one resource rule, and a policy imported with ``assay probe import --dry-run``. Kept in
one place so each test file says only what its policy and its objects are."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import run_cli
from workers.engine.toolsets.snapshot_backend import SnapshotBackend

API_VERSIONS = {
    "ValidatingPolicy": "policies.kyverno.io/v1",
    "NamespacedValidatingPolicy": "policies.kyverno.io/v1",
    "ValidatingAdmissionPolicy": "admissionregistration.k8s.io/v1",
}


def write_objects(folder: Path, *objects: dict[str, Any]) -> Path:
    """``folder`` holding exactly ``objects``, one JSON file each (what it held is gone).
    JSON writes a NUL as \\u0000, as the API server's JSON holds it."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for number, obj in enumerate(objects):
        (folder / f"{number}.json").write_text(json.dumps(obj))
    return folder


def snapshot_of(folder: Path, *objects: dict[str, Any]) -> SnapshotBackend:
    """A stored cluster of ``objects``, written to ``folder``."""
    return SnapshotBackend(write_objects(folder, *objects))


def pod(
    name: str, namespace: str, image: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Pod of one container ``app`` running ``image``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "app", "image": image}]},
    }


def deployment(name: str, namespace: str, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A Deployment whose pods (labelled ``app: name``) are ``pod_spec``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    }


def config_map(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def policy_text(
    name: str, resource: str, rest: str, *, kind: str = "ValidatingPolicy", spec: str = ""
) -> str:
    """A policy of ``kind`` matching the CREATE of ``resource`` (core v1): ``spec`` is the
    lines written before its matchConstraints, ``rest`` those after (each indented 2).
    ``name`` is written into the metadata's flow mapping: ``"web, namespace: shop"`` names
    a namespaced policy's namespace too."""
    return f"""
apiVersion: {API_VERSIONS[kind]}
kind: {kind}
metadata: {{name: {name}}}
spec:
{spec}  matchConstraints:
    resourceRules:
      - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [{resource}]}}
{rest}"""


def dry_import(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, folder: Path, text: str
) -> tuple[int, str]:
    """(exit code, output folded to one line) of ``assay probe import --dry-run`` of
    ``text`` written as policy.yaml in ``folder``."""
    monkeypatch.chdir(folder)
    (folder / "policy.yaml").write_text(text)
    code, out, err = run_cli(capsys, "probe", "import", "policy.yaml", "--dry-run")
    return code, " ".join((out + err).split())
