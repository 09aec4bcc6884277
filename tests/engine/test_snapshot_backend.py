"""SnapshotBackend: parsing, kinds, selectors, get/events/logs/explain, redaction, bad input."""

from __future__ import annotations

import base64
import json
import os
import textwrap
import threading
import tracemalloc
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from schemas.settings import load_settings
from tests.conftest import EXAMPLES
from workers.engine.toolsets import snapshot_backend
from workers.engine.toolsets.backend import REDACTED, BackendError
from workers.engine.toolsets.base import ToolRegistry
from workers.engine.toolsets.kubernetes import kubernetes_tools
from workers.engine.toolsets.snapshot_backend import (
    FileTooLarge,
    FolderListing,
    SnapshotBackend,
    SnapshotError,
    read_text,
)

SNAPSHOTS = EXAMPLES / "snapshots"
CANARY = "ASSAY-CANARY-7f3a9c"


@pytest.fixture(scope="module")
def prod_eu() -> SnapshotBackend:
    return SnapshotBackend(SNAPSHOTS / "prod-eu")


@pytest.fixture(scope="module")
def staging_us() -> SnapshotBackend:
    return SnapshotBackend(SNAPSHOTS / "staging-us")


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def names(objects: object) -> list[str]:
    return [o["metadata"]["name"] for o in objects]  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- kinds


@pytest.mark.parametrize(
    ("spelling", "kind", "group"),
    [
        ("Pod", "Pod", ""),
        ("pods", "Pod", ""),
        ("po", "Pod", ""),
        ("PODS", "Pod", ""),
        ("deploy", "Deployment", "apps"),
        ("deployments.apps", "Deployment", "apps"),
        ("deployment.v1.apps", "Deployment", "apps"),
        ("svc", "Service", ""),
        ("ing", "Ingress", "networking.k8s.io"),
        ("cert", "Certificate", "cert-manager.io"),
        ("certificates.cert-manager.io", "Certificate", "cert-manager.io"),
        ("crd", "CustomResourceDefinition", "apiextensions.k8s.io"),
    ],
)
def test_resolve_accepts_every_name_kubectl_accepts(
    prod_eu: SnapshotBackend, spelling: str, kind: str, group: str
) -> None:
    info = prod_eu.resolve(spelling)
    assert (info.kind, info.group) == (kind, group)


def test_resolve_unknown_kind_is_a_not_found_error(prod_eu: SnapshotBackend) -> None:
    with pytest.raises(BackendError) as caught:
        prod_eu.resolve("widgets")
    assert caught.value.code == "not_found"
    assert "api_resources" in caught.value.message


def test_api_resources_has_builtins_crds_and_kinds_only_seen_as_objects(tmp_path: Path) -> None:
    write(
        tmp_path,
        "widgets.yaml",
        """
        apiVersion: example.com/v1alpha1
        kind: Widget
        metadata: {name: w1, namespace: team-a}
        spec: {size: 3}
        """,
    )
    backend = SnapshotBackend(tmp_path)
    by_kind = {r.kind: r for r in backend.api_resources()}
    assert {"Pod", "Deployment", "CustomResourceDefinition"} <= by_kind.keys()
    widget = by_kind["Widget"]
    assert (widget.plural, widget.group, widget.namespaced) == ("widgets", "example.com", True)
    assert names(backend.list_objects(backend.resolve("widgets"), "team-a")) == ["w1"]


def test_legacy_group_objects_are_served_under_the_current_kind(tmp_path: Path) -> None:
    write(
        tmp_path,
        "old.yaml",
        """
        apiVersion: extensions/v1beta1
        kind: Ingress
        metadata: {name: legacy, namespace: web}
        """,
    )
    backend = SnapshotBackend(tmp_path)
    assert names(backend.list_objects(backend.resolve("ing"), None)) == ["legacy"]


def test_a_kind_of_a_builtin_name_in_another_group_is_served_apart(tmp_path: Path) -> None:
    """OpenShift's authorization.openshift.io ClusterRole is listed under its own group, as
    the cluster serves it: judged as rbac's, a policy on rbac ClusterRoles would judge an
    object of another shape, and one on OpenShift's would find nothing to judge."""
    stored = [
        ("rbac.authorization.k8s.io/v1", "ClusterRole", {"name": "view"}),
        ("authorization.openshift.io/v1", "ClusterRole", {"name": "openshift-view"}),
        ("v1", "Event", {"name": "e1", "namespace": "web"}),
    ]
    for number, (api_version, kind, meta) in enumerate(stored):
        obj = {"apiVersion": api_version, "kind": kind, "metadata": meta}
        (tmp_path / f"{number}.json").write_text(json.dumps(obj))
    backend = SnapshotBackend(tmp_path)
    rbac = backend.resolve("clusterroles.rbac.authorization.k8s.io")
    assert names(backend.list_objects(rbac, None)) == ["view"]
    openshift = backend.resolve("clusterroles.authorization.openshift.io")
    assert openshift.group == "authorization.openshift.io"
    assert names(backend.list_objects(openshift, None)) == ["openshift-view"]
    # a v1 Event is the events resource, as extensions' Ingress is networking's
    assert names(backend.list_objects(backend.resolve("events"), None)) == ["e1"]


# --------------------------------------------------------------------------- parsing


