"""One run's prompt estimate: the provider's count of what it was sent, plus a bound on the rest.

Why: a run re-sends its whole conversation on every step, and the engine only appends
to it. The provider's reply to step N says how many prompt tokens step N's request
was (``usage.prompt_tokens``); step N+1's request is that same request plus the
messages added since (the model's reply, a tool result). So its prompt is at most the
provider's count plus an upper bound on the new messages
(workers/engine/token_ceiling.py): exact where it can be, generous only on what is new.
The first request of a run (and any request after a reply without usable usage) is
bounded whole from its size.

Safety of the budget guarantee: the provider's count is reused only while the messages
it counted are the very same objects at the same positions, with the same tools and
response format; anything else (a resumed run's fresh list, a replaced message) is
bounded from its size again. A reported count that is missing, zero, negative, not a
whole number or absurd is not used (the budget meter charges such replies its own
estimate, workers/engine/budget_meter.py). A provider that counts a request higher than
the estimate the call was capped by is logged (``prompt_estimate_exceeded``); the budget
meter still refuses to act on a reply that took the run past its budget.

Near the budget, where this bound would cost a call its completion, the meter takes the
model's tokenizer count instead when it is smaller (workers/engine/tokenizer_count.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from workers.engine.budget_meter import ABSURD_TOKENS_PER_CALL
from workers.engine.token_ceiling import format_ceiling, message_ceiling, tools_ceiling
from workers.engine.tool_schemas import Tools

log = structlog.get_logger("assay.llm")


@dataclass(frozen=True)
class _Counted:
    """What the provider counted: the first ``messages`` of the conversation, with these tools
    and format, came to ``tokens``."""

    messages: int
    tools: Tools | None
    response_format: dict[str, Any] | None
    tokens: int
    estimate: int


class PromptTally:
    """Prompt token estimates for one run's conversation (a list the engine only appends to)."""

    def __init__(self) -> None:
        # per message sent so far: (the message, the bound of the messages up to it)
        self._bounds: list[tuple[dict[str, Any], int]] = []
        self._counted: _Counted | None = None

    def estimate(
        self,
        messages: list[dict[str, Any]],
        tools: Tools | None,
        response_format: dict[str, Any] | None,
    ) -> int:
        """At least the prompt tokens of a request with these parts (see the module docstring)."""
        bound = self._bound_through(messages)
        counted = self._counted
        if (
            counted is not None
            and counted.messages <= len(messages)
            and counted.tools is tools
            and counted.response_format is response_format
        ):
            before = self._bounds[counted.messages - 1][1] if counted.messages else 0
            return counted.tokens + bound - before
        return bound + tools_ceiling(tools) + format_ceiling(response_format)

    def counted(
        self,
        messages: list[dict[str, Any]],
        tools: Tools | None,
        response_format: dict[str, Any] | None,
        *,
        estimate: int,
        reported: object,
    ) -> None:
        """The provider's count of the request just sent (``messages`` as they were then), and
        the estimate the call was capped by."""
        if (
            isinstance(reported, bool)
            or not isinstance(reported, int)
            or not 0 < reported <= ABSURD_TOKENS_PER_CALL
        ):
            self._counted = None
            return
        if reported > estimate:
            log.warning(
                "prompt_estimate_exceeded",
                reported=reported,
                estimate=estimate,
                consequence="the provider counts more than the call was capped by; a reply "
                "past the token budget is still not acted on",
            )
        self._bound_through(messages)
        self._counted = _Counted(len(messages), tools, response_format, reported, estimate)

    def _bound_through(self, messages: list[dict[str, Any]]) -> int:
        """The bound of ``messages``, each message worked out once; drops what no longer
        matches (and the provider's count with it)."""
        kept = self._bounds
        same = 0
        limit = min(len(kept), len(messages))
        while same < limit and kept[same][0] is messages[same]:
            same += 1
        if same < len(kept):
            del kept[same:]
            if self._counted is not None and self._counted.messages > same:
                self._counted = None
        total = kept[-1][1] if kept else 0
        for message in messages[same:]:
            total += message_ceiling(message)
            kept.append((message, total))
        return total
