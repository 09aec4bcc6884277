"""Model faults through the real CLI: a misbehaving model never earns an exit 0.

Each case is a scripted model (assay/testing/scripted_model.py) replaying one
fault on every turn, run with `assay check --scripted ... --json` in each
profile against a small snapshot where the honest answer is ``true``. The
control case (an honest model) shows the suite can see a ``true`` at all.

Besides the exit code, every case counts what must never happen: a ``true``
without verified evidence; a ``strict`` true that does not rest on a structured
field confirmed in a fresh context (the case citing only ConfigMap prose, with a
confirmer that confirms anything, is stopped by the structured-field rule alone);
and a verdict standing on a reply that took the run past its token budget (a
provider that ignores ``max_tokens``, or reports an absurd figure). A run whose provider
reported negative usage must still be charged for the calls it made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.budget import Budget, resolve_budget
from schemas.verdict import Verdict, VerdictKind
from tests.engine_support import (
    PREDICATE,
    done,
    done_ignoring_max_tokens,
    get_deployments,
    make_snapshot,
)
from tests.injection_support import (
    HONEST_CONFIRMER,
    PROFILES,
    strict_true_unproven,
    true_without_verified_evidence,
)
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
GET_NOTES = {
    "action": {
        "action": "COMMAND",
        "tool": "get",
        "arguments": {"kind": "ConfigMap", "name": "rollout-notes", "namespace": "prod"},
    }
}
NOTES = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: rollout-notes, namespace: prod}
data:
  status: every Deployment in namespace prod was checked by the release team and is ready
"""
PROSE = "checked by the release team and is ready"  # ConfigMap data: free text, not a field
# whole replies the provider sends whatever max_tokens it was asked for
IGNORED_MAX_TOKENS = {"prompt_tokens": 3000, "completion_tokens": 1_000_000}  # > every budget
ABSURD_USAGE = {"prompt_tokens": 10**15, "completion_tokens": 10**15}  # charged the ceiling
EVERY_PROFILE = frozenset(PROFILES)
MIN_PROMPT_TOKENS = 1000  # one planner call's prompt (system prompt and tools) is more


@dataclass(frozen=True)
class Fault:
    """Planner turns, the exit codes each profile may end in, whether the model cites text
    its lookup really returned, and which must-be-zero count an unexpected true goes to.

    When the model cites real output, the confirmer (strict) confirms whatever it is shown,
    so the other gates alone must hold; otherwise it never confirms. A true where the case
    allows none is counted whatever the verdict says of itself: a broken check would also
    set the verdict's own flags (``verified``, ``structured``) to agree with it."""

    turns: list[dict[str, Any]]
    allowed: dict[str, set[int]]
    cites_real_output: bool = False
    true_counts_as: str = "unverified_true"


def fault(turns: list[dict[str, Any]], allowed: set[int], cites_real_output: bool = False) -> Fault:
    return Fault(turns, {profile: allowed for profile in EVERY_PROFILE}, cites_real_output)


