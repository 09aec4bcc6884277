"""An upper bound on a request's prompt tokens, worked out from its size, without a tokenizer.

Why: the budget meter caps each call's completion to what the token budget has left
after the prompt, so it needs the prompt's count before the call. A tokenizer gives
it only for the models it knows (tiktoken's counts are OpenAI's, not a vLLM model's),
and loading one costs a command line seconds (issue 32). The provider's own count
arrives with every reply (``usage.prompt_tokens``); this module bounds what is not
counted yet (workers/engine/prompt_tally.py keeps the two together).

Why it is an upper bound: every tokenizer in use is byte-level (tiktoken's BPE and
the Hugging Face ones, which fall back to bytes), so a text never takes more tokens
than its UTF-8 bytes. Here every string of a message counts (keys too): ASCII by its
length, anything else at four per character, plus :data:`PIECE_MARKERS` each, plus
:data:`MESSAGE_OVERHEAD` per message for the chat template's framing. Real text takes
three to four times fewer tokens than this; the estimate is generous on purpose, and
only what the provider has not counted yet is estimated this way. Where it would cost a
call its completion (near the token budget), the budget meter takes the model's
tokenizer count instead when it is smaller (workers/engine/tokenizer_count.py).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from workers.engine.tool_schemas import Tools, ToolSchemas

MESSAGE_OVERHEAD = 8
"""A chat template's framing of one message (role markers, separators; 3 to 6 tokens)."""

PIECE_MARKERS = 4
"""Per string: a Hugging Face tokenizer's begin/end markers, and the template's punctuation or
indentation around a value it renders (a tool's JSON schema, a call's arguments)."""

NON_ASCII_TOKENS_PER_CHAR = 4
"""A character is at most four UTF-8 bytes, and a byte-level tokenizer gives at most one
token per byte."""


def message_ceiling(message: Any) -> int:
    """At least the tokens any byte-level tokenizer gives ``message`` in a chat request."""
    return MESSAGE_OVERHEAD + _value_ceiling(message)


def _value_ceiling(value: Any) -> int:
    total = 0
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            size = len(item) if item.isascii() else NON_ASCII_TOKENS_PER_CHAR * len(item)
            total += size + PIECE_MARKERS
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
        elif item is not None:  # a number or a flag, counted as its text
            pending.append(str(item))
    return total


def tools_ceiling(tools: Tools | None) -> int:
    """At least the tokens of the tool definitions as a template renders them into the prompt."""
    if not tools:
        return 0
    text = tools.json_text if isinstance(tools, ToolSchemas) else json.dumps(tools)
    return _json_ceiling(text)


def format_ceiling(response_format: dict[str, Any] | None) -> int:
    """At least the tokens of a JSON mode's ``response_format`` (a schema), should the provider
    put it into the prompt."""
    return _json_ceiling(json.dumps(response_format)) if response_format else 0


@lru_cache(maxsize=64)
def _json_ceiling(text: str) -> int:
    """The same few tool lists and schemas in every run: worked out once per process."""
    return MESSAGE_OVERHEAD + _value_ceiling(json.loads(text))


def request_ceiling(
    messages: list[dict[str, Any]],
    tools: Tools | None,
    response_format: dict[str, Any] | None,
) -> int:
    """At least the prompt tokens of a whole request, none of it counted by the provider yet."""
    return (
        sum(message_ceiling(message) for message in messages)
        + tools_ceiling(tools)
        + format_ceiling(response_format)
    )
