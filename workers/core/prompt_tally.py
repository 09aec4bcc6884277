"""One run's prompt token count, kept up to date as the conversation grows.

Why per run: a run re-sends its whole history on every step. A process-wide
cache of per-message counts (what there was before) is shared by every run in
the worker; with 200 runs of 12-25 steps in flight it thrashes, and each step
recounts the whole conversation. The engine only appends to a run's messages,
so the run itself can remember what each message it already sent costs and
count only the new ones.

Safety of the budget guarantee: a message is reused only if it is the very
same object at the same position as when it was counted; anything else
(a resumed run's fresh list, a replaced message) is counted again from that
position. Counting message by message adds the tokenizer's per-request priming
once per message, so the total errs high, like the whole-list count it replaces.
"""

from __future__ import annotations

from typing import Any, Protocol

from workers.core.tool_schemas import Tools


class _Counter(Protocol):
    def count_tokens(
        self, model: str, messages: list[dict[str, Any]], tools: Tools | None
    ) -> int: ...


class PromptTally:
    """Prompt tokens of one run's requests; each message and the tool list counted once."""

    def __init__(self, counter: _Counter, model: str) -> None:
        self._counter = counter
        self._model = model
        self._counted: list[tuple[dict[str, Any], int]] = []
        self._messages_total = 0
        self._tools: Tools | None = None
        self._tools_tokens = 0
        self.messages_counted = 0  # how many single-message counts were made (for tests/bench)

    def count(self, messages: list[dict[str, Any]], tools: Tools | None) -> int:
        """The prompt tokens of ``messages`` plus ``tools``, counting only what is new."""
        return self._count_messages(messages) + self._count_tools(tools)

    def _count_messages(self, messages: list[dict[str, Any]]) -> int:
        same = 0
        limit = min(len(self._counted), len(messages))
        while same < limit and self._counted[same][0] is messages[same]:
            same += 1
        if same < len(self._counted):  # something was replaced or dropped: recount from there
            del self._counted[same:]
            self._messages_total = sum(tokens for _, tokens in self._counted)
        for message in messages[same:]:
            tokens = self._counter.count_tokens(self._model, [message], None)
            self.messages_counted += 1
            self._counted.append((message, tokens))
            self._messages_total += tokens
        return self._messages_total

    def _count_tools(self, tools: Tools | None) -> int:
        if not tools:
            return 0
        if tools is not self._tools:
            self._tools_tokens = self._counter.count_tokens(self._model, [], tools)
            self._tools = tools
        return self._tools_tokens
