"""The strict profile's confirmation of a ``true``: one more model call, in a fresh context.

Asking the planner "are you sure?" in its own conversation asks a model that
has read every planted instruction the cluster held, so it confirms whatever
those told it to. The confirmation therefore starts from nothing: its
conversation holds the confirm system prompt (prompts/confirm.txt), the
predicate, and the cited evidence with its provenance (step, tool, arguments),
fenced as data. It does not hold the planner's explanation (model output) or any
free text: each citation is shown through the structured view of its lookup
(workers/engine/evidence.py), the cited lines marked, a few lines around them; a
citation that rests on free text is named but not shown.

Only an explicit ``true`` from the confirmer confirms. ``false``,
``cannot_determine``, ``poorly_posed``, another action, a malformed reply or a
failed call all leave the run without a ``true``; the engine ends it as
``cannot_determine`` (a ``false`` there comes from a model that saw part of the
evidence and made no lookup, so it does not earn a ``false`` either).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import prompts
from schemas.actions import Done
from schemas.request import EvaluationRequest
from schemas.verdict import Evidence, VerdictKind
from workers.engine.conversation import ParsedReply, action_tool_schemas
from workers.engine.evidence import context, normalise
from workers.engine.fencing import EVIDENCE, fenced, neutralise
from workers.engine.llm import Transport
from workers.engine.toolsets.structured import withhold_free_text


def confirmation_messages(
    request: EvaluationRequest,
    evidence: Sequence[Evidence],
    views: Mapping[int, str],
    fence_token: str,
) -> list[dict[str, Any]]:
    """The whole conversation of the confirmation call: system prompt and one user message."""
    blocks = [_citation(n, item, views, fence_token) for n, item in enumerate(evidence, 1)]
    now = datetime.now(UTC).isoformat(timespec="seconds")
    user = (
        f"Predicate: {request.text}\nCluster: {request.target.name}\nCurrent time (UTC): {now}\n\n"
        f"The planner cited {len(evidence)} lookup output(s). The evidence, as data:\n"
        + fenced("\n\n".join(blocks), fence_token, EVIDENCE)
    )
    return [
        {"role": "system", "content": prompts.load("confirm")},
        {"role": "user", "content": user},
    ]


def _citation(number: int, item: Evidence, views: Mapping[int, str], fence_token: str) -> str:
    arguments = json.dumps(
        withhold_free_text(item.arguments), sort_keys=True, separators=(",", ":")
    )
    outcome = "succeeded" if item.ok else "failed"
    head = f"Citation {number}: step {item.step}, lookup {item.tool} {arguments}, {outcome}"
    lines = context(views.get(item.step, ""), item.excerpt) if item.structured else ""
    if not lines:
        return neutralise(
            f"{head}\n(free text or unstructured output: not shown; a true cannot rest on it)",
            fence_token,
        )
    return neutralise(f"{head}\nCited: {normalise(item.excerpt)}\n{lines}", fence_token)


def confirmation_tools(transport: Transport) -> list[dict[str, Any]] | None:
    """Only ``done`` is offered (tool calling); JSON mode asks for the planner response schema."""
    if transport != "tools":
        return None
    return [spec for spec in action_tool_schemas() if spec["function"]["name"] == "done"]


def confirmation_outcome(parsed: ParsedReply) -> tuple[bool, str]:
    """Whether the confirmer explicitly answered ``true``, and what it answered, for the record."""
    action = parsed.action
    if action is None:
        return False, f"the confirmation reply could not be read: {parsed.error}"
    if not isinstance(action, Done):
        return False, f"the confirmation replied with a {action.action} instead of a verdict"
    if action.verdict != VerdictKind.TRUE:
        return False, f"the confirmation answered {action.verdict.value}: {action.explanation}"
    return True, "confirmed"
