"""Which resource types exist and how people name them.

The model says ``po``, ``pods``, ``Pod`` or ``deployments.apps``; kubectl
accepts all of them, so the tools do too. :class:`ResourceIndex` does that
mapping for any list of :class:`ResourceInfo` (the snapshot's, or a live
cluster's discovery), and ``BUILTIN_RESOURCES`` is the set of built-in kinds
assay knows without discovery.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from workers.engine.toolsets.backend import BackendError, ResourceInfo
from workers.engine.toolsets.echo import compose, quoted


def _r(
    kind: str, plural: str, group: str, version: str, namespaced: bool, *short: str
) -> ResourceInfo:
    return ResourceInfo(kind, plural, group, version, namespaced, tuple(short))


# Ordered: when two groups share a kind (Event), the first one wins a bare-name lookup.
BUILTIN_RESOURCES: tuple[ResourceInfo, ...] = (
    _r("Pod", "pods", "", "v1", True, "po"),
    _r("Service", "services", "", "v1", True, "svc"),
    _r("Namespace", "namespaces", "", "v1", False, "ns"),
    _r("Node", "nodes", "", "v1", False, "no"),
    _r("ConfigMap", "configmaps", "", "v1", True, "cm"),
    _r("Secret", "secrets", "", "v1", True),
    _r("ServiceAccount", "serviceaccounts", "", "v1", True, "sa"),
    _r("Event", "events", "", "v1", True, "ev"),
    _r("Endpoints", "endpoints", "", "v1", True, "ep"),
    _r("PersistentVolume", "persistentvolumes", "", "v1", False, "pv"),
    _r("PersistentVolumeClaim", "persistentvolumeclaims", "", "v1", True, "pvc"),
    _r("ReplicationController", "replicationcontrollers", "", "v1", True, "rc"),
    _r("ResourceQuota", "resourcequotas", "", "v1", True, "quota"),
    _r("LimitRange", "limitranges", "", "v1", True, "limits"),
    _r("Deployment", "deployments", "apps", "v1", True, "deploy"),
    _r("ReplicaSet", "replicasets", "apps", "v1", True, "rs"),
    _r("StatefulSet", "statefulsets", "apps", "v1", True, "sts"),
    _r("DaemonSet", "daemonsets", "apps", "v1", True, "ds"),
    _r("ControllerRevision", "controllerrevisions", "apps", "v1", True),
    _r("Job", "jobs", "batch", "v1", True),
    _r("CronJob", "cronjobs", "batch", "v1", True, "cj"),
    _r("Ingress", "ingresses", "networking.k8s.io", "v1", True, "ing"),
    _r("IngressClass", "ingressclasses", "networking.k8s.io", "v1", False),
    _r("NetworkPolicy", "networkpolicies", "networking.k8s.io", "v1", True, "netpol"),
    _r("HorizontalPodAutoscaler", "horizontalpodautoscalers", "autoscaling", "v2", True, "hpa"),
    _r("PodDisruptionBudget", "poddisruptionbudgets", "policy", "v1", True, "pdb"),
    _r("Role", "roles", "rbac.authorization.k8s.io", "v1", True),
    _r("RoleBinding", "rolebindings", "rbac.authorization.k8s.io", "v1", True),
    _r("ClusterRole", "clusterroles", "rbac.authorization.k8s.io", "v1", False),
    _r("ClusterRoleBinding", "clusterrolebindings", "rbac.authorization.k8s.io", "v1", False),
    _r("StorageClass", "storageclasses", "storage.k8s.io", "v1", False, "sc"),
    _r("CSIDriver", "csidrivers", "storage.k8s.io", "v1", False),
    _r("PriorityClass", "priorityclasses", "scheduling.k8s.io", "v1", False, "pc"),
    _r("EndpointSlice", "endpointslices", "discovery.k8s.io", "v1", True),
    _r("Lease", "leases", "coordination.k8s.io", "v1", True),
    _r("Event", "events", "events.k8s.io", "v1", True, "ev"),
    _r(
        "CustomResourceDefinition",
        "customresourcedefinitions",
        "apiextensions.k8s.io",
        "v1",
        False,
        "crd",
        "crds",
    ),
    _r(
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        "admissionregistration.k8s.io",
        "v1",
        False,
    ),
    _r(
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        "admissionregistration.k8s.io",
        "v1",
        False,
    ),
    _r("APIService", "apiservices", "apiregistration.k8s.io", "v1", False),
    # The other kinds a Kubernetes 1.33/1.34 API server stores and lists (GA or served by
    # default), so an admission policy on any of them can be exported and imported offline.
    _r("PodTemplate", "podtemplates", "", "v1", True),
    _r("ComponentStatus", "componentstatuses", "", "v1", False, "cs"),
    _r(
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        "admissionregistration.k8s.io",
        "v1",
        False,
    ),
    _r(
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        "admissionregistration.k8s.io",
        "v1",
        False,
    ),
    _r(
        "CertificateSigningRequest",
        "certificatesigningrequests",
        "certificates.k8s.io",
        "v1",
        False,
        "csr",
    ),
    _r("FlowSchema", "flowschemas", "flowcontrol.apiserver.k8s.io", "v1", False),
    _r(
        "PriorityLevelConfiguration",
        "prioritylevelconfigurations",
        "flowcontrol.apiserver.k8s.io",
        "v1",
        False,
    ),
    _r("RuntimeClass", "runtimeclasses", "node.k8s.io", "v1", False),
    _r("CSINode", "csinodes", "storage.k8s.io", "v1", False),
    _r("CSIStorageCapacity", "csistoragecapacities", "storage.k8s.io", "v1", True),
    _r("VolumeAttachment", "volumeattachments", "storage.k8s.io", "v1", False),
    _r("IPAddress", "ipaddresses", "networking.k8s.io", "v1", False),
    _r("ServiceCIDR", "servicecidrs", "networking.k8s.io", "v1", False),
    _r("DeviceClass", "deviceclasses", "resource.k8s.io", "v1", False),
    _r("ResourceClaim", "resourceclaims", "resource.k8s.io", "v1", True),
    _r("ResourceClaimTemplate", "resourceclaimtemplates", "resource.k8s.io", "v1", True),
    _r("ResourceSlice", "resourceslices", "resource.k8s.io", "v1", False),
    _r("VolumeAttributesClass", "volumeattributesclasses", "storage.k8s.io", "v1", False),
)


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> (``apps``, ``v1``); ``v1`` -> (``""``, ``v1``)."""
    group, _, version = api_version.rpartition("/")
    return group, version


