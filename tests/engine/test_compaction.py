"""Compaction: only the listed noise removed, every meaning (and every empty block) kept."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.conftest import EXAMPLES
from workers.engine.toolsets.compaction import compact_object, render_object
from workers.engine.toolsets.snapshot_backend import SnapshotBackend

SNAPSHOTS = EXAMPLES / "snapshots"


def token_volume(name: str) -> dict[str, Any]:
    """The projected service-account token volume Kubernetes adds to every pod."""
    return {
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        "name": "kube-root-ca.crt",
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                "path": "namespace",
                            }
                        ]
                    }
                },
            ],
        },
    }


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
                            "readOnly": True,
                        },
                        {"mountPath": "/cache", "name": "cache"},
                    ],
                }
            ],
            "volumes": [{"name": "cache", "emptyDir": {}}, token_volume("kube-api-access-abcde")],
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
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "controller": True}
    ]
    assert compact["status"]["containerStatuses"][0]["imageID"] == "web@sha256:abc"  # the digest
    assert compact["metadata"]["creationTimestamp"] == "2026-03-01T00:00:00Z"
    assert compact["status"]["containerStatuses"][0]["restartCount"] == 2


def test_zero_and_false_survive_default_stripping() -> None:
    deployment = {
        "apiVersion": "apps/v1",
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
    assert compact_node["status"]["images"] == "(omitted: 5 container images cached on this node)"
    assert compact_node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.29")
    crd = backend.get(backend.resolve("crd"), "certificates.cert-manager.io", None)
    rendered = render_object(crd)
    assert "openAPIV3Schema" not in rendered
    assert "use explain" in rendered


def test_rendering_is_deterministic() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "prod-eu")
    obj = backend.get(backend.resolve("po"), "api-7c9d8f6b5-x2k4p", "prod")
    assert render_object(obj) == render_object(copy.deepcopy(obj))


# --------------------------------------------------------------------------- meaning kept


def network_policy(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "np", "namespace": "prod", "uid": "u-1", "resourceVersion": "9"},
        "spec": spec,
    }


def test_an_allow_all_ingress_rule_is_not_rendered_as_deny_all() -> None:
    policy = network_policy({"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]})
    compact = compact_object(policy)
    assert compact["spec"] == {"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]}
    assert yaml.safe_load(render_object(policy))["spec"]["ingress"] == [{}]


def test_an_any_namespace_peer_and_an_all_pods_selector_are_kept() -> None:
    spec = {
        "podSelector": {},
        "ingress": [{"from": [{"namespaceSelector": {}}], "ports": [{"port": 80}]}],
        "egress": [{"to": [{"podSelector": {}, "namespaceSelector": {}}]}],
        "policyTypes": ["Ingress", "Egress"],
    }
    compact = compact_object(network_policy(spec))
    assert compact["spec"] == spec


def test_an_empty_pdb_selector_is_kept() -> None:
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "all", "namespace": "prod"},
        "spec": {"maxUnavailable": 1, "selector": {}},
    }
    assert compact_object(pdb)["spec"] == {"maxUnavailable": 1, "selector": {}}


def test_an_empty_block_of_a_custom_object_is_kept() -> None:
    apiserver = {
        "apiVersion": "config.openshift.io/v1",
        "kind": "APIServer",
        "metadata": {"name": "cluster"},
        "spec": {"encryption": {}},
    }
    compact = compact_object(apiserver)
    assert compact["spec"] == {"encryption": {}}
    assert "encryption: {}" in render_object(apiserver)


def test_a_host_path_volume_is_kept_whatever_its_name() -> None:
    pod = raw_pod()
    pod["spec"]["volumes"].append({"name": "kube-api-access-evil", "hostPath": {"path": "/"}})
    pod["spec"]["containers"][0]["volumeMounts"].append(
        {
            "name": "kube-api-access-evil",
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        }
    )
    compact = compact_object(pod)
    assert {"name": "kube-api-access-evil", "hostPath": {"path": "/"}} in compact["spec"]["volumes"]
    assert {
        "name": "kube-api-access-evil",
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    } in compact["spec"]["containers"][0]["volumeMounts"]
    assert "path: /\n" in render_object(pod)


def test_a_token_volume_that_differs_from_the_standard_one_is_kept() -> None:
    pod = raw_pod()
    odd = {"name": "kube-api-access-abcde", "projected": {"sources": []}}
    pod["spec"]["volumes"] = [odd]
    assert compact_object(pod)["spec"]["volumes"] == [odd]


# --------------------------------------------------------------------------- each rule's test
# The property test (test_compaction_property.py) checks that only the rules drop
# anything; these check that each rule that looks at content drops the noise and
# keeps its near misses.


def pod_with(spec: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec or {}, **top}


def shows(obj: dict[str, Any], *path: str | int) -> bool:
    current: Any = compact_object(obj)
    for part in path:
        in_mapping = isinstance(current, dict) and part in current
        in_list = isinstance(current, list) and isinstance(part, int) and part < len(current)
        if not (in_mapping or in_list):
            return False
        current = current[part]
    return True


SA = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_MOUNT = {"name": "kube-api-access-x", "mountPath": SA, "readOnly": True}
DEFAULT_TOLERATION = {
    "key": "node.kubernetes.io/unreachable",
    "operator": "Exists",
    "effect": "NoExecute",
    "tolerationSeconds": 300,
}


def owned(generate_name: str, controller: bool) -> dict[str, Any]:
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "web-1",
        "controller": controller,
    }
    return pod_with(
        metadata={"name": "p", "generateName": generate_name, "ownerReferences": [owner]}
    )


def generations(generation: Any, observed: Any, in_condition: Any = None) -> dict[str, Any]:
    status: dict[str, Any] = {"observedGeneration": observed}
    if in_condition is not None:
        status["conditions"] = [
            {"type": "Ready", "status": "True", "observedGeneration": in_condition}
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "generation": generation},
        "status": status,
    }


def token_pod(volume: dict[str, Any], mount: dict[str, Any]) -> dict[str, Any]:
    return pod_with({"containers": [{"name": "c", "volumeMounts": [mount]}], "volumes": [volume]})


def service(ports: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": ports, **spec},
    }


STANDARD = token_volume("kube-api-access-x")
RULE_CASES: list[tuple[str, dict[str, Any], tuple[str | int, ...], bool]] = [
    (
        "podIPs repeating podIP",
        pod_with(status={"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}]}),
        ("status", "podIPs"),
        False,
    ),
    (
        "dual-stack podIPs",
        pod_with(status={"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]}),
        ("status", "podIPs"),
        True,
    ),
    (
        "clusterIPs repeating clusterIP",
        service([], clusterIP="10.96.0.1", clusterIPs=["10.96.0.1"]),
        ("spec", "clusterIPs"),
        False,
    ),
    (
        "dual-stack clusterIPs",
        service([], clusterIP="10.96.0.1", clusterIPs=["10.96.0.1", "fd00::1"]),
        ("spec", "clusterIPs"),
        True,
    ),
    ("generation the status has seen", generations(3, 3), ("metadata", "generation"), False),
    ("observedGeneration equal to it", generations(3, 3), ("status", "observedGeneration"), False),
    ("generation not yet observed", generations(4, 3), ("metadata", "generation"), True),
    ("observedGeneration behind", generations(4, 3), ("status", "observedGeneration"), True),
    ("a condition behind", generations(4, 4, in_condition=3), ("metadata", "generation"), True),
    ("generation as a string", generations("3", "3"), ("metadata", "generation"), True),
    (
        "generateName from the controller",
        owned("web-1-", True),
        ("metadata", "generateName"),
        False,
    ),
    (
        "generateName of a non-controller owner",
        owned("web-1-", False),
        ("metadata", "generateName"),
        True,
    ),
    ("generateName of its own", owned("batch-", True), ("metadata", "generateName"), True),
    (
        "serviceAccount copying serviceAccountName",
        pod_with({"serviceAccount": "a", "serviceAccountName": "a"}),
        ("spec", "serviceAccount"),
        False,
    ),
    (
        "serviceAccount differing",
        pod_with({"serviceAccount": "a", "serviceAccountName": "b"}),
        ("spec", "serviceAccount"),
        True,
    ),
    (
        "the default toleration",
        pod_with({"tolerations": [DEFAULT_TOLERATION]}),
        ("spec", "tolerations"),
        False,
    ),
    (
        "a shorter toleration",
        pod_with({"tolerations": [{**DEFAULT_TOLERATION, "tolerationSeconds": 30}]}),
        ("spec", "tolerations", 0),
        True,
    ),
    (
        "a toleration with a value",
        pod_with({"tolerations": [{**DEFAULT_TOLERATION, "value": "x"}]}),
        ("spec", "tolerations", 0),
        True,
    ),
    ("the standard token volume", token_pod(STANDARD, TOKEN_MOUNT), ("spec", "volumes"), False),
    (
        "its standard mount",
        token_pod(STANDARD, TOKEN_MOUNT),
        ("spec", "containers", 0, "volumeMounts"),
        False,
    ),
    (
        "a token volume with a wider mode",
        token_pod(
            {**STANDARD, "projected": {**STANDARD["projected"], "defaultMode": 511}}, TOKEN_MOUNT
        ),
        ("spec", "volumes", 0),
        True,
    ),
    (
        "a token volume with a longer token",
        token_pod(
            {
                "name": "kube-api-access-x",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 86400, "path": "token"}},
                        *STANDARD["projected"]["sources"][1:],
                    ]
                },
            },
            TOKEN_MOUNT,
        ),
        ("spec", "volumes", 0),
        True,
    ),
    (
        "a standard volume under another name",
        token_pod({**STANDARD, "name": "token"}, {**TOKEN_MOUNT, "name": "token"}),
        ("spec", "volumes", 0),
        True,
    ),
    (
        "a writable mount of it",
        token_pod(STANDARD, {**TOKEN_MOUNT, "readOnly": False}),
        ("spec", "containers", 0, "volumeMounts", 0),
        True,
    ),
    (
        "... which keeps the volume too",
        token_pod(STANDARD, {**TOKEN_MOUNT, "readOnly": False}),
        ("spec", "volumes", 0),
        True,
    ),
    (
        "a mount of it elsewhere",
        token_pod(STANDARD, {**TOKEN_MOUNT, "mountPath": "/host"}),
        ("spec", "volumes", 0),
        True,
    ),
    (
        "the service-account path from a hostPath",
        token_pod({"name": "kube-api-access-x", "hostPath": {"path": "/"}}, TOKEN_MOUNT),
        ("spec", "containers", 0, "volumeMounts", 0),
        True,
    ),
    (
        "protocol TCP of a Service port",
        service([{"port": 80, "protocol": "TCP"}]),
        ("spec", "ports", 0, "protocol"),
        False,
    ),
    (
        "protocol UDP",
        service([{"port": 53, "protocol": "UDP"}]),
        ("spec", "ports", 0, "protocol"),
        True,
    ),
    (
        "protocol TCP of a custom resource",
        {
            "apiVersion": "example.com/v1",
            "kind": "Service",
            "metadata": {"name": "s"},
            "spec": {"ports": [{"protocol": "TCP"}]},
        },
        ("spec", "ports", 0, "protocol"),
        True,
    ),
    (
        "protocol TCP without an apiVersion",
        {"kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"protocol": "TCP"}]}},
        ("spec", "ports", 0, "protocol"),
        True,
    ),
    (
        "uid of an owner reference",
        pod_with(
            metadata={"name": "p", "ownerReferences": [{"kind": "Job", "name": "j", "uid": "u"}]}
        ),
        ("metadata", "ownerReferences", 0, "uid"),
        False,
    ),
    (
        "uid that is not a reference",
        {
            "apiVersion": "example.com/v1",
            "kind": "User",
            "metadata": {"name": "u"},
            "spec": {"uid": 1000},
        },
        ("spec", "uid"),
        True,
    ),
    (
        "an empty securityContext of a pod",
        pod_with({"securityContext": {}}),
        ("spec", "securityContext"),
        False,
    ),
    (
        "an empty securityContext of a container",
        pod_with({"containers": [{"name": "c", "securityContext": {}}]}),
        ("spec", "containers", 0, "securityContext"),
        True,
    ),
    (
        "an image cache of a custom Node",
        {
            "apiVersion": "example.com/v1",
            "kind": "Node",
            "metadata": {"name": "n"},
            "status": {"images": [{"names": ["a"]}]},
        },
        ("status", "images", 0),
        True,
    ),
]


@pytest.mark.parametrize(
    ("obj", "path", "kept"), [case[1:] for case in RULE_CASES], ids=[case[0] for case in RULE_CASES]
)
def test_each_rule_drops_its_noise_and_keeps_near_misses(
    obj: dict[str, Any], path: tuple[str | int, ...], kept: bool
) -> None:
    assert shows(obj, *path) is kept


# --------------------------------------------------------------------------- the text


def test_the_text_holds_values_as_written_and_reads_back_the_same() -> None:
    message = "Back-off pulling image app:1.0, " * 6 + "then giving up"
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c"},
        "data": {"long": message, "emoji": "ready 😍", "nel": "a\x85b", "\x85": "𑤌"},
    }
    text = render_object(config)
    assert yaml.safe_load(text) == compact_object(config)  # line breaks NEL/LS/PS included
    assert f"long: {message}\n" in text  # never folded: the model quotes it as evidence
    assert "emoji: ready 😍\n" in text  # not escaped as \U0001F60D
