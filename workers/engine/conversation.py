"""The planner conversation: what the engine says to the model and how it reads the answers.

Kept apart from the loop in ``workers/engine/engine.py`` so the two transports
(native tool calling, JSON-schema output) differ only here: both end in the
same validated :data:`schemas.actions.PlannerAction`, or in a one-line reason
why the reply was rejected, which goes back to the model in a repair turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError

import prompts
from schemas.actions import (
    Command,
    Done,
    Error,
    PlannerResponse,
    Thought,
    Wait,
    action_from_tool_call,
)
from schemas.request import EvaluationRequest
from workers.engine.fencing import fenced, neutralise, neutralise_marked
from workers.engine.llm import LLMReply, Transport, planner_response_format
from workers.engine.tool_schemas import Tools, ToolSchemas
from workers.engine.toolsets.base import ToolRegistry, ToolResult
from workers.engine.toolsets.echo import Marked, clipped

PlannerActionModel = Thought | Command | Wait | Done | Error

_ACTION_TOOLS: dict[str, tuple[type[BaseModel], str]] = {
    "think": (Thought, "Put reasoning on record. Costs a step; runs nothing."),
    "wait": (
        Wait,
        "Wait before continuing: give `seconds`, or an `until` instant with a time zone.",
    ),
    "done": (
        Done,
        "End the run with a verdict, a short explanation, and evidence citing the "
        "[step N] numbers of lookups made in this run.",
    ),
    "error": (Error, "Give up because you cannot continue; the run ends as cannot_determine."),
}


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace ``$ref``s by their definitions: many OpenAI-compatible servers ignore ``$defs``."""
    defs = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


@cache
def _action_tool_schemas() -> tuple[str, ...]:
    tools = []
    for name, (model, description) in _ACTION_TOOLS.items():
        parameters = _inline_refs(model.model_json_schema())
        parameters["properties"].pop("action", None)
        parameters.pop("title", None)
        spec = {"name": name, "description": description, "parameters": parameters}
        tools.append(json.dumps({"type": "function", "function": spec}))
    return tuple(tools)


def action_tool_schemas() -> list[dict[str, Any]]:
    """think / wait / done / error as function definitions, from the action models."""
    return [json.loads(text) for text in _action_tool_schemas()]


def tools_for(transport: Transport, registry: ToolRegistry) -> Tools | None:
    """The ``tools`` to offer: lookups plus the action tools, or none in JSON mode."""
    if transport != "tools":
        return None
    # Built once per process per set of tools and kept as JSON text, which no run can change
    # (workers/engine/tool_schemas.py): every run of these tools is offered the same object.
    if not isinstance(registry, ToolRegistry):  # a stand-in without its tools to key on
        return [_inline_refs(spec) for spec in registry.json_schemas()] + action_tool_schemas()
    key = tuple((tool.name, tool.description, tool.args_model) for tool in registry)
    tools = _TOOLS_JSON.get(key)
    if tools is None:
        specs = [_inline_refs(spec) for spec in registry.json_schemas()] + action_tool_schemas()
        tools = ToolSchemas(json.dumps(specs))
        if len(_TOOLS_JSON) >= _TOOLS_JSON_LIMIT:
            _TOOLS_JSON.clear()
        _TOOLS_JSON[key] = tools
    return tools


_TOOLS_JSON: dict[tuple[Any, ...], ToolSchemas] = {}
_TOOLS_JSON_LIMIT = 128


def planner_response_format_for(transport: Transport) -> dict[str, Any] | None:
    """The ``response_format`` to ask for: the PlannerResponse schema in JSON mode only."""
    return planner_response_format() if transport == "json" else None


def initial_messages(
    request: EvaluationRequest, transport: Transport, registry: ToolRegistry
) -> list[dict[str, Any]]:
    system = prompts.load("query" if request.kind == "query" else "check")
    if transport == "json":
        lookups = [
            {"tool": spec["function"]["name"], **spec["function"]}
            for spec in registry.json_schemas()
        ]
        for item in lookups:
            item.pop("name", None)
        system += (
            '\n\nJSON mode: every reply is one JSON object {"action": {...}} matching the '
            'response schema. A lookup is {"action": "COMMAND", "tool": NAME, '
            '"arguments": {...}, "reason": "..."}; the lookup tools are:\n'
            + json.dumps(lookups, indent=1)
        )
    label = "Question" if request.kind == "query" else "Predicate"
    now = datetime.now(UTC).isoformat(timespec="seconds")
    user = f"{label}: {request.text}\nCluster: {request.target.name}\nCurrent time (UTC): {now}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class ParsedReply:
    """One model reply: an action, or the reason it was rejected."""

    assistant_message: dict[str, Any]
    action: PlannerActionModel | None = None
    error: str | None = None
    raw: str | None = None
    tool_call_id: str | None = None
    dropped_calls: int = 0


def parse_reply(reply: LLMReply, transport: Transport, tool_names: set[str]) -> ParsedReply:
    """Validate a reply into one action against the tools this run offers."""
    if transport == "tools":
        parsed = _parse_tool_reply(reply, tool_names)
    else:
        parsed = _parse_json_reply(reply, tool_names)
    if parsed.error is not None and reply.finish_reason == "length":
        note = " (the reply was cut off at its max_tokens limit: answer more briefly)"
        parsed = replace(parsed, error=parsed.error + note)
    return parsed