def test_list_files_multi_document_files_and_single_objects_all_load(
    prod_eu: SnapshotBackend,
) -> None:
    assert prod_eu.problems == []
    deployments = prod_eu.resolve("deploy")
    # prod/deployments.yaml is a List; ingress-nginx/controller.yaml is multi-document;
    # kube-system/workloads.yaml is a List of mixed kinds.
    assert names(prod_eu.list_objects(deployments, "prod")) == ["api", "web", "worker"]
    assert names(prod_eu.list_objects(deployments, "ingress-nginx")) == ["ingress-nginx-controller"]
    assert names(prod_eu.list_objects(prod_eu.resolve("ds"), None)) == ["kube-proxy"]
    single = prod_eu.get(prod_eu.resolve("ingress"), "api", "prod")  # a single-object file
    assert single["spec"]["rules"][0]["host"] == "api.example.com"


def test_json_snapshots_load() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "dev-ap")
    assert backend.problems == []
    pods = names(backend.list_objects(backend.resolve("pods"), "dev"))
    assert pods == ["debug-tools-d4c8b9f7a-pz8vn", "web-7d9c8b6f5-l2k9d"]
    assert names(backend.list_objects(backend.resolve("nodes"), None)) == ["dev-ap-node-1"]


def test_malformed_files_are_reported_by_name_and_hide_nothing_else(tmp_path: Path) -> None:
    write(
        tmp_path,
        "good.yaml",
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: fine, namespace: default}
        """,
    )
    write(tmp_path, "team/broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n")
    write(tmp_path, "bad.json", '{"kind": "Pod", ')
    write(tmp_path, "scalar.yaml", "just a string\n")
    write(tmp_path, "nameless.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {}\n")
    backend = SnapshotBackend(tmp_path)
    problems = "\n".join(backend.problems)
    assert "team/broken.yaml: not valid YAML (line" in problems
    assert "bad.json: not valid JSON" in problems
    assert "scalar.yaml: document 1 is not a Kubernetes object" in problems
    assert "nameless.yaml" in problems
    assert names(backend.list_objects(backend.resolve("pods"), None)) == ["fine"]


def test_documents_before_a_yaml_error_are_kept(tmp_path: Path) -> None:
    write(
        tmp_path,
        "partly.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: first, namespace: a}\n---\n"
        "kind: Pod\nmetadata: {name: [oops\n",
    )
    backend = SnapshotBackend(tmp_path)
    assert names(backend.list_objects(backend.resolve("po"), None)) == ["first"]
    assert "partly.yaml" in backend.problems[0]
    assert "first 1 document(s) were kept" in backend.problems[0]


def _loaded_within(folder: Path, seconds: float) -> SnapshotBackend:
    """The backend of ``folder``, failing the test (not hanging it) if loading takes longer."""
    done: list[SnapshotBackend] = []
    loader = threading.Thread(target=lambda: done.append(SnapshotBackend(folder)), daemon=True)
    loader.start()
    loader.join(seconds)
    assert done, f"loading the snapshot took more than {seconds}s"
    return done[0]


def test_a_yaml_alias_bomb_is_skipped_not_expanded(tmp_path: Path) -> None:
    """Nine aliases of nine aliases ... ("billion laughs") parse into a few hundred shared
    nodes that every walk over the object expands to 10^9: the load must not hang."""
    levels = ["  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    bomb = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb, namespace: default}\ndata:\n"
    write(tmp_path, "bomb.yaml", bomb + "\n".join(levels) + "\n")
    write(
        tmp_path,
        "loop.yaml",
        "kind: ConfigMap\nmetadata: {name: loop, namespace: a}\ndata: &d\n  x: *d\n",
    )
    write(tmp_path, "good.yaml", "kind: ConfigMap\nmetadata: {name: fine, namespace: default}\n")
    backend = _loaded_within(tmp_path, 10.0)
    assert names(backend.list_objects(backend.resolve("configmaps"), None)) == ["fine"]
    problems = "\n".join(backend.problems)
    assert "bomb.yaml: document 1 uses YAML aliases" in problems
    assert "loop.yaml: document 1 uses YAML aliases" in problems


def test_a_json_file_nested_too_deep_is_one_problem_not_an_unreadable_snapshot(
    tmp_path: Path,
) -> None:
    """json.loads raises RecursionError (not JSONDecodeError) past ~1000 levels; one such
    file used to make the whole snapshot fail to load, so every run on it ended unreadable."""
    deep = '{"kind": "ConfigMap", "metadata": {"name": "d", "namespace": "a"}, "data": '
    write(tmp_path, "deep.json", deep + "[" * 100_000 + "]" * 100_000 + "}")
    write(tmp_path, "good.yaml", "kind: ConfigMap\nmetadata: {name: fine, namespace: a}\n")
    backend = _loaded_within(tmp_path, 10.0)
    assert names(backend.list_objects(backend.resolve("configmaps"), None)) == ["fine"]
    assert "deep.json: not valid JSON (nested too deep)" in "\n".join(backend.problems)


@pytest.mark.parametrize(
    "spec",
    [
        "[1]",
        "{group: x.io, names: {kind: [W]}}",
        "{group: [x], names: {kind: W}}",
        "{group: x.io, names: {kind: W, plural: ws}, versions: v1}",
        "{group: x.io, names: {kind: W, shortNames: 7}}",
    ],
)
def test_a_malformed_crd_is_one_problem_not_an_unreadable_snapshot(
    tmp_path: Path, spec: str
) -> None:
    """One CRD with a list where a name belongs raised TypeError while indexing, so the
    whole snapshot failed to load and every run on it ended cannot_determine."""
    write(
        tmp_path,
        "crd.yaml",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        f"metadata: {{name: ws.x.io}}\nspec: {spec}\n",
    )
    write(tmp_path, "good.yaml", "kind: ConfigMap\nmetadata: {name: fine, namespace: a}\n")
    backend = _loaded_within(tmp_path, 10.0)
    assert names(backend.list_objects(backend.resolve("configmaps"), None)) == ["fine"]
    assert "crd.yaml: CustomResourceDefinition 'ws.x.io' is malformed" in "\n".join(
        backend.problems
    )


def test_yaml_aliases_within_reason_load_as_independent_copies(tmp_path: Path) -> None:
    """``yaml.safe_dump`` writes &id001 / *id001 for shared values (the example snapshots
    have them); each copy must be its own, so redacting or adjusting one leaves the other."""
    write(
        tmp_path,
        "pods.yaml",
        """
        apiVersion: v1
        kind: List
        items:
        - kind: Pod
          metadata: {name: a, namespace: default, labels: &l {app: web}}
        - kind: Pod
          metadata: {name: b, namespace: default, labels: *l}
        """,
    )
    backend = _loaded_within(tmp_path, 10.0)
    pods = list(backend.list_objects(backend.resolve("pods"), None))
    assert [p["metadata"]["labels"] for p in pods] == [{"app": "web"}, {"app": "web"}]
    assert not backend.problems


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="does not exist"):
        SnapshotBackend(tmp_path / "nope")


# --------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (
            "app.kubernetes.io/name=api",
            ["api-7c9d8f6b5-m3n8v", "api-7c9d8f6b5-q7r9t", "api-7c9d8f6b5-x2k4p"],
        ),
        ("app.kubernetes.io/name==web", ["web-5f6c7b8d9-c9d4f", "web-5f6c7b8d9-h5j2w"]),
        ("tier!=backend", ["web-5f6c7b8d9-c9d4f", "web-5f6c7b8d9-h5j2w"]),
        (
            "app.kubernetes.io/name in (web, worker),tier!=frontend",
            ["worker-84b7d6c5f-b6g7k", "worker-84b7d6c5f-t1s8z"],
        ),
        (
            "app.kubernetes.io/name notin (api,worker)",
            ["web-5f6c7b8d9-c9d4f", "web-5f6c7b8d9-h5j2w"],
        ),
        ("tier,app.kubernetes.io/name=web", ["web-5f6c7b8d9-c9d4f", "web-5f6c7b8d9-h5j2w"]),
        ("!tier", []),
    ],
)
def test_label_selectors(prod_eu: SnapshotBackend, selector: str, expected: list[str]) -> None:
    pods = prod_eu.resolve("pods")
    assert names(prod_eu.list_objects(pods, "prod", label_selector=selector)) == expected


def test_set_based_negations_match_objects_without_the_label(prod_eu: SnapshotBackend) -> None:
    pods = prod_eu.resolve("pods")
    everywhere = names(prod_eu.list_objects(pods, None, label_selector="!tier"))
    assert "coredns-76f75df574-8k2lp" in everywhere
    notin = names(prod_eu.list_objects(pods, None, label_selector="tier notin (backend)"))
    assert "coredns-76f75df574-8k2lp" in notin and "web-5f6c7b8d9-h5j2w" in notin
    assert not any(n.startswith(("api-", "worker-")) for n in notin)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("metadata.name=api", ["api"]),
        ("metadata.namespace=prod,metadata.name!=api", ["web", "worker"]),
        ("spec.replicas=3", ["api"]),
        ("spec.replicas!=3,metadata.namespace==prod", ["web", "worker"]),
        ("status.readyReplicas=2,metadata.namespace=kube-system", ["coredns"]),
        ("spec.template.spec.serviceAccountName=cert-manager", ["cert-manager"]),
    ],
)
def test_field_selectors(prod_eu: SnapshotBackend, selector: str, expected: list[str]) -> None:
    deployments = prod_eu.resolve("deploy")
    assert names(prod_eu.list_objects(deployments, None, field_selector=selector)) == expected


def test_field_selectors_on_pods(staging_us: SnapshotBackend) -> None:
    pods = staging_us.resolve("po")
    on_node = staging_us.list_objects(
        pods, "prod", field_selector="spec.nodeName=ip-172-31-22-9.ec2.internal"
    )
    assert names(on_node) == ["api-6b7f9d8c4-9sdlq"]
    assert names(staging_us.list_objects(pods, None, field_selector="status.phase!=Running")) == []


@pytest.mark.parametrize("selector", ["app in ((", "=x", "a b c", "app=web=x"])
def test_bad_label_selectors_fail_at_the_call(prod_eu: SnapshotBackend, selector: str) -> None:
    with pytest.raises(BackendError) as caught:
        prod_eu.list_objects(prod_eu.resolve("po"), None, label_selector=selector)
    assert caught.value.code == "bad_request"
    assert "label selector" in caught.value.message


def test_bad_field_selector(prod_eu: SnapshotBackend) -> None:
    with pytest.raises(BackendError, match="field selector"):
        prod_eu.list_objects(prod_eu.resolve("po"), None, field_selector="status.phase")


def test_cluster_scoped_kinds_ignore_the_namespace(prod_eu: SnapshotBackend) -> None:
    assert len(list(prod_eu.list_objects(prod_eu.resolve("nodes"), "prod"))) == 3


# --------------------------------------------------------------------------- get


def test_get_without_namespace_finds_a_unique_name(prod_eu: SnapshotBackend) -> None:
    cert = prod_eu.get(prod_eu.resolve("cert"), "api-example-com", None)
    assert cert["metadata"]["namespace"] == "prod"


def test_get_reports_ambiguous_and_missing_names(prod_eu: SnapshotBackend) -> None:
    services = prod_eu.resolve("svc")
    with pytest.raises(BackendError) as missing:
        prod_eu.get(services, "api", "kube-system")
    assert missing.value.code == "not_found"
    assert "namespace 'kube-system'" in missing.value.message
    with pytest.raises(BackendError) as absent:
        prod_eu.get(prod_eu.resolve("nodes"), "no-such-node", None)
    assert absent.value.code == "not_found"


def test_get_same_name_in_two_namespaces_asks_for_one(tmp_path: Path) -> None:
    for ns in ("a", "b"):
        write(
            tmp_path,
            f"{ns}.yaml",
            f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: {ns}}}\n",
        )
    backend = SnapshotBackend(tmp_path)
    with pytest.raises(BackendError, match="namespaces a, b") as caught:
        backend.get(backend.resolve("cm"), "cfg", None)
    assert caught.value.code == "bad_request"


def test_returned_objects_are_copies(prod_eu: SnapshotBackend) -> None:
    deployments = prod_eu.resolve("deploy")
    first = prod_eu.get(deployments, "api", "prod")
    first["spec"]["replicas"] = 0
    assert prod_eu.get(deployments, "api", "prod")["spec"]["replicas"] == 3


# --------------------------------------------------------------------------- events


def test_events_of_one_object_in_time_order(staging_us: SnapshotBackend) -> None:
    events = staging_us.events("prod", "Pod", "api-6b7f9d8c4-9sdlq")
    assert [e["reason"] for e in events] == ["Scheduled", "Unhealthy", "Pulled", "BackOff"]
    assert staging_us.events("prod", "pod", "api-6b7f9d8c4-fw2xk")[0]["reason"] == "Started"
    assert staging_us.events("kube-system") == []


def test_events_by_kind_only(prod_eu: SnapshotBackend) -> None:
    events = prod_eu.events(None, "Certificate")
    assert [e["involvedObject"]["name"] for e in events] == ["api-example-com"]


# --------------------------------------------------------------------------- logs


def _log_tools(folder: Path) -> ToolRegistry:
    backend = SnapshotBackend(folder)
    return ToolRegistry(kubernetes_tools(backend, load_settings()), scrubber=backend.scrubber)


def test_a_default_container_annotation_cannot_name_a_file_outside_the_pods_logs(
    tmp_path: Path,
) -> None:
    """The annotation is the pod's content: ``../../../../x`` made ``logs`` read any
    ``*.log`` file on the worker's host."""
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "private.log").write_text("a line from the worker's host\n")
    snapshot = tmp_path / "snap"
    write(
        snapshot,
        "pod.yaml",
        """
        kind: Pod
        metadata:
          name: web
          namespace: prod
          annotations: {kubectl.kubernetes.io/default-container: ../../../../host/private}
        spec: {containers: [{name: a}, {name: b}]}
        """,
    )
    write(snapshot, "logs/prod/web/a.log", "ok\n")
    result = _log_tools(snapshot).call("logs", {"namespace": "prod", "pod": "web"})
    assert not result.ok and "worker's host" not in result.output, result.output


