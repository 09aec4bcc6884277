"""A Kyverno ValidatingPolicy that reads other objects of its cluster (``resource.Get`` /
``resource.List``, ``globalContext.Get`` of a GlobalContextEntry listing them) judges a
stored cluster from that cluster's own objects: imported with `assay probe import`, run with
`assay probe test` on a snapshot and on the test API server, the listings shared by the
tick; what needs the network or writes is refused at import, with the reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.request import ContextTarget
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.cli_support import run_cli as run
from workers.engine.toolsets.live_backend import LiveBackend
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.run import run_policies

REGISTRIES = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: registries-from-configmap}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  variables:
    - name: allowed
      expression: >-
        resource.Get('v1', 'configmaps', 'platform', 'registries').data.allowed.split(',')
  validations:
    - expression: >-
        object.spec.containers.all(c, variables.allowed.exists(r, c.image.startsWith(r + '/')))
      messageExpression: "'images must come from ' + variables.allowed.join(', ')"
"""

SERVICE_OWNED = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: pods-behind-a-service}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
    - expression: >-
        resource.List('v1', 'services', object.metadata.namespace).items.exists(s,
          s.spec.selector.all(k, object.metadata.?labels[?k].orValue('') == s.spec.selector[k]))
      message: every pod is selected by a service of its namespace
    - expression: >-
        !globalContext.Get('retired-images', '').exists(cm,
          object.spec.containers.exists(c, c.image in cm.data.images.split(',')))
      message: no pod runs a retired image
---
apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata: {name: retired-images}
spec:
  kubernetesResource: {version: v1, resource: configmaps, namespace: platform}
"""


def _pod(name: str, image: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": labels or {}},
        "spec": {"containers": [{"name": "app", "image": image}]},
    }


def _configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "platform"},
        "data": data,
    }


def _service(name: str, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"selector": selector, "ports": [{"port": 80}]},
    }


def _write(folder: Path, *objects: dict[str, Any]) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for number, obj in enumerate(objects):
        (folder / f"{number}.json").write_text(json.dumps(obj))
    return folder


@pytest.fixture
def store(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.integration
def test_resource_get_judges_pods_by_a_configmap_of_the_same_cluster(
    capsys: pytest.CaptureFixture[str], store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (store / "policy.yaml").write_text(REGISTRIES)
    code, out, err = run(capsys, "probe", "import", "policy.yaml")
    assert code == 0, err
    pods = [_pod("ours", "registry.example.com/app:1"), _pod("hub", "docker.io/library/app:1")]
    _write(store / "cluster", _configmap("registries", {"allowed": "registry.example.com"}), *pods)
    code, out, _ = run(
        capsys, "probe", "test", "policy:registries-from-configmap", "--snapshot", "cluster"
    )
    assert code == 1, out
    assert "(2 judged, 1 violate it)" in out
    assert "Pod shop/hub: images must come from registry.example.com" in out
    # the same policy on a cluster whose ConfigMap allows docker.io too: the data decides
    allowed = {"allowed": "registry.example.com,docker.io"}
    _write(store / "cluster", _configmap("registries", allowed), *pods)
    code, out, _ = run(
        capsys, "probe", "test", "policy:registries-from-configmap", "--snapshot", "cluster"
    )
    assert code == 0 and "(2 judged, 0 violate it)" in out, out
    # the same on a live cluster (the test API server), as `--context` reads it
    with FakeApiServer([FakeCluster.from_snapshot(store / "cluster", name="live")]) as server:
        monkeypatch.setenv("ASSAY_KUBECONFIG", str(server.write_kubeconfig(store / "kc")))
        code, out, _ = run(
            capsys, "probe", "test", "policy:registries-from-configmap", "--context", "live"
        )
    assert code == 0 and "(2 judged, 0 violate it)" in out, out
    # without the ConfigMap, Kyverno's call fails: no verdict, never a pass
    _write(store / "cluster", *pods)
    code, out, _ = run(
        capsys, "probe", "test", "policy:registries-from-configmap", "--snapshot", "cluster"
    )
    assert code == 3, out
    assert "configmaps 'registries' not found in namespace 'platform'" in out


def test_list_and_global_context_read_the_live_cluster_once_per_tick(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Twenty copies of the policy over a live cluster: every pod is judged by the services
    and the retired images the cluster holds, and services and configmaps are each listed
    once for the whole tick, however many policies, pods and calls read them."""
    folder = _write(
        tmp_path / "cluster",
        _service("web", {"app": "web"}),
        _configmap("retired", {"images": "docker.io/old:1"}),
        _pod("served", "docker.io/new:2", {"app": "web"}),
        _pod("stray", "docker.io/new:2", {"app": "batch"}),
        _pod("retired", "docker.io/old:1", {"app": "web"}),
    )
    documents = documents_from_text(SERVICE_OWNED, "policy.yaml")
    imported, refusals = import_documents(documents)
    assert refusals == [] and len(imported) == 1
    many = [imported[0].model_copy(update={"name": f"p{n}"}) for n in range(20)]
    with FakeApiServer([FakeCluster.from_snapshot(folder, name="c")]) as server:
        monkeypatch.setenv("ASSAY_KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kc")))
        settings = load_settings(kube_qps=1000)
        backend = LiveBackend.from_target(ContextTarget(context="c"), settings)
        server.clear_requests()
        results, shared = run_policies(many, backend)
        listed = [r.path.rstrip("/").split("/")[-1] for r in server.requests]
    assert {r.verdict for r in results} == {VerdictKind.FALSE}
    assert [sorted(v.name for v in r.violations) for r in results] == [["retired", "stray"]] * 20
    assert listed.count("services") == 1 and listed.count("configmaps") == 1, listed
    assert shared.requests == 9  # pods and the 6 pod controllers (autogen), services, configmaps


