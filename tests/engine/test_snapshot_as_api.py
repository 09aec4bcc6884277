"""A snapshot reads as the API server would serve the same manifests once applied.

Manifests kept in git often leave out ``metadata.namespace`` and write timestamps
unquoted. The API server (and ``kubectl apply``) puts such an object in ``default`` and
returns timestamps as RFC 3339 text, so a model scoping to ``default`` must find the
object, every listing must show it there, and every reader of the objects (get,
describe, the structured view, a probe and its sensitivity search) must see the API's
timestamp text. Compaction leaves out the standard service-account token volume and
says so, so "pods mount the service-account token" cannot read as absent.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from schemas.probe import ProbeLookup, ProposedProbe
from schemas.settings import load_settings
from workers.engine.toolsets.base import ToolRegistry
from workers.engine.toolsets.compaction import SERVICE_ACCOUNT_MOUNT
from workers.engine.toolsets.kubernetes import kubernetes_tools
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.engine.toolsets.structured import META_KEY
from workers.policy_engine.probes.runner import run_probe_with_results
from workers.policy_engine.probes.sensitivity import check_sensitivity

MANIFESTS = """\
apiVersion: v1
kind: Pod
metadata:
  name: nonspod
  creationTimestamp: 2023-06-26T15:04:05Z
spec:
  containers:
  - name: app
    image: nginx:1.25
    volumeMounts:
    - {name: kube-api-access-x7k2p, mountPath: /var/run/secrets/kubernetes.io/serviceaccount,
       readOnly: true}
  volumes:
  - name: kube-api-access-x7k2p
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken: {expirationSeconds: 3607, path: token}
      - configMap:
          name: kube-root-ca.crt
          items: [{key: ca.crt, path: ca.crt}]
      - downwardAPI:
          items:
          - path: namespace
            fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}
status:
  phase: Running
  startTime: 2023-06-26T17:04:06.5+02:00
---
apiVersion: v1
kind: Pod
metadata: {name: placed, namespace: prod}
spec:
  containers: [{name: app, image: nginx:1.25}]
---
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules: []
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: certificates.cert-manager.io}
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Certificate, plural: certificates}
  versions: [{name: v1, served: true, storage: true}]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: clusterissuers.cert-manager.io}
spec:
  group: cert-manager.io
  scope: Cluster
  names: {kind: ClusterIssuer, plural: clusterissuers}
  versions: [{name: v1, served: true, storage: true}]
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: api-tls}
spec: {dnsNames: [api.example.com]}
---
apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata: {name: letsencrypt}
spec: {acme: {}}
"""


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> ToolRegistry:
    root = tmp_path_factory.mktemp("as-api") / "manifests"
    root.mkdir()
    (root / "manifests.yaml").write_text(MANIFESTS)
    backend = SnapshotBackend(root)
    assert backend.problems == []  # the API server's defaults are no problem of the snapshot
    return ToolRegistry(kubernetes_tools(backend, load_settings()), backend=backend)


def _ok(tools: ToolRegistry, tool: str, **arguments: Any) -> str:
    result = tools.call(tool, arguments)
    assert result.ok, result.output
    return result.output


def test_a_namespaced_object_written_without_a_namespace_is_in_default(tools: ToolRegistry) -> None:
    one = yaml.safe_load(_ok(tools, "get", kind="Pod", name="nonspod", namespace="default"))
    assert one["metadata"] == {
        "name": "nonspod",
        "namespace": "default",
        "creationTimestamp": "2023-06-26T15:04:05Z",
    }
    assert "nonspod" in _ok(tools, "get", kind="Pod", namespace="default")
    everywhere = _ok(tools, "get", kind="Pod").splitlines()
    assert everywhere[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert everywhere[1].split()[:2] == ["default", "nonspod"]
    assert everywhere[2].split()[:2] == ["prod", "placed"]
    cert = yaml.safe_load(
        _ok(tools, "get", kind="Certificate", name="api-tls", namespace="default")
    )
    assert cert["metadata"]["namespace"] == "default"  # a CRD's namespaced kind too
    assert "namespace" not in _ok(tools, "describe", kind="Pod", name="placed").split("\n")[3]


@pytest.mark.parametrize(
    ("kind", "name"),
    [("Namespace", "team"), ("ClusterRole", "reader"), ("ClusterIssuer", "letsencrypt")],
)
def test_a_cluster_scoped_object_stays_without_a_namespace(
    tools: ToolRegistry, kind: str, name: str
) -> None:
    obj = yaml.safe_load(_ok(tools, "get", kind=kind, name=name))
    assert "namespace" not in obj["metadata"]
    assert not _ok(tools, "get", kind=kind).startswith("NAMESPACE")


def test_unquoted_timestamps_read_as_the_api_s_text_everywhere(tools: ToolRegistry) -> None:
    result = tools.call("get", {"kind": "Pod", "name": "nonspod", "namespace": "default"})
    for text in (result.output, result.meta[META_KEY]()):  # what the model and strict read
        assert "creationTimestamp: '2023-06-26T15:04:05Z'" in text
        assert "startTime: '2023-06-26T15:04:06.5Z'" in text  # to UTC, the digits written
        assert "+00:00" not in text and "2023-06-26 15:04:05" not in text


def test_a_probe_and_its_sensitivity_read_the_same_corrected_objects(tools: ToolRegistry) -> None:
    probe = ProposedProbe(
        lookups=[ProbeLookup(tool="get", args={"kind": "Pod", "namespace": "default"})],
        expression='results[0].all(p, p.metadata.namespace == "default" && '
        'timestamp(p.metadata.creationTimestamp) < timestamp("2024-01-01T00:00:00Z"))',
    )
    run, results = run_probe_with_results(probe, tools.backend)
    assert run.error is None and run.value is True, run.error
    assert results is not None
    assert results[0][0]["metadata"]["creationTimestamp"] == "2023-06-26T15:04:05Z"
    assert check_sensitivity(probe, results, True).sensitive  # a later timestamp flips it


def test_the_left_out_token_volume_is_named_in_the_output(tools: ToolRegistry) -> None:
    for tool in ("get", "describe"):
        text = _ok(tools, tool, kind="Pod", name="nonspod", namespace="default")
        assert "kube-api-access-x7k2p" in text and SERVICE_ACCOUNT_MOUNT in text
        assert "standard service-account token volume" in text
        assert "the pod mounts the service-account token" in text
        assert "\n  volumes:\n" not in text  # left out, as before: the note says so
    placed = _ok(tools, "get", kind="Pod", name="placed", namespace="prod")
    assert "service-account token" not in placed  # no volume, no note