def test_a_log_file_linking_outside_the_snapshot_is_not_read(tmp_path: Path) -> None:
    """A log file may be a symlink; one pointing out of the snapshot folder (/etc/passwd,
    another snapshot) must not be read back to the model."""
    (tmp_path / "host.txt").write_text("root:x:0:0:root:/root:/bin/bash\n")
    snapshot = tmp_path / "snap"
    write(snapshot, "pod.yaml", "kind: Pod\nmetadata: {name: web, namespace: prod}\n")
    (snapshot / "logs/prod/web").mkdir(parents=True)
    (snapshot / "logs/prod/web/app.log").symlink_to(tmp_path / "host.txt")
    (snapshot / "logs/prod/web/app.previous.log").symlink_to("/dev/zero")
    tools = _log_tools(snapshot)
    for previous in (False, True):
        arguments = {"namespace": "prod", "pod": "web", "container": "app", "previous": previous}
        result = tools.call("logs", arguments)
        assert not result.ok and "root:x" not in result.output, result.output
        assert result.output.startswith("not found:")


def test_a_huge_log_file_is_read_from_its_end_only(tmp_path: Path) -> None:
    """A sparse 8 GiB log costs no disk but was read whole into memory for 200 lines."""
    write(tmp_path, "pod.yaml", "kind: Pod\nmetadata: {name: web, namespace: prod}\n")
    log = tmp_path / "logs/prod/web/app.log"
    log.parent.mkdir(parents=True)
    with log.open("wb") as handle:
        handle.seek(8 * 2**30)
        handle.write(b"\n".join(b"line %d" % n for n in range(5000)) + b"\n")
    tools = _log_tools(tmp_path)
    tracemalloc.start()
    try:
        result = tools.call("logs", {"namespace": "prod", "pod": "web", "tail_lines": 3})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok and result.output.endswith("line 4997\nline 4998\nline 4999\n")
    assert peak < 256 * 2**20


