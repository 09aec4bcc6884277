"""A cluster installed with Helm, written as a snapshot folder (serve it as it is, or through
``FakeApiServer`` for the live backend).

Every Helm release leaves a Secret per revision, ``sh.helm.release.v1.RELEASE.vN`` of type
``helm.sh/release.v1``, labelled ``owner: helm, name: RELEASE, status: deployed`` (older
revisions ``superseded``), whose one value is the release blob. The release's name is
repeated everywhere else: its namespace, its workloads' names, their
``app.kubernetes.io/instance`` label, ``meta.helm.sh/release-name``, often the image path.
Those are identifiers: a scrubber that takes the release Secret's labels for values rewrites
every one of them. Besides the releases: an Opaque Secret whose value is copied into a
ConfigMap (a value, to be scrubbed wherever it appears), and a ConfigMap holding
``password: encrypted-password`` (a credential shape, shown redacted, judged as stored).
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    revision: int
    chart: str
    deployment: str
    image: str
    replicas: int


RELEASES = (
    Release("ingress-nginx", "ingress-nginx", 3, "ingress-nginx-4.10.1",
            "ingress-nginx-controller", "registry.k8s.io/ingress-nginx/controller:v1.10.1", 2),
    Release("cert-manager", "cert-manager", 1, "cert-manager-v1.14.4", "cert-manager",
            "quay.io/jetstack/cert-manager-controller:v1.14.4", 1),
    Release("checkout", "shop", 7, "checkout-2.3.0", "checkout",
            "ghcr.io/example/checkout:2.3.0", 5),
    Release("kube-prometheus-stack", "monitoring", 2, "kube-prometheus-stack-58.2.2",
            "kube-prometheus-stack-operator",
            "quay.io/prometheus-operator/prometheus-operator:v0.73.2", 1),
)  # fmt: skip
"""Every release: its namespace, latest revision, chart, the Deployment named after it."""

SHOP = "shop"


@dataclass(frozen=True)
class HelmCluster:
    path: Path
    blobs: tuple[str, ...]  # every release Secret's value (decoded once, as Helm stores it)
    password: str  # an Opaque Secret's value, copied into a ConfigMap

    def values(self) -> tuple[str, ...]:
        """Every Secret value of the cluster, in the form a leak would show it."""
        return (*self.blobs, self.password)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _release_secret(release: Release, revision: int, blob: str) -> dict[str, Any]:
    status = "deployed" if revision == release.revision else "superseded"
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": f"sh.helm.release.v1.{release.name}.v{revision}",
            "namespace": release.namespace,
            "labels": {
                "owner": "helm",
                "name": release.name,
                "status": status,
                "version": str(revision),
                "modifiedAt": "1716000000",
            },
        },
        "data": {"release": _b64(blob)},
    }


def _deployment(release: Release) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/instance": release.name,
        "app.kubernetes.io/name": release.deployment,
        "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": release.chart,
    }
    selector = {"app.kubernetes.io/instance": release.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": release.deployment,
            "namespace": release.namespace,
            "labels": labels,
            "annotations": {
                "meta.helm.sh/release-name": release.name,
                "meta.helm.sh/release-namespace": release.namespace,
            },
        },
        "spec": {
            "replicas": release.replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {"containers": [{"name": "main", "image": release.image}]},
            },
        },
        "status": {"replicas": release.replicas, "readyReplicas": release.replicas},
    }


def write_helm_cluster(root: Path, name: str = "helm") -> HelmCluster:
    """Write the snapshot folder ``root/name``; returns it with its Secret values."""
    folder = root / name
    folder.mkdir(parents=True)
    objects: list[dict[str, Any]] = []
    blobs: list[str] = []
    for release in RELEASES:
        objects.append({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": release.namespace}})  # fmt: skip
        for revision in range(1, release.revision + 1):
            blob = "H4sIAAAAAAAC/" + secrets.token_urlsafe(48)  # what Helm's blob looks like
            blobs.append(blob)
            objects.append(_release_secret(release, revision, blob))
        objects.append(_deployment(release))
        objects.append({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{release.deployment}.1", "namespace": release.namespace},
            "involvedObject": {"kind": "Deployment", "name": release.deployment,
                               "namespace": release.namespace},
            "reason": "ScalingReplicaSet",
            "type": "Normal",
            "message": f"release {release.name} deployed: scaled up {release.deployment}",
            "lastTimestamp": "2025-01-01T00:00:00Z",
        })  # fmt: skip
    password = f"Pw-{secrets.token_hex(8)}-checkout"
    objects += [
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": "checkout-db", "namespace": SHOP, "labels": {"app": "checkout"}},
         "data": {"password": _b64(password)}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "checkout-notes", "namespace": SHOP},
         "data": {"notes": f"fallback seed {password} for the checkout release"}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "db-settings", "namespace": SHOP},
         "data": {"password": "encrypted-password"}},
    ]  # fmt: skip
    (folder / "objects.yaml").write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    return HelmCluster(folder, tuple(blobs), password)
