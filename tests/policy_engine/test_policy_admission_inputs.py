"""What an imported policy reads besides its object, served as for a CREATE of the stored
object: ``namespaceObject`` from the target's own Namespaces (snapshot and live, one listing
per tick), ``request`` of that CREATE, ``oldObject`` null behind the idioms that guard it;
and what only an admission request holds refused at import, naming it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.policy import ImportedPolicy
from schemas.probe import ProbeLookup, ProposedProbe
from schemas.request import ContextTarget
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.cli_support import run_cli as run
from workers.engine.toolsets.live_backend import LiveBackend
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.run import run_policies
from workers.policy_engine.probes.runner import run_probe

TIERED = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: production-replicas}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  validations:
    - expression: >-
        namespaceObject.metadata.?labels[?'tier'].orValue('') != 'production'
        || object.spec.replicas >= 2
      messageExpression: "request.namespace + '/' + request.name + ' has one replica'"
"""

KYVERNO = """
apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: namespace-owner}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
    - expression: >-
        object.metadata.?labels[?'owner'].orValue('') ==
        namespaceObject.metadata.?annotations[?'owner'].orValue('')
      message: owner differs from the namespace's
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: no-latest
  annotations: {pod-policies.kyverno.io/autogen-controllers: none}
spec:
  rules:
    - name: no-latest
      match: {any: [{resources: {kinds: [Pod]}}]}
      validate:
        cel:
          expressions:
            - expression: >-
                ![object, oldObject].exists(o, o != null &&
                  o.spec.containers.exists(c, c.image.endsWith(':latest')))
              message: a latest image
"""


def _policies(text: str) -> list[ImportedPolicy]:
    policies, refusals = import_documents(documents_from_text(text, "test.yaml"))
    assert refusals == []
    return policies


def _snapshot(folder: Path, *objects: dict[str, Any]) -> SnapshotBackend:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "objects.yaml").write_text(yaml.safe_dump_all(objects))
    return SnapshotBackend(folder)


def _namespace(name: str, labels: dict[str, str], **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _deployment(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "x:1"}]},
            },
        },
    }


def _cluster_objects() -> list[dict[str, Any]]:
    return [
        _namespace("shop", {"tier": "production"}, owner="payments"),
        _namespace("lab", {"tier": "development"}),
        _deployment("checkout", "shop", 3),
        _deployment("cart", "shop", 1),
        _deployment("notebook", "lab", 1),
    ]


def test_namespace_object_and_request_are_served_through_import_and_probe_test(
    capsys: pytest.CaptureFixture[str],
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    Path("policy.yaml").write_text(TIERED)
    code, out, err = run(capsys, "probe", "import", "policy.yaml")
    assert code == 0, out + err
    assert "imported policy:production-replicas" in out
    _snapshot(tmp_path / "cluster", *_cluster_objects())
    code, out, _ = run(
        capsys, "probe", "test", "policy:production-replicas", "--snapshot", "cluster"
    )
    # only the one-replica Deployment of the production namespace violates it, and the
    # message reads the request's namespace and name
    assert code == 1, out
    assert "(3 judged, 1 violate it)" in out
    assert "shop/cart has one replica" in out


def test_namespace_object_on_a_snapshot_without_the_namespace_gives_no_verdict(
    tmp_path: Path,
) -> None:
    backend = _snapshot(tmp_path / "a", _deployment("cart", "shop", 1))
    (result,), _ = run_policies(_policies(TIERED), backend)
    assert result.verdict == VerdictKind.CANNOT_DETERMINE
    assert "holds no Namespace 'shop'" in (result.reason or "")


def test_kyverno_policies_read_namespace_object_and_a_null_old_object(tmp_path: Path) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "floating", "namespace": "shop"},
        "spec": {"containers": [{"name": "c", "image": "nginx:latest"}]},
    }
    pinned = {**pod, "metadata": {"name": "pinned", "namespace": "shop"},
              "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}  # fmt: skip
    maps = [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": name, "namespace": "shop", "labels": {"owner": owner}}}
        for name, owner in (("prices", "payments"), ("banners", "marketing"))
    ]  # fmt: skip
    backend = _snapshot(tmp_path / "a", *_cluster_objects(), pod, pinned, *maps)
    results, _ = run_policies(_policies(KYVERNO), backend)
    by_name = {r.policy: r for r in results}
    owner, latest = by_name["namespace-owner"], by_name["no-latest"]
    assert owner.verdict == VerdictKind.FALSE
    assert [v.name for v in owner.violations] == ["banners"]
    assert latest.verdict == VerdictKind.FALSE
    assert [v.name for v in latest.violations] == ["floating"]
    assert latest.judged_total == 2 and owner.judged_total == 2


def test_cluster_scoped_objects_get_a_null_namespace_object_and_no_request_namespace(
    tmp_path: Path,
) -> None:
    policy = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: scopes}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [nodes, namespaces]}
  validations:
    - expression: >-
        request.kind.kind == 'Namespace'
          ? namespaceObject.metadata.name == object.metadata.name
            && request.namespace == object.metadata.name
          : namespaceObject == null && !has(request.namespace)
            && request.resource.resource == 'nodes' && request.operation == 'CREATE'
            && !request.dryRun && !has(request.subResource) && !has(oldObject.metadata)
            && oldObject.?metadata.?name.orValue('none') == 'none'
