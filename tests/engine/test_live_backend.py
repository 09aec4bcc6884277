"""The live backend, through the real kubernetes client, against the test API server.

Every test goes the way a user's lookup goes: a kubeconfig context, the
kubernetes client's configuration loading and HTTP layer, ``LiveBackend``
and (mostly) the same Kubernetes tools the planner calls. The server records
every request, so tests can say exactly what reached the "cluster".
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.request import ContextTarget, InClusterTarget
from schemas.settings import AssaySettings, load_settings
from tests.live_support import new_canary, write_cluster
from workers.engine.toolsets import live_transport
from workers.engine.toolsets.backend import REDACTED, BackendError
from workers.engine.toolsets.base import ToolRegistry, ToolResult
from workers.engine.toolsets.kubernetes import kubernetes_tools
from workers.engine.toolsets.live_backend import LiveBackend
from workers.engine.toolsets.live_transport import WriteRefused, check_read_path
from workers.engine.toolsets.snapshot_backend import SnapshotBackend

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Clusters:
    server: FakeApiServer
    kubeconfig: Path
    canary: str

    def settings(self, **overrides: Any) -> AssaySettings:
        defaults: dict[str, Any] = {
            "kubeconfig": str(self.kubeconfig),
            "kube_request_timeout_seconds": 5.0,
            "kube_retry_deadline_seconds": 10.0,
        }
        return load_settings(**{**defaults, **overrides})

    def backend(self, context: str = "east", **overrides: Any) -> LiveBackend:
        return LiveBackend.from_target(ContextTarget(context=context), self.settings(**overrides))

    def tools(self, context: str = "east", **overrides: Any) -> ToolRegistry:
        settings = self.settings(**overrides)
        backend = LiveBackend.from_target(ContextTarget(context=context), settings)
        return ToolRegistry(kubernetes_tools(backend, settings))

    def paths(self) -> list[str]:
        return [r.path for r in self.server.requests]


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[Clusters]:
    canary = new_canary()
    east = write_cluster(tmp_path, "east", ready=3, canary=canary)
    west = write_cluster(tmp_path, "west", ready=0)
    with FakeApiServer([FakeCluster.from_snapshot(east), FakeCluster.from_snapshot(west)]) as srv:
        yield Clusters(srv, srv.write_kubeconfig(tmp_path / "kubeconfig"), canary)


def ok(result: ToolResult) -> str:
    assert result.ok, result.output
    return result.output


# --- the tools on two contexts ---------------------------------------------------------


def test_get_reads_each_context_from_its_own_cluster(clusters: Clusters) -> None:
    east = ok(clusters.tools("east").call("get", {"kind": "deploy", "namespace": "prod"}))
    west = ok(clusters.tools("west").call("get", {"kind": "deploy", "namespace": "prod"}))
    assert "3/3" in east and "0/3" not in east
    assert "0/3" in west
    assert {r.cluster for r in clusters.server.requests} == {"east", "west"}
    assert all(r.authorized for r in clusters.server.requests)


def test_get_lists_across_namespaces_and_reads_one_object(clusters: Clusters) -> None:
    tools = clusters.tools()
    listing = ok(tools.call("get", {"kind": "pods"}))
    assert "staging" in listing and "worker-1" in listing and "4 pods" in listing.lower()
    one = ok(tools.call("get", {"kind": "Pod", "name": "web-2", "namespace": "prod"}))
    assert "kind: Pod" in one and "name: web-2" in one
    crd = ok(tools.call("get", {"kind": "certificates.cert-manager.io", "namespace": "prod"}))
    assert "api-tls" in crd and "Ready=True" in crd


def test_selectors_are_sent_to_the_server(clusters: Clusters) -> None:
    tools = clusters.tools()
    out = ok(
        tools.call(
            "get",
            {
                "kind": "po",
                "label_selector": "app=web",
                "field_selector": "metadata.namespace=prod",
            },
        )
    )
    assert "web-1" in out and "web-2" in out and "worker-1" not in out and "staging" not in out
    listed = [r for r in clusters.server.requests if r.path == "/c/east/api/v1/pods"][-1]
    assert listed.query["labelSelector"] == ["app=web"]
    assert listed.query["fieldSelector"] == ["metadata.namespace=prod"]
    assert listed.query["limit"] == ["500"]


def test_describe_shows_the_object_and_its_events(clusters: Clusters) -> None:
    tools = clusters.tools("west")
    out = ok(tools.call("describe", {"kind": "pod", "name": "web-1", "namespace": "prod"}))
    assert "name: web-1" in out and "BackOff" in out and "in west" in out
    assert "secretKeyRef" in out and "db-credentials" in out  # the reference, not a value
    unique = ok(tools.call("describe", {"kind": "pod", "name": "worker-1"}))
    assert "namespace: prod" in unique and "Pulled" in unique  # found without a namespace
    twice = tools.call("describe", {"kind": "pod", "name": "web-1"})
    assert not twice.ok and "several namespaces (prod, staging)" in twice.output


def test_logs_pass_tail_previous_since_and_a_byte_cap(clusters: Clusters) -> None:
    tools = clusters.tools("west")
    tail = ok(tools.call("logs", {"namespace": "prod", "pod": "web-1", "tail_lines": 2}))
    assert "west line 8" in tail and "west line 9" in tail and "west line 7" not in tail
    previous = ok(tools.call("logs", {"namespace": "prod", "pod": "web-1", "previous": True}))
    assert "panic: west crashed before" in previous
    since = ok(tools.call("logs", {"namespace": "prod", "pod": "web-1", "since_seconds": 60}))
    assert "line 8" in since and "line 7" not in since
    request = [r for r in clusters.server.requests if r.path.endswith("/log")][-1]
    assert request.query["sinceSeconds"] == ["60"] and int(request.query["limitBytes"][0]) > 0
    several = tools.call("logs", {"namespace": "prod", "pod": "worker-1"})
    assert not several.ok and "choose one of: [main sidecar]" in several.output
    backend = clusters.backend("west")
    assert backend.logs("prod", "web-1", "app", limit_bytes=10) == "2025-01-01"


def test_events_filter_by_involved_object(clusters: Clusters) -> None:
    out = ok(clusters.tools().call("events", {"namespace": "prod", "involved_name": "web-1"}))
    assert "BackOff" in out and "Pulled" not in out
    request = [r for r in clusters.server.requests if r.path.endswith("/events")][-1]
    assert request.query["fieldSelector"] == ["involvedObject.name=web-1"]


def test_api_resources_include_crds_discovered_like_builtins(clusters: Clusters) -> None:
    out = ok(clusters.tools().call("api_resources", {}))
    assert "certificates" in out and "cert-manager.io/v1" in out and "deployments" in out
    assert "pods/exec" not in out and "pods/log" not in out


def test_explain_builtin_and_crd_through_openapi_v3(clusters: Clusters) -> None:
    tools = clusters.tools()
    containers = ok(tools.call("explain", {"kind": "pod", "field_path": "spec.containers"}))
    assert "List of containers" in containers and "image <string>" in containers
    cert = ok(tools.call("explain", {"kind": "Certificate", "field_path": "spec"}))
    assert "dnsNames <[]string>" in cert and "Requested DNS subject" in cert
    missing = tools.call("explain", {"kind": "Certificate", "field_path": "spec.nope"})
    assert not missing.ok and "no field 'nope'" in missing.output
    assert any(p.endswith("/openapi/v3/apis/cert-manager.io/v1") for p in clusters.paths())


@pytest.mark.parametrize("openapi", ["v2", "none"])
def test_explain_falls_back_to_v2_and_to_the_crd(tmp_path: Path, openapi: str) -> None:
    folder = write_cluster(tmp_path, "east", ready=3)
    with FakeApiServer([FakeCluster.from_snapshot(folder)], openapi=openapi) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        settings = load_settings(kubeconfig=str(kubeconfig))
        backend = LiveBackend.from_target(ContextTarget(context="east"), settings)
        schema = backend.explain(backend.resolve("cert"), "spec.dnsNames")
        assert schema["type"] == "array" and schema["items"]["type"] == "string"
        paths = [r.path for r in server.requests]
        if openapi == "none":
            assert paths[-1].endswith("/customresourcedefinitions/certificates.cert-manager.io")
            with pytest.raises(BackendError) as missing:
                backend.explain(backend.resolve("pods"))
            assert missing.value.code == "not_found"
        else:
            assert any(p.endswith("/openapi/v2") for p in paths)
            pod = backend.explain(backend.resolve("pods"), "spec")
            assert "containers" in pod["properties"]


# --- secrets -------------------------------------------------------------------------------


def test_secret_values_never_leave_the_backend(clusters: Clusters) -> None:
    encoded = base64.b64encode(clusters.canary.encode()).decode()
    tools = clusters.tools()
    outputs = [
        ok(tools.call("get", {"kind": "secrets", "namespace": "prod", "name": "db-credentials"})),
        ok(tools.call("get", {"kind": "secret"})),
        ok(tools.call("describe", {"kind": "secret", "name": "db-credentials"})),
    ]
    for output in outputs:
        assert clusters.canary not in output and encoded not in output
    assert "password" in outputs[0] and REDACTED in outputs[0] and "Opaque" in outputs[0]
    backend = clusters.backend()
    secret = backend.get(backend.resolve("secret"), "db-credentials", "prod")
    assert secret["data"] == {"password": REDACTED, "username": REDACTED}
    # last-applied-configuration held the whole manifest, values included
    assert secret["metadata"]["annotations"] == {}
    # as probes read it: no values at all, not even a placeholder; the rest as stored
    stored = backend.get(backend.resolve("secret"), "db-credentials", "prod", as_stored=True)
    assert "data" not in stored and stored["metadata"]["annotations"] == {}
    assert stored["type"] == "Opaque" and stored["metadata"]["labels"] == {"app": "db"}
    # the server did hand the value out: the redaction is the backend's doing
    assert any(r.path.endswith("/secrets/db-credentials") for r in clusters.server.requests)


# --- large lists ---------------------------------------------------------------------------


@pytest.fixture
def small_synthetic(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Path]]:
    with FakeApiServer([FakeCluster.synthetic(600)]) as server:
        yield server, server.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def synthetic_5000(tmp_path: Path) -> Iterator[Path]:
    """5,000 generated pods served by a separate process, so only the client is measured."""
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "assay.testing.fake_apiserver",
            "--synthetic-pods",
            "5000",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None and "contexts: synthetic" in process.stdout.readline()
        yield kubeconfig
    finally:
        process.terminate()
        process.wait(timeout=10)


def synthetic_backend(kubeconfig: Path, **overrides: Any) -> LiveBackend:
    settings = load_settings(kubeconfig=str(kubeconfig), kube_qps=1000, **overrides)
    return LiveBackend.from_target(ContextTarget(context="synthetic"), settings)


def test_5000_pods_are_listed_page_by_page_in_bounded_memory(synthetic_5000: Path) -> None:
    cluster = FakeCluster.synthetic(5000)
    pods_on_server = cluster.collection(cluster.resources[0])
    full_list_bytes = sum(len(json.dumps(pods_on_server.at(i))) for i in range(5000))
    backend = synthetic_backend(synthetic_5000, kube_page_size=50)
    pods = backend.resolve("pods")

    tracemalloc.start()
    try:
        names = {obj["metadata"]["name"] for obj in backend.list_objects(pods, None)}
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(names) == 5000
    # the full list is ~15 MB as JSON (~70 MB as Python objects); one page at a time is not
    assert peak < full_list_bytes / 4, (peak, full_list_bytes)


def test_lists_are_requested_with_limit_and_continue(
    small_synthetic: tuple[FakeApiServer, Path],
) -> None:
    server, kubeconfig = small_synthetic
    backend = synthetic_backend(kubeconfig, kube_page_size=100)
    names = [o["metadata"]["name"] for o in backend.list_objects(backend.resolve("pods"), None)]
    assert names == [f"pod-{i:05d}" for i in range(600)]
    pages = [r for r in server.requests if r.path == "/c/synthetic/api/v1/pods"]
    assert len(pages) == 6 and all(r.query["limit"] == ["100"] for r in pages)
    assert ["continue" in r.query for r in pages] == [False] + [True] * 5


def test_stopping_early_reads_only_the_pages_needed(
    small_synthetic: tuple[FakeApiServer, Path],
) -> None:
    server, kubeconfig = small_synthetic
    backend = synthetic_backend(kubeconfig, kube_page_size=100)
    for count, _ in enumerate(backend.list_objects(backend.resolve("pods"), None)):
        if count == 150:
            break
    assert sum(r.path == "/c/synthetic/api/v1/pods" for r in server.requests) == 2


def test_get_tool_over_5000_pods_is_capped_and_counts_them_all(synthetic_5000: Path) -> None:
    settings = load_settings(kubeconfig=str(synthetic_5000), kube_qps=1000)
    backend = LiveBackend.from_target(ContextTarget(context="synthetic"), settings)
    result = ToolRegistry(kubernetes_tools(backend, settings)).call("get", {"kind": "pods"})
    assert result.ok and result.truncated
    assert len(result.output) <= settings.tool_output_limit_chars
    assert "5000 in all" in result.output


def test_an_expired_continue_token_restarts_the_list_once(
    small_synthetic: tuple[FakeApiServer, Path],
) -> None:
    server, kubeconfig = small_synthetic
    backend = synthetic_backend(kubeconfig, kube_page_size=100)
    seen: list[str] = []
    for obj in backend.list_objects(backend.resolve("pods"), None):
        seen.append(obj["metadata"]["name"])
        if len(seen) == 150:
            server.expire_continue_tokens()
    assert len(seen) == len(set(seen)) == 600  # restarted, without repeating anything
    assert server.requests[-1].query.get("continue")  # and then read on to the end


def test_a_second_expiry_ends_the_list_as_gone(
    small_synthetic: tuple[FakeApiServer, Path],
) -> None:
    server, kubeconfig = small_synthetic
    backend = synthetic_backend(kubeconfig, kube_page_size=100)
    with pytest.raises(BackendError) as gone:
        for count, _ in enumerate(backend.list_objects(backend.resolve("pods"), None)):
            if count in (150, 350):
                server.expire_continue_tokens()
    assert gone.value.code == "gone" and "run the lookup again" in gone.value.message


# --- errors the model reads, and retries ----------------------------------------------------


def test_forbidden_becomes_a_result_naming_what_was_refused(clusters: Clusters) -> None:
    clusters.server.add_fault(r"/api/v1/namespaces/prod/pods$", 403)
    result = clusters.tools().call("get", {"kind": "pods", "namespace": "prod"})
    assert not result.ok
    assert result.output.startswith(
        "forbidden: the assay service account cannot list pods in namespace prod"
    )


def test_not_found_becomes_a_result(clusters: Clusters) -> None:
    result = clusters.tools().call("get", {"kind": "deploy", "name": "nope", "namespace": "prod"})
    assert not result.ok and result.output.startswith("not found:") and "nope" in result.output
    unknown = clusters.tools().call("get", {"kind": "frobnicators"})
    assert not unknown.ok and "api_resources" in unknown.output


def test_a_hanging_server_times_out_within_the_deadline(clusters: Clusters) -> None:
    tools = clusters.tools(kube_request_timeout_seconds=0.3, kube_retry_deadline_seconds=1.0)
    ok(tools.call("api_resources", {}))  # discovery first, so only the list hangs
    clusters.server.add_fault(r"/namespaces/prod/pods$", hang=30)
    started = time.monotonic()
    result = tools.call("get", {"kind": "pods", "namespace": "prod"})
    elapsed = time.monotonic() - started
    assert not result.ok and result.output.startswith("timeout:")
    assert "list pods in namespace prod" in result.output
    assert elapsed < 3.0
    hung = [r for r in clusters.server.requests if r.path.endswith("/namespaces/prod/pods")]
    assert len(hung) >= 2  # the timeout was retried before giving up


def test_a_dripping_answer_ends_at_the_lookup_deadline(clusters: Clusters) -> None:
    """A server that sends its answer a byte at a time never trips the socket's read
    timeout (each byte comes in time); the lookup's deadline must still end the read."""
    tools = clusters.tools(kube_request_timeout_seconds=0.5, kube_retry_deadline_seconds=1.5)
    ok(tools.call("api_resources", {}))
    clusters.server.add_fault(r"/namespaces/prod/pods$", drip=0.05)
    started = time.monotonic()
    result = tools.call("get", {"kind": "pods", "namespace": "prod"})
    assert not result.ok and result.output.startswith("timeout:"), result.output
    assert time.monotonic() - started < 4.0