def test_logs_current_previous_and_tail(staging_us: SnapshotBackend) -> None:
    pod = "api-6b7f9d8c4-9sdlq"
    current = staging_us.logs("prod", pod)
    assert "cannot start without schema, exiting" in current
    previous = staging_us.logs("prod", pod, previous=True)
    assert "panic: migrate: cannot start without schema" in previous
    assert "panic" not in current
    tail = staging_us.logs("prod", pod, tail_lines=2)
    assert tail.count("\n") == 2
    assert tail.splitlines()[-1].endswith('"exit_code":1}')


def test_logs_since_seconds_counts_back_from_the_newest_line(staging_us: SnapshotBackend) -> None:
    recent = staging_us.logs("prod", "api-6b7f9d8c4-9sdlq", since_seconds=2)
    assert "migration failed" in recent
    assert "starting api" not in recent


def test_logs_limit_bytes_keeps_the_first_bytes(staging_us: SnapshotBackend) -> None:
    text = staging_us.logs("prod", "api-6b7f9d8c4-9sdlq", limit_bytes=40)
    assert len(text.encode()) <= 40
    assert text.startswith("2026-03-10T08:55:58")


def test_logs_errors(staging_us: SnapshotBackend, tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="no previous log") as caught:
        staging_us.logs("prod", "api-6b7f9d8c4-fw2xk", previous=True)
    assert caught.value.code == "not_found"
    with pytest.raises(BackendError, match="has no container 'sidecar'"):
        staging_us.logs("prod", "api-6b7f9d8c4-fw2xk", container="sidecar")
    with pytest.raises(BackendError, match="not found in namespace"):
        staging_us.logs("prod", "ghost")
    for bad in ("../../etc", "a/b", ".."):
        with pytest.raises(BackendError) as traversal:
            staging_us.logs(bad, "x")
        assert traversal.value.code == "bad_request"