def guess_plural(kind: str) -> str:
    """English plural of a kind, as Kubernetes derives it when a CRD does not say."""
    lower = kind.lower()
    if lower.endswith(("s", "x", "z", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return lower[:-1] + "ies"
    return lower + "s"


@lru_cache(maxsize=4096)
def _names_of(info: ResourceInfo) -> frozenset[str]:
    """Every name of a resource; per process, as each run's index repeats the built-in kinds."""
    bare = {info.kind.lower(), info.plural.lower(), *(s.lower() for s in info.short_names)}
    names = set(bare)
    if info.group:
        for name in (info.kind.lower(), info.plural.lower()):
            names.add(f"{name}.{info.group.lower()}")
            names.add(f"{name}.{info.version.lower()}.{info.group.lower()}")
    return frozenset(names)


class ResourceIndex:
    """Resolves every name kubectl accepts for a resource, case-insensitively.

    Accepted: kind (``Deployment``), plural (``deployments``), singular
    (``deployment``), short names (``deploy``), and the group-qualified forms
    ``deployments.apps`` / ``deployment.v1.apps``.
    """

    def __init__(self, resources: Iterable[ResourceInfo]) -> None:
        self._resources: list[ResourceInfo] = []
        self._by_name: dict[str, list[ResourceInfo]] = {}
        self._seen: set[tuple[str, str]] = set()
        for info in resources:
            self._add(info)

    @classmethod
    def builtin_with(cls, extra: Iterable[ResourceInfo]) -> ResourceIndex:
        """``ResourceIndex([*BUILTIN_RESOURCES, *extra])``, the built-in part built once per
        process: every snapshot run needs it, and indexing the built-in kinds' names was a
        tenth of a snapshot evaluation's CPU (issue 15). With nothing to add, the built-in
        index itself is returned: an index is read-only once built."""
        base = builtin_index()
        extra = list(extra)
        if not extra:  # most snapshots: nothing to add, and an index is never changed once built
            return base
        index = cls.__new__(cls)
        index._resources = list(base._resources)
        index._by_name = dict(base._by_name)  # lists are shared: _add replaces, never appends
        index._seen = set(base._seen)
        for info in extra:
            index._add(info)
        return index

    def _add(self, info: ResourceInfo) -> None:
        key = (info.group, info.kind)
        if key in self._seen:
            return
        self._seen.add(key)
        self._resources.append(info)
        for name in self._names(info):
            self._by_name[name] = [*self._by_name.get(name, ()), info]

    @staticmethod
    def _names(info: ResourceInfo) -> frozenset[str]:
        return _names_of(info)

    @property
    def resources(self) -> list[ResourceInfo]:
        return list(self._resources)

    def resolve(self, kind: str) -> ResourceInfo:
        name = kind.strip().lower()
        if "/" in name:  # "apps/v1/deployments" or "v1/pods" style
            *prefix, last = name.split("/")
            group = prefix[0] if len(prefix) == 2 else ""
            name = f"{last}.{group}" if group else last
        matches = self._by_name.get(name)
        if not matches:
            raise BackendError(
                "not_found",
                compose(
                    "no resource type named {} here; "
                    "call api_resources to see the kinds this cluster has",
                    quoted(kind),
                ),
            )
        return matches[0]


@lru_cache(maxsize=1)
def builtin_index() -> ResourceIndex:
    """The built-in kinds' index, built once per process (read-only: never add to it)."""
    return ResourceIndex(BUILTIN_RESOURCES)
