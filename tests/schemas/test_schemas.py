"""The contract: committed JSON Schemas match the models; both transports share one mapping."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from schemas.actions import (
    Command,
    Done,
    PlannerResponse,
    Wait,
    action_from_tool_call,
    action_to_tool_call,
)
from schemas.verdict import VerdictKind

ROOT = Path(__file__).resolve().parents[2]


def test_committed_json_schemas_match_the_models() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "schemas.generate", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_tool_calls_and_actions_map_both_ways() -> None:
    actions = [
        Command(tool="get", arguments={"kind": "Pod"}, reason="look"),
        Done(verdict=VerdictKind.FALSE, explanation="x", evidence=[{"step": 0, "excerpt": "y"}]),
        Wait(seconds=5),
    ]
    for action in actions:
        name, arguments = action_to_tool_call(action)
        parsed = PlannerResponse.model_validate({"action": action_from_tool_call(name, arguments)})
        assert parsed.action == action


def test_a_command_must_name_an_offered_tool() -> None:
    raw = {"action": {"action": "COMMAND", "tool": "delete", "arguments": {}}}
    with pytest.raises(ValidationError, match="unknown tool 'delete'"):
        PlannerResponse.model_validate(raw, context={"tools": {"get", "describe"}})


def test_a_verdict_outside_the_contract_is_rejected() -> None:
    raw = {"action": {"action": "DONE", "verdict": "probably", "explanation": "x"}}
    with pytest.raises(ValidationError):
        PlannerResponse.model_validate(raw)
