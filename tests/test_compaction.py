"""Compaction: noise removed, meaning kept."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.conftest import EXAMPLES
from workers.toolsets.compaction import compact_object, render_object
from workers.toolsets.snapshot_backend import SnapshotBackend

SNAPSHOTS = EXAMPLES / "snapshots"


def raw_pod(name: str = "web-1", **status: Any) -> dict[str, Any]:
    """A pod as the API returns it, with the usual noise."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "prod",
            "uid": "0b7c3f6e-1111-2222-3333-444455556666",
            "resourceVersion": "123456",
            "creationTimestamp": "2026-03-01T00:00:00Z",
            "labels": {"app": "web", "node-role.kubernetes.io/edge": ""},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": '{"big": "blob"}',
                "team": "shop",
            },
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-abc",
                    "uid": "x",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "web:1.2",
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "securityContext": {"runAsUser": 0},
                    "volumeMounts": [
                        {
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "name": "kube-api-access-abcde",
                        },
                        {"mountPath": "/cache", "name": "cache"},
                    ],
                }
            ],
            "volumes": [
                {"name": "cache", "emptyDir": {}},
                {"name": "kube-api-access-abcde", "projected": {"sources": []}},
            ],
            "tolerations": [
                {
                    "effect": "NoExecute",
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                },
                {"effect": "NoSchedule", "key": "dedicated", "operator": "Equal", "value": "edge"},
            ],
            "schedulerName": "default-scheduler",
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "hostNetwork": False,
            "priority": 0,
            "securityContext": {},
            "serviceAccount": "web",
            "serviceAccountName": "web",
            "nodeName": "node-1",
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.5",
            "podIPs": [{"ip": "10.0.0.5"}],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": "2026-03-01T00:00:05Z",
                }
            ],
            "containerStatuses": [
                {
                    "name": "web",
                    "ready": True,
                    "restartCount": 2,
                    "image": "web:1.2",
                    "imageID": "web@sha256:abc",
                    "containerID": "containerd://abc",
                    "state": {"running": {"startedAt": "2026-03-01T00:00:04Z"}},
                }
            ],
            **status,
        },
    }


def test_compaction_drops_noise() -> None:
    compact = compact_object(raw_pod())
    text = yaml.safe_dump(compact)
    for noise in (
        "managedFields",
        "last-applied-configuration",
        "resourceVersion",
        "uid",
        "imageID",
        "containerID",
        "terminationMessage",
        "kube-api-access",
        "serviceaccount",
        "not-ready",
        "default-scheduler",
        "ClusterFirst",
        "lastProbeTime",
        "podIPs",
        "blockOwnerDeletion",
    ):
        assert noise not in text, noise
    assert "priority" not in compact["spec"]
    assert "securityContext" not in compact["spec"]  # empty
    assert "serviceAccount" not in compact["spec"]  # same as serviceAccountName


def test_compaction_keeps_what_predicates_are_about() -> None:
    compact = compact_object(raw_pod())
    container = compact["spec"]["containers"][0]
    assert container["securityContext"] == {"runAsUser": 0}  # runs as root: kept
    assert container["image"] == "web:1.2"
    assert container["volumeMounts"] == [{"mountPath": "/cache", "name": "cache"}]
    assert compact["spec"]["volumes"] == [{"name": "cache", "emptyDir": {}}]  # empty but meaningful
    assert compact["spec"]["tolerations"] == [
        {"effect": "NoSchedule", "key": "dedicated", "operator": "Equal", "value": "edge"}
    ]
    assert compact["spec"]["hostNetwork"] is False
    assert compact["spec"]["serviceAccountName"] == "web"
    assert compact["metadata"]["labels"]["node-role.kubernetes.io/edge"] == ""
    assert compact["metadata"]["annotations"] == {"team": "shop"}
    assert compact["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc"}
    ]
    assert compact["metadata"]["creationTimestamp"] == "2026-03-01T00:00:00Z"
    assert compact["status"]["containerStatuses"][0]["restartCount"] == 2


def test_zero_and_false_survive_default_stripping() -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "d", "generation": 4},
        "spec": {
            "replicas": 0,
            "paused": False,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 120,
        },
        "status": {"observedGeneration": 4},
    }
    compact = compact_object(deployment)
    assert compact["spec"] == {"replicas": 0, "paused": False, "progressDeadlineSeconds": 120}
    assert compact["metadata"] == {"name": "d"}
    assert "status" not in compact


def test_compaction_never_mutates_its_input() -> None:
    pod = raw_pod()
    before = copy.deepcopy(pod)
    compact_object(pod)
    render_object(pod)
    assert pod == before


def test_node_images_and_crd_schemas_are_left_out() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "prod-eu")
    node = next(backend.list_objects(backend.resolve("nodes"), None))
    assert node["status"]["images"]
    compact_node = compact_object(node)
    assert "images" not in compact_node["status"]
    assert compact_node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.29")
    crd = backend.get(backend.resolve("crd"), "certificates.cert-manager.io", None)
    rendered = render_object(crd)
    assert "openAPIV3Schema" not in rendered
    assert "use explain" in rendered


def test_rendering_is_deterministic() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "prod-eu")
    obj = backend.get(backend.resolve("po"), "api-7c9d8f6b5-x2k4p", "prod")
    assert render_object(obj) == render_object(copy.deepcopy(obj))
