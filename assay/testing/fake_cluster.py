"""The data behind the test API server: one cluster's objects, logs and resource types.

Two sources. :meth:`FakeCluster.from_snapshot` reads a snapshot folder (the
same layout as ``SnapshotBackend``: YAML/JSON objects, ``List`` kinds,
multi-document files, logs under ``logs/NS/POD/CONTAINER[.previous].log``).
:meth:`FakeCluster.synthetic` serves N generated pods that are built on
demand, one at a time, so a 5,000-pod cluster costs the server no memory.

This loader is deliberately not ``SnapshotBackend``: that backend redacts
Secrets while parsing, but a stand-in API server must hand out Secret values
the way a real one does, so the tests prove that the *live* backend is what
keeps them away from the model.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from workers.engine.toolsets.backend import ResourceInfo
from workers.engine.toolsets.kinds import BUILTIN_RESOURCES, guess_plural, split_api_version

LOGS_FOLDER = "logs"
OBJECT_SUFFIXES = frozenset({".yaml", ".yml", ".json"})
SYNTHETIC_TIMESTAMP = "2025-01-01T00:00:00Z"
_LOG_TIMESTAMP = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))\s"
)

try:  # libyaml is several times faster on large snapshots
    _YamlLoader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _YamlLoader = yaml.SafeLoader


class Collection(Protocol):
    """The objects of one resource type, in list order (namespace, name)."""

    def __len__(self) -> int: ...

    def at(self, index: int) -> dict[str, Any]: ...

    def find(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class StoredCollection:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self._objects = sorted(objects, key=_namespace_and_name)
        self._index = {_namespace_and_name(o): o for o in self._objects}

    def __len__(self) -> int:
        return len(self._objects)

    def at(self, index: int) -> dict[str, Any]:
        return self._objects[index]

    def find(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._index.get((namespace, name))


LogSource = Callable[[str, str, str, bool], str | None]
"""(namespace, pod, container, previous) -> the log text, or None when there is none."""


@dataclass
class FakeCluster:
    name: str
    resources: list[ResourceInfo]
    collections: dict[tuple[str, str], Collection] = field(default_factory=dict)
    logs: LogSource = lambda namespace, pod, container, previous: None
    resource_version: str = "1000"
    problems: list[str] = field(default_factory=list)  # snapshot files that were skipped

    def collection(self, resource: ResourceInfo) -> Collection:
        return self.collections.get((resource.group, resource.plural)) or StoredCollection([])

    def crds(self) -> Iterator[dict[str, Any]]:
        stored = self.collections.get(("apiextensions.k8s.io", "customresourcedefinitions"))
        for index in range(len(stored) if stored is not None else 0):
            yield stored.at(index)  # type: ignore[union-attr]

    # --- snapshot folders ------------------------------------------------------------

    @classmethod
    def from_snapshot(cls, folder: str | Path, name: str | None = None) -> FakeCluster:
        root = Path(folder).expanduser().resolve()
        if not root.is_dir():
            raise FileNotFoundError(f"snapshot folder {str(folder)!r} does not exist")
        objects: list[dict[str, Any]] = []
        problems: list[str] = []
        for file in sorted(root.rglob("*")):
            relative = file.relative_to(root)
            if (
                file.is_file()
                and file.suffix.lower() in OBJECT_SUFFIXES
                and relative.parts[0] != LOGS_FOLDER
                and not any(part.startswith(".") for part in relative.parts)
            ):
                try:
                    objects.extend(_objects_in(file))
                except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
                    problems.append(f"{relative}: skipped, it does not parse ({exc})")
        resources, grouped = _group_by_resource(objects)
        collections: dict[tuple[str, str], Collection] = {
            key: StoredCollection(found) for key, found in grouped.items()
        }
        return cls(
            name=name or root.name,
            resources=resources,
            collections=collections,
            logs=_folder_logs(root / LOGS_FOLDER),
            problems=problems,
        )

    # --- generated pods --------------------------------------------------------------

    @classmethod
    def synthetic(cls, pods: int, name: str = "synthetic", namespaces: int = 10) -> FakeCluster:
        generated = GeneratedPods(pods, namespaces)
        namespace_objects = [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "uid": _uid("Namespace", "", ns)},
                "status": {"phase": "Active"},
            }
            for ns in generated.namespaces
        ]
        return cls(
            name=name,
            resources=list(BUILTIN_RESOURCES),
            collections={
                ("", "pods"): generated,
                ("", "namespaces"): StoredCollection(namespace_objects),
            },
            logs=generated.log,
        )


class GeneratedPods:
    """``count`` pods, each built when asked for: pod ``i`` is the same every time."""

    def __init__(self, count: int, namespaces: int) -> None:
        self.count = count
        self.namespaces = [f"ns-{n:02d}" for n in range(max(1, namespaces))]
        self._per_namespace = -(-count // len(self.namespaces))  # ceil

    def __len__(self) -> int:
        return self.count

    def at(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.count:
            raise IndexError(index)
        namespace = self.namespaces[index // self._per_namespace]
        return synthetic_pod(index, namespace)

    def find(self, namespace: str, name: str) -> dict[str, Any] | None:
        match = re.fullmatch(r"pod-(\d{5})", name)
        if not match:
            return None
        index = int(match.group(1))
        if index >= self.count or self.at(index)["metadata"]["namespace"] != namespace:
            return None
        return self.at(index)

    def log(self, namespace: str, pod: str, container: str, previous: bool) -> str | None:
        found = self.find(namespace, pod)
        if found is None or container != "app" or previous:
            return None
        return "".join(
            f"2025-01-01T00:{minute:02d}:00Z {pod} handled request {minute}\n"
            for minute in range(60)
        )


def synthetic_pod(index: int, namespace: str) -> dict[str, Any]:
    """A pod about the size of a real one (~4 KB of JSON), so memory figures mean something."""
    name = f"pod-{index:05d}"
    app = f"app-{index % 50:02d}"
    phase = "Pending" if index % 97 == 0 else "Running"
    ready = "False" if phase == "Pending" else "True"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid("Pod", namespace, name),
            "resourceVersion": str(10_000 + index),
            "creationTimestamp": SYNTHETIC_TIMESTAMP,
            "labels": {"app": app, "tier": "web" if index % 3 else "db", "index": str(index)},
            "annotations": {"example.com/owner": f"team-{index % 7}"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-5d9c7b",
                    "uid": _uid("ReplicaSet", namespace, app),
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": f"node-{index % 20:02d}",
            "serviceAccountName": "default",
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.com/{app}:1.{index % 9}.0",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "env": [
                        {"name": f"SETTING_{n}", "value": f"value-{n}-{index}"} for n in range(8)
                    ],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "500m", "memory": "256Mi"},
                    },
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8080},
                        "periodSeconds": 10,
                    },
                    "securityContext": {"runAsNonRoot": True, "readOnlyRootFilesystem": True},
                },
                {
                    "name": "sidecar",
                    "image": "registry.example.com/proxy:2.4.1",
                    "args": ["--listen=:9090", "--upstream=127.0.0.1:8080", "--log-level=info"],
                },
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": f"{app}-config"}},
                {
                    "name": "token",
                    "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]},
                },
            ],
        },
        "status": {
            "phase": phase,
            "podIP": f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}",
            "hostIP": f"192.168.0.{index % 20}",
            "startTime": SYNTHETIC_TIMESTAMP,
            "conditions": [
                {"type": t, "status": ready, "lastTransitionTime": SYNTHETIC_TIMESTAMP}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": c,
                    "ready": phase == "Running",
                    "restartCount": index % 4,
                    "image": f"registry.example.com/{c}:1.0",
                    "imageID": f"registry.example.com/{c}@sha256:{'ab' * 32}",
                    "containerID": f"containerd://{uuid.UUID(int=index).hex * 2}",
                    "started": phase == "Running",
                    "state": {"running": {"startedAt": SYNTHETIC_TIMESTAMP}},
                }
                for c in ("app", "sidecar")
            ],
        },
    }


# --- loading helpers -------------------------------------------------------------------


def _namespace_and_name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _uid(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"assay-fake/{kind}/{namespace}/{name}"))


def _objects_in(file: Path) -> list[dict[str, Any]]:
    text = file.read_text(encoding="utf-8")
    if file.suffix.lower() == ".json":
        documents: list[Any] = [json.loads(text)]
    else:
        documents = list(yaml.load_all(text, Loader=_YamlLoader))
    found: list[dict[str, Any]] = []
    for document in documents:
        if not isinstance(document, dict):
            continue
        kind = str(document.get("kind") or "")
        if kind.endswith("List") and isinstance(document.get("items"), list):
            for item in document["items"]:
                if isinstance(item, dict):
                    item.setdefault("kind", kind.removesuffix("List"))
                    item.setdefault("apiVersion", document.get("apiVersion", "v1"))
                    found.append(item)
        else:
            found.append(document)
    return [o for o in found if o.get("kind") and (o.get("metadata") or {}).get("name")]


def _crd_resource(crd: dict[str, Any]) -> ResourceInfo | None:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    if not spec.get("group") or not names.get("kind"):
        return None
    versions = spec.get("versions") or [{}]
    served = next((v for v in versions if v.get("storage")), versions[0])
    return ResourceInfo(
        kind=names["kind"],
        plural=names.get("plural") or guess_plural(names["kind"]),
        group=spec["group"],
        version=served.get("name") or "v1",
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
    )


def _group_by_resource(
    objects: list[dict[str, Any]],
) -> tuple[list[ResourceInfo], dict[tuple[str, str], list[dict[str, Any]]]]:
    known = list(BUILTIN_RESOURCES)
    for obj in objects:
        if obj["kind"] == "CustomResourceDefinition":
            info = _crd_resource(obj)
            if info is not None:
                known.append(info)
    by_key = {(r.group, r.kind): r for r in known}
    by_kind: dict[str, ResourceInfo] = {}
    for r in known:
        by_kind.setdefault(r.kind, r)
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for obj in objects:
        group, version = split_api_version(str(obj.get("apiVersion", "v1")))
        kind = str(obj["kind"])
        info = by_key.get((group, kind)) or by_kind.get(kind)
        if info is None:
            namespaced = bool((obj.get("metadata") or {}).get("namespace"))
            info = ResourceInfo(kind, guess_plural(kind), group, version, namespaced)
            by_key[(group, kind)] = by_kind[kind] = info
            known.append(info)
        meta = obj["metadata"]
        if not info.namespaced:  # a real API server stores no namespace for these
            meta.pop("namespace", None)
        meta.setdefault("uid", _uid(kind, str(meta.get("namespace") or ""), str(meta["name"])))
        meta.setdefault("resourceVersion", "1000")
        obj["apiVersion"] = info.api_version
        grouped.setdefault((info.group, info.plural), []).append(obj)
    return known, grouped


def _folder_logs(logs_root: Path) -> LogSource:
    def read(namespace: str, pod: str, container: str, previous: bool) -> str | None:
        suffix = ".previous.log" if previous else ".log"
        parts = (namespace, pod, container)
        if any(not p or "/" in p or p in {".", ".."} for p in parts):
            return None
        file = logs_root / namespace / pod / f"{container}{suffix}"
        return file.read_text(encoding="utf-8", errors="replace") if file.is_file() else None

    return read


def filter_since(text: str, since_seconds: int) -> str:
    """Lines from the last ``since_seconds`` before the newest timestamped line.

    A snapshot has no "now", so its newest log line stands in for it (the
    snapshot backend's rule); lines without timestamps cannot be filtered.
    """
    from datetime import datetime, timedelta

    lines = text.splitlines(keepends=True)
    stamps = []
    for line in lines:
        match = _LOG_TIMESTAMP.match(line)
        stamps.append(
            datetime.fromisoformat(match.group(1).replace("Z", "+00:00")) if match else None
        )
    known = [s for s in stamps if s is not None]
    if not known:
        return text
    cutoff = max(known) - timedelta(seconds=since_seconds)
    kept, keep = [], False
    for line, stamp in zip(lines, stamps, strict=True):
        if stamp is not None:
            keep = stamp >= cutoff
        if keep:
            kept.append(line)
    return "".join(kept)
