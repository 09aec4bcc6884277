"""The Kubernetes tools through the registry the engine uses, over the example snapshots."""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from schemas.request import ContextTarget, EvaluationRequest, SnapshotTarget
from schemas.settings import AssaySettings, load_settings
from tests.conftest import EXAMPLES
from workers.engine.toolsets.base import ToolRegistry, ToolResult
from workers.engine.toolsets.factory import ToolsetUnavailable, build_registry, snapshot_cache
from workers.engine.toolsets.snapshot_backend import SnapshotBackend

SNAPSHOTS = EXAMPLES / "snapshots"
EXAMPLE_NAMES = ["prod-eu", "staging-us", "dev-ap"]
CANARY = "ASSAY-CANARY-7f3a9c"
CANARY_FORMS = (CANARY, base64.b64encode(CANARY.encode()).decode())
TOOL_NAMES = {"get", "describe", "logs", "events", "api_resources", "explain"}


def registry_for(path: Path, settings: AssaySettings | None = None) -> ToolRegistry:
    request = EvaluationRequest(text="anything", target=SnapshotTarget(path=str(path)))
    return build_registry(request, settings or load_settings())


@pytest.fixture(scope="module")
def prod_eu() -> ToolRegistry:
    return registry_for(SNAPSHOTS / "prod-eu")


@pytest.fixture(scope="module")
def staging_us() -> ToolRegistry:
    return registry_for(SNAPSHOTS / "staging-us")


def ok(result: ToolResult) -> str:
    assert result.ok, result.output
    return result.output


# --------------------------------------------------------------------------- the registry


def test_registry_offers_the_six_tools_with_strict_schemas(prod_eu: ToolRegistry) -> None:
    assert prod_eu.names == TOOL_NAMES
    for schema in prod_eu.json_schemas():
        function = schema["function"]
        assert function["description"]
        assert function["parameters"]["additionalProperties"] is False
    get_schema = next(s for s in prod_eu.json_schemas() if s["function"]["name"] == "get")
    assert get_schema["function"]["parameters"]["required"] == ["kind"]
    assert {"kind", "name", "namespace", "label_selector", "field_selector"} == set(
        get_schema["function"]["parameters"]["properties"]
    )


def test_bad_arguments_come_back_as_results(prod_eu: ToolRegistry) -> None:
    unknown = prod_eu.call("get", {"kind": "Pod", "verb": "delete"})
    assert not unknown.ok and "invalid arguments for get" in unknown.output
    too_many = prod_eu.call("logs", {"namespace": "prod", "pod": "x", "tail_lines": 5000})
    assert not too_many.ok and "tail_lines" in too_many.output


# --------------------------------------------------------------------------- get


def test_get_lists_a_table_with_a_drill_down_hint(prod_eu: ToolRegistry) -> None:
    output = ok(prod_eu.call("get", {"kind": "deployments", "namespace": "prod"}))
    lines = output.splitlines()
    assert lines[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "IMAGES"]
    assert [line.split()[:2] for line in lines[1:4]] == [
        ["api", "3/3"],
        ["web", "2/2"],
        ["worker", "2/2"],
    ]
    assert lines[-1] == (
        "3 deployments in namespace prod. Details: get kind=Deployment name=NAME namespace=prod"
    )


def test_get_across_namespaces_adds_the_namespace_column(staging_us: ToolRegistry) -> None:
    for namespace in (None, "all", "*"):
        arguments: dict[str, Any] = {"kind": "deploy"}
        if namespace:
            arguments["namespace"] = namespace
        output = ok(staging_us.call("get", arguments))
        assert output.splitlines()[0].startswith("NAMESPACE")
        assert any(line.split()[1:3] == ["api", "1/2"] for line in output.splitlines())
        assert "in all namespaces" in output


def test_get_custom_resources_use_the_crd_printer_columns(prod_eu: ToolRegistry) -> None:
    output = ok(prod_eu.call("get", {"kind": "certificates", "namespace": "prod"}))
    header, row = output.splitlines()[:2]
    assert header.split() == ["NAME", "READY", "SECRET"]
    assert row.split() == ["api-example-com", "True", "api-example-com-tls"]


