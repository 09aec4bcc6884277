"""``explain`` for a live cluster: the OpenAPI schema of a kind, or of one of its fields.

Where the schema comes from, in order: the server's OpenAPI v3 document for
the kind's group-version (``/openapi/v3`` lists them), the single v2 document
(``/openapi/v2``) on older servers, and for custom resources the CRD's own
``openAPIV3Schema``. Documents are cached per target like discovery.

What comes back is one level of the schema, as ``kubectl explain`` shows it:
the node's description and type, and each field's type and description, with
``$ref``s resolved one step. Deeper levels are one ``field_path`` away.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from workers.engine.toolsets.backend import BackendError, ResourceInfo
from workers.engine.toolsets.live_transport import GetOnlyTransport, path_segment

_cache: dict[tuple[str, str], tuple[float, Any]] = {}  # (target, path) -> (fetched at, doc)
_cache_lock = threading.Lock()
_MISSING: dict[str, Any] = {}
CACHE_DOCUMENTS = 32


def explain(
    transport: GetOnlyTransport,
    resource: ResourceInfo,
    field_path: str | None,
    ttl_seconds: float,
) -> dict[str, Any]:
    docs = _Documents(transport, ttl_seconds)
    schema, definitions = _schema_of(docs, resource)
    node = _descend(schema, definitions, resource, field_path)
    return _one_level(node, definitions)


class _Documents:
    """Fetches OpenAPI documents through the transport, caching them per target."""

    def __init__(self, transport: GetOnlyTransport, ttl_seconds: float) -> None:
        self.transport = transport
        self.ttl = ttl_seconds

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        key = (self.transport.target_key, path)
        now = time.monotonic()
        with _cache_lock:
            cached = _cache.get(key)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        try:
            doc = self.transport.get_json(path, query, action=f"read the OpenAPI document {path}")
        except BackendError as exc:
            if exc.code != "not_found":
                raise
            doc = _MISSING
        with _cache_lock:
            _cache[key] = (now, doc)
            _evict(now, self.ttl)
        return doc


def _evict(now: float, ttl: float) -> None:
    """Drop stale documents and keep at most ``CACHE_DOCUMENTS`` (they are large)."""
    for key in [k for k, (fetched, _) in _cache.items() if now - fetched >= ttl]:
        del _cache[key]
    while len(_cache) > CACHE_DOCUMENTS:
        del _cache[min(_cache, key=lambda k: _cache[k][0])]


def _schema_of(docs: _Documents, resource: ResourceInfo) -> tuple[dict[str, Any], dict[str, Any]]:
    """The kind's schema and the definitions its ``$ref``s point into."""
    wanted = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    index = docs.get("/openapi/v3")
    if index is not _MISSING:
        key = f"apis/{resource.group}/{resource.version}" if resource.group else "api/v1"
        entry = (index.get("paths") or {}).get(key) or {}
        url = entry.get("serverRelativeURL") or f"/openapi/v3/{key}"
        parts = urlsplit(url)
        doc = docs.get(parts.path, dict(parse_qsl(parts.query)) or None)
        definitions = (doc.get("components") or {}).get("schemas") or {}
        found = _by_gvk(definitions, wanted)
        if found is not None:
            return found, definitions
    else:
        doc = docs.get("/openapi/v2")
        definitions = doc.get("definitions") or {}
        found = _by_gvk(definitions, wanted)
        if found is not None:
            return found, definitions
    if resource.group:
        crd = _crd_schema(docs.transport, resource)
        if crd is not None:
            return crd, {}
    raise BackendError(
        "not_found",
        f"the server publishes no schema for {resource.kind} ({resource.api_version}); "
        "describe an object of that kind instead",
    )


def _by_gvk(definitions: dict[str, Any], wanted: dict[str, str]) -> dict[str, Any] | None:
    for schema in definitions.values():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if all(gvk.get(k, "") == v for k, v in wanted.items()):
                return dict(schema)
    return None


def _crd_schema(transport: GetOnlyTransport, resource: ResourceInfo) -> dict[str, Any] | None:
    name = path_segment(f"{resource.plural}.{resource.group}", "CustomResourceDefinition")
    try:
        crd = transport.get_json(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
            action=f"get the CustomResourceDefinition {resource.plural}.{resource.group}",
        )
    except BackendError as exc:
        if exc.code in ("not_found", "forbidden"):
            return None
        raise
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") == resource.version:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            return dict(schema) if isinstance(schema, dict) else None
    return None


def _deref(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """Follow ``$ref`` (bare or wrapped in a one-item ``allOf``), keeping the local description."""
    for _ in range(10):
        ref = node.get("$ref")
        if ref is None and len(node.get("allOf") or []) == 1:
            ref = node["allOf"][0].get("$ref")
        if not ref:
            return node
        target = definitions.get(ref.rsplit("/", 1)[-1])
        if target is None:
            return node
        merged = dict(target)
        if node.get("description"):
            merged["description"] = node["description"]
        node = merged
    return node


def _descend(
    schema: dict[str, Any],
    definitions: dict[str, Any],
    resource: ResourceInfo,
    field_path: str | None,
) -> dict[str, Any]:
    parts = [p for p in (field_path or "").split(".") if p]
    if parts and parts[0].lower() in {resource.kind.lower(), resource.plural.lower()}:
        parts = parts[1:]
    node = _deref(schema, definitions)
    walked: list[str] = []
    for part in parts:
        while node.get("type") == "array" and isinstance(node.get("items"), dict):
            node = _deref(node["items"], definitions)
        child = (node.get("properties") or {}).get(part)
        if child is None:
            where = ".".join([resource.kind, *walked]) if walked else resource.kind
            raise BackendError(
                "not_found",
                f"{where} has no field {part!r}; explain {where} to list its fields",
            )
        walked.append(part)
        node = _deref(child, definitions)
    return node


def _one_level(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """The node itself, with each field that is a ``$ref`` shown as a one-line summary.

    Inline sub-schemas (a CRD's ``openAPIV3Schema`` is all inline) are kept
    whole, so a custom resource explains the same way as from a snapshot.
    """
    out = {k: v for k, v in node.items() if k not in ("$ref", "allOf")}
    if isinstance(node.get("items"), dict):  # a list's fields are its items' fields
        out["items"] = _one_level(_deref(node["items"], definitions), definitions)
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _summary(node["additionalProperties"], definitions)
    properties = node.get("properties")
    if isinstance(properties, dict):
        out["properties"] = {name: _summary(p, definitions) for name, p in properties.items()}
    return out


def _summary(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    if not _is_ref(node):
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            return {**node, "items": _summary(node["items"], definitions)}
        return node
    resolved = _deref(node, definitions)
    out: dict[str, Any] = {
        k: resolved[k] for k in ("type", "format", "description", "enum") if k in resolved
    }
    if "type" not in out and resolved.get("properties"):
        out["type"] = "object"
    return out


def _is_ref(node: dict[str, Any]) -> bool:
    return "$ref" in node or any("$ref" in part for part in node.get("allOf") or [])