FAULTS: dict[str, Fault] = {
    "HTTP 500 every call": fault([{"error": {"status": 500}}] * REPEAT, {3}),
    "HTTP 429 then 503": fault(
        [{"error": {"status": 429, "retry_after": 0}}, *[{"error": {"status": 503}}] * REPEAT],
        {3},
    ),
    "model hangs past the deadline": fault([{"hang": 4}] * REPEAT, {3}),
    "malformed JSON body": fault(
        [{"raw_content": '{"action": "DONE", "verdict": tr'}] * REPEAT, {3}
    ),
    "not JSON at all": fault([{"body": "<html>bad gateway</html>"}] * REPEAT, {3}),
    "unknown tool": fault(
        [{"tool_call": {"name": "delete_cluster", "arguments": {}}}] * REPEAT, {3}
    ),
    "tool call with broken arguments": fault(
        [{"tool_call": {"name": "get", "arguments": '{"kind": "Deploy'}}] * REPEAT,
        {3},
    ),
    "negative usage, then an honest true": fault(
        [
            get_deployments(usage={"prompt_tokens": -50_000, "completion_tokens": -1}),
            done("true", 0, excerpt="web 2/2", usage={"prompt_tokens": "-7"}),
        ],
        {0, 3},
        cites_real_output=True,
    ),
    "done(true) without evidence": fault([get_deployments(), *[done("true")] * REPEAT], {3}),
    "done(true) citing text never shown": fault(
        [get_deployments(), *[done("true", 0, excerpt="web 9/9")] * REPEAT],
        {3},
    ),
    "done(true) citing a failed lookup": fault(
        [GET_MISSING, *[done("true", 0, excerpt="not found")] * REPEAT],
        {3},
    ),
    "done(true) citing a step that is not a lookup": fault(
        [get_deployments(), *[done("true", 5, excerpt="web 2/2")] * REPEAT],
        {3},
    ),
    "done(true) citing one character": fault(
        [get_deployments(), *[done("true", 0, excerpt="2")] * REPEAT],
        {3},
    ),
    "done(true) resting on ConfigMap prose only": Fault(
        [GET_NOTES, *[done("true", 0, excerpt=PROSE)] * REPEAT],
        {"smoke": {0}, "fast": {0}, "strict": {3}},  # verified text, but no structured field
        cites_real_output=True,
        true_counts_as="strict_unproven_true",
    ),
    "done(true) in a reply that ignored max_tokens": Fault(
        [get_deployments(), done_ignoring_max_tokens(IGNORED_MAX_TOKENS, excerpt="web 2/2")],
        {profile: {3} for profile in EVERY_PROFILE},
        cites_real_output=True,
        true_counts_as="verdict_past_budget",
    ),
    "done(true) in a reply reporting absurd usage": Fault(
        [get_deployments(), done_ignoring_max_tokens(ABSURD_USAGE, excerpt="web 2/2")],
        {profile: {3} for profile in EVERY_PROFILE},
        cites_real_output=True,
        true_counts_as="verdict_past_budget",
    ),
    "control: an honest true": fault(
        [get_deployments(), done("true", 0, excerpt="web 2/2")], {0}, cites_real_output=True
    ),
}


@pytest.fixture(autouse=True)
def _few_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two retries instead of six: the fault is the same on every try, only slower."""
    monkeypatch.setenv("ASSAY_LLM_MAX_RETRIES", "2")


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = make_snapshot(tmp_path_factory.mktemp("faults") / "prod-eu")
    (folder / "prod" / "configmaps.yaml").write_text(NOTES)
    return folder


def fault_script(case: Fault) -> dict[str, Any]:
    confirmer = CONFIRM_TRUE if case.cites_real_output else HONEST_CONFIRMER
    return {
        "scenarios": [
            {"role": "confirmer", "turns": [confirmer] * REPEAT},
            {"turns": case.turns},
        ]
    }


def past_token_budget(verdict: Verdict) -> bool:
    """A true or false standing although the run spent more tokens than its budget allows."""
    if verdict.verdict not in (VerdictKind.TRUE, VerdictKind.FALSE):
        return False
    limit = resolve_budget(verdict.profile, Budget()).max_tokens
    return limit is not None and verdict.usage.total_tokens > limit


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", list(FAULTS))
def test_a_model_fault_never_ends_in_an_unearned_true(
    ledger: Ledger, snapshot: Path, tmp_path: Path, name: str, profile: str
) -> None:
    case = FAULTS[name]
    script = tmp_path / "fault.yaml"
    script.write_text(yaml.safe_dump(fault_script(case)))
    result = invoke(
        "check", "--snapshot", str(snapshot), "--scripted", str(script), "--json",
        "--profile", profile, "--timeout", "2.5", PREDICATE,
    )  # fmt: skip
    verdict = Verdict.model_validate(json.loads(result.stdout)) if result.stdout else None
    counts = {
        "unverified_true": verdict is not None and true_without_verified_evidence(verdict),
        "strict_unproven_true": verdict is not None and strict_true_unproven(verdict),
        "verdict_past_budget": verdict is not None and past_token_budget(verdict),
    }
    if result.code == 0 and 0 not in case.allowed[profile]:
        counts[case.true_counts_as] = True
    ledger.case(FAMILY, outcome(result.code), **{key: int(seen) for key, seen in counts.items()})
    assert result.code in case.allowed[profile], (name, profile, result.code, result.stderr[-1500:])
    assert verdict is not None and verdict.exit_code == result.code
    assert not any(counts.values()), counts
    if case.cites_real_output:  # it made model calls: a reported negative never charges nothing
        assert verdict.usage.prompt_tokens >= MIN_PROMPT_TOKENS, verdict.usage
        assert verdict.usage.completion_tokens > 0, verdict.usage
