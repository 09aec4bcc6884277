"""The hand-written admission-document model (workers/policy_engine/admission_schema.py) held
against a JSON (OpenAPI) schema of the same documents: the official Kubernetes schemas
shipped with assay (tests/policy_engine/test_admission_schema_official.py) and the CRD
schemas of Kyverno and Gatekeeper read at run time (bench/check_admission_model.py).

The model is written from field references, so it can drift from the APIs it reads. What
matters is one direction: a field the model accepts that the schema lacks, or a type the
schema refuses (a literal value outside its ``enum``, any string where it has one), lets
the model read a document its engine would never hold (``drift``). The other direction is
fail-safe (a schema field the model does not know makes the importer refuse the document)
and is listed for information only.

One walk over the pydantic annotations and the schema nodes: models against objects' listed
``properties``, lists against ``items``, maps against ``additionalProperties``, literals
against ``enum``, scalars against ``type``. A node that lists no fields (an object the schema
leaves open, ``x-kubernetes-preserve-unknown-fields``) cannot prove anything and is reported
as not described rather than counted as agreement.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", bool: "boolean", float: "number"}
Resolve = Callable[[str], dict[str, Any]]


def _no_references(name: str) -> dict[str, Any]:
    raise KeyError(f"the schema refers to {name}, and no resolver was given")


@dataclass
class Comparison:
    """What one walk found, each entry a dotted path (``[]``: a list's items, ``{}``: a map's
    values), with the reason after a colon where there is one."""

    compared: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    unknown_to_model: list[str] = field(default_factory=list)
    undescribed: list[str] = field(default_factory=list)
    passed_through: list[str] = field(default_factory=list)


def compare(
    annotation: Any | Mapping[str, Any],
    schema: dict[str, Any],
    where: str = "",
    resolve: Resolve = _no_references,
) -> Comparison:
    """``annotation`` (a model, a type such as ``list[Validation]``, or a mapping of field
    names to types: the fields an importer reads from an untyped object) against the schema
    node ``schema``; ``resolve`` gives the node a ``$ref`` names."""
    out = Comparison()
    if isinstance(annotation, Mapping):
        _fields(dict(annotation), False, _deref(schema, resolve), where, resolve, out)
    else:
        _walk(annotation, schema, where, resolve, out)
    return out


def strict(node: Any) -> Any:
    """The schema with unknown fields refused wherever it lists an object's fields (the API
    server's strict field validation), except where it keeps unknown fields."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict(value) for key, value in node.items()}
    keeps_unknown = out.get("x-kubernetes-preserve-unknown-fields") is True
    if "properties" in out and "additionalProperties" not in out and not keeps_unknown:
        out["additionalProperties"] = False
    return out


def _deref(node: Any, resolve: Resolve) -> dict[str, Any]:
    seen = 0
    while isinstance(node, dict) and "$ref" in node and seen < 32:
        node = resolve(node["$ref"])
        seen += 1
    all_of = node.get("allOf") if isinstance(node, dict) else None
    if isinstance(all_of, list) and len(all_of) == 1:  # OpenAPI's way of annotating a $ref
        return _deref(all_of[0], resolve)
    return node if isinstance(node, dict) else {}


