"""OpenAPI documents for the test API server, shaped like a real server's.

Built-in kinds get their schema from the kubernetes client's own pydantic
models (real field names and descriptions, no network); custom resources get
their CRD's ``openAPIV3Schema``. Documents are built on first request and
kept, per cluster.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from assay.testing.fake_cluster import FakeCluster
from workers.engine.toolsets.backend import ResourceInfo

V3_REF = "#/components/schemas/{model}"
V2_REF = "#/definitions/{model}"


def v3_index(cluster: FakeCluster) -> dict[str, Any]:
    """``/openapi/v3``: one entry per group-version, each with its document's URL."""
    paths = {}
    for key in sorted({_gv_key(r) for r in cluster.resources}):
        digest = hashlib.sha256(f"{cluster.name}/{key}".encode()).hexdigest()[:16].upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


def v3_document(cluster: FakeCluster, key: str) -> dict[str, Any] | None:
    """``/openapi/v3/api/v1`` or ``/openapi/v3/apis/GROUP/VERSION``."""
    resources = [r for r in cluster.resources if _gv_key(r) == key]
    if not resources:
        return None
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.31.0"},
        "paths": {},
        "components": {"schemas": _schemas(cluster, resources, V3_REF)},
    }


def v2_document(cluster: FakeCluster) -> dict[str, Any]:
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.31.0"},
        "paths": {},
        "definitions": _schemas(cluster, cluster.resources, V2_REF),
    }


def _gv_key(resource: ResourceInfo) -> str:
    return f"apis/{resource.group}/{resource.version}" if resource.group else "api/v1"


def _schemas(
    cluster: FakeCluster, resources: list[ResourceInfo], ref_template: str
) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    crds = {
        (
            (crd.get("spec") or {}).get("group"),
            ((crd.get("spec") or {}).get("names") or {}).get("kind"),
        ): crd
        for crd in cluster.crds()
    }
    for resource in resources:
        gvk = [{"group": resource.group, "version": resource.version, "kind": resource.kind}]
        crd = crds.get((resource.group, resource.kind))
        if crd is not None:
            schema = _crd_schema(crd, resource.version)
            if schema is not None:
                name = ".".join(
                    [*reversed(resource.group.split(".")), resource.version, resource.kind]
                )
                schemas[name] = {**schema, "x-kubernetes-group-version-kind": gvk}
            continue
        model = _client_model(resource)
        if model is None:
            continue
        top, definitions = _model_schemas(model, ref_template)
        for def_name, definition in definitions.items():
            schemas.setdefault(def_name, definition)
        schemas[model.__name__] = {**top, "x-kubernetes-group-version-kind": gvk}
    return schemas


@functools.lru_cache(maxsize=256)
def _model_schemas(model: Any, ref_template: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A client model's schema and the definitions it refers to (cached: it takes a while)."""
    generated = model.model_json_schema(by_alias=True, ref_template=ref_template)
    definitions = {k: _normalise(v) for k, v in (generated.pop("$defs", None) or {}).items()}
    return _normalise(generated), definitions


def _crd_schema(crd: dict[str, Any], version: str) -> dict[str, Any] | None:
    for entry in (crd.get("spec") or {}).get("versions") or []:
        if entry.get("name") == version:
            schema = (entry.get("schema") or {}).get("openAPIV3Schema")
            return dict(schema) if isinstance(schema, dict) else None
    return None


def _client_model(resource: ResourceInfo) -> Any:
    import kubernetes.client.models as models

    version = resource.version[:1].upper() + resource.version[1:]
    prefix = resource.group.split(".")[0].capitalize() if resource.group else "Core"
    for name in (f"{version}{resource.kind}", f"{prefix}{version}{resource.kind}"):
        model = getattr(models, name, None)
        if model is not None and hasattr(model, "model_json_schema"):
            return model
    return None


def _normalise(schema: Any) -> Any:
    """Turn pydantic's schema dialect into the API server's: no nullable anyOf, no titles."""
    if isinstance(schema, list):
        return [_normalise(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _normalise(v) for k, v in schema.items() if k not in ("title", "default")}
    if out.get("additionalProperties") is False:
        del out["additionalProperties"]
    if isinstance(out.get("description"), str):
        out["description"] = out["description"].split("\n\nAttributes:")[0].strip()
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _normalise(v) for k, v in out["properties"].items()}
    options = out.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) == 1:
            del out["anyOf"]
            only = kept[0]
            if "$ref" in only:
                out["allOf"] = [only]
            else:
                out = {**only, **out}
    return out
