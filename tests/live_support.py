"""Two small clusters for the live-backend tests, written as snapshot folders.

``east`` and ``west`` differ where a test can tell them apart (east's
Deployment ``web`` is 3/3 ready, west's is 0/3). East holds a Secret whose
value is a unique canary, also base64-encoded and inside the
last-applied-configuration annotation, so a test can search every prompt and
report for it.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.crd_support import custom_resource_definition


def new_canary() -> str:
    return f"canary-{uuid.uuid4().hex}"


def _deployment(ready: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod", "labels": {"app": "web"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}},
        },
        "status": {"replicas": 3, "readyReplicas": ready, "availableReplicas": ready},
    }


def _pod(name: str, phase: str, containers: list[str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "prod", "labels": labels},
        "spec": {
            "nodeName": "node-1",
            "containers": [
                {
                    "name": c,
                    "image": f"example/{c}:1.0",
                    "env": [
                        {
                            "name": "DB_PASSWORD",
                            "valueFrom": {
                                "secretKeyRef": {"name": "db-credentials", "key": "password"}
                            },
                        }
                    ],
                }
                for c in containers
            ],
        },
        "status": {"phase": phase},
    }


def _certificate_crd() -> dict[str, Any]:
    names = {
        "kind": "Certificate",
        "plural": "certificates",
        "singular": "certificate",
        "shortNames": ["cert"],
    }
    schema = {
        "type": "object",
        "description": "A Certificate resource should be created to ensure "
        "an up to date and signed X.509 certificate is stored in a Secret.",
        "properties": {
            "spec": {
                "type": "object",
                "description": "Specification of the desired state.",
                "properties": {
                    "dnsNames": {
                        "type": "array",
                        "description": "Requested DNS subject alternative names.",
                        "items": {"type": "string"},
                    },
                    "secretName": {
                        "type": "string",
                        "description": "Name of the Secret resource that "
                        "will be automatically created.",
                    },
                },
            },
            "status": {"type": "object"},
        },
    }
    return custom_resource_definition("cert-manager.io", names, schema)


def write_cluster(root: Path, name: str, *, ready: int, canary: str | None = None) -> Path:
    """Write one snapshot folder; returns it."""
    folder = root / name
    folder.mkdir(parents=True)
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "staging"}},
        _deployment(ready),
        _pod("web-1", "Running", ["app"], {"app": "web", "tier": "front"}),
        _pod("web-2", "Running" if ready else "Pending", ["app"], {"app": "web"}),
        _pod("worker-1", "Running", ["main", "sidecar"], {"app": "worker"}),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "staging", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "example/app:0.9"}]},
            "status": {"phase": "Running"},
        },
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "web-1.1", "namespace": "prod"},
            "involvedObject": {"kind": "Pod", "name": "web-1", "namespace": "prod"},
            "reason": "BackOff",
            "type": "Warning",
            "message": f"Back-off restarting failed container app in {name}",
            "lastTimestamp": "2025-01-01T00:05:00Z",
            "count": 4,
        },
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "worker-1.1", "namespace": "prod"},
            "involvedObject": {"kind": "Pod", "name": "worker-1", "namespace": "prod"},
            "reason": "Pulled",
            "type": "Normal",
            "message": "Container image pulled",
            "lastTimestamp": "2025-01-01T00:01:00Z",
        },
        _certificate_crd(),
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {"name": "api-tls", "namespace": "prod"},
            "spec": {"dnsNames": [f"api.{name}.example.com"], "secretName": "api-tls"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    ]
    if canary is not None:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db-credentials", "namespace": "prod", "labels": {"app": "db"}},
            "type": "Opaque",
            "data": {
                "password": base64.b64encode(canary.encode()).decode(),
                "username": base64.b64encode(b"app").decode(),
            },
        }
        secret["metadata"]["annotations"] = {  # type: ignore[index]
            "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                {**secret, "stringData": {"password": canary}}
            )
        }
        objects.append(secret)
    (folder / "objects.yaml").write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    logs = folder / "logs" / "prod" / "web-1"
    logs.mkdir(parents=True)
    (logs / "app.log").write_text(
        "".join(f"2025-01-01T00:{m:02d}:00Z {name} line {m}\n" for m in range(10)),
        encoding="utf-8",
    )
    (logs / "app.previous.log").write_text(f"panic: {name} crashed before\n", encoding="utf-8")
    return folder
