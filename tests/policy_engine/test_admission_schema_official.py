"""The hand-written admission-document model (workers/policy_engine/admission_schema.py) held
against the official Kubernetes schemas shipped in kind_schemas.json.gz, with a JSON Schema
validator: every field the model accepts is one the API defines, with the API's type, and a
document the model accepts is one the official schema accepts with unknown fields refused
(the API server's strict field validation). Kyverno's ValidatingPolicy has no shipped
schema and is not held here."""

from __future__ import annotations

import copy
import types
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from workers.policy_engine.admission_schema import (
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
    problems,
)
from workers.policy_engine.probes.kind_schemas import shipped_definitions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GROUP = "io.k8s.api.admissionregistration.v1."
OFFICIAL = {
    "ValidatingAdmissionPolicy": GROUP + "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding": GROUP + "ValidatingAdmissionPolicyBinding",
}
_JSON_TYPES = {str: "string", int: "integer", bool: "boolean", float: "number"}


def _strict(node: Any) -> Any:
    """The schema with unknown fields refused wherever it lists an object's fields."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def official_problems(document: dict[str, Any]) -> list[str]:
    """What the official schema (strict) finds in ``document``, one line per error."""
    definitions = {name: _strict(schema) for name, schema in shipped_definitions().items()}
    registry: Registry[Any] = Registry().with_resources(
        (name, Resource.from_contents(schema, default_specification=DRAFT202012))
        for name, schema in definitions.items()
    )
    validator = jsonschema.Draft202012Validator(
        {"$ref": OFFICIAL[document["kind"]]}, registry=registry
    )
    return [
        f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def _documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(FIXTURES.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") in OFFICIAL:
                found.append((f"{path.relative_to(FIXTURES)}:{document['kind']}", document))
    return found


DOCUMENTS = _documents()


def test_there_are_documents_to_hold() -> None:
    assert len(DOCUMENTS) >= 8


@pytest.mark.parametrize(("where", "document"), DOCUMENTS, ids=[w for w, _ in DOCUMENTS])
def test_what_the_model_accepts_the_official_schema_accepts(
    where: str, document: dict[str, Any]
) -> None:
    assert problems(document) == [], where
    assert official_problems(document) == [], where


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "surprise"), 1),  # a field the API does not define
        (("spec", "validations"), "object.spec.replicas > 1"),  # a list written as a string
        (("spec", "validations", 0, "expression"), 3),
        (("spec", "matchConstraints", "resourceRules", 0, "operations"), "CREATE"),
    ],
)
def test_what_the_official_schema_refuses_the_model_refuses(
    path: tuple[Any, ...], value: Any
) -> None:
    document = copy.deepcopy(
        next(d for _, d in DOCUMENTS if d["kind"] == "ValidatingAdmissionPolicy")
    )
    document["spec"].setdefault("matchConstraints", {"resourceRules": [{}]})
    document["spec"]["matchConstraints"].setdefault("resourceRules", [{}])
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert official_problems(document) != []
    assert problems(document) != []


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (itself, in a list or a dict, or optional)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        if (model := _model_of(argument)) is not None:
            return model
    return None


def _official_type(schema: dict[str, Any]) -> set[str]:
    kinds = schema.get("type", [])
    return {kinds} if isinstance(kinds, str) else set(kinds)


def _field_drift(model: type[BaseModel], name: str, where: str) -> list[str]:
    """Fields of ``model`` the official definition ``name`` lacks, or types it disagrees on."""
    official = shipped_definitions()[name]
    drift = []
    for field_name, field in model.model_fields.items():
        alias = field.alias or field_name
        if alias not in official.get("properties", {}):
            drift.append(f"{where}.{alias}")
            continue
        schema = official["properties"][alias]
        inner = _model_of(field.annotation)
        ref = schema.get("$ref") or schema.get("items", {}).get("$ref")
        if inner is not None and ref:
            drift.extend(_field_drift(inner, ref, f"{where}.{alias}"))
            continue
        plain = {_JSON_TYPES[a] for a in typing.get_args(field.annotation) if a in _JSON_TYPES} | (
            {_JSON_TYPES[field.annotation]} if field.annotation in _JSON_TYPES else set()
        )
        origin = typing.get_origin(field.annotation)
        if origin in (list, dict) or origin in (types.UnionType, typing.Union):
            continue  # containers and optionals: their items are checked above when models
        if plain and not plain & _official_type(schema):
            drift.append(f"{where}.{alias}: {sorted(plain)} not {sorted(_official_type(schema))}")
    return drift


@pytest.mark.parametrize(
    "model", [ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding], ids=lambda m: m.__name__
)
def test_every_field_of_the_model_is_one_the_api_defines(model: type[BaseModel]) -> None:
    assert _field_drift(model, OFFICIAL[model.__name__], model.__name__) == []
