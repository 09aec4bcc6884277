"""Compaction: noise removed, meaning kept, tables, streaming caps, explain text."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import EXAMPLES
from workers.toolsets.compaction import (
    cap_text,
    compact_object,
    jsonpath_values,
    pod_status,
    printer_columns,
    render_object,
    render_schema,
    render_table,
)
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
    pods = backend.resolve("po")
    first = render_table(
        backend.list_objects(pods, None), "Pod", limit_chars=6000, with_namespace=True
    )
    second = render_table(
        backend.list_objects(pods, None), "Pod", limit_chars=6000, with_namespace=True
    )
    assert first == second
    obj = backend.get(pods, "api-7c9d8f6b5-x2k4p", "prod")
    assert render_object(obj) == render_object(copy.deepcopy(obj))


# --------------------------------------------------------------------------- tables


def test_pod_table_has_kubectl_columns() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "staging-us")
    table = render_table(
        backend.list_objects(backend.resolve("po"), "prod"),
        "Pod",
        limit_chars=6000,
        with_namespace=False,
    )
    lines = table.text.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "NODE", "IMAGES"]
    crashing = next(line for line in lines if line.startswith("api-6b7f9d8c4-9sdlq"))
    assert crashing.split()[1:4] == ["0/1", "CrashLoopBackOff", "7"]
    assert (table.shown, table.total, table.truncated) == (2, 2, False)


def test_deployment_table_shows_ready_over_desired() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "staging-us")
    table = render_table(
        backend.list_objects(backend.resolve("deploy"), "prod"),
        "Deployment",
        limit_chars=6000,
        with_namespace=False,
    )
    header, row = table.text.splitlines()
    assert header.split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "IMAGES"]
    assert row.split()[:4] == ["api", "1/2", "2", "1"]


def test_generic_table_uses_phase_or_ready_condition() -> None:
    objects: list[dict[str, Any]] = [
        {
            "metadata": {"name": "a"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
        {"metadata": {"name": "b"}, "status": {"phase": "Bound"}},
    ]
    text = render_table(objects, "Thing", limit_chars=1000, with_namespace=False).text
    assert text.splitlines() == ["NAME  STATUS", "a     Ready=False", "b     Bound"]


def test_empty_columns_are_left_out() -> None:
    objects = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
    text = render_table(objects, "Thing", limit_chars=1000, with_namespace=False).text
    assert text.splitlines() == ["NAME", "a", "b"]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"phase": "Running"}, "Running"),
        (
            {
                "phase": "Running",
                "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
            },
            "CrashLoopBackOff",
        ),
        (
            {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 2}}}]},
            "ExitCode:2",
        ),
        (
            {
                "phase": "Pending",
                "initContainerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}],
            },
            "Init:ImagePullBackOff",
        ),
        ({"phase": "Failed", "reason": "Evicted"}, "Evicted"),
    ],
)
def test_pod_status_column(status: dict[str, Any], expected: str) -> None:
    assert pod_status({"status": status}) == expected


def many_pods(count: int, consumed: list[int]) -> Iterator[dict[str, Any]]:
    for index in range(count):
        consumed[0] += 1
        yield {
            "kind": "Pod",
            "metadata": {"name": f"pod-{index:05d}", "namespace": "big"},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "img:1"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [{"ready": True, "restartCount": 0}],
            },
        }


def test_a_huge_list_is_streamed_rows_until_the_cap_then_only_counted() -> None:
    consumed = [0]
    table = render_table(
        many_pods(20_000, consumed),
        "Pod",
        limit_chars=2000,
        with_namespace=True,
        footer=lambda total: f"{total} pods.",
    )
    assert consumed[0] == 20_000
    assert table.total == 20_000
    assert 0 < table.shown < 100
    assert table.truncated
    assert len(table.text) <= 2000
    assert f"... truncated, {20_000 - table.shown} more rows not shown (20000 in all)" in table.text
    assert table.text.endswith("20000 pods.")
    # rows shown are the first ones, complete
    assert table.text.splitlines()[1].startswith("big")
    assert "pod-00000" in table.text


def test_long_cells_are_cut_with_an_ellipsis() -> None:
    objects = [{"metadata": {"name": "n" * 300}}]
    text = render_table(objects, "Thing", limit_chars=5000, with_namespace=False).text
    assert "…" in text
    assert max(len(line) for line in text.splitlines()) <= 100


# --------------------------------------------------------------------------- caps


def test_cap_text_head_says_how_much_was_cut() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    capped, truncated = cap_text(text, 600)
    assert truncated
    assert len(capped) <= 600
    assert capped.startswith("line 0\n")
    omitted = int(capped.rsplit("truncated, ", 1)[1].split()[0])
    assert omitted == len(text) - len(capped.rsplit("\n... truncated", 1)[0]) - 1


def test_cap_text_tail_keeps_the_newest_lines() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    capped, truncated = cap_text(text, 600, keep="tail")
    assert truncated and len(capped) <= 600
    assert capped.startswith("... truncated, ")
    assert capped.endswith("line 999\n")
    assert cap_text("short", 600) == ("short", False)


# --------------------------------------------------------------------------- CRDs


def test_printer_columns_and_jsonpath() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "prod-eu")
    crd = backend.get(backend.resolve("crd"), "certificates.cert-manager.io", None)
    columns = printer_columns(crd, "v1")
    assert [name for name, _ in columns] == ["READY", "SECRET"]  # priority>0 and dates dropped
    cert = backend.get(backend.resolve("cert"), "api-example-com", "prod")
    assert [cell(cert) for _, cell in columns] == ["True", "api-example-com-tls"]
    assert jsonpath_values(cert, ".spec.dnsNames[0]") == ["api.example.com"]
    assert jsonpath_values(cert, ".spec.dnsNames[*]") == ["api.example.com"]
    assert jsonpath_values(cert, ".status.conditions[?(@.type=='Nope')].status") == []
    assert jsonpath_values(cert, "{weird}") == []


def test_render_schema_reads_like_kubectl_explain() -> None:
    schema = {
        "type": "object",
        "description": "Spec   of the\nthing.",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "description": "The name."},
            "hosts": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "port": {"x-kubernetes-int-or-string": True},
        },
    }
    text = render_schema("Thing", "example.com/v1", "spec", schema)
    assert text.splitlines()[:3] == [
        "KIND:     Thing",
        "VERSION:  example.com/v1",
        "FIELD:    spec <Object>",
    ]
    assert "  Spec of the thing." in text
    assert "  name <string> -required-" in text
    assert "  hosts <[]string>" in text
    assert "  labels <map[string]string>" in text
    assert "  port <int-or-string>" in text
