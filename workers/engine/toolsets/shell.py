"""The opt-in shell toolset: one tool, ``run_command``, over an operator's allow-list.

Off unless ``AssaySettings.shell_config`` names a policy file (see
``docs/shell-toolset.md``). A command goes through four gates, each of which
turns into an ``ok=False`` result the model can read, never an exception:

1. screening of the raw text (``shell_input``): length, a character allow-list
   that refuses every shell metacharacter and all non-ASCII, ``shlex.split``;
2. the policy (``shell_policy``): deny, then allow, then available_commands;
3. program lookup in the scrubbed PATH;
4. the run itself (``shell_runner``): no shell, own session, timeout, output cap.

A command that ran to completion is ``ok=True`` whatever its exit code, since
a non-zero exit is often the answer (``openssl x509 -checkend`` exits 1 for a
certificate that will have expired); a refusal, a missing program, a timeout
or an OS error is ``ok=False``.

What repeats the model's own command is echo (workers/engine/toolsets/echo.py) and
never verifies a citation: the ``$ argv`` line, a refusal's reason, and the whole
output of a catalogue entry marked ``output_repeats_arguments`` (``date -u +*``
prints its format back; the engine cannot see which bytes came from argv).
"""

from __future__ import annotations

import shlex
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field

from schemas.settings import AssaySettings
from workers.engine.toolsets.base import Tool, ToolResult
from workers.engine.toolsets.echo import Marked, compose, echo
from workers.engine.toolsets.shell_input import screen_command
from workers.engine.toolsets.shell_policy import (
    HARD_MAX_COMMAND_CHARS,
    ShellConfigError,
    ShellPolicy,
    load_shell_policy,
)
from workers.engine.toolsets.shell_runner import (
    RunOutcome,
    resolve_program,
    run_argv,
    scrubbed_environment,
)

__all__ = ["TOOL_NAME", "RunCommandArgs", "RunCommandTool", "ShellConfigError", "shell_tools"]

log = structlog.get_logger(__name__)

TOOL_NAME = "run_command"


class RunCommandArgs(BaseModel):
    """Arguments of ``run_command``; the engine carries the model's ``reason`` separately."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(
        min_length=1,
        max_length=HARD_MAX_COMMAND_CHARS,
        description=(
            "One command line: a program and its arguments, e.g. 'date -u'. "
            "No shell syntax, plain ASCII only."
        ),
    )


def describe_tool(policy: ShellPolicy) -> str:
    """The description the model sees: the catalogue and the rules the code enforces."""
    lines = [
        "Run one read-only command from the list below and read its exit code and output.",
        "Available commands (`*` stands for one argument without '/', '..' or a URL, `**` for "
        "any number of such arguments, `{*}` / `{**}` for any argument(s)):",
    ]
    lines += [
        f"- `{entry.pattern}`: {entry.description}"
        + (
            " (prints its arguments back: its output is never evidence)"
            if entry.output_repeats_arguments
            else ""
        )
        for entry in policy.available_commands
    ]
    patterns = " ".join(entry.pattern for entry in policy.available_commands)
    if "{file}" in patterns:
        lines.append(
            "`{file}` stands for a relative path (from the working directory) of a file inside "
            "the working files folder; absolute paths, '..' out of it and URLs are refused."
        )
    if "{host}" in patterns:
        lines.append(
            "`{host}` stands for HOST:PORT, one of: " + ", ".join(policy.hosts) + " "
            "('*.' means any subdomain)."
        )
    lines += [
        "Rules: the command runs without a shell, so no pipes, redirections, `;`, `&&`, `$`, "
        "backticks, wildcards or newlines; letters, digits, spaces and _ - . , : / = @ % + "
        "and quotes only;",
        f"at most {policy.max_command_chars} characters; a wildcard that stands for a value "
        "never matches an option starting with '-';",
        f"each command is stopped after {policy.timeout_seconds:g} s and output beyond "
        f"{policy.output_limit_bytes} bytes is cut off.",
    ]
    return "\n".join(lines)


def _refused(command: str, reason: str) -> ToolResult:
    """The reason quotes the model's command (a character, a program, a rule it matched)."""
    log.info("shell_command_refused", command=command[:200], reason=reason)
    output = compose(
        "refused: {}. Nothing was run; choose one of the available commands.", echo(reason)
    )
    return ToolResult.of(False, output, refused=True, reason=reason)


