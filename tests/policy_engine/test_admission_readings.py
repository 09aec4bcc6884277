"""One admission-document model (workers/policy_engine/admission_schema.py), read two ways:
an export is held to the API server's rules, an import is read as its engine reads it. Each
test takes one document and shows what each reading does with it."""

from __future__ import annotations

import pytest
import yaml

from schemas.policy import ImportedPolicy
from tests.kyverno_support import policy_text
from workers.policy_engine.admission_schema import problems
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents

KYVERNO_VP = policy_text(
    "red-labels",
    "configmaps",
    "  matchConditions:\n"
    '    - {name: has-labels, expression: "has(object.metadata.labels)"}\n'
    "  validations:\n"
    "    - expression: \"object.metadata.labels.?color.orValue('') == 'red'\"\n"
    "      message: the color label is red\n",
    spec="  validationActions: [Audit]\n",
)


def _import(text: str) -> tuple[list[ImportedPolicy], list[str]]:
    policies, refusals = import_documents(documents_from_text(text, "test.yaml"))
    return policies, [refusal.reason for refusal in refusals]


def test_the_document_as_written_is_valid_in_both_readings() -> None:
    assert problems(yaml.safe_load(KYVERNO_VP)) == []
    policies, refused = _import(KYVERNO_VP)
    assert refused == [] and len(policies) == 1


def test_a_match_condition_name_kyverno_takes_is_imported_though_the_api_server_refuses_it() -> (
    None
):
    """Kyverno's conformance suite names match conditions in prose; Kyverno runs them."""
    text = KYVERNO_VP.replace("name: has-labels", "name: Label should be red")
    assert any("is not a qualified name" in p for p in problems(yaml.safe_load(text)))
    policies, refused = _import(text)
    assert refused == []
    assert policies[0].rules[0].match_conditions[0].name == "Label should be red"


def test_a_rule_without_operations_is_imported_as_every_operation() -> None:
    """The API server requires operations; Kyverno's CRD does not, and an empty list admits
    every request (a stored object is judged as its CREATE)."""
    text = KYVERNO_VP.replace("operations: [CREATE], ", "")
    assert any(
        "operations must hold at least one item" in p for p in problems(yaml.safe_load(text))
    )
    policies, refused = _import(text)
    assert refused == [] and policies[0].rules[0].match[0][0].kinds


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (
            "      message: the color label is red",
            "      message: the color label is red\n      messageExpresion: \"'typo'\"",
            "messageExpresion",
        ),
        (
            "  matchConstraints:\n",
            "  matchConstraints:\n    matchLabelsOnly: true\n",
            "matchLabelsOnly",
        ),
        (
            "    - {name: has-labels,",
            "    - {name: has-labels, scope: Namespaced,",
            "scope",
        ),
    ],
)
def test_a_field_the_model_does_not_know_is_refused_in_both_readings(
    old: str, new: str, field: str
) -> None:
    """Dropped silently, an unknown field could widen or narrow what a policy matches (or
    hide a typo), and a violation could pass: the import refuses it, naming where it is."""
    assert old in KYVERNO_VP
    text = KYVERNO_VP.replace(old, new, 1)
    assert any("Extra inputs are not permitted" in p for p in problems(yaml.safe_load(text)))
    policies, refused = _import(text)
    assert policies == [] and len(refused) == 1
    assert field in refused[0] and "Extra inputs are not permitted" in refused[0]


def test_a_field_of_the_wrong_type_is_refused_with_where_it_is() -> None:
    text = KYVERNO_VP.replace("resources: [configmaps]", "resources: configmaps")
    policies, refused = _import(text)
    assert policies == []
    assert refused == [
        "spec.matchConstraints.resourceRules.0.resources: Input should be a valid list"
    ]


def test_null_is_a_field_not_written_in_both_readings() -> None:
    """The API server decodes ``field: null`` as the field left out (so does kubectl)."""
    text = KYVERNO_VP.replace("spec:\n", "spec:\n  variables: null\n  auditAnnotations: null\n")
    assert problems(yaml.safe_load(text)) == []
    policies, refused = _import(text)
    assert refused == [] and policies[0].rules[0].variables == []


def test_a_refusal_names_a_long_unknown_key_in_a_few_words() -> None:
    text = KYVERNO_VP.replace(
        "  matchConstraints:\n", f"  matchConstraints:\n    {'k' * 1000}: 1\n"
    )
    policies, refused = _import(text)
    assert policies == [] and len(refused) == 1
    assert f"spec.matchConstraints.{'k' * 60}...: Extra inputs" in refused[0]
    assert len(refused[0]) < 200


def test_an_evaluation_mode_kyverno_takes_is_refused_by_the_importer_with_its_name() -> None:
    """Kyverno's CRD takes any mode (Envoy, HTTP): the model reads it, the importer says why
    it judges none of them."""
    text = KYVERNO_VP.replace("spec:\n", "spec:\n  evaluation: {mode: Envoy}\n")
    policies, refused = _import(text)
    assert policies == [] and refused == ["it evaluates Envoy payloads, not Kubernetes objects"]


@pytest.mark.parametrize(
    "field",
    ["evaluation: {admission: {enabled: 'false'}}", "webhookConfiguration: {timeoutSeconds: '5'}"],
)
def test_a_string_where_the_schema_has_a_bool_or_an_integer_is_refused(field: str) -> None:
    """The CRD refuses ``'false'`` for a boolean (no object holding it is ever stored); read
    loosely it would become False and turn the policy's evaluation off."""
    text = KYVERNO_VP.replace("spec:\n", f"spec:\n  {field}\n")
    assert any("Input should be a valid" in p for p in problems(yaml.safe_load(text)))
    policies, refused = _import(text)
    assert policies == [] and len(refused) == 1 and "Input should be a valid" in refused[0]