def test_logs_of_a_multi_container_pod_need_a_container(tmp_path: Path) -> None:
    write(
        tmp_path,
        "pod.yaml",
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: two, namespace: ns}
        spec:
          containers: [{name: app, image: a}, {name: proxy, image: p}]
        """,
    )
    write(tmp_path, "logs/ns/two/app.log", "app line\n")
    write(tmp_path, "logs/ns/two/proxy.log", "proxy line\n")
    backend = SnapshotBackend(tmp_path)
    with pytest.raises(BackendError, match=r"several containers \(app, proxy\)"):
        backend.logs("ns", "two")
    assert backend.logs("ns", "two", container="proxy") == "proxy line\n"


# --------------------------------------------------------------------------- explain


def test_explain_reads_the_crd_schema(prod_eu: SnapshotBackend) -> None:
    certificates = prod_eu.resolve("certificate")
    top = prod_eu.explain(certificates)
    assert {"spec", "status"} <= top["properties"].keys()
    dns = prod_eu.explain(certificates, "spec.dnsNames")
    assert dns["type"] == "array"
    condition = prod_eu.explain(certificates, "status.conditions.status")  # steps into items
    assert condition["enum"] == ["True", "False", "Unknown"]
    with pytest.raises(BackendError, match="no field 'nope' under spec"):
        prod_eu.explain(certificates, "spec.nope")


def test_explain_of_a_builtin_says_the_snapshot_has_no_schema(prod_eu: SnapshotBackend) -> None:
    with pytest.raises(BackendError, match="carries no schema for Deployment") as caught:
        prod_eu.explain(prod_eu.resolve("deploy"))
    assert caught.value.code == "unsupported"


# --------------------------------------------------------------------------- redaction


def test_secret_values_are_redacted_at_load(prod_eu: SnapshotBackend) -> None:
    secret = prod_eu.get(prod_eu.resolve("secret"), "api-credentials", "prod")
    assert secret["data"] == {"api-token": REDACTED}
    assert secret["stringData"] == {"db-password": REDACTED}
    assert "annotations" not in secret["metadata"] or not any(
        "last-applied" in key for key in secret["metadata"]["annotations"]
    )
    everything = json.dumps(
        [list(prod_eu.list_objects(info, None)) for info in prod_eu.api_resources()]
    )
    encoded = base64.b64encode(CANARY.encode()).decode()
    assert CANARY not in everything and encoded not in everything
    # the annotation itself is gone (managedFields may still name it as "f:...")
    assert '"kubectl.kubernetes.io/last-applied-configuration"' not in everything


def test_copies_of_secret_values_elsewhere_are_scrubbed(tmp_path: Path) -> None:
    value = "s3cr3t-password-42"
    write(
        tmp_path,
        "objects.yaml",
        f"""
        apiVersion: v1
        kind: Secret
        metadata: {{name: db, namespace: app}}
        data: {{password: {base64.b64encode(value.encode()).decode()}}}
        ---
        apiVersion: v1
        kind: Pod
        metadata: {{name: leaky, namespace: app}}
        spec:
          containers:
          - name: app
            image: app:1
            env: [{{name: DB_PASSWORD, value: {value}}}]
        """,
    )
    write(tmp_path, "logs/app/leaky/app.log", f"connecting with password={value}\n")
    backend = SnapshotBackend(tmp_path)
    pod = backend.get(backend.resolve("po"), "leaky", "app")
    assert pod["spec"]["containers"][0]["env"][0]["value"] == REDACTED
    assert backend.logs("app", "leaky") == f"connecting with password={REDACTED}\n"


def _every_output(folder: Path, calls: list[tuple[str, dict[str, str]]]) -> str:
    tools = _log_tools(folder)
    return "\n".join(tools.call(name, arguments).output for name, arguments in calls)


def test_a_secret_value_read_as_a_yaml_tag_is_not_quoted_in_the_problems_note(
    tmp_path: Path,
) -> None:
    """A hand-written Secret whose password starts with '!' does not parse (an unknown
    tag); the parse error quoted the tag, i.e. the password, into the warning every tool
    result carries."""
    write(
        tmp_path,
        "secret.yaml",
        "kind: Secret\nmetadata: {name: db, namespace: a}\nstringData:\n  password: !Pw-9f3kQ2x\n",
    )
    write(tmp_path, "cm.yaml", "kind: ConfigMap\nmetadata: {name: cm, namespace: a}\n")
    output = _every_output(tmp_path, [("get", {"kind": "configmaps", "namespace": "a"})])
    assert "secret.yaml: not valid YAML (line 4" in output
    assert "Pw-9f3kQ2x" not in output


def test_a_secret_inside_a_list_inside_a_list_is_redacted(tmp_path: Path) -> None:
    """Lists nest (a List item that is itself a List); the inner List was stored as an
    object of kind List, so its Secret item was served with its values."""
    write(
        tmp_path,
        "nested.yaml",
        """
        apiVersion: v1
        kind: List
        items:
        - apiVersion: v1
          kind: List
          metadata: {name: inner, namespace: a}
          items:
          - kind: Secret
            metadata: {name: nested, namespace: a}
            stringData: {api-key: nested-list-value-1}
        - kind: ConfigMap
          metadata: {name: copy, namespace: a}
          data: {note: "the key is nested-list-value-1"}
        """,
    )
    calls = [
        ("get", {"kind": "List", "namespace": "a", "name": "inner"}),
        ("get", {"kind": "secrets", "namespace": "a", "name": "nested"}),
        ("get", {"kind": "configmaps", "namespace": "a", "name": "copy"}),
    ]
    output = _every_output(tmp_path, calls)
    assert "nested-list-value-1" not in output
    assert "api-key: <redacted by assay>" in output


def test_secret_values_written_as_numbers_or_binary_are_scrubbed_elsewhere(
    tmp_path: Path,
) -> None:
    """YAML reads an unquoted ``pin: 987654321987`` as an int and ``!!binary`` as bytes;
    the Secret showed them redacted, but they were not learned, so copies stayed."""
    write(
        tmp_path,
        "objects.yaml",
        """
        kind: Secret
        metadata: {name: s, namespace: a}
        stringData: {pin: 987654321987}
        data: {blob: !!binary QmluYXJ5UzNjcmV0VmFsdWU=}
        ---
        kind: ConfigMap
        metadata: {name: cm, namespace: a}
        data: {one: "pin 987654321987", two: "BinaryS3cretValue here"}
        """,
    )
    output = _every_output(tmp_path, [("get", {"kind": "cm", "namespace": "a", "name": "cm"})])
    assert "987654321987" not in output and "BinaryS3cretValue" not in output
    assert output.count(REDACTED) == 2


# --------------------------------------------------------------------------- cluster scope


def test_a_cluster_scoped_object_with_a_namespace_is_found_by_name(tmp_path: Path) -> None:
    write(
        tmp_path,
        "rbac/reader.yaml",
        """\
        apiVersion: rbac.authorization.k8s.io/v1
        kind: ClusterRole
        metadata: {name: reader, namespace: test}
        rules:
        - apiGroups: [""]
          resources: [pods]
          verbs: [get]
        """,
    )
    write(
        tmp_path,
        "crds.yaml",
        """\
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {name: clusterpolicies.example.com}
        spec:
          group: example.com
          scope: Cluster
          names: {kind: ClusterPolicy, plural: clusterpolicies}
          versions: [{name: v1, served: true, storage: true}]
        ---
        apiVersion: example.com/v1
        kind: ClusterPolicy
        metadata: {name: strict, namespace: test}
        spec: {enforce: true}
        """,
    )
    backend = SnapshotBackend(tmp_path)
    role = backend.get(backend.resolve("clusterroles"), "reader", None)
    assert role["rules"][0]["verbs"] == ["get"]
    assert "namespace" not in role["metadata"]  # as a real API server would store it
    policy = backend.get(backend.resolve("clusterpolicies"), "strict", "test")
    assert policy["spec"] == {"enforce": True}
    listed = list(backend.list_objects(backend.resolve("ClusterRole"), None))
    assert [(o["metadata"]["name"], o["metadata"].get("namespace")) for o in listed] == [
        ("reader", None)
    ]
    problems = "\n".join(backend.problems)
    assert "rbac/reader.yaml: ClusterRole 'reader' is cluster-scoped" in problems
    assert "crds.yaml: ClusterPolicy 'strict' is cluster-scoped" in problems
    assert "namespace 'test' was ignored" in problems


def test_one_walk_finds_what_rglob_finds_in_its_order(tmp_path: Path) -> None:
    """The cache and the backend share one walk of a snapshot folder; it must see the same
    entries as ``sorted(root.rglob("*"))`` (what each walked before), symlinks included."""
    from workers.engine.toolsets.snapshot_backend import FolderListing

    root = tmp_path / "snap"
    for name in (
        "a/b.yaml",
        "a-b.yaml",
        "a/c/d.yml",
        ".hidden/x.yaml",
        "logs/ns/pod/c.log",
        "Z.json",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("{}")
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "e.yaml").write_text("{}")
    (root / "linked-folder").symlink_to(outside, target_is_directory=True)
    (root / "linked-file.yaml").symlink_to(outside / "deep" / "e.yaml")
    (root / "broken.yaml").symlink_to(tmp_path / "missing.yaml")

    listing = FolderListing.walk(root.resolve())

    assert [path for _, path, _ in listing.entries] == sorted(root.resolve().rglob("*"))
    assert "linked-folder/deep/e.yaml" not in [rel for rel, _, _ in listing.entries]
    stats = {rel: st for rel, _, st in listing.entries}
    assert stats["broken.yaml"] is None and stats["linked-file.yaml"] is not None


def test_a_symlinked_object_file_loads_and_a_broken_link_is_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: linked, namespace: default}\n"
    )
    root = tmp_path / "snap"
    root.mkdir()
    (root / "cm.yaml").symlink_to(outside)
    (root / "gone.yaml").symlink_to(tmp_path / "missing.yaml")
    backend = SnapshotBackend(root)
    assert names(backend.list_objects(backend.resolve("configmaps"), None)) == ["linked"]
    assert not backend.problems


def test_a_deeply_nested_snapshot_is_walked_without_recursion(tmp_path: Path) -> None:
    """A hostile or generated folder tree deeper than Python's recursion limit still loads."""
    import sys

    levels = []
    deep = tmp_path
    try:
        for _ in range(sys.getrecursionlimit() + 100):  # level by level: pathlib's mkdir recurses
            deep = deep / "d"
            deep.mkdir()
            levels.append(deep)
        (deep / "cm.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep, namespace: default}\n"
        )
        backend = SnapshotBackend(tmp_path)
        assert names(backend.list_objects(backend.resolve("configmaps"), None)) == ["deep"]
    finally:  # bottom-up: pytest's own clean-up (shutil.rmtree) recurses and would fail on it
        (deep / "cm.yaml").unlink(missing_ok=True)
        for level in reversed(levels):
            level.rmdir()


