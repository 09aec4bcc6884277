"""How the API server stores an object, where that differs from the object as written.

Every labelled object is judged as stored: a container port's ``hostPort: 0`` is gone (the
field is ``omitempty``) and every Namespace is labelled with its own name
(:func:`as_the_api_server_stores`, :func:`stored_namespace`). The defaults below are filled
in only for labels a real cluster gave (:func:`with_defaults`).

A chainsaw test creates its objects in a cluster, so Kyverno judged them as the API server
stored them: with the defaults it fills in. A policy that reads such a field
(``imagePullPolicy``, a StorageClass's ``reclaimPolicy``) errs on the written object, while
the engine read a value. These are the API server's own rules (its defaulting of
containers and StorageClasses); no other default is applied, so a written object differs
from a stored one only where those rules say.

* A container's ``imagePullPolicy``: ``Always`` for an image tagged ``latest`` or with
  neither tag nor digest, ``IfNotPresent`` otherwise; in a Pod and in every pod template
  (workloads, a CronJob's job template), for containers, init and ephemeral containers.
* A StorageClass's ``reclaimPolicy`` ``Delete`` and ``volumeBindingMode`` ``Immediate``.
* A template's ``metadata`` (a workload's pod template, a CronJob's job template and its pod
  template): the API server's object holds it as a struct, so a stored template always has
  one, if empty, where a written one may have none.
"""

from __future__ import annotations

import copy
from typing import Any

from schemas.kubernetes_metadata import NAMESPACE_NAME_LABEL
from workers.policy_engine.policies.documents import name_of

_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_TEMPLATED = frozenset(
    {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "ReplicationController"}
)


def with_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the API server would store it, for the defaults above (a copy)."""
    out = copy.deepcopy(obj)
    kind = out.get("kind")
    spec = out.get("spec")
    if kind == "StorageClass":
        out.setdefault("reclaimPolicy", "Delete")
        out.setdefault("volumeBindingMode", "Immediate")
    elif kind == "Pod":
        _pod_spec(spec)
    elif kind in _TEMPLATED:
        _with_metadata(_at(spec, "template"))
        _pod_spec(_at(spec, "template", "spec"))
    elif kind == "CronJob":
        _with_metadata(_at(spec, "jobTemplate"))
        _with_metadata(_at(spec, "jobTemplate", "spec", "template"))
        _pod_spec(_at(spec, "jobTemplate", "spec", "template", "spec"))
    return out


def _with_metadata(template: Any) -> None:
    if isinstance(template, dict) and template.get("metadata") is None:
        template["metadata"] = {}


def _at(value: Any, *path: str) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _pod_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    for field in _CONTAINER_LISTS:
        for container in spec.get(field) or []:
            if isinstance(container, dict) and not container.get("imagePullPolicy"):
                container["imagePullPolicy"] = _pull_policy(str(container.get("image") or ""))


def _pull_policy(image: str) -> str:
    """The API server's: ``Always`` when the image's tag is ``latest``, or it has neither a
    tag nor a digest (it then means ``latest``); ``IfNotPresent`` otherwise."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    if not tag and not digest:
        tag = "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def as_the_api_server_stores(obj: dict[str, Any]) -> dict[str, Any]:
    """A written test object as a cluster would hold it once admitted, where the API server's
    encoding differs from what was written: a container port's ``hostPort: 0`` is dropped
    (the field is ``omitempty``), so no stored object holds it, while the engine's label
    came from the object as stored. Only that rule: other defaults stay as written."""

    def stored(value: Any) -> Any:
        if isinstance(value, list):
            return [stored(item) for item in value]
        if not isinstance(value, dict):
            return value
        kept = {k: stored(v) for k, v in value.items()}
        if "containerPort" in kept and kept.get("hostPort") == 0:
            del kept["hostPort"]
        return kept

    result: dict[str, Any] = stored(obj)
    return result


def stored_namespace(namespace: dict[str, Any]) -> dict[str, Any]:
    """A Namespace as the API server stores it: labelled with its own name, as every one is."""
    meta: dict[str, Any] = namespace.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), NAMESPACE_NAME_LABEL: name_of(namespace)}
    return {**namespace, "metadata": {**meta, "labels": labels}}