def test_an_endless_answer_is_cut_off_not_buffered(
    clusters: Clusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 200 whose body never ends must not be read into memory until the worker dies."""
    monkeypatch.setattr(live_transport, "MAX_RESPONSE_BYTES", 2 * 1024 * 1024)
    tools = clusters.tools(kube_request_timeout_seconds=2.0, kube_retry_deadline_seconds=20.0)
    ok(tools.call("api_resources", {}))
    clusters.server.add_fault(r"/namespaces/prod/pods$", endless=True)
    started = time.monotonic()
    tracemalloc.start()
    try:
        result = tools.call("get", {"kind": "pods", "namespace": "prod"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not result.ok and result.output.startswith("unavailable:"), result.output
    assert "2 MiB" in result.output
    assert peak < 8 * 1024 * 1024
    assert time.monotonic() - started < 10.0


def test_429_is_retried_honouring_retry_after(clusters: Clusters) -> None:
    tools = clusters.tools()
    ok(tools.call("api_resources", {}))
    clusters.server.add_fault(r"/deployments$", 429, retry_after=1, times=2)
    started = time.monotonic()
    out = ok(tools.call("get", {"kind": "deploy", "namespace": "prod"}))
    assert "3/3" in out
    assert time.monotonic() - started >= 2.0  # waited Retry-After twice
    assert sum(r.path.endswith("/deployments") for r in clusters.server.requests) == 3


def test_503_is_retried_then_reported_as_unavailable(clusters: Clusters) -> None:
    tools = clusters.tools(kube_retry_deadline_seconds=2.0)
    ok(tools.call("api_resources", {}))
    clusters.server.add_fault(r"/deployments$", 503, times=2)
    assert "3/3" in ok(tools.call("get", {"kind": "deploy", "namespace": "prod"}))
    clusters.server.add_fault(r"/deployments$", 503)
    down = tools.call("get", {"kind": "deploy", "namespace": "prod"})
    assert not down.ok and down.output.startswith("unavailable:") and "HTTP 503" in down.output


@pytest.mark.parametrize(("bound", "out_of_time"), [(1.0, True), (None, False)])
def test_a_lookup_the_runs_deadline_ended_says_so(
    clusters: Clusters, bound: float | None, out_of_time: bool
) -> None:
    """A probe re-run tells "the run's time ran out" (cannot_determine, no model: no time
    left) from "the cluster failed" (the model may look instead). The transport knows which
    deadline stopped its retries, and may stop before it: the next backoff would pass it."""
    retry_deadline = 1.0 if bound is None else 10.0  # the nearer deadline stops the retries
    backend = clusters.backend(
        kube_retry_deadline_seconds=retry_deadline, kube_request_timeout_seconds=0.5
    )
    deployments = backend.resolve("deploy")
    if bound is not None:
        backend.bind_deadline(time.monotonic() + bound)
    clusters.server.add_fault(r"/deployments$", 503)
    with pytest.raises(BackendError) as failed:
        list(backend.list_objects(deployments, "prod"))
    assert failed.value.code == "unavailable" and failed.value.out_of_time is out_of_time


def test_an_unreachable_server_is_unavailable_not_a_crash(clusters: Clusters) -> None:
    backend = clusters.backend(kube_retry_deadline_seconds=1.0, kube_request_timeout_seconds=0.5)
    clusters.server.stop()
    with pytest.raises(BackendError) as down:
        backend.api_resources()
    assert down.value.code in ("unavailable", "timeout")


# --- sharing per target: discovery cache and QPS -------------------------------------------


def test_discovery_is_cached_per_target_with_a_ttl(clusters: Clusters) -> None:
    for _ in range(3):
        clusters.backend("east", kube_qps=1000).resolve("pods")
    clusters.backend("west", kube_qps=1000).resolve("pods")
    assert clusters.paths().count("/c/east/api") == 1
    assert clusters.paths().count("/c/west/api") == 1
    clusters.backend("west", discovery_ttl_seconds=0, kube_qps=1000).resolve("pods")
    clusters.backend("west", discovery_ttl_seconds=0, kube_qps=1000).resolve("pods")
    assert clusters.paths().count("/c/west/api") == 3


def test_discovery_the_runs_deadline_cut_short_is_not_cached(clusters: Clusters) -> None:
    """A group skipped because the run ran out of time is not a group that is down: the
    discovery fails (out of time) and caches nothing, so the next run finds its kinds."""
    slow = clusters.backend("east", kube_qps=1000)
    slow.bind_deadline(time.monotonic() + 0.5)
    clusters.server.add_fault(r"^/apis/apps/v1$", hang=30, times=1)
    with pytest.raises(BackendError) as cut:
        slow.resolve("deployments")
    assert cut.value.out_of_time
    assert clusters.backend("east", kube_qps=1000).resolve("deployments").kind == "Deployment"


def test_qps_limit_is_shared_by_backends_of_one_target(clusters: Clusters) -> None:
    first = clusters.backend("east", kube_qps=4)
    second = clusters.backend("east", kube_qps=4)
    started = time.monotonic()
    for backend in (first, second) * 4:  # 8 requests, 4 of them allowed at once
        backend.logs("prod", "web-1", "app", tail_lines=1)
    assert time.monotonic() - started >= 0.9


# --- read-only, structurally -------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])
def test_the_client_refuses_anything_but_get(clusters: Clusters, method: str) -> None:
    backend = clusters.backend()
    rest = backend._transport._client.rest_client
    url = clusters.server.cluster_url("east") + "/apis/apps/v1/namespaces/prod/deployments/web"
    with pytest.raises(WriteRefused):
        rest.request(method, url, body={"spec": {"replicas": 0}})
    assert clusters.server.requests == []


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/namespaces/prod/pods/web-1/exec",
        "/api/v1/namespaces/prod/pods/web-1/attach",
        "/api/v1/namespaces/prod/pods/web-1/portforward",
        "/api/v1/namespaces/prod/services/web/proxy/admin",
        "/api/v1/nodes/node-1/proxy",
        "/apis/apps/v1/namespaces/prod/deployments/web/scale",
        "/api/v1/namespaces/prod/pods/web-1/eviction",
        "/api/v1/namespaces/prod/pods/web-1/log/../exec",
    ],
)
def test_streaming_and_write_subresources_cannot_be_requested(path: str) -> None:
    with pytest.raises(WriteRefused):
        check_read_path(path)


STREAMING_AND_WRITE_REQUESTS = [
    ("/api/v1/namespaces/prod/pods/web-1/exec", {"command": "sh", "stdin": "true"}),
    ("/api/v1/namespaces/prod/pods/web-1/attach", {"stdin": "true"}),
    ("/api/v1/namespaces/prod/pods/web-1/portforward", {"ports": "8080"}),
    ("/api/v1/namespaces/prod/pods/web-1/proxy", None),
    ("/api/v1/namespaces/prod/services/web/proxy/admin", None),
    ("/api/v1/nodes/node-1/proxy/configz", None),
    ("/api/v1/namespaces/prod/pods/web-1/eviction", None),
    ("/apis/apps/v1/namespaces/prod/deployments/web/scale", None),
    ("/api/v1/namespaces/prod/pods/web-1/log/../exec", None),
]
# Streaming reads (a watch by path or by query, a followed log): each would hold a connection
# open until the lookup's deadline.
STREAMING_READS = [
    ("/api/v1/watch/pods", None),
    ("/apis/apps/v1/watch/deployments", None),
    ("/api/v1/namespaces/prod/pods", {"watch": "true"}),
    ("/api/v1/namespaces/prod/pods/web-1/log", {"follow": "true"}),
]


@pytest.mark.parametrize(
    ("path", "query"),
    [
        *STREAMING_AND_WRITE_REQUESTS,
        *STREAMING_READS,
    ],
)
def test_the_transport_never_sends_a_streaming_or_write_request(
    clusters: Clusters, path: str, query: dict[str, str] | None
) -> None:
    """End to end: the transport the live backend reads through, asked directly for a
    subresource no lookup builds, refuses before any byte reaches the API server."""
    transport = clusters.backend()._transport
    for read in (transport.get_json, transport.get_text):
        with pytest.raises(WriteRefused, match="not a read-only path assay uses"):
            read(path, query, action="try a streaming or write request")
    assert clusters.server.requests == []


def test_names_cannot_change_the_shape_of_a_path(clusters: Clusters) -> None:
    tools = clusters.tools()
    sneaky = tools.call("logs", {"namespace": "prod", "pod": "web-1/exec"})
    assert not sneaky.ok
    dots = tools.call("get", {"kind": "pods", "namespace": "..", "name": "web-1"})
    assert not dots.ok and "not a valid Kubernetes namespace name" in dots.output
    dotted = tools.call("get", {"kind": "pods", "namespace": "prod", "name": ".."})
    assert not dotted.ok and "not a valid Kubernetes name" in dotted.output
    assert not any(r.path.endswith("/exec") for r in clusters.server.requests)
    assert clusters.server.methods() <= {"GET"}


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("get", {"kind": "nodes", "name": "node-1/proxy/configz"}),
        ("get", {"kind": "services", "namespace": "prod", "name": "web:80/proxy/admin"}),
        ("describe", {"kind": "pods", "namespace": "prod", "name": "web-1/proxy"}),
        ("logs", {"namespace": "prod", "pod": "web-1/proxy"}),
        ("get", {"kind": "pods", "name": "web-1%2Fexec"}),
    ],
)
def test_a_name_with_a_slash_never_reaches_the_server_encoded(
    clusters: Clusters, tool: str, arguments: dict[str, Any]
) -> None:
    """A real API server decodes %2F before routing (Go's URL.Path), so ``node-1%2Fproxy``
    would be read as the node proxy subresource: a name planted in the cluster for the model
    to repeat must be refused as client-go refuses it (no '/' or '%' in a path segment)."""
    result = clusters.tools().call(tool, arguments)
    assert not result.ok and result.output.startswith("bad request:"), result.output
    assert not any("%" in r.path for r in clusters.server.requests)


def test_a_discovered_resource_name_cannot_change_the_shape_of_a_path(tmp_path: Path) -> None:
    """Discovery of an aggregated API is served by that API's own server; a resource name
    holding ``%2F`` went into the path as is, and the API server decodes it before routing
    (``/apis/evil.io/v1/w%2F..%2F..%2F..%2Fapi%2Fv1%2Fnodes%2Fnode-1%2Fproxy``)."""
    folder = write_cluster(tmp_path, "east", ready=3)
    hostile = "w%2F..%2F..%2F..%2Fapi%2Fv1%2Fnodes%2Fnode-1%2Fproxy"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{hostile}.evil.io"},
        "spec": {
            "group": "evil.io",
            "scope": "Cluster",
            "names": {"kind": "Widget", "plural": hostile, "singular": "widget"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    (folder / "crd.yaml").write_text(yaml.safe_dump(crd))
    with FakeApiServer([FakeCluster.from_snapshot(folder)]) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        clusters = Clusters(server, kubeconfig, "")
        result = clusters.tools().call("get", {"kind": "Widget"})
        assert not result.ok and result.output.startswith("not found:"), result.output
        assert not any("%" in r.path for r in server.requests)


# --- targets -------------------------------------------------------------------------------------


def test_an_unknown_context_says_what_to_check(clusters: Clusters) -> None:
    with pytest.raises(BackendError) as missing:
        clusters.backend("north")
    assert missing.value.code == "unavailable" and "--context" in missing.value.message


def test_in_cluster_outside_a_cluster_says_so(clusters: Clusters) -> None:
    with pytest.raises(BackendError) as outside:
        LiveBackend.from_target(InClusterTarget(), clusters.settings())
    assert outside.value.code == "unavailable" and "in-cluster" in outside.value.message


# --- the same answers as from a snapshot -----------------------------------------------------

EXAMPLES = ROOT / "examples" / "snapshots"


def parity_calls(snapshot: SnapshotBackend) -> list[tuple[str, dict[str, Any]]]:
    """Every lookup worth comparing in one snapshot."""
    calls: list[tuple[str, dict[str, Any]]] = [("events", {}), ("get", {"kind": "nope"})]
    for resource in snapshot.present_resources():
        calls.append(("get", {"kind": resource.plural}))
        for obj in list(snapshot.list_objects(resource, None))[:2]:
            where = {"name": obj["metadata"]["name"], "namespace": obj["metadata"].get("namespace")}
            calls.append(("get", {"kind": resource.plural, **where}))
            calls.append(("describe", {"kind": resource.plural, **where}))
        if resource.kind == "CustomResourceDefinition":
            for crd in snapshot.list_objects(resource, None):
                kind = crd["spec"]["names"]["kind"]
                calls += [
                    ("explain", {"kind": kind}),
                    ("explain", {"kind": kind, "field_path": "spec"}),
                ]
    for pod_logs in sorted(snapshot.root.glob("logs/*/*")):
        namespace, pod = pod_logs.parent.name, pod_logs.name
        for log in sorted(pod_logs.glob("*.log")):
            container = log.name.split(".")[0]
            arguments = {"namespace": namespace, "pod": pod, "container": container}
            calls.append(
                ("logs", {**arguments, "tail_lines": 5, "previous": ".previous" in log.name})
            )
    return calls


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()))
def test_live_answers_match_the_snapshot_backend(tmp_path: Path, name: str) -> None:
    snapshot = SnapshotBackend(EXAMPLES / name)
    with FakeApiServer([FakeCluster.from_snapshot(EXAMPLES / name)]) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kc")
        settings = load_settings(kubeconfig=str(kubeconfig), kube_qps=1000)
        live = LiveBackend.from_target(ContextTarget(context=name), settings)
        offline = ToolRegistry(kubernetes_tools(snapshot, settings))
        online = ToolRegistry(kubernetes_tools(live, settings))
        calls = parity_calls(snapshot)
        assert len(calls) > 20
        for tool, arguments in calls:
            expected, got = offline.call(tool, arguments), online.call(tool, arguments)
            assert (got.ok, got.output) == (expected.ok, expected.output), (tool, arguments)
        assert server.methods() == {"GET"}


def test_a_tls_failure_is_unavailable_with_a_hint(clusters: Clusters, tmp_path: Path) -> None:
    config = yaml.safe_load(clusters.kubeconfig.read_text())
    for cluster in config["clusters"]:  # the test server speaks plain HTTP: TLS must fail
        cluster["cluster"]["server"] = cluster["cluster"]["server"].replace("http://", "https://")
    broken = tmp_path / "tls-kubeconfig"
    broken.write_text(yaml.safe_dump(config))
    settings = load_settings(kubeconfig=str(broken), kube_retry_deadline_seconds=2.0)
    backend = LiveBackend.from_target(ContextTarget(context="east"), settings)
    result = ToolRegistry(kubernetes_tools(backend, settings)).call("api_resources", {})
    assert not result.ok and result.output.startswith("unavailable:")
    assert "certificate" in result.output or "connection" in result.output