def _render(
    argv: list[str], outcome: RunOutcome, timeout_seconds: float, *, repeats_arguments: bool
) -> Marked:
    output = outcome.output.decode("utf-8", errors="replace").rstrip("\n")
    text = echo(output) if repeats_arguments else Marked(output)
    if outcome.timed_out:
        status = f"timed out after {timeout_seconds:g} s; the command and its children were killed"
    elif outcome.status_lost:
        status = "exit code unknown: the worker lost the command's exit status; do not rely on it"
    else:
        status = f"exit code: {outcome.exit_code}"
    parts: list[str | Marked] = [compose("$ {}", echo(shlex.join(argv))), status, text]
    if outcome.truncated:
        parts.append(
            f"[output truncated by assay: first {len(outcome.output)} of "
            f"{outcome.total_output_bytes} bytes shown]"
        )
    rendered = Marked()
    for part in parts:
        if part:
            rendered += ("\n" if rendered else "") + part
    return rendered


class RunCommandTool:
    """``run_command``: screening, policy, then a bounded run; see the module docstring."""

    name = TOOL_NAME
    args_model: type[BaseModel] = RunCommandArgs

    def __init__(self, policy: ShellPolicy) -> None:
        self.policy = policy
        self.description = describe_tool(policy)

    def run(self, args: Any) -> ToolResult:
        command = RunCommandArgs.model_validate(args).command
        screened = screen_command(command, self.policy.max_command_chars)
        if screened.argv is None:
            return _refused(command, screened.refusal or "the command was not accepted")
        argv = screened.argv
        refusal = self.policy.refusal_for(argv)
        if refusal is not None:
            return _refused(command, refusal)
        env = scrubbed_environment(self.policy.env_allow)
        executable = resolve_program(argv[0], env)
        if executable is None:
            return _refused(command, f"the program {argv[0]!r} is not installed on this worker")
        try:
            outcome = run_argv(
                argv,
                executable,
                env=env,
                cwd=self.policy.working_dir,
                timeout_seconds=self.policy.timeout_seconds,
                output_limit_bytes=self.policy.output_limit_bytes,
            )
        except OSError as exc:
            log.warning("shell_command_failed_to_start", argv=argv, error=str(exc))
            failure = compose(
                "error: {} could not be started ({})", echo(argv[0]), echo(exc.strerror or exc)
            )
            return ToolResult.of(False, failure, argv=argv)
        log.info(
            "shell_command_ran",
            argv=argv,
            exit_code=outcome.exit_code,
            timed_out=outcome.timed_out,
            output_bytes=outcome.total_output_bytes,
            duration_s=round(outcome.duration_seconds, 3),
        )
        rendered = _render(
            argv,
            outcome,
            self.policy.timeout_seconds,
            repeats_arguments=self.policy.repeats_arguments(argv),
        )
        return ToolResult.of(
            not (outcome.timed_out or outcome.status_lost),
            rendered,
            truncated=outcome.truncated,
            argv=argv,
            exit_code=outcome.exit_code,
            timed_out=outcome.timed_out,
            status_lost=outcome.status_lost,
            output_bytes=outcome.total_output_bytes,
        )


def shell_tools(settings: AssaySettings) -> list[Tool]:
    """The shell tools for a run: none unless ``settings.shell_config`` is set.

    Raises ``ShellConfigError`` (one sentence, what to fix) when the file is
    configured but missing or invalid: a broken policy must not silently run
    with other rules.
    """
    if settings.shell_config is None:
        return []
    return [RunCommandTool(load_shell_policy(settings.shell_config))]
