"""A Kyverno ValidatingPolicy that uses Kyverno's own CEL libraries of pure functions
(``parseImageReference`` / ``image``, ``json.unmarshal`` / ``marshal``, ``hash.*``) judges a
stored cluster with `assay probe import` and `assay probe test`, as Kyverno does; a reference
that does not parse gives no verdict; the same calls in a ValidatingAdmissionPolicy (which
has no such library) are refused at import with the reason."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import run_cli as run

POLICY = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: images-by-library}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  variables:
    - name: images
      expression: "object.spec.containers.map(c, parseImageReference(c.image))"
    - name: allowed
      expression: >-
        json.unmarshal(object.metadata.?annotations[?'example.com/registries'].orValue('[]'))
  validations:
    - expression: "variables.images.all(i, i.registry() in variables.allowed)"
      messageExpression: >-
        'registry not allowed: ' + variables.images.map(i, i.registry()).join(', ')
    - expression: >-
        object.metadata.?labels[?'images-md5'].orValue('') in
        ['', hash.md5(json.marshal(object.spec.containers.map(c, c.image)))]
      message: the images-md5 label is the md5 of the images as JSON
"""


def _pod(name: str, image: str, registries: list[str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": labels,
            "annotations": {"example.com/registries": json.dumps(registries)},
        },
        "spec": {"containers": [{"name": "app", "image": image}]},
    }


def _write(folder: Path, *objects: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    for number, obj in enumerate(objects):
        (folder / f"{number}.json").write_text(json.dumps(obj))


@pytest.fixture
def store(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.integration
def test_kyverno_s_pure_libraries_judge_a_snapshot(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    (store / "policy.yaml").write_text(POLICY)
    code, out, err = run(capsys, "probe", "import", "policy.yaml")
    assert code == 0, out + err
    # the md5 Kyverno computes: Go's JSON of the list of images, no spaces
    checksum = hashlib.md5(b'["ghcr.io/org/api:1.2"]').hexdigest()
    pods = [
        _pod("ghcr", "ghcr.io/org/api:1.2", ["ghcr.io"], {"images-md5": checksum}),
        # Docker Hub is index.docker.io, however the reference is written
        _pod("hub", "nginx:1.25", ["index.docker.io"], {}),
        _pod("elsewhere", "quay.io/org/api:1.2", ["ghcr.io"], {}),
        _pod("stale-label", "ghcr.io/org/api:1.3", ["ghcr.io"], {"images-md5": checksum}),
    ]
    _write(store / "cluster", *pods)
    code, out, _ = run(capsys, "probe", "test", "policy:images-by-library", "--snapshot", "cluster")
    text = " ".join(out.split())
    assert code == 1, out
    assert "(4 judged, 2 violate it)" in text, text
    assert "Pod shop/elsewhere: registry not allowed: quay.io" in text, text
    assert "Pod shop/stale-label: the images-md5 label is the md5 of the images as JSON" in text
    # an image reference Kyverno cannot parse (upper case): no verdict, never a pass
    _write(store / "cluster", _pod("upper", "ghcr.io/Org/api:1.2", ["ghcr.io"], {}))
    code, out, _ = run(capsys, "probe", "test", "policy:images-by-library", "--snapshot", "cluster")
    assert code == 3, out
    assert "is no image reference" in out, out


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("parseImageReference(object.spec.containers[0].image).registry() == 'ghcr.io'",
         "it calls parseImageReference, of Kyverno's image library"),
        ("image(object.spec.containers[0].image).registry() == 'ghcr.io'",
         "it calls image, of Kyverno's image library"),
        ("sha256(object.metadata.name) != ''", "it calls sha256, of Kyverno's hash library"),
        ("hash.md5(object.metadata.name) != ''", "Kyverno's hash library"),
        ("size(json.unmarshal('[]')) == 0", "Kyverno's json library"),
    ],
)  # fmt: skip
def test_a_validating_admission_policy_has_no_kyverno_library(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    expression: str,
    reason: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    policy = f"""
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: kyverno-calls}}
spec:
  matchConstraints:
    resourceRules:
      - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}
  validations:
    - expression: "{expression}"
"""
    (tmp_path / "policy.yaml").write_text(policy)
    code, out, err = run(capsys, "probe", "import", "policy.yaml", "--dry-run")
    assert code == 65, out + err
    text = " ".join((out + err).split())
    assert "kyverno-calls" in text and reason in text, text
