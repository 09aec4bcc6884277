"""bench/check_admission_model.py's logic (assay/testing/crd_conformance.py and the walk of
assay/testing/admission_conformance.py) on small CRDs written here: a field the model
accepts that the CRD lacks or types differently is reported, a CRD field the model does not
know is listed apart, a part the CRD leaves undescribed is not counted as agreement, and
documents are sorted by which side accepts them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.testing.admission_conformance import compare
from assay.testing.crd_conformance import Judgement, crd_versions, hold, judge_documents
from bench.check_admission_model import main
from tests.crd_support import custom_resource_definition

STRING = {"type": "string"}


def _objects(*names: str) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "object", "properties": {name: STRING for name in names}},
    }


# a template whose CEL source the CRD describes field by field, as the model reads it
SOURCE = {
    "type": "object",
    "properties": {
        "variables": _objects("name", "expression"),
        "matchConditions": _objects("name", "expression"),
        "validations": _objects("expression", "message", "messageExpression", "reason"),
    },
}


def _template_crd(source: dict[str, Any]) -> dict[str, Any]:
    code = {"type": "object", "properties": {"engine": STRING, "source": source}}
    target = {"type": "object", "properties": {"code": {"type": "array", "items": code}}}
    spec = {"type": "object", "properties": {"targets": {"type": "array", "items": target}}}
    return custom_resource_definition(
        "templates.gatekeeper.sh",
        {"kind": "ConstraintTemplate", "plural": "constrainttemplates"},
        {"type": "object", "properties": {"spec": spec}},
        scope="Cluster",
    )


def _held(tmp_path: Path, source: dict[str, Any]) -> Any:
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(_template_crd(source)), encoding="utf-8")
    [held] = hold(crd_versions(tmp_path))
    assert held.comparison is not None
    return held.comparison


def test_a_crd_that_agrees_with_the_model_reports_every_field_compared_and_no_drift(
    tmp_path: Path,
) -> None:
    comparison = _held(tmp_path, SOURCE)
    assert comparison.drift == []
    assert len(comparison.compared) == 11
    assert "spec.targets[].code[].source.validations[].messageExpression" in comparison.compared


def test_a_field_typed_differently_in_the_crd_is_reported(tmp_path: Path) -> None:
    source = copy.deepcopy(SOURCE)
    source["properties"]["validations"]["items"]["properties"]["message"] = {"type": "integer"}
    assert _held(tmp_path, source).drift == [
        "spec.targets[].code[].source.validations[].message: the model's string, "
        "the schema's integer"
    ]


def test_a_field_the_crd_lacks_is_reported(tmp_path: Path) -> None:
    source = copy.deepcopy(SOURCE)
    del source["properties"]["matchConditions"]["items"]["properties"]["expression"]
    assert _held(tmp_path, source).drift == [
        "spec.targets[].code[].source.matchConditions[].expression: the schema has no such field"
    ]


def test_a_crd_field_the_model_does_not_know_is_listed_but_is_not_drift(tmp_path: Path) -> None:
    source = copy.deepcopy(SOURCE)
    source["properties"]["paramKind"] = {"type": "object"}
    comparison = _held(tmp_path, source)
    assert comparison.drift == []
    assert comparison.unknown_to_model == ["spec.targets[].code[].source.paramKind"]


def test_a_source_the_crd_keeps_unknown_compares_nothing_and_says_so(tmp_path: Path) -> None:
    comparison = _held(tmp_path, {"x-kubernetes-preserve-unknown-fields": True})
    assert comparison.compared == [] and comparison.drift == []
    assert comparison.undescribed == [
        "spec.targets[].code[].source: the schema keeps unknown fields "
        "(the model's variables, matchConditions, validations)"
    ]


@pytest.mark.parametrize(
    ("annotation", "schema", "drift"),
    [
        (  # a map of any key where the CRD lists its fields
            dict[str, int],
            {"type": "object", "properties": {"timeoutSeconds": {"type": "integer"}}},
            "w: the model accepts any key, the schema only ['timeoutSeconds']",
        ),
        (  # any string where the CRD has an enum
            list[str],
            {"type": "array", "items": {"type": "string", "enum": ["Deny", "Audit"]}},
            "w[]: the model accepts any value, the schema only ['Deny', 'Audit']",
        ),
        (
            list[str],
            {"type": "string"},
            "w: the model's list, the schema's string",
        ),
    ],
)
def test_maps_enums_and_lists_the_crd_narrows_are_drift(
    annotation: Any, schema: dict[str, Any], drift: str
) -> None:
    assert compare(annotation, schema, "w").drift == [drift]


def _validating_policy_crd() -> dict[str, Any]:
    spec = {
        "type": "object",
        "properties": {
            "validations": _objects("expression", "message"),
            "evaluation": {"type": "object", "properties": {"mode": STRING}},
            "surprise": STRING,
        },
    }
    properties = {"apiVersion": STRING, "kind": STRING, "metadata": {"type": "object"}}
    return custom_resource_definition(
        "policies.kyverno.io",
        {"kind": "ValidatingPolicy", "plural": "validatingpolicies"},
        {"type": "object", "properties": {**properties, "spec": spec}},
        scope="Cluster",
    )


def _policy(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": "p"},
        "spec": spec,
    }


def test_documents_are_sorted_by_which_side_accepts_them(tmp_path: Path) -> None:
    crds, documents = tmp_path / "crds", tmp_path / "documents"
    crds.mkdir()
    documents.mkdir()
    (crds / "vpol.yaml").write_text(yaml.safe_dump(_validating_policy_crd()), encoding="utf-8")
    written = {
        "both.yaml": _policy({"validations": [{"expression": "true", "message": "m"}]}),
        # the CRD lacks variables (refused as unknown), the model reads them
        "model-only.yaml": _policy({"variables": [{"name": "v", "expression": "1"}]}),
        # a field of the CRD the model does not know (refused at import, fail-safe)
        "crd-only.yaml": _policy({"surprise": "yes"}),
        "neither.yaml": _policy({"validations": [{"expression": 3}]}),
        "asserted.yaml": {**_policy({}), "status": {"ready": True}},
    }
    for name, document in written.items():
        (documents / name).write_text(yaml.safe_dump(document), encoding="utf-8")
    chainsaw = {
        "apiVersion": "chainsaw.kyverno.io/v1alpha1",
        "kind": "Test",
        "metadata": {"name": "t"},
        "spec": {"steps": [{"try": [{"assert": {"file": "asserted.yaml"}}]}]},
    }
    (documents / "chainsaw-test.yaml").write_text(yaml.safe_dump(chainsaw), encoding="utf-8")
    judgement = Judgement()
    judge_documents(documents, crd_versions(crds), judgement)

    def sources(crd: bool, model: bool) -> list[str]:
        return [j.source for j in judgement.count(crd_accepts=crd, model_accepts=model)]

    assert sources(True, True) == ["both.yaml#0"]
    assert sources(False, True) == ["model-only.yaml#0"]
    assert sources(True, False) == ["crd-only.yaml#0"]
    assert sources(False, False) == ["neither.yaml#0"]
    assert judgement.partial == 1


def test_the_check_fails_when_the_model_drifts_from_a_crd_and_passes_when_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = copy.deepcopy(SOURCE)
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(_template_crd(source)), encoding="utf-8")
    assert main(["--crds", str(tmp_path)]) == 0
    source["properties"]["variables"]["items"]["properties"]["name"] = {"type": "boolean"}
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(_template_crd(source)), encoding="utf-8")
    assert main(["--crds", str(tmp_path)]) == 1
    assert "variables[].name: the model's string, the schema's boolean" in capsys.readouterr().out


def test_a_mistyped_path_or_a_tree_without_crds_is_said_not_read_as_agreement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, said in (
        (["--crds", str(tmp_path / "typo")], "is neither a folder nor a bare git directory"),
        (["--crds", str(tmp_path)], "no CustomResourceDefinition in"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2 and said in capsys.readouterr().err
