"""A request's prompt tokens by the model's tokenizer, through litellm: only near the budget.

Why: before a call the budget meter needs a bound on its prompt. The cheap one
(workers/engine/prompt_tally.py, workers/engine/token_ceiling.py) needs no tokenizer but runs
about four times the real count on what the provider has not counted yet; far from the
budget that decides nothing (the completion gets its full cap either way). Near it, that
bound would cap the completion short or refuse a call the budget has room for, so the
meter asks for this count then, and only then (``BudgetMeter.allow_call``'s ``tighter``).
Importing litellm costs a command line seconds (issue 32), so it is imported here, when a
call needs the count, never for a run far from its budget.

What is counted, erring high: the messages as litellm counts them
(``litellm.token_counter``: the model's own tokenizer where litellm has one, tiktoken's
otherwise), and the tools and a JSON mode's response format as their JSON text (servers such
as vLLM paste the schemas into the prompt; OpenAI's compact rendering costs less). The
meter adds the margin the project has always put on a tokenizer's count (10 % and 16
tokens, ``budget_meter.padded_prompt``), for a provider whose tokenizer counts a little
higher; the meter's ``ensure_within`` still refuses to act on a reply that took a run past
its budget. Any failure (a tokenizer litellm cannot load) gives no count: the cheap bound
stands.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import structlog

from workers.engine.litellm_import import load_litellm
from workers.engine.tool_schemas import Tools, tools_json

log = structlog.get_logger("assay.llm")


def tokenizer_count(
    model: str,
    messages: list[dict[str, Any]],
    tools: Tools | None,
    response_format: dict[str, Any] | None,
) -> int | None:
    """The prompt tokens of a request by ``model``'s tokenizer, or None when it cannot count."""
    try:
        counted = int(load_litellm().token_counter(model=model, messages=messages))
        if tools:
            counted += _text_count(model, tools_json(tools))
        if response_format:
            counted += _text_count(model, json.dumps(response_format))
    except Exception as exc:  # a tokenizer that will not load: the size bound stands
        log.warning(
            "prompt_not_counted",
            model=model,
            error=str(exc)[:300],
            consequence="the call is capped by the prompt's size bound",
        )
        return None
    return counted


@lru_cache(maxsize=64)
def _text_count(model: str, text: str) -> int:
    """The same few tool lists and response formats in every run: counted once per process."""
    return int(load_litellm().token_counter(model=model, text=text))