"""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"}}
    backend = _snapshot(tmp_path / "a", node, _namespace("shop", {}))
    (result,), _ = run_policies(_policies(policy), backend)
    assert result.verdict == VerdictKind.TRUE, result.reason
    assert result.judged_total == 2


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        ("request.userInfo.username != 'admin'", "request.userInfo"),
        ("request.options.fieldManager != 'kubectl'", "request.options"),
        ("request.uid != ''", "request.uid"),
        ("authorizer.group('').resource('pods').check('get').allowed()", "authorizer"),
    ],
)
def test_what_only_an_admission_request_holds_is_refused_naming_it(
    expression: str, named: str
) -> None:
    text = TIERED.replace("object.spec.replicas >= 2", expression)
    policies, refusals = import_documents(documents_from_text(text, "test.yaml"))
    assert policies == []
    assert [r.name for r in refusals] == ["production-replicas"]
    assert named in refusals[0].reason


def test_a_live_cluster_serves_namespace_object_from_one_listing_per_tick(
    tmp_path: Path,
) -> None:
    _snapshot(tmp_path / "cluster", *_cluster_objects())
    with FakeApiServer([FakeCluster.from_snapshot(tmp_path / "cluster", name="c")]) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        settings = load_settings(kubeconfig=str(kubeconfig), kube_qps=1000)
        backend = LiveBackend.from_target(ContextTarget(context="c"), settings)
        many = [
            p.model_copy(update={"name": f"tier-{n}"}) for n in range(5) for p in _policies(TIERED)
        ]
        server.clear_requests()
        results, _ = run_policies(many, backend)
        assert Counter(r.verdict for r in results) == {VerdictKind.FALSE: 5}
        assert all([v.name for v in r.violations] == ["cart"] for r in results)
        listed = Counter(
            r.path for r in server.requests if r.path.rstrip("/").endswith("/namespaces")
        )
        assert list(listed.values()) == [1]


def test_a_models_probe_is_not_given_admission_inputs(tmp_path: Path) -> None:
    """A model's probe judges what is stored: reading the request or the namespace object
    is refused (no verdict), never read as null."""
    backend = _snapshot(tmp_path / "a", *_cluster_objects())
    for expression in ("namespaceObject == null", "oldObject == null", "has(request.name)"):
        probe = ProposedProbe(
            lookups=[ProbeLookup(tool="get", args={"kind": "deployments"})],
            expression=f"object.spec.replicas > 0 && {expression}",
            scope="each_object",
        )
        run = run_probe(probe, backend)
        assert run.verdict is None
        assert "only an imported admission policy is given" in (run.error or "")


def test_an_update_only_policy_reading_old_object_is_refused_and_a_create_one_is_not() -> None:
    immutable = TIERED.replace("operations: [CREATE]", "operations: [UPDATE]").replace(
        "object.spec.replicas >= 2", "oldObject == null || object.spec.replicas >= 2"
    )
    policies, refusals = import_documents(documents_from_text(immutable, "test.yaml"))
    assert policies == []
    assert "reads oldObject and judges only UPDATE requests" in refusals[0].reason
    both = immutable.replace("operations: [UPDATE]", "operations: [CREATE, UPDATE]")
    assert _policies(both)[0].name == "production-replicas"