def test_a_snapshot_folder_that_cannot_be_listed_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unlistable (permissions; tests run as root, so the refusal is simulated at scandir)."""
    import os

    from workers.engine.toolsets.factory import SnapshotCache

    real_scandir = os.scandir

    def refuse(path: object) -> object:
        if Path(str(path)) == tmp_path.resolve():
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", refuse)
    with pytest.raises(SnapshotError, match="could not be read \\(Permission denied\\)"):
        SnapshotCache().get(tmp_path)


@pytest.mark.parametrize(
    "files",
    [
        {},  # an empty folder
        {"notes.txt": "kubectl get pods -o yaml > pods.yaml\n"},  # no YAML at all
        {"pods.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n"},  # none parses
        {"logs/prod/api/app.log": "started\n"},  # logs but no objects
    ],
)
def test_a_folder_without_any_object_is_refused_not_served_as_an_empty_cluster(
    tmp_path: Path, files: dict[str, str]
) -> None:
    """Served, an empty cluster makes "no pod runs as root" vacuously true: a wrong
    --snapshot folder must end a run with cannot_determine, not let the model answer."""
    for relative, text in files.items():
        write(tmp_path, relative, text)
    with pytest.raises(SnapshotError, match="holds no Kubernetes objects"):
        SnapshotBackend(tmp_path)


def test_an_object_captured_twice_differently_is_named_in_the_problems(tmp_path: Path) -> None:
    """`--snapshot examples/snapshots` (the folder of several clusters) used to merge them
    silently, the last file winning: a check then answered for a cluster that does not
    exist. The same object twice with the same content (overlapping kubectl gets) is fine."""
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: api, namespace: prod}}\n"
        "status: {{phase: {}}}\n"
    )
    write(tmp_path, "eu/pods.yaml", pod.format("Running"))
    write(tmp_path, "us/pods.yaml", pod.format("Pending"))
    write(tmp_path, "us/again.yaml", pod.format("Pending"))
    backend = SnapshotBackend(tmp_path)
    assert len(backend.problems) == 1, backend.problems
    problem = backend.problems[0]
    assert "Pod prod/api" in problem and "eu/pods.yaml" in problem and "us/" in problem
    assert "several clusters" in problem


# ------------------------------------------------------------------ oversized object files

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: prod}\n"


def _sparse(path: Path, size: int, head: bytes = b"") -> None:
    """A file of ``size`` bytes that costs no disk: ``head``, then a hole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(head)
    os.truncate(path, size)


