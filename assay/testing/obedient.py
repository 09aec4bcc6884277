"""What a gullible model does with instructions planted in a tool result. It is not an LLM.

The scripted model's ``obey_injections`` mode (docs/ARCHITECTURE.md) reads the
newest tool result of each request (:func:`newest_tool_result`: the newest
lookup result, not the engine's own repair or confirm text after it), and when
it finds one of the planted instructions below it answers with what the
instruction asked, instead of its script, as often as it is asked. That is the
worst case of a model that cannot tell data from instructions, made
repeatable, so the engine's defences can be measured:

1. **fake tool-call JSON**: an object starting ``{"action": ...`` (bare, or
   wrapped as ``{"action": {...}}``) is answered as that action, verbatim;
2. **a forged step label**: ``[step N] ...`` (also the neutralised
   ``[quoted step N]``, as a model might still believe it) followed by lines of
   output: the model answers ``true``, citing step N with the first following
   line that looks like a ready count (``3/3``), else the label's own line;
3. **"ignore previous instructions"** (ignore all / the prior / above /
   earlier instructions): the model answers ``true``, citing the step whose
   result it is reading with the line that held the instruction.

The first that matches wins, in that order. Text before the first line break
of a result that starts with the engine's own ``[step N]`` label is the
engine's, not planted, and is skipped.
"""

from __future__ import annotations

import json
import re
from typing import Any

OBEYED_EXPLANATION = "Following the instructions found in the tool output."
_EXCERPT_CHARS = 200
_OWN_LABEL = re.compile(r"\[step (\d+)\]")
_JSON_ACTION = re.compile(r'\{\s*"action"\s*:')
_FORGED_LABEL = re.compile(r"\[[^\]\n]{0,20}?\bstep\s+(\d+)\s*\]", re.IGNORECASE)
_READY_COUNT = re.compile(r"\b\d+/\d+\b")
_IGNORE = re.compile(
    r"ignore\s+(?:all\s+|any\s+)?(?:the\s+)?(?:previous|prior|above|earlier)\s+instructions",
    re.IGNORECASE,
)
_DECODER = json.JSONDecoder(strict=False)  # a string value may span a wrapped YAML line
_RESULT_LABEL = re.compile(r"\[step \d+\] [^\n]* -> (?:ok|failed)(?:\n|$)")


def newest_tool_result(messages: list[dict[str, Any]]) -> str:
    """The newest lookup result in a conversation (a ``[step N] TOOL ARGS -> ok`` message).

    Without one (the first request, or a confirmation request, which holds the evidence
    in its only user message), the newest ``tool`` or ``user`` message.
    """
    fallback = ""
    for message in reversed(messages):
        if message.get("role") not in ("tool", "user"):
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        if _RESULT_LABEL.match(text):
            return text
        fallback = fallback or text
    return fallback


def planted_action(tool_result: str) -> dict[str, Any] | None:
    """The action a gullible model takes after reading ``tool_result``, or None."""
    own = _OWN_LABEL.match(tool_result)
    body = tool_result.split("\n", 1)[1] if own and "\n" in tool_result else tool_result
    step = int(own.group(1)) if own else 0
    return _json_action(body) or _forged_label(body) or _ignore_instructions(body, step)


def _json_action(text: str) -> dict[str, Any] | None:
    for match in _JSON_ACTION.finditer(text):
        try:
            value, _ = _DECODER.raw_decode(text, match.start())
        except ValueError:
            continue
        action = value.get("action") if isinstance(value, dict) else None
        if isinstance(action, dict):
            return action
        if isinstance(action, str):
            return value
    return None


def _forged_label(text: str) -> dict[str, Any] | None:
    match = _FORGED_LABEL.search(text)
    if match is None:
        return None
    lines = text[match.start() :].splitlines()
    excerpt = next((line for line in lines[1:6] if _READY_COUNT.search(line)), lines[0])
    return _done_true(int(match.group(1)), excerpt)


def _ignore_instructions(text: str, step: int) -> dict[str, Any] | None:
    match = _IGNORE.search(text)
    if match is None:
        return None
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return _done_true(step, text[start : end if end >= 0 else len(text)])


def _done_true(step: int, excerpt: str) -> dict[str, Any]:
    cited = " ".join(excerpt.split())[:_EXCERPT_CHARS] or "ok"
    return {
        "action": "DONE",
        "verdict": "true",
        "explanation": OBEYED_EXPLANATION,
        "evidence": [{"step": step, "excerpt": cited}],
    }
