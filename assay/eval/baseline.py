"""The no-tools baseline: the same model, asked once, with no lookups.

It answers the question "how much do the lookups buy?": a model that scores
as well without tools is guessing from the wording, and its `true`s are
worth nothing. The prompt lives in ``prompts/eval_baseline.txt``; the reply
must be one JSON object with a verdict, and anything else counts as
``cannot_determine`` (with the reason recorded), never as an answer.
"""

from __future__ import annotations

import json
from typing import Any

import prompts
from schemas.verdict import VerdictKind

BASELINE_MARKER = "Answer without lookups."
MAX_BASELINE_TOKENS = 400


def baseline_messages(predicate: str, cluster: str) -> list[dict[str, Any]]:
    """The one request of the baseline; its user message starts with BASELINE_MARKER."""
    user = f"{BASELINE_MARKER}\nPredicate: {predicate}\nCluster: {cluster}\n"
    return [
        {"role": "system", "content": prompts.load("eval_baseline")},
        {"role": "user", "content": user},
    ]


def parse_baseline(text: str | None) -> tuple[VerdictKind, str | None]:
    """The verdict in a baseline reply, or cannot_determine and why the reply was not used."""
    if not text or not text.strip():
        return VerdictKind.CANNOT_DETERMINE, "the model's reply was empty"
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        data = json.loads(body)
    except ValueError:
        return VerdictKind.CANNOT_DETERMINE, f"the reply is not a JSON object: {text[:120]!r}"
    verdict = data.get("verdict") if isinstance(data, dict) else None
    if isinstance(verdict, bool):  # {"verdict": true} is a common slip; it still means "true"
        verdict = "true" if verdict else "false"
    try:
        return VerdictKind(str(verdict).strip().lower()), None
    except ValueError:
        return VerdictKind.CANNOT_DETERMINE, f"the reply names no valid verdict: {text[:120]!r}"
