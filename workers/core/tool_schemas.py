"""A run's tool list that remembers the JSON text it was parsed from.

Why: the tool definitions are about 9 KB of JSON, and encoding them again was
the largest single cost of building a model request on the direct path: three
times per 3-step evaluation, plus once for the token count (issue 15).
``conversation.tools_for`` parses each run's list from one process-wide text,
so that text is exactly ``json.dumps`` of the list as made, and the request
encoder and the token count can use it as it is.

The text stands for the list only while the list is as made. The engine never
changes its run's tool list; litellm (which might) gets the list on its own
path, where the text is not used for the request.
"""

from __future__ import annotations

import json
from typing import Any


class ToolSchemas(list[dict[str, Any]]):
    """A fresh list of tool definitions parsed from ``text``, which it keeps."""

    def __init__(self, text: str) -> None:
        super().__init__(json.loads(text))
        self.json_text = text


def tools_json(tools: list[dict[str, Any]]) -> str:
    """``json.dumps(tools)``, without encoding a :class:`ToolSchemas` list again."""
    return tools.json_text if isinstance(tools, ToolSchemas) else json.dumps(tools)


def encode_body(body: dict[str, Any]) -> bytes:
    """``json.dumps(body).encode()``, byte for byte, reusing the tools' text when it has it."""
    tools = body.get("tools")
    if not isinstance(tools, ToolSchemas):
        return json.dumps(body).encode()
    members = (
        f"{json.dumps(key)}: {tools.json_text if key == 'tools' else json.dumps(value)}"
        for key, value in body.items()
    )
    return ("{" + ", ".join(members) + "}").encode()