def test_get_one_object_is_compact_yaml(prod_eu: ToolRegistry) -> None:
    output = ok(prod_eu.call("get", {"kind": "Deployment", "name": "api", "namespace": "prod"}))
    assert output.startswith("apiVersion: apps/v1\nkind: Deployment\n")
    assert "readyReplicas: 3" in output
    assert "managedFields" not in output and "resourceVersion" not in output
    assert output == ok(prod_eu.call("get", {"kind": "deployment/api", "namespace": "prod"}))


def test_get_with_selectors(prod_eu: ToolRegistry) -> None:
    output = ok(
        prod_eu.call(
            "get",
            {
                "kind": "po",
                "label_selector": "app.kubernetes.io/name in (web)",
                "field_selector": "status.phase=Running",
            },
        )
    )
    assert output.count("web-5f6c7b8d9-") == 2
    assert "api-" not in output
    nothing = ok(
        prod_eu.call("get", {"kind": "po", "namespace": "prod", "label_selector": "app=nope"})
    )
    assert nothing == "No pods found in namespace prod matching label_selector 'app=nope'."


def test_ingress_nginx_versions_are_visible_in_each_snapshot() -> None:
    for name, version in (("prod-eu", "v1.10.1"), ("staging-us", "v1.11.2"), ("dev-ap", "v1.9.0")):
        output = ok(
            registry_for(SNAPSHOTS / name).call(
                "get", {"kind": "deploy", "namespace": "ingress-nginx"}
            )
        )
        assert f"ingress-nginx/controller:{version}@sha256:" in output


def test_pod_running_as_root_is_visible(tmp_path: Path) -> None:
    registry = registry_for(SNAPSHOTS / "dev-ap")
    output = ok(
        registry.call(
            "get", {"kind": "pod", "name": "debug-tools-d4c8b9f7a-pz8vn", "namespace": "dev"}
        )
    )
    assert "runAsUser: 0" in output


def test_truncated_listing_has_an_explicit_marker() -> None:
    registry = registry_for(SNAPSHOTS / "prod-eu", load_settings(tool_output_limit_chars=800))
    result = prod_pods = registry.call("get", {"kind": "pods"})
    output = ok(prod_pods)
    assert result.truncated
    assert len(output) <= 800
    assert "... truncated, " in output and "more rows not shown (14 in all)" in output
    assert output.endswith("Details: get kind=Pod name=NAME namespace=NAMESPACE")
    assert result.meta["total"] == 14 and result.meta["rows"] < 14


def test_large_single_object_is_capped() -> None:
    registry = registry_for(SNAPSHOTS / "prod-eu", load_settings(tool_output_limit_chars=600))
    result = registry.call(
        "get", {"kind": "node", "name": "ip-10-0-1-11.eu-west-1.compute.internal"}
    )
    assert result.ok and result.truncated
    assert len(result.output) <= 600
    assert "... truncated, " in result.output and "more chars not shown" in result.output


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("get", {"kind": "widgets"}, "not found: no resource type named 'widgets'"),
        (
            "get",
            {"kind": "po", "name": "ghost", "namespace": "prod"},
            "not found: Pod 'ghost' not found in namespace 'prod'",
        ),
        (
            "get",
            {"kind": "po", "label_selector": "a in (("},
            "bad request: cannot parse label selector",
        ),
        (
            "describe",
            {"kind": "svc", "name": "ghost"},
            "not found: Service 'ghost' not found in any namespace",
        ),
        (
            "logs",
            {"namespace": "prod", "pod": "ghost"},
            "not found: pod 'ghost' not found in namespace 'prod'",
        ),
        (
            "logs",
            {"namespace": "../..", "pod": "x"},
            "bad request: namespace '../..' is not a valid name",
        ),
        (
            "explain",
            {"kind": "deploy"},
            "unsupported: this snapshot carries no schema for Deployment",
        ),
        (
            "explain",
            {"kind": "cert", "field_path": "spec.nope"},
            "not found: Certificate has no field 'nope'",
        ),
    ],
)
def test_backend_errors_become_readable_results(
    prod_eu: ToolRegistry, tool: str, arguments: dict[str, Any], expected: str
) -> None:
    result = prod_eu.call(tool, arguments)
    assert not result.ok
    assert result.output.startswith(expected), result.output