def test_a_list_read_for_every_object_is_charged_each_time(tmp_path: Path) -> None:
    """Reading the whole pod list once per pod converts it once per pod: over a large
    cluster the run is refused as too costly (never a pass), as the cost bound promises."""
    policy = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: unique-names}
spec:
  autogen: {podControllers: {controllers: []}}
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
    - expression: >-
        resource.List('v1', 'pods', '').items.filter(p,
          p.metadata.name == object.metadata.name).size() <= 2
"""
    labels = {f"label-{n}": "value" for n in range(12)}
    pods = [_pod(f"pod-{n}", "registry.example.com/app:1", labels) for n in range(300)]
    backend = SnapshotBackend(_write(tmp_path / "cluster", *pods))
    imported, _ = import_documents(documents_from_text(policy, "policy.yaml"))
    (result,), _ = run_policies(imported, backend)
    assert result.verdict == VerdictKind.CANNOT_DETERMINE
    assert "too costly" in (result.reason or "") and "resource.List()" in (result.reason or "")
    # a handful of pods is judged
    backend = SnapshotBackend(_write(tmp_path / "small", *pods[:5]))
    (result,), _ = run_policies(imported, backend)
    assert result.verdict == VerdictKind.TRUE and result.judged_total == 5


REFUSED = [
    (
        "resource.Post('authorization.k8s.io/v1', 'subjectaccessreviews', {}).status.allowed",
        "creates an object (or asks the API server, as a SubjectAccessReview does)",
    ),
    ("http.Get('https://example.com/allowed').allowed", "calls a service over the network"),
    ("image.GetMetadata(object.spec.containers[0].image) != null", "reads a registry"),
    ("globalContext.Get('remote', '') == null", "lives outside the cluster (an API call)"),
    ("globalContext.Get('local', 'names') == null", "calls to_upper(), one of Kyverno's own"),
    ("globalContext.Get(object.metadata.name, '') == null", "named by a computed value"),
]


@pytest.mark.parametrize(("expression", "reason"), REFUSED)
def test_what_needs_the_network_or_writes_is_refused_with_the_reason(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    expression: str,
    reason: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    documents: list[dict[str, Any]] = [
        yaml.safe_load(REGISTRIES),
        {
            "apiVersion": "kyverno.io/v2alpha1",
            "kind": "GlobalContextEntry",
            "metadata": {"name": "remote"},
            "spec": {"apiCall": {"urlPath": "/api/v1/namespaces", "refreshInterval": "10s"}},
        },
        {
            "apiVersion": "kyverno.io/v2alpha1",
            "kind": "GlobalContextEntry",
            "metadata": {"name": "local"},
            "spec": {
                "kubernetesResource": {"version": "v1", "resource": "configmaps"},
                "projections": [{"name": "names", "jmesPath": "[].metadata.name | to_upper(@)"}],
            },
        },
    ]
    documents[0]["spec"]["validations"] = [{"expression": expression}]
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump_all(documents))
    code, out, err = run(capsys, "probe", "import", "policy.yaml", "--dry-run")
    assert code == 65, out + err
    text = " ".join((out + err).split())
    assert "registries-from-configmap" in text and reason in text, text


def test_a_cluster_policy_has_no_resource_library(tmp_path: Path) -> None:
    """Kyverno evaluates a ClusterPolicy's validate.cel in Kubernetes' own CEL environment,
    where ``resource`` is not defined: refused, not served."""
    policy = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: cluster-reads}
spec:
  rules:
    - name: read
      match: {any: [{resources: {kinds: [Pod]}}]}
      validate:
        cel:
          expressions:
            - expression: "resource.List('v1', 'pods', '').items.size() < 100"
"""
    imported, refusals = import_documents(documents_from_text(policy, "p.yaml"))
    assert imported == []
    assert "only a Kyverno ValidatingPolicy has" in refusals[0].reason


