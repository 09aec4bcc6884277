"""The OpenAPI schema of a kind, for type-checking a policy's field paths before export.

The API server compiles a ValidatingAdmissionPolicy's expressions against the schema of each
kind it matches and refuses a path the kind does not have (``undefined field 'replica'``).
An export is checked the same way wherever a schema is known:

* a live cluster's own schemas (``/openapi/v3``, through the backend's ``explain``), and a
  snapshot's CustomResourceDefinitions (theirs);
* for built-in kinds, the Kubernetes API's schemas shipped with assay
  (``kind_schemas.json.gz``, written by scripts/gen_kind_schemas.py for the version it
  states).

What is checked: every field path read from ``object`` directly (``object.spec.replicas``,
``object.metadata.?labels``); a path through a map (labels) or a field that keeps unknown
fields is fine past that point. Paths read through comprehension variables (``c.image`` in
``containers.all(c, ...)``) and computed keys are not followed.
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from workers.engine.toolsets.backend import BackendError, ClusterBackend, ResourceInfo

SCHEMAS_FILE = Path(__file__).with_name("kind_schemas.json.gz")


@lru_cache(maxsize=1)
def _shipped() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(gzip.decompress(SCHEMAS_FILE.read_bytes()))
    return document


def shipped_definitions() -> dict[str, Any]:
    """Every shipped schema by its OpenAPI name (what a ``$ref`` names)."""
    definitions: dict[str, Any] = _shipped()["definitions"]
    return definitions


def shipped_schema(resource: ResourceInfo) -> dict[str, Any] | None:
    """The built-in kind's schema at its root, or None when none is shipped for it."""
    name = _shipped()["kinds"].get(f"{resource.api_version}/{resource.kind}")
    if name is None:
        return None
    schema: dict[str, Any] = _shipped()["definitions"][name]
    return schema


def _deref(node: dict[str, Any]) -> dict[str, Any]:
    seen = 0
    while "$ref" in node and seen < 32:
        node = _shipped()["definitions"].get(node["$ref"], {})
        seen += 1
    return node


def undefined_in_shipped(schema: dict[str, Any], path: tuple[str, ...]) -> str | None:
    """Where ``path`` leaves the schema (``spec.replica``), or None when every step exists
    (or steps past what the schema describes)."""
    node = _deref(schema)
    walked: list[str] = []
    for field in path:
        if node.get("x-kubernetes-preserve-unknown-fields") or "oneOf" in node:
            return None
        properties = node.get("properties")
        if isinstance(properties, dict) and field in properties:
            node = _deref(properties[field])
        elif isinstance(node.get("additionalProperties"), dict):
            node = _deref(node["additionalProperties"])
        elif isinstance(properties, dict) or _is_scalar_or_list(node):
            return ".".join([*walked, field])
        else:
            return None  # an object the schema does not describe: nothing to check
        walked.append(field)
    return None


def _is_scalar_or_list(node: dict[str, Any]) -> bool:
    kinds = node.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return any(k in ("string", "integer", "number", "boolean", "array") for k in kinds)


def undefined_via_backend(
    backend: ClusterBackend, resource: ResourceInfo, path: tuple[str, ...]
) -> str | None:
    """As :func:`undefined_in_shipped`, through the target's own schema (``explain``, one
    level at a time). BackendError when the target has no schema for the kind."""
    walked: list[str] = []
    for field in path:
        node = backend.explain(resource, ".".join(walked) or None)
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return None
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            node = node["items"]
        properties = node.get("properties")
        if isinstance(properties, dict) and field in properties:
            walked.append(field)
            continue
        if node.get("additionalProperties"):
            return None  # a map: any key, and what is under it is the value's
        if isinstance(properties, dict) and properties:
            return ".".join([*walked, field])
        return None
    return None


def undefined_path(
    resource: ResourceInfo, path: tuple[str, ...], backend: ClusterBackend | None = None
) -> str | None:
    """Where ``path`` leaves the kind's schema, from the target's schema when a backend is
    given and has one, else the shipped one; None when it exists or no schema is known."""
    if backend is not None:
        try:
            return undefined_via_backend(backend, resource, path)
        except BackendError:
            pass  # no schema there (a snapshot has none for built-in kinds): the shipped one
    schema = shipped_schema(resource)
    return None if schema is None else undefined_in_shipped(schema, path)