def test_a_malformed_file_is_named_in_tool_output(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap"
    shutil.copytree(SNAPSHOTS / "staging-us", snapshot)
    (snapshot / "prod" / "extra-deployments.yaml").write_text(
        "kind: Deployment\nmetadata: {name: [\n"
    )
    registry = registry_for(snapshot)
    output = ok(registry.call("get", {"kind": "deploy", "namespace": "prod"}))
    assert "api" in output  # the rest of the snapshot is still served
    assert "warning: this snapshot has 1 problem(s)" in output
    assert "prod/extra-deployments.yaml: not valid YAML" in output
    missing = registry.call("get", {"kind": "deploy", "name": "payments", "namespace": "prod"})
    assert not missing.ok  # "not found" in an incomplete snapshot says it may be incomplete
    assert "prod/extra-deployments.yaml: not valid YAML" in missing.output


def test_many_broken_files_still_fit_the_cap(tmp_path: Path) -> None:
    for index in range(20):
        (tmp_path / f"broken-{index:02d}-{'x' * 80}.yaml").write_text("a: [\n")
    # One object that parses: a folder with none at all is refused outright.
    (tmp_path / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    registry = registry_for(tmp_path, load_settings(tool_output_limit_chars=500))
    for tool, arguments in (("get", {"kind": "pods"}), ("api_resources", {})):
        result = registry.call(tool, arguments)
        assert result.ok and len(result.output) <= 500
        assert "warning: this snapshot has 20 problem(s)" in result.output


# --------------------------------------------------------------------------- describe, logs, events


def test_describe_includes_the_objects_events(staging_us: ToolRegistry) -> None:
    output = ok(staging_us.call("describe", {"kind": "pod", "name": "api-6b7f9d8c4-9sdlq"}))
    body, events = output.split("\nEvents:\n")
    assert "reason: CrashLoopBackOff" in body
    assert "restartCount: 7" in body
    assert "BackOff" in events and "Back-off restarting failed container api" in events
    assert "Warning" in events
    quiet = ok(staging_us.call("describe", {"kind": "svc", "name": "api", "namespace": "prod"}))
    assert quiet.endswith("Events: <none>")


def test_logs_tool_previous_and_tail(staging_us: ToolRegistry) -> None:
    previous = ok(
        staging_us.call(
            "logs", {"namespace": "prod", "pod": "api-6b7f9d8c4-9sdlq", "previous": True}
        )
    )
    assert previous.startswith("logs of pod prod/api-6b7f9d8c4-9sdlq (previous instance):\n")
    assert "panic: migrate" in previous
    tail = ok(
        staging_us.call(
            "logs", {"namespace": "prod", "pod": "api-6b7f9d8c4-fw2xk", "tail_lines": 1}
        )
    )
    assert len(tail.splitlines()) == 2  # header + one line


def test_long_logs_keep_the_newest_lines() -> None:
    registry = registry_for(SNAPSHOTS / "prod-eu", load_settings(tool_output_limit_chars=800))
    result = registry.call(
        "logs", {"namespace": "prod", "pod": "api-7c9d8f6b5-x2k4p", "tail_lines": 2000}
    )
    assert result.ok and result.truncated
    assert len(result.output) <= 800
    assert "... truncated, " in result.output
    assert result.output.rstrip().endswith('"duration_ms":15}')  # the newest line


def test_events_tool_filters_by_involved_object(staging_us: ToolRegistry) -> None:
    output = ok(
        staging_us.call("events", {"involved_kind": "po", "involved_name": "api-6b7f9d8c4-9sdlq"})
    )
    assert "4 events in all namespaces about Pod api-6b7f9d8c4-9sdlq." in output
    assert "fw2xk" not in output
    none = ok(staging_us.call("events", {"namespace": "kube-system"}))
    assert none == "No events found in namespace kube-system."


def test_api_resources_and_explain(prod_eu: ToolRegistry) -> None:
    resources = ok(prod_eu.call("api_resources", {}))
    row = next(line for line in resources.splitlines() if line.startswith("certificates "))
    assert row.split() == [
        "certificates",
        "cert,certs",
        "cert-manager.io/v1",
        "true",
        "Certificate",
    ]
    explained = ok(
        prod_eu.call("explain", {"kind": "Certificate", "field_path": "certificate.spec"})
    )
    assert "FIELD:    spec <Object>" in explained
    assert "  dnsNames <[]string>" in explained
    assert "  secretName <string> -required-" in explained


# --------------------------------------------------------------------------- redaction sweep


def every_call(
    registry: ToolRegistry, backend: SnapshotBackend
) -> list[tuple[str, dict[str, Any]]]:
    """Every tool over every object of a snapshot: what a curious model could ask for."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("api_resources", {}),
        ("events", {}),
        ("get", {"kind": "secrets", "label_selector": "app.kubernetes.io/part-of=api"}),
    ]
    for info in backend.api_resources():
        calls.append(("get", {"kind": info.plural}))
        calls.append(("explain", {"kind": info.plural}))
        for obj in backend.list_objects(info, None):
            meta = obj["metadata"]
            target = {"kind": info.kind, "name": meta["name"], "namespace": meta.get("namespace")}
            calls += [("get", target), ("describe", target)]
            calls.append(("events", {"involved_kind": info.kind, "involved_name": meta["name"]}))
            if info.kind == "Pod":
                for container in obj["spec"]["containers"]:
                    for previous in (False, True):
                        calls.append(
                            (
                                "logs",
                                {
                                    "namespace": meta["namespace"],
                                    "pod": meta["name"],
                                    "container": container["name"],
                                    "previous": previous,
                                },
                            )
                        )
    return calls


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_the_canary_never_appears_in_any_tool_output(name: str) -> None:
    registry = registry_for(SNAPSHOTS / name)
    backend = snapshot_cache.get(SNAPSHOTS / name)
    raw = "".join(p.read_text() for p in (SNAPSHOTS / name).rglob("*.yaml"))
    calls = every_call(registry, backend)
    assert len(calls) > 50
    outputs = [registry.call(tool, arguments) for tool, arguments in calls]
    assert sum(r.ok for r in outputs) > len(outputs) // 2
    # meta may offer a structured rendering as a function (strict runs call it): render it too
    everything = "\n".join(r.output + json.dumps(r.meta, default=lambda f: f()) for r in outputs)
    if name != "dev-ap":
        assert CANARY in raw  # the canary really is in the snapshot's files
        assert "api-token: <redacted by assay>" in everything
    for form in CANARY_FORMS:
        assert form not in everything


# --------------------------------------------------------------------------- factory


def test_snapshots_are_parsed_once_and_reparsed_after_a_change(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap"
    shutil.copytree(SNAPSHOTS / "dev-ap", snapshot)
    first = snapshot_cache.get(snapshot)
    assert snapshot_cache.get(snapshot) is first
    assert snapshot_cache.get(str(snapshot) + "/") is first
    pods_file = snapshot / "dev" / "pods.json"
    pods_file.write_text(
        pods_file.read_text().replace("debug-tools-d4c8b9f7a-pz8vn", "renamed-pod")
    )
    stat = pods_file.stat()
    os.utime(pods_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    second = snapshot_cache.get(snapshot)
    assert second is not first
    output = ok(registry_for(snapshot).call("get", {"kind": "pods", "namespace": "dev"}))
    assert "renamed-pod" in output


def test_a_snapshot_slow_to_read_holds_up_no_other_runs_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder on a slow disk (or a large one) is parsed outside the cache's lock."""
    import workers.engine.toolsets.factory as factory

    slow, quick = tmp_path / "slow", tmp_path / "quick"
    shutil.copytree(SNAPSHOTS / "dev-ap", slow)
    shutil.copytree(SNAPSHOTS / "dev-ap", quick)
    reading, release = threading.Event(), threading.Event()

    def parse(root: Path, *args: Any) -> SnapshotBackend:
        if root.name == "slow":
            reading.set()
            release.wait(timeout=60)
        return SnapshotBackend(root, *args)

    monkeypatch.setattr(factory, "SnapshotBackend", parse)
    stuck = threading.Thread(target=snapshot_cache.get, args=(slow,))
    stuck.start()
    try:
        assert reading.wait(timeout=30)
        opened: list[SnapshotBackend] = []
        other = threading.Thread(target=lambda: opened.append(snapshot_cache.get(quick)))
        other.start()
        other.join(timeout=30)
        assert opened and not other.is_alive(), "the quick snapshot waited for the slow one"
    finally:
        release.set()
        stuck.join(timeout=60)
    assert snapshot_cache.get(slow) is snapshot_cache.get(slow)  # and both are cached


def test_missing_snapshot_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ToolsetUnavailable, match="does not exist"):
        registry_for(tmp_path / "missing")


def test_shell_toolset_is_opt_in() -> None:
    request = EvaluationRequest(
        text="x",
        target=SnapshotTarget(path=str(SNAPSHOTS / "prod-eu")),
        toolsets=["kubernetes", "shell"],
    )
    with pytest.raises(ToolsetUnavailable, match="ASSAY_SHELL_CONFIG"):
        build_registry(request, load_settings())


def test_unloadable_context_is_a_clear_error(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    request = EvaluationRequest(
        text="x", target=ContextTarget(context="nowhere", kubeconfig=str(kubeconfig))
    )
    with pytest.raises(ToolsetUnavailable, match="nowhere"):
        build_registry(request, load_settings())


def test_a_cluster_scoped_object_written_with_a_namespace_is_fetched_by_name(
    tmp_path: Path,
) -> None:
    (tmp_path / "roles.yaml").write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n"
        "metadata: {name: reader, namespace: test}\n"
        "rules: [{apiGroups: [''], resources: [pods], verbs: [get, list]}]\n"
    )
    registry = registry_for(tmp_path)
    for tool in ("get", "describe"):
        output = ok(registry.call(tool, {"kind": "clusterrole", "name": "reader"}))
        assert "- list" in output
        assert "roles.yaml: ClusterRole 'reader' is cluster-scoped" in output  # the warning
    listing = ok(registry.call("get", {"kind": "clusterroles"}))
    assert "reader" in listing and "1 ClusterRole." in listing


def test_empty_blocks_and_look_alike_noise_reach_the_model_by_name(tmp_path: Path) -> None:
    (tmp_path / "objects.yaml").write_text(
        """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-all, namespace: prod, uid: 1b2c}
spec:
  podSelector: {}
  ingress:
  - {}
  - from: [{namespaceSelector: {}}]
  policyTypes: [Ingress]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: every-pod, namespace: prod}
spec: {maxUnavailable: 1, selector: {}}
---
apiVersion: v1
kind: Pod
metadata: {name: sneaky, namespace: prod}
spec:
  containers:
  - name: app
    image: app:1
    volumeMounts:
    - {name: kube-api-access-zz, mountPath: /var/run/secrets/kubernetes.io/serviceaccount}
  volumes:
  - {name: kube-api-access-zz, hostPath: {path: /}}
"""
    )
    registry = registry_for(tmp_path)
    policy = ok(registry.call("get", {"kind": "netpol", "name": "allow-all", "namespace": "prod"}))
    assert (
        "  podSelector: {}\n  ingress:\n  - {}\n  - from:\n    - namespaceSelector: {}\n" in policy
    )
    assert "uid" not in policy
    pdb = ok(registry.call("describe", {"kind": "pdb", "name": "every-pod", "namespace": "prod"}))
    assert "  selector: {}\n" in pdb
    pod = ok(registry.call("get", {"kind": "pod", "name": "sneaky", "namespace": "prod"}))
    assert "  - name: kube-api-access-zz\n    hostPath:\n      path: /\n" in pod