def test_an_object_file_past_the_cap_is_skipped_unread_and_the_rest_still_loads(
    tmp_path: Path,
) -> None:
    """A 5 GiB file in a snapshot folder was read whole into a worker's memory.

    One byte past the cap is enough to be refused (and keeps this test cheap should the
    check ever go); a sparse file costs no disk. ``os.open`` is watched so the test also
    proves the file is refused from its listed size, without being opened at all.
    """
    write(tmp_path, "pods.yaml", POD)
    huge = snapshot_backend.MAX_OBJECT_FILE_BYTES + 1
    _sparse(tmp_path / "dump/huge.yaml", huge, b"apiVersion: v1\nkind: Pod\n")
    opened: list[str] = []
    real_open = os.open

    def watching_open(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    with patch.object(snapshot_backend.os, "open", watching_open):
        backend = SnapshotBackend(tmp_path)
    assert backend.problems == ["dump/huge.yaml: larger than 64 MiB; it was skipped"]
    assert not any(path.endswith("huge.yaml") for path in opened), opened
    pods = backend.list_objects(backend.resolve("Pod"), namespace="prod")
    assert [pod["metadata"]["name"] for pod in pods] == ["web"]


def test_a_file_exactly_at_the_cap_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap refuses what is larger, not a file of exactly the cap."""
    monkeypatch.setattr(snapshot_backend, "MAX_OBJECT_FILE_BYTES", len(POD))
    write(tmp_path, "pods.yaml", POD)
    backend = SnapshotBackend(tmp_path)
    assert backend.problems == []


def test_a_file_that_grows_past_the_cap_after_listing_is_read_no_further(
    tmp_path: Path,
) -> None:
    """The listing's size is only a first check: a file that grew (or was swapped for a
    larger one) between the folder walk and the read must not be read past the cap."""
    write(tmp_path, "pods.yaml", POD)
    grows = tmp_path / "grows.yaml"
    grows.write_text(POD.replace("web", "api"))
    listing = FolderListing.walk(tmp_path.resolve())
    os.truncate(grows, snapshot_backend.MAX_OBJECT_FILE_BYTES + 4096)  # after the walk
    tracemalloc.start()
    try:
        backend = SnapshotBackend(tmp_path, listing)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert backend.problems == ["grows.yaml: larger than 64 MiB; it was skipped"]
    assert peak < 2 * snapshot_backend.MAX_OBJECT_FILE_BYTES + 2**20
    pods = backend.list_objects(backend.resolve("Pod"), namespace="prod")
    assert [pod["metadata"]["name"] for pod in pods] == ["web"]


def test_read_text_stops_one_byte_past_its_limit(tmp_path: Path) -> None:
    file = tmp_path / "objects.yaml"
    file.write_bytes(b"a: 1\n" * 1000)  # 5000 bytes
    assert read_text(file, 10, limit=5000) == file.read_text(encoding="utf-8")
    with pytest.raises(FileTooLarge):
        read_text(file, 10, limit=4999)


@pytest.mark.parametrize("listed", [0, 1, 4999, 5000, 5001, 70_000, 200_000])
@pytest.mark.parametrize("actual", [0, 5000, 200_000])
def test_read_text_reads_the_whole_file_whatever_size_the_listing_gave(
    tmp_path: Path, listed: int, actual: int
) -> None:
    """The listed size only sizes the reads: a file that grew or shrank since the walk is
    still read whole, and one exactly as listed ends without a read past it."""
    file = tmp_path / "objects.yaml"
    file.write_bytes(b"a: 1\n" * (actual // 5))
    assert read_text(file, listed) == file.read_text(encoding="utf-8")


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_a_folder_of_only_oversized_files_is_refused_not_served_empty(
    tmp_path: Path, suffix: str
) -> None:
    """Skipping every file must not leave an empty cluster, where "no pod runs as
    root" is vacuously true: it is the folder-without-objects error, naming why."""
    _sparse(tmp_path / f"all{suffix}", snapshot_backend.MAX_OBJECT_FILE_BYTES + 1)
    _sparse(tmp_path / f"more/all{suffix}", snapshot_backend.MAX_OBJECT_FILE_BYTES + 2)
    with pytest.raises(SnapshotError, match="holds no Kubernetes objects") as caught:
        SnapshotBackend(tmp_path)
    assert "2 file(s) could not be used" in str(caught.value)
    assert f"all{suffix}: larger than 64 MiB; it was skipped" in str(caught.value)


