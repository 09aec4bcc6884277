"""An upper bound on a message's token count, worked out from its size without a tokenizer.

Why (issue 15): a run counts every message it sends so the budget meter can cap the
next completion. Far from the budget that count decides nothing: the completion gets
its full ``MAX_COMPLETION_TOKENS`` whatever the exact figure, and the tokenizer was
a tenth of a 3-step evaluation's CPU. The engine asks for this ceiling first and
counts exactly only when the ceiling is close enough to the budget to matter
(``BudgetMeter.ceiling_suffices``), so every cap it sets is the one the exact count
would have set.

Why it bounds litellm's count (``token_counter``): litellm adds a few tokens per
message and counts each text in it (content, name, a tool call's arguments). Every
tokenizer litellm uses is byte-level (tiktoken's BPE; the Hugging Face ones fall back
to bytes), so a text never counts more tokens than its UTF-8 bytes, plus the few
markers a Hugging Face tokenizer adds per call. For text longer than
``TOKEN_COUNTER_MAX_EXACT_CHARS`` litellm extrapolates from samples by characters,
which the samples' bytes per character bound: one for ASCII, at most four otherwise.
Here every string in the message counts (keys too), ASCII by its length, anything
else at four per character, plus ``PIECE_MARKERS`` each, plus ``MESSAGE_OVERHEAD``.

Trust, but verify: the first ``VERIFIED_MESSAGES`` messages of each model in a process
are counted both ways; a model whose exact count ever exceeds its ceiling is never
given one again in this process (logged once), and its runs count exactly, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog

MESSAGE_OVERHEAD = 8
"""litellm adds 3 per message and 1 per ``name``; the rest is room for its next release."""

PIECE_MARKERS = 4
"""Per string: a Hugging Face tokenizer's begin/end markers, and rounding of an extrapolation."""

NON_ASCII_TOKENS_PER_CHAR = 4
"""A character is at most four UTF-8 bytes, and a byte-level tokenizer gives at most one
token per byte."""

VERIFIED_MESSAGES = 64
"""Messages per model and process counted both ways before the ceiling is trusted alone."""

log = structlog.get_logger("assay.llm")


def message_ceiling(message: dict[str, Any]) -> int:
    """At least litellm's token count of ``message`` alone (see the module's docstring)."""
    total = MESSAGE_OVERHEAD
    pending: list[Any] = [message]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            size = len(value) if value.isascii() else NON_ASCII_TOKENS_PER_CHAR * len(value)
            total += size + PIECE_MARKERS
        elif isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list | tuple):
            pending.extend(value)
        elif value is not None:  # a number or a flag, counted as its text
            pending.append(str(value))
    return total


class CeilingCheck:
    """Which models' ceilings held against their exact counts; thread-safe, one per process."""

    def __init__(self, verified_messages: int = VERIFIED_MESSAGES) -> None:
        self._verified_messages = verified_messages
        self._checked: dict[str, int] = {}
        self._broken: set[str] = set()
        self._lock = threading.Lock()

    def ceiling(
        self, model: str, message: dict[str, Any], exact: Callable[[dict[str, Any]], int]
    ) -> int | None:
        """``message``'s ceiling, or None when ``model`` broke it once (count exactly).

        While the model is still being checked, ``exact`` counts the message too.
        """
        if model in self._broken:
            return None
        ceiling = message_ceiling(message)
        if self._checked.get(model, 0) >= self._verified_messages:
            return ceiling
        counted = exact(message)
        with self._lock:
            if counted > ceiling:
                if model not in self._broken:
                    self._broken.add(model)
                    log.warning(
                        "token_ceiling_broken",
                        model=model,
                        exact=counted,
                        ceiling=ceiling,
                        consequence="this model's prompts are counted exactly from now on",
                    )
                return None
            self._checked[model] = self._checked.get(model, 0) + 1
        return ceiling


CHECK = CeilingCheck()
"""The process's record (the tokenizer of a model does not change while it runs)."""
