"""What the model reads of an object: Kubernetes objects made short.

``get`` with a name and ``describe`` show whole objects, so every such prompt
is mostly made of this module's output. It must be deterministic (same object,
same text: no ages relative to "now") and cheap, and it never mutates what it
is given. Listings are tables (:mod:`workers.toolsets.tables`); the size cap
lives in :mod:`workers.toolsets.truncation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

# libyaml's dumper when PyYAML was built with it: rendering is on every tool call's path.
_YamlDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

# ---------------------------------------------------------------------- object compaction

# Keys that are bookkeeping wherever they appear.
_NOISE_KEYS = frozenset(
    {
        "managedFields",
        "uid",
        "resourceVersion",
        "selfLink",
        "generation",
        "observedGeneration",
        "imageID",
        "containerID",
        "terminationMessagePath",
        "lastProbeTime",
        "lastHeartbeatTime",
        "lastUpdateTime",
        "blockOwnerDeletion",
        "generateName",
        "bootID",
        "machineID",
        "systemUUID",
    }
)
# Fields whose value only restates the API default.
_DEFAULTS: dict[str, Any] = {
    "schedulerName": "default-scheduler",
    "dnsPolicy": "ClusterFirst",
    "enableServiceLinks": True,
    "preemptionPolicy": "PreemptLowerPriority",
    "priority": 0,
    "terminationGracePeriodSeconds": 30,
    "terminationMessagePolicy": "File",
    "progressDeadlineSeconds": 600,
    "revisionHistoryLimit": 10,
    "sessionAffinity": "None",
    "internalTrafficPolicy": "Cluster",
    "ipFamilyPolicy": "SingleStack",
    # probe defaults
    "failureThreshold": 3,
    "successThreshold": 1,
    "timeoutSeconds": 1,
    "periodSeconds": 10,
    "scheme": "HTTP",
    "protocol": "TCP",
}
# Empty objects whose presence is the information (a volume type, a container state).
_MEANINGFUL_WHEN_EMPTY = frozenset({"emptyDir", "running", "waiting", "terminated"})
_NOISE_ANNOTATIONS = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        "deployment.kubernetes.io/revision",
        "deployment.kubernetes.io/desired-replicas",
        "deployment.kubernetes.io/max-replicas",
    }
)
_NODE_STATUS_NOISE = frozenset({"images", "daemonEndpoints", "volumesAttached", "volumesInUse"})
_SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
_DEFAULT_TOLERATION_KEYS = frozenset(
    {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
)


def _is_default(key: str, value: Any) -> bool:
    if key not in _DEFAULTS:
        return False
    default = _DEFAULTS[key]
    return type(value) is type(default) and value == default  # True is not 0 here


def _is_noise_item(key: str, item: Any) -> bool:
    """List items Kubernetes adds to every pod, which say nothing about the workload."""
    if not isinstance(item, Mapping):
        return False
    if key == "volumes":
        return str(item.get("name", "")).startswith("kube-api-access-")
    if key == "volumeMounts":
        return item.get("mountPath") == _SERVICE_ACCOUNT_MOUNT
    if key == "tolerations":
        return (
            item.get("key") in _DEFAULT_TOLERATION_KEYS
            and item.get("effect") == "NoExecute"
            and item.get("tolerationSeconds") == 300
        )
    return False


def _compact(value: Any, key: str) -> Any:
    """``value`` is found under ``key`` (list items under their list's key)."""
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for child_key, child in value.items():
            if child_key in _NOISE_KEYS and (child_key != "generation" or key == "metadata"):
                continue
            if child_key == "controller" and key == "ownerReferences":
                continue
            if child_key == "annotations" and isinstance(child, Mapping):
                child = {k: v for k, v in child.items() if k not in _NOISE_ANNOTATIONS}
            if _is_default(child_key, child):
                continue
            if child_key == "serviceAccount" and child == value.get("serviceAccountName"):
                continue
            compacted = _compact(child, child_key)
            if (
                compacted is None
                or compacted == []
                or (compacted == {} and child_key not in _MEANINGFUL_WHEN_EMPTY)
            ):
                continue
            result[child_key] = compacted
        return result
    if isinstance(value, list):
        items = [_compact(item, key) for item in value if not _is_noise_item(key, item)]
        return [item for item in items if item not in (None, {}, [])]
    return value


def condition_line(condition: Mapping[str, Any]) -> str:
    """``Ready=False since 2026-03-10T08:41:07Z (ContainersNotReady): containers ...``.

    A condition is five or six YAML lines; as one line it reads the same to the
    model for a fraction of the tokens.
    """
    line = f"{condition.get('type')}={condition.get('status')}"
    if since := condition.get("lastTransitionTime"):
        line += f" since {since}"
    if reason := condition.get("reason"):
        line += f" ({reason})"
    if message := condition.get("message"):
        line += f": {' '.join(str(message).split())}"
    return line


def compact_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A new, shorter copy of ``obj`` with the same meaning for a predicate."""
    result = _compact(obj, "")
    kind = obj.get("kind")
    status = result.get("status")
    if isinstance(status, dict) and isinstance(status.get("conditions"), list):
        status["conditions"] = [
            condition_line(c) if isinstance(c, Mapping) and "type" in c else c
            for c in status["conditions"]
        ]
    if isinstance(status, dict):  # single-stack pods repeat their IPs as one-item lists
        for single, plural in (("podIP", "podIPs"), ("hostIP", "hostIPs")):
            if status.get(plural) == [{"ip": status.get(single)}]:
                del status[plural]
    if kind == "Node" and isinstance(status, dict):
        for key in _NODE_STATUS_NOISE:
            status.pop(key, None)
    if kind == "CustomResourceDefinition":
        for version in (result.get("spec") or {}).get("versions") or []:
            if isinstance(version, dict) and "schema" in version:
                version["schema"] = "(omitted; use explain for the fields)"
    return dict(result)


def render_object(obj: Mapping[str, Any]) -> str:
    """One object as compact YAML, in the API's own key order."""
    return yaml.dump(
        compact_object(obj),
        Dumper=_YamlDumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=120,
    )
