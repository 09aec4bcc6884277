"""A run's tool definitions kept as JSON text; the request body built around them.

Why: the tool definitions are about 9 KB of JSON, and encoding them again was
the largest single cost of building a model request on the direct path: three
times per 3-step evaluation, plus once for the token count (issue 15). Parsing
that text into a fresh list for every run (what there was before) still cost
about 40 us per run. ``conversation.tools_for`` therefore hands every run the
same :class:`ToolSchemas`: the text itself, which nothing can change. The
direct path sends it as it is, the token count counts it, and only litellm's
path (which may rewrite what it is given) parses a private list from it, per
call (:func:`tools_list`).

The system prompt is the other large part of every request (about 5 KB, the same
for every run of a kind): its JSON is kept per process too, so a 3-step
evaluation encodes it once per process instead of three times per run.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any


class ToolSchemas:
    """Tool definitions as the JSON text of their list, exactly as ``json.dumps`` wrote it.

    Immutable: a run cannot change what another run is offered. :meth:`fresh` parses
    a private list for code that wants one (litellm's path, tests).
    """

    __slots__ = ("json_text",)

    def __init__(self, text: str) -> None:
        self.json_text = text

    def fresh(self) -> list[dict[str, Any]]:
        """A new list of the definitions, the caller's own to change."""
        parsed: list[dict[str, Any]] = json.loads(self.json_text)
        return parsed

    def __bool__(self) -> bool:
        return self.json_text != "[]"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolSchemas) and other.json_text == self.json_text

    def __hash__(self) -> int:
        return hash(self.json_text)


Tools = list[dict[str, Any]] | ToolSchemas
"""What a model call offers: a list of definitions, or a :class:`ToolSchemas`."""


def tools_json(tools: Tools) -> str:
    """``json.dumps`` of the definitions, without encoding a :class:`ToolSchemas` again."""
    return tools.json_text if isinstance(tools, ToolSchemas) else json.dumps(tools)


def tools_list(tools: Tools) -> list[dict[str, Any]]:
    """The definitions as a list (a fresh one for a :class:`ToolSchemas`)."""
    return tools.fresh() if isinstance(tools, ToolSchemas) else tools


def encode_body(body: dict[str, Any]) -> bytes:
    """``json.dumps(body).encode()``, byte for byte, reusing the JSON of the parts it has already
    encoded: the tools' text, and the system prompt's (see the module's docstring)."""
    members = (f"{json.dumps(key)}: {_member_json(key, value)}" for key, value in body.items())
    return ("{" + ", ".join(members) + "}").encode()


def _member_json(key: str, value: Any) -> str:
    if key == "tools" and isinstance(value, ToolSchemas):
        return value.json_text
    if key == "messages" and isinstance(value, list):
        return "[" + ", ".join(_message_json(message) for message in value) + "]"
    return json.dumps(value)


def _message_json(message: Any) -> str:
    if isinstance(message, dict) and message.get("role") == "system":
        items = tuple(message.items())
        if all(isinstance(value, str) for _, value in items):
            return _string_members_json(items)
    return json.dumps(message)


@lru_cache(maxsize=64)
def _string_members_json(items: tuple[tuple[str, str], ...]) -> str:
    """A message whose values are all text, as ``json.dumps`` writes it (the few system prompts
    a worker sends; ``items`` keeps their order)."""
    return json.dumps(dict(items))
