"""What the planner's first request costs in tokens, and what a small budget leaves its call.

For the README predicate on ``examples/snapshots/prod-eu``, in both transports, prints

* the size of the action tools (think, wait, done, error) as the model is shown them, the
  ``done`` tool alone, and the lookup tools;
* the first request's prompt tokens by a tokenizer (litellm's ``token_counter`` with its
  bundled tiktoken encoding, offline: the messages, and the tools or response format as their
  JSON text) against its size bound (workers/engine/token_ceiling.py), the figure a call is
  capped by when no tokenizer is loaded;
* the first call's ``max_tokens`` under the ``smoke`` budget (20,000 tokens), by the size
  bound alone and as the budget meter sets it (the tokenizer's count, near the budget).

Prints figures; asserts nothing.

    .venv/bin/python bench/bench_planner_prompt.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from schemas.budget import PROFILES  # noqa: E402
from schemas.request import EvaluationRequest, SnapshotTarget  # noqa: E402
from schemas.settings import load_settings  # noqa: E402
from workers.engine.budget_meter import BudgetExhausted, BudgetMeter  # noqa: E402
from workers.engine.conversation import (  # noqa: E402
    action_tool_schemas,
    initial_messages,
    planner_response_format_for,
    tools_for,
)
from workers.engine.litellm_import import load_litellm  # noqa: E402
from workers.engine.token_ceiling import request_ceiling  # noqa: E402
from workers.engine.tokenizer_count import tokenizer_count  # noqa: E402
from workers.engine.toolsets.factory import build_registry  # noqa: E402

PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
SNAPSHOT = ROOT / "examples" / "snapshots" / "prod-eu"
MODEL = "openai/scripted"  # an OpenAI-compatible endpoint's model: litellm's default tokenizer


def tokens(text: str) -> int:
    return int(load_litellm().token_counter(model=MODEL, text=text))


def first_cap(bound: int, counted: int | None, *, exact: bool) -> str:
    meter = BudgetMeter(PROFILES["smoke"].budget)
    try:
        tighter = (lambda: counted) if exact else None
        return str(meter.allow_call(bound, tighter=tighter).max_completion_tokens)
    except BudgetExhausted:
        return "refused"


def main() -> int:
    settings = load_settings(snapshot_roots=[str(ROOT)])
    request = EvaluationRequest(text=PREDICATE, target=SnapshotTarget(path=str(SNAPSHOT)))
    registry = build_registry(request, settings)
    actions = action_tool_schemas()
    [done] = [tool for tool in actions if tool["function"]["name"] == "done"]
    lookups = registry.json_schemas()
    print(f"tokenizer: litellm.token_counter(model={MODEL!r}), offline")
    print(f"{'tools shown':<28}{'bytes':>8}{'tokens':>8}")
    for name, part in (
        ("action tools", actions),
        ("  of which done", done),
        ("lookup tools", lookups),
    ):
        text = json.dumps(part)
        print(f"{name:<28}{len(text):>8}{tokens(text):>8}")
    print()
    print(f"{'first request':<14}{'messages':>10}{'tools/format':>14}{'total':>8}{'size bound':>12}"
          f"{'smoke cap, bound':>18}{'smoke cap, meter':>18}")  # fmt: skip
    for transport in ("tools", "json"):
        messages = initial_messages(request, transport, registry)
        tools = tools_for(transport, registry)
        response_format = planner_response_format_for(transport)
        counted = tokenizer_count(MODEL, messages, tools, response_format)
        assert counted is not None, "litellm's tokenizer did not load"
        in_messages = int(load_litellm().token_counter(model=MODEL, messages=messages))
        bound = request_ceiling(messages, tools, response_format)
        by_bound = first_cap(bound, counted, exact=False)
        by_meter = first_cap(bound, counted, exact=True)
        print(f"{transport:<14}{in_messages:>10}{counted - in_messages:>14}{counted:>8}{bound:>12}"
              f"{by_bound:>18}{by_meter:>18}")  # fmt: skip
    registry.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
