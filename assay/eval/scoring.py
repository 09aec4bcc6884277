"""The figures of one arm, computed from its attempts and nothing else.

Definitions (also in docs/eval.md; every rate is ``None`` when nothing it
divides by was seen, never 0):

- accuracy: attempts whose verdict equals the label / all attempts.
- false-true rate (the headline): attempts answered ``true`` whose label is
  not ``true`` / attempts whose label is not ``true``. This is how often a
  gate on exit code 0 would have passed when it should not have.
- false-false rate: attempts answered ``false`` whose label is not
  ``false`` / attempts whose label is not ``false``.
- cannot_determine rate: attempts answered ``cannot_determine`` / all.
- stability: cases whose repeats all gave the same verdict / cases answered
  more than once.
- tokens and cost per case: mean over attempts; cost only when known.
- probe compile rate: ``true``/``false`` attempts whose verdict carried an
  accepted probe / ``true``/``false`` attempts that carried probe information.
"""

from __future__ import annotations

from collections import defaultdict

from schemas.eval import ArmMetrics, Attempt, CategoryMetrics
from schemas.verdict import VerdictKind

VERDICTS = [v.value for v in VerdictKind]


def rate(hits: int, total: int) -> float | None:
    return hits / total if total else None


def arm_metrics(attempts: list[Attempt]) -> ArmMetrics:
    not_true = [a for a in attempts if a.label != VerdictKind.TRUE]
    not_false = [a for a in attempts if a.label != VerdictKind.FALSE]
    by_case: dict[str, list[VerdictKind]] = defaultdict(list)
    for a in attempts:
        by_case[a.case_id].append(a.verdict)
    repeated = [verdicts for verdicts in by_case.values() if len(verdicts) > 1]
    costs = [a.usage.cost_usd for a in attempts if a.usage.cost_usd is not None]
    decisive = [
        a
        for a in attempts
        if a.verdict in (VerdictKind.TRUE, VerdictKind.FALSE) and a.probe_accepted is not None
    ]
    return ArmMetrics(
        cases=len(by_case),
        attempts=len(attempts),
        accuracy=rate(sum(a.correct for a in attempts), len(attempts)),
        false_true_rate=rate(sum(a.verdict == VerdictKind.TRUE for a in not_true), len(not_true)),
        false_false_rate=rate(
            sum(a.verdict == VerdictKind.FALSE for a in not_false), len(not_false)
        ),
        cannot_determine_rate=rate(
            sum(a.verdict == VerdictKind.CANNOT_DETERMINE for a in attempts), len(attempts)
        ),
        stability=rate(sum(len(set(v)) == 1 for v in repeated), len(repeated)),
        tokens_per_case=(
            sum(a.usage.total_tokens for a in attempts) / len(attempts) if attempts else None
        ),
        cost_per_case_usd=sum(costs) / len(attempts) if costs else None,
        probe_compile_rate=rate(sum(bool(a.probe_accepted) for a in decisive), len(decisive)),
        confusion=_confusion(attempts),
        by_category=_by_category(attempts),
    )


def _confusion(attempts: list[Attempt]) -> dict[str, dict[str, int]]:
    table = {label: dict.fromkeys(VERDICTS, 0) for label in VERDICTS}
    for a in attempts:
        table[a.label.value][a.verdict.value] += 1
    return table


def _by_category(attempts: list[Attempt]) -> dict[str, CategoryMetrics]:
    groups: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        groups[a.category].append(a)
    result = {}
    for category, group in sorted(groups.items()):
        not_true = [a for a in group if a.label != VerdictKind.TRUE]
        result[category] = CategoryMetrics(
            attempts=len(group),
            accuracy=rate(sum(a.correct for a in group), len(group)),
            false_true_rate=rate(
                sum(a.verdict == VerdictKind.TRUE for a in not_true), len(not_true)
            ),
        )
    return result