def _parse_tool_reply(reply: LLMReply, tool_names: set[str]) -> ParsedReply:
    if not reply.tool_calls:
        return ParsedReply(
            assistant_message={"role": "assistant", "content": reply.content or ""},
            error="the reply had no tool call; every action must be one tool call "
            "(a lookup tool, or think, wait, done, error)",
            raw=reply.content or "",
        )
    call = reply.tool_calls[0]
    message = {
        "role": "assistant",
        "content": reply.content,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
        ],
    }
    raw = f"{call.name}({call.arguments})"
    action: PlannerActionModel | None = None
    error: str | None = None
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError as exc:
        error = f"the arguments of the {call.name!r} call are not valid JSON: {exc}"
    else:
        if isinstance(arguments, dict):
            action, error = _validate(action_from_tool_call(call.name, arguments), tool_names)
        else:
            error = f"the arguments of the {call.name!r} call must be a JSON object"
    return ParsedReply(
        assistant_message=message,
        action=action,
        error=error,
        raw=raw if error else None,
        tool_call_id=call.id,
        dropped_calls=len(reply.tool_calls) - 1,
    )


def _parse_json_reply(reply: LLMReply, tool_names: set[str]) -> ParsedReply:
    content = reply.content or ""
    message = {"role": "assistant", "content": content}
    text = content.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    try:
        data = json.loads(text)
    except ValueError as exc:
        return ParsedReply(
            assistant_message=message, error=f"the reply is not valid JSON: {exc}", raw=content
        )
    if isinstance(data, dict) and isinstance(data.get("action"), str):
        data = {"action": data}  # a bare action object: accept it
    if not isinstance(data, dict) or "action" not in data:
        shape_error = 'the reply must be one JSON object {"action": {...}}'
        return ParsedReply(assistant_message=message, error=shape_error, raw=content)
    action, error = _validate(data["action"], tool_names)
    return ParsedReply(
        assistant_message=message, action=action, error=error, raw=content if error else None
    )


def _validate(
    raw_action: Any, tool_names: set[str]
) -> tuple[PlannerActionModel | None, str | None]:
    try:
        response = PlannerResponse.model_validate(
            {"action": raw_action}, context={"tools": tool_names}
        )
    except ValidationError as exc:
        return None, describe_validation_error(exc)
    return response.action, None


def describe_validation_error(exc: ValidationError) -> str:
    """The validation errors in one line, field by field, for a repair turn."""
    parts = []
    for error in exc.errors()[:5]:
        location = [str(item) for item in error["loc"] if item != "action"]
        if location and location[0] in {"THOUGHT", "COMMAND", "WAIT", "DONE", "ERROR"}:
            location = location[1:]
        where = ".".join(location) or "action"
        parts.append(f"{where}: {error['msg']}")
    more = len(exc.errors()) - 5
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def feedback_message(text: str, tool_call_id: str | None) -> dict[str, Any]:
    """A tool result when the model used a tool call, a user message otherwise."""
    if tool_call_id is not None:
        return {"role": "tool", "tool_call_id": tool_call_id, "content": text}
    return {"role": "user", "content": text}


def shown_output(result: ToolResult, limit: int, fence_token: str) -> Marked:
    """A tool's output exactly as the model is shown it: cut at ``limit``, then neutralised,
    with the spans that repeat the model's own arguments (workers/engine/toolsets/echo.py).

    This is the text cited excerpts are checked against (workers/engine/evidence.py).
    """
    output = result.marked
    if len(output) > limit:
        kept = _whole_tokens(output.text, limit)
        omitted = len(output) - len(kept)
        output = clipped(output, 0, len(kept)) + (
            f"\n... truncated by the engine, {omitted} more characters"
        )
    return neutralise_marked(output, fence_token)


def _whole_tokens(text: str, limit: int) -> str:
    """At most ``limit`` characters of ``text``, ending at a line break in its second half,
    else at the last whitespace.

    Cut inside a token, ``ready: 10/10`` would read ``ready: 1``: a value the lookup never
    returned, which the model could conclude from and a citation would then verify.
    """
    head = text[:limit]
    if text[limit : limit + 1].isspace():
        return head
    end = head.rfind("\n")
    if end < limit // 2:  # no line break near the end: the last space will do
        end = max(end, head.rfind(" "), head.rfind("\t"))
    return head[:end] if end > 0 else head  # a single token over the limit is cut as it is


def format_tool_result(
    step: int, tool: str, arguments: dict[str, Any], ok: bool, shown: str, fence_token: str
) -> str:
    """``[step N] tool args -> ok``, then the output fenced: the label the model cites."""
    status = "ok" if ok else "failed"
    args = neutralise(json.dumps(arguments, sort_keys=True, separators=(",", ":")), fence_token)
    return f"[step {step}] {tool} {args} -> {status}\n{fenced(shown, fence_token)}"


def repair_prompt(error: str) -> str:
    return prompts.load("repair").replace("{error}", error)
