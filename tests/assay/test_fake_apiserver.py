"""The test API server itself, spoken to over plain HTTP the way the API server is.

These pin down the REST behaviour the live-backend tests rely on: discovery
documents, list/get paths, selectors, pagination with expiring tokens, logs,
OpenAPI, request recording, 405 for anything that is not a GET read, faults,
and the kubeconfig it writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from tests.live_support import new_canary, write_cluster


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FakeApiServer]:
    east = write_cluster(tmp_path, "east", ready=3, canary=new_canary())
    west = write_cluster(tmp_path, "west", ready=0)
    clusters = [FakeCluster.from_snapshot(east), FakeCluster.from_snapshot(west)]
    with FakeApiServer(clusters) as running:
        yield running


def call(
    server: FakeApiServer,
    path: str,
    *,
    cluster: str = "east",
    method: str = "GET",
    token: str | None = "default",
) -> tuple[int, Any, dict[str, str]]:
    request = urllib.request.Request(server.cluster_url(cluster) + path, method=method)
    if token == "default":
        token = f"assay-test-token-{cluster}"
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if method in ("POST", "PUT", "PATCH"):
        request.data = b"{}"
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
            status, headers = response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        body, status, headers = exc.read(), exc.code, dict(exc.headers)
    try:
        return status, json.loads(body), headers
    except ValueError:
        return status, body.decode(), headers


def names(listing: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in listing["items"]]


def test_discovery_documents_describe_builtins_and_crds(server: FakeApiServer) -> None:
    status, core, _ = call(server, "/api/v1")
    assert status == 200
    pods = next(r for r in core["resources"] if r["name"] == "pods")
    assert pods["namespaced"] is True and pods["kind"] == "Pod" and "po" in pods["shortNames"]
    assert any(r["name"] == "pods/log" for r in core["resources"])
    _, groups, _ = call(server, "/apis")
    group_names = {g["name"] for g in groups["groups"]}
    assert {"apps", "cert-manager.io", "apiextensions.k8s.io"} <= group_names
    _, certs, _ = call(server, "/apis/cert-manager.io/v1")
    assert [r["kind"] for r in certs["resources"]] == ["Certificate"]
    assert call(server, "/apis/nothing.example.com/v1")[0] == 404


def test_list_and_get_namespaced_cluster_wide_and_grouped(server: FakeApiServer) -> None:
    _, prod, _ = call(server, "/api/v1/namespaces/prod/pods")
    assert prod["kind"] == "PodList" and names(prod) == ["web-1", "web-2", "worker-1"]
    assert "kind" not in prod["items"][0]  # list items carry no kind, as from a real server
    _, everywhere, _ = call(server, "/api/v1/pods")
    assert len(everywhere["items"]) == 4
    _, deployment, _ = call(server, "/apis/apps/v1/namespaces/prod/deployments/web")
    assert deployment["status"]["readyReplicas"] == 3
    _, namespace, _ = call(server, "/api/v1/namespaces/prod")
    assert namespace["kind"] == "Namespace"
    status, missing, _ = call(server, "/api/v1/namespaces/prod/pods/nope")
    assert status == 404 and missing["reason"] == "NotFound"
    _, west, _ = call(server, "/apis/apps/v1/namespaces/prod/deployments/web", cluster="west")
    assert west["status"]["readyReplicas"] == 0


def test_a_cluster_scoped_object_written_with_a_namespace_is_served_without_one(
    tmp_path: Path,
) -> None:
    (tmp_path / "roles.yaml").write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n"
        "metadata: {name: reader, namespace: test}\nrules: []\n"
    )
    with FakeApiServer([FakeCluster.from_snapshot(tmp_path, "solo")]) as running:
        path = "/apis/rbac.authorization.k8s.io/v1/clusterroles/reader"
        status, role, _ = call(running, path, cluster="solo")
    assert status == 200 and "namespace" not in role["metadata"]  # as a real API server


def test_label_and_field_selectors_filter_on_the_server(server: FakeApiServer) -> None:
    _, labelled, _ = call(server, "/api/v1/pods?labelSelector=app%3Dweb,tier%3Dfront")
    assert names(labelled) == ["web-1"]
    _, by_field, _ = call(server, "/api/v1/pods?fieldSelector=metadata.namespace%3Dstaging")
    assert (
        names(by_field) == ["web-1"] and by_field["items"][0]["metadata"]["namespace"] == "staging"
    )
    _, events, _ = call(
        server, "/api/v1/namespaces/prod/events?fieldSelector=involvedObject.name%3Dworker-1"
    )
    assert names(events) == ["worker-1.1"]
    status, bad, _ = call(server, "/api/v1/pods?labelSelector=%3D%3Dbroken")
    assert status == 400 and "label selector" in bad["message"]


def test_pagination_walks_the_list_and_expired_tokens_get_410(tmp_path: Path) -> None:
    with FakeApiServer([FakeCluster.synthetic(25, namespaces=2)]) as synthetic:
        seen: list[str] = []
        token = ""
        pages = 0
        while True:
            query = "?limit=10" + (f"&continue={token}" if token else "")
            _, page, _ = call(synthetic, "/api/v1/pods" + query, cluster="synthetic")
            seen.extend(names(page))
            pages += 1
            token = page["metadata"].get("continue", "")
            if not token:
                break
        assert pages == 3 and len(seen) == len(set(seen)) == 25
        _, first, _ = call(synthetic, "/api/v1/pods?limit=10", cluster="synthetic")
        assert first["metadata"]["remainingItemCount"] == 15
        synthetic.expire_continue_tokens()
        status, gone, _ = call(
            synthetic,
            f"/api/v1/pods?limit=10&continue={first['metadata']['continue']}",
            cluster="synthetic",
        )
        assert status == 410 and gone["reason"] == "Expired"
        assert call(synthetic, "/api/v1/pods?continue=garbage", cluster="synthetic")[0] == 400


def test_logs_honour_tail_bytes_since_previous_and_container(server: FakeApiServer) -> None:
    log = "/api/v1/namespaces/prod/pods/web-1/log"
    _, tail, _ = call(server, log + "?tailLines=2")
    assert tail == "2025-01-01T00:08:00Z east line 8\n2025-01-01T00:09:00Z east line 9\n"
    _, capped, _ = call(server, log + "?limitBytes=10")
    assert capped == "2025-01-01"
    _, recent, _ = call(server, log + "?sinceSeconds=120")
    assert recent.splitlines() == [f"2025-01-01T00:0{m}:00Z east line {m}" for m in (7, 8, 9)]
    _, previous, _ = call(server, log + "?previous=true")
    assert previous == "panic: east crashed before\n"
    status, choose, _ = call(server, "/api/v1/namespaces/prod/pods/worker-1/log")
    assert status == 400 and "[main sidecar]" in choose["message"]
    status, _, _ = call(
        server, "/api/v1/namespaces/prod/pods/worker-1/log?previous=true&container=main"
    )
    assert status == 400


def test_openapi_v3_serves_builtin_and_crd_schemas(server: FakeApiServer) -> None:
    _, index, _ = call(server, "/openapi/v3")
    url = index["paths"]["apis/cert-manager.io/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/cert-manager.io/v1?hash=")
    _, doc, _ = call(server, url)
    (certificate,) = [
        s
        for s in doc["components"]["schemas"].values()
        if s.get("x-kubernetes-group-version-kind", [{}])[0].get("kind") == "Certificate"
    ]
    assert "dnsNames" in certificate["properties"]["spec"]["properties"]
    _, core, _ = call(server, "/openapi/v3/api/v1")
    pod_spec = core["components"]["schemas"]["V1PodSpec"]
    assert "List of containers" in pod_spec["properties"]["containers"]["description"]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_writes_are_refused_with_405_and_recorded(server: FakeApiServer, method: str) -> None:
    status, body, _ = call(server, "/apis/apps/v1/namespaces/prod/deployments/web", method=method)
    assert status == 405 and "read-only" in body["message"]
    assert server.requests[-1].method == method
    _, deployment, _ = call(server, "/apis/apps/v1/namespaces/prod/deployments/web")
    assert deployment["spec"]["replicas"] == 3  # nothing changed


@pytest.mark.parametrize("subresource", ["exec", "attach", "portforward", "proxy"])
def test_streaming_subresources_are_not_served(server: FakeApiServer, subresource: str) -> None:
    status, _, _ = call(server, f"/api/v1/namespaces/prod/pods/web-1/{subresource}")
    assert status == 405
    assert server.requests[-1].path.endswith(f"/web-1/{subresource}")


def test_requests_without_the_context_token_are_unauthorized(server: FakeApiServer) -> None:
    assert call(server, "/api/v1/pods", token=None)[0] == 401
    assert call(server, "/api/v1/pods", token="assay-test-token-west")[0] == 401
    assert server.requests[-1].authorized is False


def test_faults_per_path_pattern(server: FakeApiServer) -> None:
    server.add_fault(r"/namespaces/prod/pods$", 403, cluster="east")
    server.add_fault(r"/deployments$", 429, retry_after=2, times=1)
    assert call(server, "/api/v1/namespaces/prod/pods")[0] == 403
    assert call(server, "/api/v1/namespaces/prod/pods", cluster="west")[0] == 200
    status, _, headers = call(server, "/apis/apps/v1/namespaces/prod/deployments")
    assert status == 429 and headers["Retry-After"] == "2"
    assert call(server, "/apis/apps/v1/namespaces/prod/deployments")[0] == 200  # times=1
    server.add_fault(r"/api/v1/nodes", hang=0.5)
    started = time.monotonic()
    assert call(server, "/api/v1/nodes")[0] == 200
    assert time.monotonic() - started >= 0.5


def test_kubeconfig_has_one_context_per_cluster(server: FakeApiServer, tmp_path: Path) -> None:
    config = yaml.safe_load(server.write_kubeconfig(tmp_path / "kc.yaml").read_text())
    assert [c["name"] for c in config["contexts"]] == ["east", "west"]
    servers = {c["name"]: c["cluster"]["server"] for c in config["clusters"]}
    assert servers["west"] == server.cluster_url("west")


def test_synthetic_pods_are_generated_on_demand(tmp_path: Path) -> None:
    cluster = FakeCluster.synthetic(5000)
    with FakeApiServer([cluster]) as synthetic:
        _, page, _ = call(synthetic, "/api/v1/pods?limit=3", cluster="synthetic")
        assert names(page) == ["pod-00000", "pod-00001", "pod-00002"]
        assert page["metadata"]["remainingItemCount"] == 4997
        namespace = cluster.collection(cluster.resources[0]).at(4999)["metadata"]["namespace"]
        _, last, _ = call(
            synthetic, f"/api/v1/namespaces/{namespace}/pods/pod-04999", cluster="synthetic"
        )
        assert last["metadata"]["name"] == "pod-04999"
        _, log, _ = call(
            synthetic,
            f"/api/v1/namespaces/{namespace}/pods/pod-04999/log?container=app&tailLines=1",
            cluster="synthetic",
        )
        assert log == "2025-01-01T00:59:00Z pod-04999 handled request 59\n"


def test_runs_as_a_module_and_writes_the_kubeconfig(tmp_path: Path) -> None:
    east = write_cluster(tmp_path, "east", ready=3)
    west = write_cluster(tmp_path, "west", ready=0)
    kubeconfig = tmp_path / "kubeconfig.yaml"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "assay.testing.fake_apiserver",
            "--snapshot",
            str(east),
            "--snapshot",
            str(west),
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert "contexts: east, west" in banner
        config = yaml.safe_load(kubeconfig.read_text())
        west_url = next(c["cluster"]["server"] for c in config["clusters"] if c["name"] == "west")
        request = urllib.request.Request(west_url + "/apis/apps/v1/namespaces/prod/deployments/web")
        request.add_header("Authorization", "Bearer assay-test-token-west")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response)["status"]["readyReplicas"] == 0
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
