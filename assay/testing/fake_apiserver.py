"""A test API server: snapshot folders served through the real Kubernetes REST paths.

No real API server runs where assay's tests run, so this one stands in for
it. The live backend reaches it through the official kubernetes client and a
generated kubeconfig, exactly as it would reach a cluster. It serves:

* discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/GROUP[/VERSION]``;
* list and get, namespaced and cluster-wide, core and grouped, with
  ``labelSelector`` / ``fieldSelector`` and ``limit`` + ``continue``
  pagination (410 Expired for a stale token);
* ``pods/NAME/log`` with ``container``, ``tailLines``, ``limitBytes``,
  ``sinceSeconds`` and ``previous``; events like any other list;
* ``/openapi/v3`` (and ``/openapi/v2``) for ``explain``.

Every request is recorded (method, path, query). Anything but GET gets 405,
and so does every subresource other than ``log`` (exec, attach, proxy ...),
so tests can prove assay never tried them. Faults can be injected per path
pattern: an HTTP status (403, 404, 429 with Retry-After, 503 ...) or a hang.

One exception, off unless a test asks for it (``report_writes=True``): the
policyreport sink's writes. Then server-side apply (PATCH with
``application/apply-patch+yaml`` and a ``fieldManager``) and DELETE of the report
kinds, and only those (``wgpolicyk8s.io/v1alpha2`` policyreports and
clusterpolicyreports, ``openreports.io/v1alpha1`` reports and clusterreports), are
accepted, and only with the *writer's* token (:meth:`FakeApiServer.write_kubeconfig`
with ``writer=True``), which in turn may read nothing: the readers' token still
cannot write, and every other write is still a 405. What was written is kept in
:attr:`FakeApiServer.reports`, each object with the ``metadata.uid`` the server gave it
when it was created and, in :attr:`FakeApiServer.report_managers`, the field manager
that wrote it. As the API server does for an object another manager wrote (simplified to
the whole object), an apply from a different ``fieldManager`` answers 409 Conflict unless
``force=true``; a DELETE whose ``preconditions.uid`` is not the object's answers 409.

Each cluster lives under its own path prefix (``/c/NAME``), and
:meth:`FakeApiServer.write_kubeconfig` writes one context per cluster.

Run it by hand::

    python -m assay.testing.fake_apiserver --snapshot DIR [--snapshot DIR2] \\
        [--synthetic-pods 5000] --kubeconfig-out kubeconfig.yaml
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from assay.testing import fake_openapi
from assay.testing.fake_cluster import FakeCluster, filter_since
from workers.engine.toolsets.backend import BackendError, ResourceInfo
from workers.engine.toolsets.selectors import field_matcher, label_matcher

CLUSTER_PREFIX = "/c/"
# The report kinds a writer may write when report writes are on: (group, version) ->
# {plural: namespaced}.
REPORT_RESOURCES: dict[tuple[str, str], dict[str, bool]] = {
    ("wgpolicyk8s.io", "v1alpha2"): {"policyreports": True, "clusterpolicyreports": False},
    ("openreports.io", "v1alpha1"): {"reports": True, "clusterreports": False},
}
APPLY_PATCH = "application/apply-patch+yaml"
FULL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
POD_SUBRESOURCES = [
    "attach",
    "binding",
    "eviction",
    "exec",
    "log",
    "portforward",
    "proxy",
    "status",
]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # as received, including the cluster prefix
    query: dict[str, list[str]]
    cluster: str | None
    authorized: bool
    writer: bool = False  # made with the report writer's token

    @property
    def url(self) -> str:
        return self.path + (
            "?" + "&".join(f"{k}={v}" for k, vs in self.query.items() for v in vs)
            if self.query
            else ""
        )


@dataclass
class Fault:
    """What to do instead of answering, for requests whose path matches ``pattern``.

    ``pattern`` is a regex searched in the path *after* the cluster prefix
    (``/api/v1/namespaces/prod/pods``). ``times`` None = every time.
    """

    pattern: re.Pattern[str]
    status: int | None = None
    retry_after: float | None = None
    hang: float | None = None
    times: int | None = None
    cluster: str | None = None
    message: str | None = None
    drip: float | None = None  # send the real answer one byte every ``drip`` seconds
    endless: bool = False  # answer 200 with a chunked body that never ends
    body: Any = None  # answer this JSON document (with ``status``, 200 when None) instead
    hits: int = 0

    def applies(self, cluster: str | None, path: str) -> bool:
        if self.cluster is not None and self.cluster != cluster:
            return False
        if self.times is not None and self.hits >= self.times:
            return False
        return bool(self.pattern.search(path))


@dataclass
class _Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    drip: float | None = None
    endless: bool = False


class FakeApiServer:
    """In-process test API server; ``start()`` it, point a kubeconfig at it, ``stop()`` it."""

    def __init__(
        self,
        clusters: Iterable[FakeCluster],
        host: str = "127.0.0.1",
        port: int = 0,
        openapi: str = "v3",
        continue_ttl_seconds: float | None = None,
        report_writes: bool = False,
    ) -> None:
        self.clusters = {c.name: c for c in clusters}
        if not self.clusters:
            raise ValueError("the test API server needs at least one cluster")
        self.openapi = openapi  # "v3", "v2" or "none" (then explain falls back to CRDs)
        self.continue_ttl_seconds = continue_ttl_seconds
        self.requests: list[RecordedRequest] = []
        self.faults: list[Fault] = []
        self.report_writes = report_writes
        # (cluster, group, plural, namespace or "", name) -> the report as last applied
        self.reports: dict[tuple[str, str, str, str, str], dict[str, Any]] = {}
        # the same key -> the field manager whose apply made or last changed the report
        self.report_managers: dict[tuple[str, str, str, str, str], str] = {}
        self._lock = threading.Lock()
        self._generation = 0
        self._stopping = threading.Event()
        self._openapi_cache: dict[tuple[str, str], bytes] = {}
        self._host = host
        self._httpd = _Server((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._httpd.app = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._httpd.server_address[1]}"

    def cluster_url(self, name: str) -> str:
        return f"{self.url}{CLUSTER_PREFIX}{name}"

    def start(self) -> FakeApiServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases hanging handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- test controls -----------------------------------------------------------------

    def add_fault(
        self,
        pattern: str,
        status: int | None = None,
        *,
        retry_after: float | None = None,
        hang: float | None = None,
        times: int | None = None,
        cluster: str | None = None,
        message: str | None = None,
        drip: float | None = None,
        endless: bool = False,
        body: Any = None,
    ) -> Fault:
        """``drip``, ``endless`` and ``body`` play a hostile server: the real answer sent one
        byte every ``drip`` seconds, a 200 whose chunked body never ends, or ``body`` (a JSON
        document: a list without its items, say) as the answer."""
        fault = Fault(
            re.compile(pattern),
            status,
            retry_after,
            hang,
            times,
            cluster,
            message,
            drip,
            endless,
            body,
        )
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def expire_continue_tokens(self) -> None:
        """Every continue token handed out so far now answers 410 Expired."""
        with self._lock:
            self._generation += 1

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def methods(self) -> set[str]:
        with self._lock:
            return {r.method for r in self.requests}

    def write_kubeconfig(
        self, path: str | Path, current: str | None = None, *, writer: bool = False
    ) -> Path:
        """A kubeconfig with one context (and bearer token) per cluster: the readers', or
        with ``writer`` the report writer's (a token of its own)."""
        names = list(self.clusters)
        role = "writer" if writer else "reader"
        token = _writer_token if writer else _token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "current-context": current or names[0],
            "clusters": [{"name": n, "cluster": {"server": self.cluster_url(n)}} for n in names],
            "users": [{"name": f"{n}-{role}", "user": {"token": token(n)}} for n in names],
            "contexts": [
                {"name": n, "context": {"cluster": n, "user": f"{n}-{role}"}} for n in names
            ],
        }
        target = Path(path)
        target.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return target

    # --- request handling (called from handler threads) ------------------------------

    def handle(
        self,
        method: str,
        raw_path: str,
        authorization: str | None,
        body: bytes = b"",
        content_type: str | None = None,
    ) -> _Reply:
        parts = urlsplit(raw_path)
        path = parts.path
        query = parse_qs(parts.query, keep_blank_values=True)
        cluster_name, inner = _split_cluster(path)
        cluster = self.clusters.get(cluster_name or "")
        authorized = cluster is not None and authorization == f"Bearer {_token(cluster.name)}"
        writer = (
            self.report_writes
            and cluster is not None
            and authorization == f"Bearer {_writer_token(cluster.name)}"
        )
        with self._lock:
            self.requests.append(
                RecordedRequest(method, path, query, cluster_name, authorized, writer)
            )
            fault = next((f for f in self.faults if f.applies(cluster_name, inner)), None)
            if fault is not None:
                fault.hits += 1
        report = _report_path(inner) if self.report_writes else None
        if method != "GET" and (report is None or method not in ("PATCH", "DELETE")):
            return _status(
                405, "MethodNotAllowed", f"{method} is not allowed: this server is read-only"
            )
        if cluster is None:
            return _status(404, "NotFound", f"no cluster at {path}; paths start with /c/NAME")
        if method != "GET":
            assert report is not None
            if authorized:  # the readers' credentials: never a write
                return _status(403, "Forbidden", "the reader may not write")
            if not writer:
                return _status(401, "Unauthorized", "Unauthorized")
            if fault is not None:
                reply = self._fault_reply(fault)
                if reply is not None:
                    return reply
            return self._write_report(cluster.name, method, report, query, body, content_type)
        if writer:  # the writer's credentials: may write the reports, read nothing
            return _status(403, "Forbidden", "the report writer may not read")
        if not authorized:
            return _status(401, "Unauthorized", "Unauthorized")
        if fault is not None:
            reply = self._fault_reply(fault)
            if reply is not None:
                return reply
        try:
            reply = self._route(cluster, inner, {k: v[-1] for k, v in query.items()})
        except BackendError as exc:  # selector syntax and the like
            return _status(400, "BadRequest", exc.message)
        if fault is not None:
            reply.drip, reply.endless = fault.drip, fault.endless
        return reply

    def _write_report(
        self,
        cluster: str,
        method: str,
        report: tuple[str, str, str, str],
        query: dict[str, list[str]],
        body: bytes,
        content_type: str | None,
    ) -> _Reply:
        """Server-side apply or delete of one report object (report writes on)."""
        group, plural, namespace, name = report
        key = (cluster, group, plural, namespace, name)
        if method == "DELETE":
            wanted_uid = _precondition_uid(body)
            with self._lock:
                found = self.reports.get(key)
                if found is None:
                    return _status(404, "NotFound", f'{plural} "{name}" not found')
                if wanted_uid is not None and found["metadata"].get("uid") != wanted_uid:
                    return _status(
                        409, "Conflict", f"Precondition failed: UID in precondition: {wanted_uid}"
                    )
                del self.reports[key]
                self.report_managers.pop(key, None)
            return _json({"kind": "Status", "apiVersion": "v1", "status": "Success"})
        if (content_type or "").split(";")[0].strip() != APPLY_PATCH:
            return _status(415, "UnsupportedMediaType", f"only {APPLY_PATCH} is served")
        if not query.get("fieldManager"):
            return _status(422, "Invalid", "fieldManager is required for apply patch")
        try:
            document = yaml.safe_load(body.decode("utf-8"))
        except (UnicodeDecodeError, yaml.YAMLError) as exc:
            return _status(400, "BadRequest", f"the body is not YAML or JSON: {exc}")
        metadata = document.get("metadata") if isinstance(document, dict) else None
        if not isinstance(metadata, dict) or metadata.get("name") != name:
            return _status(400, "BadRequest", "metadata.name must match the path")
        if (metadata.get("namespace") or "") != namespace:
            return _status(400, "BadRequest", "metadata.namespace must match the path")
        version = next(
            v for (g, v), plurals in REPORT_RESOURCES.items() if g == group and plural in plurals
        )
        if document.get("apiVersion") != f"{group}/{version}":
            return _status(400, "BadRequest", f"apiVersion must be {group}/{version}")
        manager = query["fieldManager"][-1]
        force = query.get("force", ["false"])[-1] == "true"
        with self._lock:
            owner = self.report_managers.get(key)
            if owner is not None and owner != manager and not force:
                return _status(
                    409, "Conflict", f'Apply failed with conflicts: conflict with "{owner}"'
                )
            previous = self.reports.get(key)
            uid = previous["metadata"]["uid"] if previous else str(uuid.uuid4())
            document["metadata"] = {**metadata, "uid": uid}
            self.reports[key] = document
            self.report_managers[key] = manager
        return _json(document)

    def _fault_reply(self, fault: Fault) -> _Reply | None:
        if fault.hang:
            self._stopping.wait(fault.hang)
        if fault.body is not None:
            return _json(fault.body, fault.status or 200)
        if fault.status is None or fault.drip or fault.endless:
            return None
        reasons = {403: "Forbidden", 404: "NotFound", 410: "Expired", 429: "TooManyRequests"}
        reply = _status(
            fault.status,
            reasons.get(fault.status, "InternalError" if fault.status >= 500 else "BadRequest"),
            fault.message or f"injected fault: HTTP {fault.status}",
        )
        if fault.retry_after is not None:
            reply.headers["Retry-After"] = f"{fault.retry_after:g}"
        return reply

    def _route(self, cluster: FakeCluster, path: str, query: dict[str, str]) -> _Reply:
        segments = [unquote(s) for s in path.strip("/").split("/") if s]
        if query.get("watch") in ("1", "true"):
            return _status(405, "MethodNotAllowed", "watch is not served by the test API server")
        if segments == ["version"]:
            return _json(
                {
                    "major": "1",
                    "minor": "31",
                    "gitVersion": "v1.31.0-assay-test",
                    "platform": "linux/amd64",
                }
            )
        if segments[:1] == ["openapi"]:
            return self._openapi(cluster, segments[1:])
        if segments == ["api"]:
            return _json(
                {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
            )
        if segments == ["apis"]:
            return _json(_group_list(cluster))
        if segments[:1] == ["api"] and len(segments) >= 2:
            group, version, rest = "", segments[1], segments[2:]
        elif segments[:1] == ["apis"] and len(segments) >= 2:
            if len(segments) == 2:
                found = _group_entry(cluster, segments[1])
                return _json(found) if found else _status(404, "NotFound", "group not found")
            group, version, rest = segments[1], segments[2], segments[3:]
        else:
            return _status(
                404, "NotFound", f"the server could not find the requested resource {path}"
            )
        served = [r for r in cluster.resources if r.group == group and r.version == version]
        if not served:
            return _status(404, "NotFound", f"the server could not find {group}/{version}")
        if not rest:
            return _json(_resource_list(group, version, served))
        return self._resource_request(cluster, served, rest, query)

    def _resource_request(
        self,
        cluster: FakeCluster,
        served: list[ResourceInfo],
        rest: list[str],
        query: dict[str, str],
    ) -> _Reply:
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        by_plural = {r.plural: r for r in served}
        resource = by_plural.get(rest[0])
        if resource is None or (namespace is not None and not resource.namespaced):
            return _status(404, "NotFound", "the server could not find the requested resource")
        if len(rest) == 1:
            return self._list(cluster, resource, namespace, query)
        name = rest[1]
        if len(rest) == 2:
            return self._get(cluster, resource, namespace, name)
        if len(rest) == 3 and resource.plural == "pods" and rest[2] == "log" and namespace:
            return self._log(cluster, namespace, name, query)
        return _status(
            405, "MethodNotAllowed", f"subresource {rest[2]!r} is not served by the test API server"
        )

    def _list(
        self,
        cluster: FakeCluster,
        resource: ResourceInfo,
        namespace: str | None,
        query: dict[str, str],
    ) -> _Reply:
        labels = label_matcher(query.get("labelSelector"))
        fields = field_matcher(query.get("fieldSelector"))
        limit = int(query["limit"]) if query.get("limit", "").isdigit() else 0
        start = 0
        if query.get("continue"):
            decoded = self._decode_continue(query["continue"])
            if isinstance(decoded, _Reply):
                return decoded
            start = decoded
        collection = cluster.collection(resource)
        items: list[dict[str, Any]] = []
        index = start
        while index < len(collection) and (limit == 0 or len(items) < limit):
            obj = collection.at(index)
            index += 1
            meta = obj.get("metadata") or {}
            if namespace is not None and meta.get("namespace") != namespace:
                continue
            if labels(obj) and fields(obj):
                items.append({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})
        metadata: dict[str, Any] = {"resourceVersion": cluster.resource_version}
        if index < len(collection):
            metadata["continue"] = self._encode_continue(index)
            if (
                not query.get("labelSelector")
                and not query.get("fieldSelector")
                and namespace is None
            ):
                metadata["remainingItemCount"] = len(collection) - index
        return _json(
            {
                "kind": f"{resource.kind}List",
                "apiVersion": resource.api_version,
                "metadata": metadata,
                "items": items,
            }
        )

    def _get(
        self, cluster: FakeCluster, resource: ResourceInfo, namespace: str | None, name: str
    ) -> _Reply:
        if resource.namespaced and namespace is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        found = cluster.collection(resource).find(namespace or "", name)
        if found is None:
            return _status(404, "NotFound", f'{resource.plural} "{name}" not found')
        return _json(found)

    def _log(self, cluster: FakeCluster, namespace: str, pod: str, query: dict[str, str]) -> _Reply:
        pod_resource = ResourceInfo("Pod", "pods", "", "v1", True)
        found = cluster.collection(pod_resource).find(namespace, pod)
        if found is None:
            return _status(404, "NotFound", f'pods "{pod}" not found')
        containers = [c.get("name") for c in (found.get("spec") or {}).get("containers") or []]
        container = query.get("container") or ""
        if not container:
            if len(containers) != 1:
                choices = " ".join(str(c) for c in containers)
                return _status(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {pod}, choose one of: [{choices}]",
                )
            container = str(containers[0])
        if container not in containers:
            return _status(400, "BadRequest", f"container {container} is not valid for pod {pod}")
        previous = query.get("previous") in ("true", "1")
        text = cluster.logs(namespace, pod, container, previous)
        if text is None:
            if previous:
                return _status(
                    400,
                    "BadRequest",
                    f'previous terminated container "{container}" in pod "{pod}" not found',
                )
            text = ""
        if query.get("sinceSeconds", "").isdigit():
            text = filter_since(text, int(query["sinceSeconds"]))
        if query.get("tailLines", "").isdigit():
            tail = int(query["tailLines"])
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-tail:]) if tail else ""
        body = text.encode("utf-8")
        if query.get("limitBytes", "").isdigit():
            body = body[: int(query["limitBytes"])]
        return _Reply(200, body, "text/plain")

    def _openapi(self, cluster: FakeCluster, rest: list[str]) -> _Reply:
        key = "/".join(rest)
        with self._lock:
            cached = self._openapi_cache.get((cluster.name, key))
        if cached is not None:
            return _Reply(200, cached)
        document: dict[str, Any] | None = None
        if rest == ["v2"] and self.openapi == "v2":
            document = fake_openapi.v2_document(cluster)
        elif rest[:1] == ["v3"] and self.openapi == "v3":
            if len(rest) == 1:
                document = fake_openapi.v3_index(cluster)
            else:
                document = fake_openapi.v3_document(cluster, "/".join(rest[1:]))
        if document is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        body = json.dumps(document).encode()
        with self._lock:
            self._openapi_cache[(cluster.name, key)] = body
        return _Reply(200, body)

    # --- continue tokens ---------------------------------------------------------------

    def _encode_continue(self, index: int) -> str:
        token = {"start": index, "generation": self._generation, "issued": time.time()}
        return base64.urlsafe_b64encode(json.dumps(token).encode()).decode()

    def _decode_continue(self, token: str) -> int | _Reply:
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
            start, generation, issued = (
                int(decoded["start"]),
                decoded["generation"],
                decoded["issued"],
            )
        except (ValueError, KeyError, TypeError):
            return _status(400, "BadRequest", "continue key is not valid")
        too_old = (
            self.continue_ttl_seconds is not None
            and time.time() - float(issued) > self.continue_ttl_seconds
        )
        if generation != self._generation or too_old:
            return _status(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter.",
            )
        return start


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-answer (a cap or a deadline on its side) is no error of
        the server's; anything else is printed as socketserver does."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "assay-fake-apiserver"

    def setup(self) -> None:
        super().setup()
        # headers and body go out in two writes; without this, Nagle's algorithm and the
        # client's delayed ACK add ~40 ms to every keep-alive request
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""  # used only by report writes
        app: FakeApiServer = self.server.app  # type: ignore[attr-defined]
        reply = app.handle(
            self.command,
            self.path,
            self.headers.get("Authorization"),
            body,
            self.headers.get("Content-Type"),
        )
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        if reply.endless:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(reply.body)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        if reply.endless or reply.drip:
            self._hostile_body(app, reply)
            return
        try:
            self.wfile.write(reply.body)
        except OSError:  # the client stopped reading (its cap or its deadline): not our error
            self.close_connection = True

    def _hostile_body(self, app: FakeApiServer, reply: _Reply) -> None:
        """A body that never ends, or the real one a byte at a time; stops with the server."""
        chunk = b" " * 65536
        try:
            while reply.endless and not app._stopping.is_set():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            for position in range(0 if reply.endless else len(reply.body)):
                if app._stopping.wait(reply.drip or 0):
                    return
                self.wfile.write(reply.body[position : position + 1])
                self.wfile.flush()
        except OSError:  # the client gave up, as it should
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _answer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the recorded requests are the log."""


# --- documents ---------------------------------------------------------------------------


def _token(cluster: str) -> str:
    return f"assay-test-token-{cluster}"


def _precondition_uid(body: bytes) -> str | None:
    """The ``preconditions.uid`` of a DELETE's DeleteOptions body, if it has one."""
    try:
        options = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        return None
    preconditions = options.get("preconditions") if isinstance(options, dict) else None
    uid = preconditions.get("uid") if isinstance(preconditions, dict) else None
    return str(uid) if uid else None


