"""Model faults through the real CLI: a misbehaving model never earns an exit 0.

Each case is a scripted model (assay/testing/scripted_model.py) replaying one
fault on every turn, run with `assay check --scripted ... --json` in each
profile against a small snapshot where the honest answer is ``true``. The
control case (an honest model) shows the suite can see a ``true`` at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.verdict import Verdict
from tests.engine_support import PREDICATE, done, get_deployments, make_snapshot
from tests.injection_support import HONEST_CONFIRMER, PROFILES, true_without_verified_evidence
from tests.reliability.cli_support import invoke, outcome
from tests.reliability.ledger import Ledger

FAMILY = "model faults"
REPEAT = 6  # every later turn repeats the fault: repairs and retries see it again

CONFIRM_TRUE = {"action": {"action": "DONE", "verdict": "true", "explanation": "confirmed"}}
GET_MISSING = {
    "action": {
        "action": "COMMAND",
        "tool": "get",
        "arguments": {"kind": "Deployment", "name": "payments", "namespace": "prod"},
    }
}

# name -> (planner turns, the exit codes it may end in)
FAULTS: dict[str, tuple[list[dict[str, Any]], set[int]]] = {
    "HTTP 500 every call": ([{"error": {"status": 500}}] * REPEAT, {3}),
    "HTTP 429 then 503": (
        [{"error": {"status": 429, "retry_after": 0}}, *[{"error": {"status": 503}}] * REPEAT],
        {3},
    ),
    "model hangs past the deadline": ([{"hang": 4}] * REPEAT, {3}),
    "malformed JSON body": ([{"raw_content": '{"action": "DONE", "verdict": tr'}] * REPEAT, {3}),
    "not JSON at all": ([{"body": "<html>bad gateway</html>"}] * REPEAT, {3}),
    "unknown tool": ([{"tool_call": {"name": "delete_cluster", "arguments": {}}}] * REPEAT, {3}),
    "tool call with broken arguments": (
        [{"tool_call": {"name": "get", "arguments": '{"kind": "Deploy'}}] * REPEAT,
        {3},
    ),
    "negative usage, then an honest true": (
        [
            get_deployments(usage={"prompt_tokens": -50_000, "completion_tokens": -1}),
            done("true", 0, excerpt="web 2/2", usage={"prompt_tokens": "-7"}),
        ],
        {0, 3},
    ),
    "done(true) without evidence": ([get_deployments(), *[done("true")] * REPEAT], {3}),
    "done(true) citing text never shown": (
        [get_deployments(), *[done("true", 0, excerpt="web 9/9")] * REPEAT],
        {3},
    ),
    "done(true) citing a failed lookup": (
        [GET_MISSING, *[done("true", 0, excerpt="not found")] * REPEAT],
        {3},
    ),
    "done(true) citing a step that is not a lookup": (
        [get_deployments(), *[done("true", 5, excerpt="web 2/2")] * REPEAT],
        {3},
    ),
    "done(true) citing one character": (
        [get_deployments(), *[done("true", 0, excerpt="2")] * REPEAT],
        {3},
    ),
    "control: an honest true": ([get_deployments(), done("true", 0, excerpt="web 2/2")], {0}),
}


@pytest.fixture(autouse=True)
def _few_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two retries instead of six: the fault is the same on every try, only slower."""
    monkeypatch.setenv("ASSAY_LLM_MAX_RETRIES", "2")


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_snapshot(tmp_path_factory.mktemp("faults") / "prod-eu")


def fault_script(turns: list[dict[str, Any]], *, honest_confirmer: bool) -> dict[str, Any]:
    confirmer = CONFIRM_TRUE if honest_confirmer else HONEST_CONFIRMER
    return {
        "scenarios": [
            {"role": "confirmer", "turns": [confirmer] * REPEAT},
            {"turns": turns},
        ]
    }


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", list(FAULTS))
def test_a_model_fault_never_ends_in_an_unearned_true(
    ledger: Ledger, snapshot: Path, tmp_path: Path, name: str, profile: str
) -> None:
    turns, allowed = FAULTS[name]
    script = tmp_path / "fault.yaml"
    # The confirmer confirms only in the control and the negative-usage case, which cite
    # real evidence; a fault case gets a confirmer that would never rescue it anyway.
    script.write_text(yaml.safe_dump(fault_script(turns, honest_confirmer=0 in allowed)))
    result = invoke(
        "check", "--snapshot", str(snapshot), "--scripted", str(script), "--json",
        "--profile", profile, "--timeout", "2.5", PREDICATE,
    )  # fmt: skip
    verdict = Verdict.model_validate(json.loads(result.stdout)) if result.stdout else None
    unearned = int(verdict is not None and true_without_verified_evidence(verdict))
    ledger.case(FAMILY, outcome(result.code), unverified_true=unearned)
    assert result.code in allowed, (name, profile, result.code, result.stderr[-1500:])
    assert verdict is not None and verdict.exit_code == result.code
    assert not unearned
