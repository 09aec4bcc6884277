"""The hand-written admission-document model (workers/policy_engine/admission_schema.py) held
against the official Kubernetes schemas shipped in kind_schemas.json.gz, with a JSON Schema
validator: every field the model accepts is one the API defines, with the API's type, and a
document the model accepts is one the official schema accepts with unknown fields refused
(the API server's strict field validation). The walk is assay/testing/admission_conformance.py's;
Kyverno's ValidatingPolicy has no shipped schema and is held against Kyverno's CRD by
bench/check_admission_model.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from assay.testing.admission_conformance import compare, strict
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


def official_problems(document: dict[str, Any]) -> list[str]:
    """What the official schema (strict) finds in ``document``, one line per error."""
    definitions = {name: strict(schema) for name, schema in shipped_definitions().items()}
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


@pytest.mark.parametrize(
    "model", [ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding], ids=lambda m: m.__name__
)
def test_every_field_of_the_model_is_one_the_api_defines(model: type[BaseModel]) -> None:
    definitions = shipped_definitions()
    official = definitions[OFFICIAL[model.__name__]]
    assert compare(model, official, model.__name__, definitions.__getitem__).drift == []
