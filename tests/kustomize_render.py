"""A small kustomize renderer for the manifest tests, in plain Python.

Why not kustomize itself: CI machines have no kustomize binary and none can be downloaded
(Debian's kubectl is too old to know components). So the tests render
``deploy/kubernetes`` with this module, which implements exactly the kustomize features
that tree uses, with kustomize's semantics:

- ``resources``: YAML files (multi-document) and directories holding a kustomization;
- ``components``: directories of ``kind: Component``, applied to what was accumulated so far;
- ``patches``: JSON 6902 patches (``add``, ``remove``, ``replace``, ``test``), inline or from
  a file, with a ``target`` of group / version / kind / name / namespace;
- ``namespace``: set on namespaced objects, ``Namespace`` objects renamed, and ServiceAccount
  subjects of (Cluster)RoleBindings that refer to a ServiceAccount of the build follow it;
- ``images``: ``newName`` / ``newTag`` / ``digest`` for matching container images.

Anything else (a strategic-merge patch, generators, labels, ...) raises
:class:`UnsupportedKustomization` instead of being silently ignored, so this renderer can
never pass a test on output kustomize would not produce. Where ``kubectl`` with kustomize v5 is
installed, ``tests/deploy/test_manifests.py`` also checks that both render the same objects.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_KEYS = {
    "apiVersion",
    "kind",
    "resources",
    "components",
    "patches",
    "namespace",
    "images",
}
# Kinds kustomize knows as cluster-scoped that this project could plausibly ship.
CLUSTER_SCOPED_KINDS = {
    "APIService",
    "ClusterIssuer",
    "ClusterRole",
    "ClusterRoleBinding",
    "CSIDriver",
    "CSINode",
    "CustomResourceDefinition",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "RuntimeClass",
    "StorageClass",
    "ValidatingWebhookConfiguration",
}
WORKLOAD_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


class UnsupportedKustomization(ValueError):
    """The kustomization uses a feature this renderer does not implement."""


class KustomizeError(ValueError):
    """The kustomization is wrong in a way kustomize itself would also refuse."""


def render(directory: Path) -> list[Resource]:
    """Every object ``kustomize build directory`` would print, in build order."""
    kustomization = _load_kustomization(directory)
    if kustomization.get("kind", "Kustomization") != "Kustomization":
        raise KustomizeError(f"{directory} is a {kustomization['kind']}, not a Kustomization")
    return _build(directory, kustomization, accumulated=[])


def resource_id(resource: Resource) -> tuple[str, str, str]:
    """(kind, namespace, name): what kustomize considers the same object."""
    metadata = resource.get("metadata") or {}
    return (resource["kind"], metadata.get("namespace", ""), metadata["name"])


def _load_kustomization(directory: Path) -> dict[str, Any]:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            data = yaml.safe_load(path.read_text()) or {}
            unknown = set(data) - SUPPORTED_KEYS
            if unknown:
                raise UnsupportedKustomization(f"{path}: {sorted(unknown)} not supported")
            return dict(data)
    raise KustomizeError(f"{directory} holds no kustomization file")


def _build(
    directory: Path, kustomization: dict[str, Any], accumulated: list[Resource]
) -> list[Resource]:
    resources = [copy.deepcopy(r) for r in accumulated]
    for entry in kustomization.get("resources") or []:
        resources.extend(_load_resource_entry(directory / entry))
        _check_unique(resources, directory)
    for entry in kustomization.get("components") or []:
        component_dir = directory / entry
        component = _load_kustomization(component_dir)
        if component.get("kind") != "Component":
            raise KustomizeError(f"{component_dir} is listed as a component but is not one")
        resources = _build(component_dir, component, accumulated=resources)
    for patch in kustomization.get("patches") or []:
        _apply_patch_entry(directory, patch, resources)
    if "namespace" in kustomization:
        _set_namespace(resources, kustomization["namespace"])
    for image in kustomization.get("images") or []:
        _set_image(resources, image)
    return resources


def _load_resource_entry(path: Path) -> list[Resource]:
    if path.is_dir():
        return render(path)
    if not path.is_file():
        raise KustomizeError(f"resource {path} does not exist")
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for doc in documents:
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            raise KustomizeError(f"{path} holds a document that is not a Kubernetes object")
    return documents


def _check_unique(resources: list[Resource], directory: Path) -> None:
    seen: set[tuple[str, str, str]] = set()
    for resource in resources:
        key = resource_id(resource)
        if key in seen:
            raise KustomizeError(f"{directory}: {key} is defined twice")
        seen.add(key)


# --- patches -----------------------------------------------------------------------------------


def _apply_patch_entry(directory: Path, entry: dict[str, Any], resources: list[Resource]) -> None:
    if "patch" in entry:
        text = entry["patch"]
    elif "path" in entry:
        text = (directory / entry["path"]).read_text()
    else:
        raise KustomizeError(f"{directory}: a patch needs `patch` or `path`")
    operations = yaml.safe_load(text)
    if not isinstance(operations, list):
        raise UnsupportedKustomization(f"{directory}: only JSON 6902 patches are supported")
    target = entry.get("target")
    if not isinstance(target, dict):
        raise KustomizeError(f"{directory}: a JSON 6902 patch needs a target")
    matched = [r for r in resources if _matches_target(r, target)]
    if not matched:
        raise KustomizeError(f"{directory}: patch target {target} matches nothing")
    for resource in matched:
        for operation in operations:
            _apply_operation(resource, operation)


def _matches_target(resource: Resource, target: dict[str, Any]) -> bool:
    unknown = set(target) - {"group", "version", "kind", "name", "namespace"}
    if unknown:
        raise UnsupportedKustomization(f"patch target fields {sorted(unknown)} not supported")
    group, _, version = resource["apiVersion"].rpartition("/")
    actual = {
        "group": group,
        "version": version,
        "kind": resource["kind"],
        "name": resource["metadata"]["name"],
        "namespace": resource["metadata"].get("namespace", ""),
    }
    return all(actual[field] == wanted for field, wanted in target.items())


def _apply_operation(document: Resource, operation: dict[str, Any]) -> None:
    op = operation["op"]
    tokens = _pointer_tokens(operation["path"])
    parent = _resolve(document, tokens[:-1])
    last = tokens[-1]
    if op == "test":
        if _resolve(document, tokens) != operation["value"]:
            raise KustomizeError(f"JSON patch test failed at {operation['path']}")
    elif op == "add":
        if isinstance(parent, list):
            index = len(parent) if last == "-" else _list_index(parent, last, inclusive=True)
            parent.insert(index, copy.deepcopy(operation["value"]))
        else:
            parent[last] = copy.deepcopy(operation["value"])
    elif op in ("remove", "replace"):
        key: int | str
        if isinstance(parent, list):
            key = _list_index(parent, last, inclusive=False)
        elif last not in parent:
            raise KustomizeError(f"JSON patch {op}: {operation['path']} does not exist")
        else:
            key = last
        if op == "remove":
            del parent[key]
        else:
            parent[key] = copy.deepcopy(operation["value"])
    else:
        raise UnsupportedKustomization(f"JSON patch op {op!r} not supported")


def _pointer_tokens(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise KustomizeError(f"JSON pointer {pointer!r} must start with /")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _resolve(document: Any, tokens: list[str]) -> Any:
    node = document
    for token in tokens:
        if isinstance(node, list):
            node = node[_list_index(node, token, inclusive=False)]
        elif isinstance(node, dict) and token in node:
            node = node[token]
        else:
            raise KustomizeError(f"JSON pointer token {token!r} not found")
    return node


def _list_index(items: list[Any], token: str, inclusive: bool) -> int:
    if not token.isdigit():
        raise KustomizeError(f"JSON pointer token {token!r} is not a list index")
    index = int(token)
    if index > len(items) or (index == len(items) and not inclusive):
        raise KustomizeError(f"JSON pointer index {index} is out of range")
    return index


# --- namespace and images ----------------------------------------------------------------------


def _set_namespace(resources: list[Resource], namespace: str) -> None:
    previous_sa_namespaces = {
        r["metadata"]["name"]: r["metadata"].get("namespace", "")
        for r in resources
        if r["kind"] == "ServiceAccount"
    }
    for resource in resources:
        kind = resource["kind"]
        if kind == "Namespace":
            resource["metadata"]["name"] = namespace
        elif kind not in CLUSTER_SCOPED_KINDS:
            resource["metadata"]["namespace"] = namespace
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            for subject in resource.get("subjects") or []:
                name = subject.get("name")
                if subject.get("kind") != "ServiceAccount" or name not in previous_sa_namespaces:
                    continue
                if subject.get("namespace", "") == previous_sa_namespaces[name]:
                    subject["namespace"] = namespace


def _set_image(resources: list[Resource], image: dict[str, Any]) -> None:
    for resource in resources:
        path = WORKLOAD_POD_SPEC_PATHS.get(resource["kind"])
        if path is None:
            continue
        pod_spec: Any = resource
        for key in path:
            pod_spec = pod_spec.get(key, {})
        for container in [*pod_spec.get("containers", []), *pod_spec.get("initContainers", [])]:
            name, tag = _split_image(container["image"])
            if name != image["name"]:
                continue
            new_name = image.get("newName", name)
            if "digest" in image:
                container["image"] = f"{new_name}@{image['digest']}"
            else:
                suffix = f":{image['newTag']}" if "newTag" in image else tag
                container["image"] = f"{new_name}{suffix}"


def _split_image(reference: str) -> tuple[str, str]:
    """("registry/name", ":tag" or "@digest" or "")."""
    if "@" in reference:
        name, digest = reference.split("@", 1)
        return name, "@" + digest
    slash = reference.rfind("/")
    colon = reference.rfind(":")
    if colon > slash:
        return reference[:colon], reference[colon:]
    return reference, ""
