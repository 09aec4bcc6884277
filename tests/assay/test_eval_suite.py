"""The shipped eval suite is sound, and a user's suite is loaded strictly.

Sound means: every snapshot loads without problems, every true/false label
cites lookups that succeed and contain their excerpt (through the real
tools), the variant folders are exactly what their spec generates, ids and
questions are unique, and every category and label is represented.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from assay.eval.suite import DEFAULT_SUITE, Suite, SuiteError, check_suite, load_suite
from assay.eval.variants import drift, render_all
from schemas.settings import load_settings
from schemas.verdict import VerdictKind

ROOT = Path(__file__).resolve().parents[2]
VARIANT_SPEC = ROOT / "examples" / "eval" / "variants.yaml"
SHOP = ROOT / "examples" / "eval" / "snapshots" / "shop-00"
REQUIRED_CATEGORIES = {
    "security-context",
    "resources",
    "images",
    "replicas-rollouts",
    "probes",
    "network-policies",
    "rbac",
    "certificates",
    "events-logs",
    "crds",
    "multi-namespace-traps",
    "time-bound",
    "injection",
}
MINIMUM_PER_LABEL = {"true": 40, "false": 40, "poorly_posed": 10, "cannot_determine": 15}


@pytest.fixture(scope="module")
def suite() -> Suite:
    return load_suite(DEFAULT_SUITE)


def test_the_shipped_suite_has_at_least_150_cases_with_unique_ids(suite: Suite) -> None:
    ids = [c.id for c in suite.cases]
    assert len(ids) >= 150
    assert len(set(ids)) == len(ids)


def test_every_label_meets_its_minimum_count(suite: Suite) -> None:
    labels = suite.info().labels
    for label, minimum in MINIMUM_PER_LABEL.items():
        assert labels.get(label, 0) >= minimum, (label, labels)


def test_every_category_of_the_issue_is_covered(suite: Suite) -> None:
    categories = suite.info().categories
    missing = REQUIRED_CATEGORIES - set(categories)
    assert not missing
    thin = {name: n for name, n in categories.items() if name in REQUIRED_CATEGORIES and n < 10}
    assert not thin, f"categories with fewer than 10 cases: {thin}"


def test_every_snapshot_loads_and_every_evidence_lookup_shows_its_excerpt(suite: Suite) -> None:
    assert check_suite(suite, load_settings(model="unused")) == []


def test_the_variant_folders_are_exactly_what_the_spec_generates() -> None:
    assert drift(render_all(VARIANT_SPEC)) == []


def test_snapshot_names_do_not_hint_at_the_answer(suite: Suite) -> None:
    """The model sees the folder name as the cluster name; it must not say what is wrong."""
    names = {c.snapshot.name for c in suite.cases}
    neutral = re.compile(r"^(shop-\d{2}|prod-eu|staging-us|dev-ap)$")
    assert all(neutral.match(name) for name in names), sorted(names)


def test_every_variant_is_used_by_cases_with_more_than_one_label(suite: Suite) -> None:
    """A variant is there to flip some facts and keep others; its cases show both sides."""
    spec = yaml.safe_load(VARIANT_SPEC.read_text())
    for variant in spec["variants"]:
        labels = {c.case.label for c in suite.cases if c.snapshot.name == variant["name"]}
        decisive = labels & {VerdictKind.TRUE, VerdictKind.FALSE}
        assert decisive, f"{variant['name']} has no true/false case"
        if variant["name"] != "shop-14":  # shop-14 only plants text: its facts all stay true
            assert len(labels) > 1, f"{variant['name']} only has {labels}"


# ----------------------------------------------------------------------------- user suites


def write_suite(folder: Path, cases: list[dict[str, object]], name: str = "cases.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump({"cases": cases}))
    return path


def case(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "id": "c1",
        "category": "mine",
        "snapshot": str(SHOP),
        "predicate": "namespace shop exists",
        "label": True,
        "why": "it is listed",
        "evidence": [{"tool": "get", "arguments": {"kind": "Namespace"}, "excerpt": "shop"}],
    }
    base.update(fields)
    return base


def test_a_yaml_boolean_label_means_the_verdict_true(tmp_path: Path) -> None:
    loaded = load_suite(write_suite(tmp_path, [case(label=True)]))
    assert loaded.cases[0].case.label == VerdictKind.TRUE


def test_a_missing_snapshot_folder_is_named_with_its_case(tmp_path: Path) -> None:
    path = write_suite(tmp_path, [case(snapshot="no-such-folder")])
    with pytest.raises(SuiteError, match=r"case c1 .*no-such-folder does not exist"):
        load_suite(path)


def test_duplicate_ids_across_files_are_refused(tmp_path: Path) -> None:
    write_suite(tmp_path, [case()], "a.yaml")
    write_suite(tmp_path, [case(predicate="namespace batch exists")], "b.yaml")
    with pytest.raises(SuiteError, match="case id c1 appears twice"):
        load_suite(tmp_path)


def test_the_same_question_twice_is_refused(tmp_path: Path) -> None:
    path = write_suite(tmp_path, [case(), case(id="c2", predicate="Namespace  SHOP exists")])
    with pytest.raises(SuiteError, match="cases c1 and c2 ask the same predicate"):
        load_suite(path)


def test_a_true_label_without_evidence_is_refused(tmp_path: Path) -> None:
    path = write_suite(tmp_path, [case(evidence=[])])
    with pytest.raises(SuiteError, match="needs at least one evidence lookup"):
        load_suite(path)


def test_an_unknown_field_is_refused_with_its_location(tmp_path: Path) -> None:
    path = write_suite(tmp_path, [case(expected="true")])
    with pytest.raises(SuiteError, match=r"at cases\.0\.expected"):
        load_suite(path)


def test_check_suite_reports_an_excerpt_the_output_lacks(tmp_path: Path) -> None:
    path = write_suite(
        tmp_path,
        [case(evidence=[{"tool": "get", "arguments": {"kind": "Namespace"}, "excerpt": "qa"}])],
    )
    problems = check_suite(load_suite(path), load_settings(model="unused"))
    assert len(problems) == 1
    assert "case c1, evidence 1" in problems[0] and "does not contain 'qa'" in problems[0]


def test_select_takes_id_globs_and_category_names(suite: Suite) -> None:
    assert {c.case.category for c in suite.select(["rbac"]).cases} == {"rbac"}
    assert all(c.id.startswith("inj-") for c in suite.select(["inj-*"]).cases)
    with pytest.raises(SuiteError, match="no case of suite eval matches nothing-here"):
        suite.select(["nothing-here"])