def _writer_token(cluster: str) -> str:
    return f"assay-test-report-writer-{cluster}"


def _report_path(inner: str) -> tuple[str, str, str, str] | None:
    """(group, plural, namespace or "", name) when ``inner`` names one report object."""
    segments = [unquote(s) for s in inner.strip("/").split("/") if s]
    if len(segments) < 5 or segments[0] != "apis":
        return None
    group, version, rest = segments[1], segments[2], segments[3:]
    plurals = REPORT_RESOURCES.get((group, version))
    if plurals is None:
        return None
    namespace = ""
    if len(rest) == 4 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if len(rest) != 2 or rest[0] not in plurals or plurals[rest[0]] != bool(namespace):
        return None
    return group, rest[0], namespace, rest[1]


def _split_cluster(path: str) -> tuple[str | None, str]:
    if not path.startswith(CLUSTER_PREFIX):
        return None, path
    name, _, rest = path[len(CLUSTER_PREFIX) :].partition("/")
    return unquote(name), "/" + rest


def _json(document: Any, status: int = 200) -> _Reply:
    return _Reply(status, json.dumps(document).encode())


def _status(code: int, reason: str, message: str) -> _Reply:
    return _json(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        },
        code,
    )


def _groups(cluster: FakeCluster) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for resource in cluster.resources:
        if resource.group and resource.version not in groups.setdefault(resource.group, []):
            groups[resource.group].append(resource.version)
    return groups