def _members(annotation: Any) -> list[Any]:
    """The alternatives of an optional or a union, flattened; the annotation itself else."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for argument in typing.get_args(annotation) for m in _members(argument)]
    return [annotation]


def _types(node: dict[str, Any]) -> set[str] | None:
    """The JSON types the node admits; None for any."""
    if node.get("x-kubernetes-int-or-string"):
        return {"integer", "string"}
    kinds = node.get("type")
    if kinds is None:
        return None
    return {kinds} if isinstance(kinds, str) else set(kinds)


def _admits(json_type: str, allowed: set[str] | None) -> bool:
    if allowed is None or json_type in allowed:
        return True
    return json_type == "integer" and "number" in allowed


def _walk(annotation: Any, node: Any, where: str, resolve: Resolve, out: Comparison) -> None:
    node = _deref(node, resolve)
    for member in _members(annotation):
        if member is not type(None):  # a null is a field not written (the model drops it)
            _walk_one(member, node, where, resolve, out)


def _walk_one(
    annotation: Any, node: dict[str, Any], where: str, resolve: Resolve, out: Comparison
) -> None:
    allowed = _types(node)
    origin = typing.get_origin(annotation)
    described = ", ".join(sorted(allowed or ()))
    if annotation is Any:
        if allowed is not None:
            out.drift.append(f"{where}: the model accepts any value, the schema {described}")
        return
    if origin is typing.Literal:
        values = typing.get_args(annotation)
        for json_type in sorted({JSON_TYPES[type(v)] for v in values}):
            if not _admits(json_type, allowed):
                out.drift.append(f"{where}: the model's {json_type}, the schema's {described}")
        enum = node.get("enum")
        outside = [v for v in values if enum is not None and v not in enum]
        if outside:
            out.drift.append(f"{where}: the model accepts {outside}, the schema's enum {enum}")
        return
    if origin is list:
        if not _admits("array", allowed):
            out.drift.append(f"{where}: the model's list, the schema's {described}")
        elif "items" not in node:
            out.undescribed.append(f"{where}[]: the schema does not describe the items")
        else:
            _walk(typing.get_args(annotation)[0], node["items"], f"{where}[]", resolve, out)
        return
    if origin is dict:
        _map(typing.get_args(annotation)[1], node, allowed, where, resolve, out)
        return
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not _admits("object", allowed):
            out.drift.append(f"{where}: the model's object, the schema's {described}")
            return
        fields = {(f.alias or name): f.annotation for name, f in annotation.model_fields.items()}
        keeps = annotation.model_config.get("extra") == "allow"
        _fields(fields, keeps, node, where, resolve, out)
        return
    if annotation in JSON_TYPES:
        if not _admits(JSON_TYPES[annotation], allowed):
            out.drift.append(
                f"{where}: the model's {JSON_TYPES[annotation]}, the schema's {described}"
            )
        elif node.get("enum") is not None:
            enum = node["enum"]
            out.drift.append(f"{where}: the model accepts any value, the schema only {enum}")
        return
    out.drift.append(f"{where}: {annotation!r} is not a type this comparison knows")


def _map(
    values: Any,
    node: dict[str, Any],
    allowed: set[str] | None,
    where: str,
    resolve: Resolve,
    out: Comparison,
) -> None:
    """A ``dict[str, X]``: the schema must be a map (any key) of what X is."""
    extra = node.get("additionalProperties")
    if not _admits("object", allowed):
        described = ", ".join(sorted(allowed or ()))
        out.drift.append(f"{where}: the model's map, the schema's {described}")
    elif isinstance(extra, dict):
        _walk(values, extra, f"{where}{{}}", resolve, out)
    elif node.get("properties") and extra is not True:
        listed = sorted(node["properties"])
        out.drift.append(f"{where}: the model accepts any key, the schema only {listed}")
    elif not (extra is True or node.get("x-kubernetes-preserve-unknown-fields")):
        out.undescribed.append(f"{where}: the schema does not describe the map's values")


def _fields(
    fields: dict[str, Any],
    keeps_unknown: bool,
    node: dict[str, Any],
    where: str,
    resolve: Resolve,
    out: Comparison,
) -> None:
    """The fields of a model (``keeps_unknown``: one that passes other fields through
    unread, as the model's ObjectMeta does) against an object node's ``properties``."""
    properties = node.get("properties")
    if not isinstance(properties, dict):
        reason = (
            "keeps unknown fields"
            if node.get("x-kubernetes-preserve-unknown-fields")
            else "lists no fields"
        )
        named = ", ".join(fields)
        out.undescribed.append(f"{where or '(root)'}: the schema {reason} (the model's {named})")
        return
    for alias, annotation in fields.items():
        path = f"{where}.{alias}" if where else alias
        if all(member is type(None) for member in _members(annotation)):
            if alias in properties:  # a field the model refuses whenever it is written
                out.unknown_to_model.append(f"{path}: the model refuses any value")
            continue
        if alias not in properties:
            out.drift.append(f"{path}: the schema has no such field")
            continue
        out.compared.append(path)
        _walk(annotation, properties[alias], path, resolve, out)
    for alias in properties:
        if alias not in fields:
            path = f"{where}.{alias}" if where else alias
            (out.passed_through if keeps_unknown else out.unknown_to_model).append(path)
