"""One run's prompt token count, kept up to date as the conversation grows.

Why per run: a run re-sends its whole history on every step. A process-wide
cache of per-message counts (what there was before) is shared by every run in
the worker; with 200 runs of 12-25 steps in flight it thrashes, and each step
recounts the whole conversation. The engine only appends to a run's messages,
so the run itself can remember what each message it already sent costs and
count only the new ones.

Two figures, each kept that way: :meth:`PromptTally.count`, the tokenizer's, and
:meth:`PromptTally.ceiling`, an upper bound on it from the messages' sizes
(workers/core/token_ceiling.py). Far from its budget a run needs only the second;
the engine asks for the first when the budget meter says the ceiling is too close
to the budget to decide the next call's cap.

Safety of the budget guarantee: a message is reused only if it is the very
same object at the same position as when it was counted; anything else
(a resumed run's fresh list, a replaced message) is counted again from that
position. Counting message by message adds the tokenizer's per-request priming
once per message, so the total errs high, like the whole-list count it replaces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from workers.core.tool_schemas import Tools


class _Counter(Protocol):
    def count_tokens(
        self, model: str, messages: list[dict[str, Any]], tools: Tools | None
    ) -> int: ...

    def token_ceiling(self, model: str, message: dict[str, Any]) -> int | None: ...


class _NoCeiling(Exception):
    """The model has no trusted ceiling: only the exact count will do."""


class _RunningSum:
    """A figure per message summed over a list that only grows, each message's worked out once."""

    def __init__(self, figure: Callable[[dict[str, Any]], int]) -> None:
        self._figure = figure
        self._kept: list[tuple[dict[str, Any], int]] = []
        self._total = 0

    def total(self, messages: list[dict[str, Any]]) -> int:
        same = 0
        limit = min(len(self._kept), len(messages))
        while same < limit and self._kept[same][0] is messages[same]:
            same += 1
        if same < len(self._kept):  # something was replaced or dropped: work out from there
            del self._kept[same:]
            self._total = sum(figure for _, figure in self._kept)
        for message in messages[same:]:
            figure = self._figure(message)
            self._kept.append((message, figure))
            self._total += figure
        return self._total


class PromptTally:
    """Prompt tokens of one run's requests; each message and the tool list counted once."""

    def __init__(self, counter: _Counter, model: str) -> None:
        self._counter = counter
        self._model = model
        self._exact = _RunningSum(self._count_one)
        self._ceilings = _RunningSum(self._ceiling_of_one)
        self._tools: Tools | None = None
        self._tools_tokens = 0

    def count(self, messages: list[dict[str, Any]], tools: Tools | None) -> int:
        """The prompt tokens of ``messages`` plus ``tools``, counting only what is new."""
        return self._exact.total(messages) + self._count_tools(tools)

    def ceiling(self, messages: list[dict[str, Any]], tools: Tools | None) -> int | None:
        """At least :meth:`count`'s figure, mostly without the tokenizer; None when this
        model's counts may not stay under it (count exactly)."""
        try:
            return self._ceilings.total(messages) + self._count_tools(tools)
        except _NoCeiling:
            return None

    def _count_one(self, message: dict[str, Any]) -> int:
        return self._counter.count_tokens(self._model, [message], None)

    def _ceiling_of_one(self, message: dict[str, Any]) -> int:
        ceiling = self._counter.token_ceiling(self._model, message)
        if ceiling is None:
            raise _NoCeiling
        return ceiling

    def _count_tools(self, tools: Tools | None) -> int:
        if not tools:
            return 0
        if tools is not self._tools:
            self._tools_tokens = self._counter.count_tokens(self._model, [], tools)
            self._tools = tools
        return self._tools_tokens