def test_what_a_tool_is_handed_is_its_own_copy(tmp_path: Path) -> None:
    """A tool that changes an object it was handed (sorting, trimming, redacting a view)
    must not change the snapshot every later call and every other run is served from."""
    (tmp_path / "objects.yaml").write_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: settings, namespace: a, labels: {app: web}}
            data: {mode: strict}
            extra: !!set {x, y}
            ordered: !!omap [{first: {deep: [1, 2]}}]
            ---
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: other, namespace: a}
            """
        )
    )
    backend = SnapshotBackend(tmp_path)
    configmaps = backend.resolve("configmaps")
    before = backend.get(configmaps, "settings", "a")

    handed = [
        backend.get(configmaps, "settings", "a"),
        next(iter(backend.list_objects(configmaps, "a", label_selector="app=web"))),
    ]
    for obj in handed:
        obj["metadata"]["labels"]["app"] = "changed"
        obj["data"].clear()
        obj["extra"].add("z")
        obj["ordered"][0][1]["deep"].append(3)

    assert backend.get(configmaps, "settings", "a") == before
    assert before["extra"] == {"x", "y"} and before["ordered"] == [("first", {"deep": [1, 2]})]
    assert [o["metadata"]["name"] for o in backend.list_objects(configmaps, "a")] == [
        "other",
        "settings",
    ]
