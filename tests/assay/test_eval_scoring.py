"""The metric definitions of docs/eval.md on hand-built attempts, and the baseline reply parser."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from assay.eval.baseline import parse_baseline
from assay.eval.runner import Caps, Spending, probe_outcome
from assay.eval.scoring import arm_metrics
from schemas.eval import Attempt
from schemas.verdict import Usage, VerdictKind

T, F, P, C = (
    VerdictKind.TRUE,
    VerdictKind.FALSE,
    VerdictKind.POORLY_POSED,
    VerdictKind.CANNOT_DETERMINE,
)


def attempt(case: str, label: VerdictKind, verdict: VerdictKind, **extra: Any) -> Attempt:
    return Attempt(
        case_id=case,
        category=extra.pop("category", "x"),
        label=label,
        arm="engine",
        repeat=extra.pop("repeat", 1),
        verdict=verdict,
        correct=label == verdict,
        **extra,
    )


def test_false_true_rate_counts_trues_among_cases_whose_label_is_not_true() -> None:
    attempts = [
        attempt("a", T, T),  # right; not in the denominator
        attempt("b", F, T),  # the dangerous one
        attempt("c", P, C),
        attempt("d", C, T),  # dangerous too
        attempt("e", F, F),
    ]
    metrics = arm_metrics(attempts)
    assert metrics.false_true_rate == pytest.approx(2 / 4)
    assert metrics.false_false_rate == pytest.approx(0 / 3)  # labels a, c, d are not false
    assert metrics.accuracy == pytest.approx(2 / 5)
    assert metrics.cannot_determine_rate == pytest.approx(1 / 5)
    assert metrics.confusion["false"]["true"] == 1 and metrics.confusion["true"]["true"] == 1
    assert metrics.by_category["x"].false_true_rate == pytest.approx(2 / 4)


def test_a_rate_with_nothing_to_divide_by_is_none_not_zero() -> None:
    metrics = arm_metrics([attempt("a", T, F)])
    assert metrics.false_true_rate is None  # no case was labelled anything but true
    assert metrics.stability is None  # nothing was repeated
    assert metrics.probe_compile_rate is None  # no verdict carried a probe
    assert arm_metrics([]).accuracy is None


def test_stability_is_the_share_of_repeated_cases_whose_answers_all_agree() -> None:
    attempts = [
        attempt("a", T, T, repeat=1),
        attempt("a", T, T, repeat=2),
        attempt("b", F, F, repeat=1),
        attempt("b", F, C, repeat=2),
    ]
    assert arm_metrics(attempts).stability == pytest.approx(1 / 2)


def test_cost_per_case_is_known_only_when_some_attempt_was_priced() -> None:
    unpriced = [attempt("a", T, T, usage=Usage(total_tokens=100))]
    assert arm_metrics(unpriced).cost_per_case_usd is None
    assert arm_metrics(unpriced).tokens_per_case == 100
    priced = [
        attempt("a", T, T, usage=Usage(total_tokens=100, cost_usd=0.02)),
        attempt("b", F, F, usage=Usage(total_tokens=300, cost_usd=0.04)),
    ]
    assert arm_metrics(priced).cost_per_case_usd == pytest.approx(0.03)


def test_probe_compile_rate_counts_only_decisive_verdicts_that_carried_a_probe() -> None:
    attempts = [
        attempt("a", T, T, probe_accepted=True),
        attempt("b", F, F, probe_accepted=False),
        attempt("c", F, F),  # no probe information: not counted
        attempt("d", C, C, probe_accepted=True),  # not a true/false verdict: not counted
    ]
    assert arm_metrics(attempts).probe_compile_rate == pytest.approx(1 / 2)


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (None, None),
        (True, True),
        ({"accepted": False, "expression": "..."}, False),
        ({"status": "agreed"}, True),
        ({"status": "rejected"}, False),
        ("something else", None),
    ],
)
def test_probe_outcome_reads_whatever_shape_a_verdict_gives_it(probe: Any, expected: Any) -> None:
    report = SimpleNamespace(verdict=SimpleNamespace(probe=probe))
    assert probe_outcome(report) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reply", "verdict", "problem"),
    [
        ('{"verdict": "false", "explanation": "x"}', F, False),
        ('```json\n{"verdict": "poorly_posed"}\n```', P, False),
        ('{"verdict": true}', T, False),
        ("true", C, True),  # prose is not the asked-for JSON: never read as an answer
        ('{"verdict": "probably"}', C, True),
        ("", C, True),
        (None, C, True),
    ],
)
def test_the_baseline_reply_must_be_json_naming_a_verdict(
    reply: str | None, verdict: VerdictKind, problem: bool
) -> None:
    parsed, reason = parse_baseline(reply)
    assert parsed == verdict
    assert (reason is not None) == problem


def test_caps_stop_at_the_token_cap_and_ignore_an_unknown_cost() -> None:
    spent = Spending()
    caps = Caps(tokens=1000, cost_usd=0.5)
    spent.add(Usage(total_tokens=999))
    assert caps.reached(spent) is None
    spent.add(Usage(total_tokens=1))
    assert "token cap of 1,000" in (caps.reached(spent) or "")
    unpriced = Spending()
    unpriced.add(Usage(total_tokens=10))  # tokens without a cost: the cost is unknown
    assert not unpriced.cost_known and Caps(cost_usd=0.0).reached(unpriced) is None
    assert unpriced.as_usage().cost_usd is None
