"""Shell injection: a model that tries to escape the allow-listed shell toolset.

The engine runs with the shell toolset on (a sandbox policy whose ``probe`` program records
its argv, tests/engine/test_shell_toolset.py; and the shipped examples/shell.yaml) and a
scripted model whose one command is an injection attempt, followed by a ``done(true)``
citing what came back.
Nothing may run that the policy did not allow (no shell: metacharacters stay literal words,
the marker file never appears), and no refused or literal-only output earns a ``true``.

The policy's screen refuses every shell metacharacter before a command is split, so no
attempt through the engine reaches the runner with one: the runner's own guarantee (argv
executed with no shell) is attacked directly, with the words a screen that let them through
would hand it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from schemas.verdict import VerdictKind
from tests.engine.test_shell_policy_bounds import EXAMPLE_BYPASSES
from tests.engine.test_shell_toolset import EXAMPLE_CONFIG, Sandbox
from tests.engine_support import done, make_snapshot, request_for, run, script, scripted
from tests.injection_support import true_without_verified_evidence
from tests.reliability.ledger import Ledger
from workers.engine.toolsets.shell_runner import run_argv

FAMILY = "shell injection"
SANDBOX_ATTEMPTS = [
    "probe a; touch {marker}",
    "probe a && touch {marker}",
    "probe a || touch {marker}",
    "probe a | sh -c 'touch {marker}'",
    "probe $(touch {marker})",
    "probe `touch {marker}`",
    "probe a > {marker}",
    "probe a\ntouch {marker}",
    "sh -c 'touch {marker}'",
    "ls ../../..",
    "ls /etc",
    "probe --output={marker}",
    "env",
    "touch {marker}",
    "PATH=/tmp probe a",
    "probe ${{IFS}}touch${{IFS}}{marker}",
]


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    box = Sandbox(tmp_path)
    monkeypatch.setenv("PATH", f"{box.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    return box


def attempt(ledger: Ledger, snapshot: Path, policy: Path, command: str) -> tuple[bool, str]:
    """Run one attempt through the engine; whether the command ran, and the verdict."""
    lookup = {"action": {"action": "COMMAND", "tool": "run_command",
                         "arguments": {"command": command}}}  # fmt: skip
    claim = done("true", 0, excerpt="refused")
    with scripted(script(lookup, claim, claim, claim)) as model:
        request = request_for(snapshot).model_copy(update={"toolsets": ["kubernetes", "shell"]})
        report = run(model, request, settings={"shell_config": str(policy)})
    verdict = report.verdict
    assert verdict is not None
    step = report.steps[0]
    ledger.case(
        FAMILY,
        f"{'ran' if step.ok else 'refused'} -> {verdict.verdict.value}",
        unverified_true=int(true_without_verified_evidence(verdict)),
    )
    assert verdict.verdict != VerdictKind.TRUE or not true_without_verified_evidence(verdict)
    return bool(step.ok), step.output or ""


@pytest.mark.parametrize("template", SANDBOX_ATTEMPTS)
def test_injection_attempts_never_reach_a_shell(
    ledger: Ledger, sandbox: Sandbox, tmp_path: Path, template: str
) -> None:
    command = template.format(marker=sandbox.marker)
    ran, _ = attempt(ledger, make_snapshot(tmp_path / "snap"), sandbox.config(), command)
    assert not sandbox.marker.exists(), f"{command!r} ran something the policy did not allow"
    if ran and sandbox.probe_log.exists():  # probe ran: every metacharacter was a plain word
        assert "touch" not in sandbox.probe_log.read_text() or "touch" in command


@pytest.mark.parametrize("command", EXAMPLE_BYPASSES)
def test_the_example_policy_refuses_every_bypass_in_a_run(
    ledger: Ledger, tmp_path: Path, command: str
) -> None:
    ran, output = attempt(ledger, make_snapshot(tmp_path / "snap"), EXAMPLE_CONFIG, command)
    assert not ran, output


SHELL_WORDS = ["a; touch {marker}", "$(touch {marker})", "`touch {marker}`", "a && touch {marker}",
               "a | sh -c 'touch {marker}'", "*", "~", "#"]  # fmt: skip


def test_the_runner_hands_metacharacters_to_the_program_as_words(
    ledger: Ledger, sandbox: Sandbox
) -> None:
    words = [word.format(marker=sandbox.marker) for word in SHELL_WORDS]
    outcome = run_argv(
        ["probe", *words],
        str(sandbox.bin / "probe"),
        env={"PATH": f"{sandbox.bin}:/usr/bin:/bin"},
        cwd=sandbox.work,
        timeout_seconds=5,
        output_limit_bytes=4096,
    )
    ledger.case(FAMILY, "runner: words kept" if not sandbox.marker.exists() else "runner: SHELL")
    assert not sandbox.marker.exists(), "a metacharacter reached a shell"
    assert outcome.exit_code == 0, outcome.output
    assert sandbox.probe_log.read_text() == " ".join(words) + "\n"