def test_a_secret_read_through_the_library_for_its_values_gives_no_verdict(
    tmp_path: Path,
) -> None:
    """A Secret's values are withheld from every policy: one that reads a Secret through
    ``resource.Get`` and names its data gets no verdict (its value would be a guess); one
    that reads only its metadata is judged."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "pull", "namespace": "shop", "labels": {"rotated": "yes"}},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": "e30="},
    }
    policy = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: pull-secret}
spec:
  autogen: {podControllers: {controllers: []}}
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
    - expression: "EXPRESSION"
"""
    backend = SnapshotBackend(
        _write(tmp_path / "cluster", secret, _pod("app", "registry.example.com/app:1"))
    )
    reads_data = "has(resource.Get('v1', 'secrets', 'shop', 'pull').data)"
    reads_labels = "resource.Get('v1', 'secrets', 'shop', 'pull').metadata.labels.rotated == 'yes'"
    outcomes = {}
    for expression in (reads_data, reads_labels):
        text = policy.replace("EXPRESSION", expression)
        imported, _ = import_documents(documents_from_text(text, "policy.yaml"))
        (outcomes[expression],), _ = run_policies(imported, backend)
    assert outcomes[reads_data].verdict == VerdictKind.CANNOT_DETERMINE
    assert "withholds" in (outcomes[reads_data].reason or "")
    assert outcomes[reads_labels].verdict == VerdictKind.TRUE


UNIQUE_OWNERS = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: unique-owners}
spec:
  validationActions: [Audit]
  evaluation: {background: {enabled: BACKGROUND}}
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  variables:
    - name: all
      expression: resource.List('v1', 'configmaps', '').items
  validations:
    - expression: >-
        !variables.all.exists(c, c.data.?owner.orValue('') == object.data.owner)
      message: another ConfigMap has this owner
"""


@pytest.mark.parametrize(
    ("background", "owners", "violating"),
    [
        ("false", ["ann", "bob"], []),  # at admission: the judged one is not there yet
        ("false", ["ann", "ann"], ["a", "b"]),  # a real clash is still one
        ("true", ["ann", "bob"], ["a", "b"]),  # the background scan: each finds itself
    ],
)
def test_an_admission_only_policy_reads_the_cluster_without_the_judged_object(
    tmp_path: Path, background: str, owners: list[str], violating: list[str]
) -> None:
    """Kyverno runs a ValidatingPolicy whose background scan is off only while an object is
    being created, when the cluster does not hold it yet: what it lists leaves the judged
    object out (else every object clashes with itself on a stored cluster). With the scan
    on, the policy reads the cluster as Kyverno's background scan does, the object in it."""
    policy = UNIQUE_OWNERS.replace("BACKGROUND", background)
    maps = [_configmap(name, {"owner": owner}) for name, owner in zip("ab", owners, strict=True)]
    imported, refusals = import_documents(documents_from_text(policy, "policy.yaml"))
    assert refusals == [] and len(imported) == 1
    (result,), _ = run_policies(imported, SnapshotBackend(_write(tmp_path / "c", *maps)))
    assert result.verdict == (VerdictKind.FALSE if violating else VerdictKind.TRUE), result
    assert sorted(v.name for v in result.violations) == violating