def _group_entry(cluster: FakeCluster, group: str) -> dict[str, Any] | None:
    versions = _groups(cluster).get(group)
    if not versions:
        return None
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def _group_list(cluster: FakeCluster) -> dict[str, Any]:
    groups = [_group_entry(cluster, g) for g in _groups(cluster)]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [g for g in groups if g]}


def _resource_list(group: str, version: str, served: list[ResourceInfo]) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for r in served:
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.kind.lower(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": FULL_VERBS,
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        entries.append(entry)
        if r.plural == "pods" and not group:
            for sub in POD_SUBRESOURCES:
                entries.append(
                    {"name": f"pods/{sub}", "namespaced": True, "kind": "Pod", "verbs": ["get"]}
                )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


# --- command line ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m assay.testing.fake_apiserver",
        description="Serve snapshot folders through the Kubernetes REST API (for tests and demos).",
    )
    parser.add_argument(
        "--snapshot", action="append", default=[], help="snapshot folder (repeatable)"
    )
    parser.add_argument("--synthetic-pods", type=int, default=0, help="also serve N generated pods")
    parser.add_argument("--kubeconfig-out", required=True, help="where to write the kubeconfig")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--openapi", choices=["v3", "v2", "none"], default="v3")
    args = parser.parse_args(argv)

    clusters: list[FakeCluster] = []
    for folder in args.snapshot:
        cluster = FakeCluster.from_snapshot(folder)
        for problem in cluster.problems:
            print(f"warning: {folder}: {problem}", file=sys.stderr)
        while cluster.name in {c.name for c in clusters}:
            cluster.name += "-2"
        clusters.append(cluster)
    if args.synthetic_pods:
        clusters.append(FakeCluster.synthetic(args.synthetic_pods))
    if not clusters:
        parser.error("give at least one --snapshot DIR or --synthetic-pods N")

    server = FakeApiServer(clusters, host=args.host, port=args.port, openapi=args.openapi).start()
    kubeconfig = server.write_kubeconfig(args.kubeconfig_out)
    print(
        f"test API server at {server.url}; contexts: {', '.join(server.clusters)}; "
        f"kubeconfig: {kubeconfig}",
        flush=True,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
