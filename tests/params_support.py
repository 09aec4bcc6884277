"""Objects for the tests of params read from the target: replica limits in ConfigMaps and
the Deployments they judge, written as a snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from workers.engine.toolsets.snapshot_backend import SnapshotBackend


def snapshot(folder: Path, *objects: dict[str, Any]) -> SnapshotBackend:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "objects.yaml").write_text(yaml.safe_dump_all(objects))
    return SnapshotBackend(folder)


def limits(
    name: str,
    namespace: str,
    most: int,
    labels: dict[str, str] | None = None,
    data: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ConfigMap of params: ``maxReplicas`` (and ``data``), labelled ``labels``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "data": {"maxReplicas": str(most), **(data or {})},
    }


def deployment(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "x:1"}]}}},
    }  # fmt: skip


def deployments() -> list[dict[str, Any]]:
    """Two Deployments in shop (2 and 8 replicas) and one in lab (20)."""
    return [deployment("small", "shop", 2), deployment("large", "shop", 8),
            deployment("huge", "lab", 20)]  # fmt: skip
