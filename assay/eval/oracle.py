"""The scripted oracle: a script for the scripted model server, generated from a suite's labels.

It is not a model and proves nothing about one. It exists for the plumbing:
run through the real engine, the real tools and litellm, it must score 100%,
and when it does not, the suite and the engine disagree (a snapshot changed,
an excerpt no longer occurs, the engine's evidence rules moved).

It plays fair with the engine's rules: for a ``true`` or ``false`` label it
first makes the case's evidence lookups, then answers citing each one with
an excerpt that occurs in that lookup's output, exactly as a careful model
must. A ``true`` is answered twice in a row, for profiles that ask a model
to confirm one. The no-tools baseline gets the label directly.
"""

from __future__ import annotations

import json
import re
from typing import Any

from assay.eval.baseline import BASELINE_MARKER
from assay.eval.suite import Suite, SuiteCase
from schemas.verdict import VerdictKind

ORACLE_EXPLANATION = "scripted oracle: the suite's label, with the suite's evidence"


def oracle_script(suite: Suite) -> dict[str, Any]:
    """The scripted-model script answering every case of ``suite`` with its label."""
    baseline = [_baseline_scenario(c) for c in suite.cases]
    engine = [_engine_scenario(c) for c in suite.cases]
    return {"scenarios": baseline + engine}


def _question(case: SuiteCase) -> str:
    """A regex for the case's first user message: its predicate, then its cluster's name."""
    predicate = re.escape(case.case.predicate)
    cluster = re.escape(case.target_name)
    return rf"Predicate: {predicate}\n(?:.*\n)*?Cluster: {cluster}(?:\n|$)"


def _baseline_scenario(case: SuiteCase) -> dict[str, Any]:
    answer = json.dumps({"verdict": case.case.label.value, "explanation": ORACLE_EXPLANATION})
    return {
        "match": "^" + re.escape(BASELINE_MARKER) + r"\n" + _question(case),
        "turns": [{"text": answer}],
    }


def _engine_scenario(case: SuiteCase) -> dict[str, Any]:
    label = case.case.label
    turns: list[dict[str, Any]] = []
    evidence: list[dict[str, Any]] = []
    decisive = label in (VerdictKind.TRUE, VerdictKind.FALSE)
    for step, hint in enumerate(case.case.evidence if decisive else []):
        turns.append(
            {
                "action": {
                    "action": "COMMAND",
                    "tool": hint.tool,
                    "arguments": hint.arguments,
                    "reason": "scripted oracle: the suite's evidence lookup",
                }
            }
        )
        evidence.append({"step": step, "excerpt": hint.excerpt})
    done = {
        "action": {
            "action": "DONE",
            "verdict": label.value,
            "explanation": ORACLE_EXPLANATION,
            "evidence": evidence,
        }
    }
    turns.append(done)
    if label == VerdictKind.TRUE:
        turns.append(done)  # the confirmation turn of profiles that confirm a true
    return {"match": _question(case), "turns": turns}
