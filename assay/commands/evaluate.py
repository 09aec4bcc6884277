"""`assay check PREDICATE` and `assay query QUESTION`: one evaluation, here and now.

Both build an EvaluationRequest, run the engine in this process and exit with
the verdict's code (0 true, 1 false, 2 poorly posed, 3 cannot determine; 64
for a wrong command line or configuration, a model name litellm cannot route
included). Every flag's default comes from ``ASSAY_*`` through
``schemas.settings.load_settings``. Heavy modules (the engine, litellm) are
imported inside the command so ``assay --help`` stays fast.

The run's time budget (``--timeout``, else the profile's) covers the whole command, as
``timeout(1)`` would: the process's start-up (imports, settings, reading the snapshot) is
charged to the run before its first step (``--trace`` prints it on a line of its own), the
run ends :data:`WRAP_UP_SECONDS` before the budget so its report is printed in time, and a
watchdog ends the command with 3 (cannot determine) when the budget runs out regardless.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/assay/test_cli_check.py keeps the engine out).
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from assay import command_clock
from assay.commands.fleet_common import WideOpt, stdout_console
from assay.commands.options import (
    ApiBaseOpt,
    ContextOpt,
    EngineFlags,
    FormatOpt,
    JsonOpt,
    MaxCostOpt,
    MaxIterationsOpt,
    MaxTokensOpt,
    ModelOpt,
    ProfileOpt,
    SetupProblem,
    SnapshotOpt,
    TimeoutOpt,
    check_profile,
    check_text,
    confined_snapshot,
    output_format,
    require_one_target,
    settings_or_usage,
    validation_detail,
)
from assay.terminal_text import print_line

if TYPE_CHECKING:
    from schemas.report import RunReport, Step
    from schemas.request import Target
    from schemas.settings import AssaySettings

NO_MODEL_MESSAGE = (
    "no model is configured: pass --model (e.g. --model openai/gpt-4o-mini) or set "
    "ASSAY_MODEL, or try the bundled demo with --scripted examples/scripts/demo.yaml"
)

TraceOpt = Annotated[bool, typer.Option("--trace", help="Show each step on stderr as it happens.")]
ScriptedOpt = Annotated[
    Path | None,
    typer.Option(
        "--scripted",
        help="Use the bundled SCRIPTED model replaying this script (not a real LLM).",
        exists=True,
        dir_okay=False,
        resolve_path=True,
    ),
]


def check(
    predicate: Annotated[str, typer.Argument(help="The predicate, in plain language.")],
    snapshot: SnapshotOpt = None,
    context: ContextOpt = None,
    model: ModelOpt = None,
    api_base: ApiBaseOpt = None,
    max_iterations: MaxIterationsOpt = None,
    max_tokens: MaxTokensOpt = None,
    timeout: TimeoutOpt = None,
    max_cost: MaxCostOpt = None,
    profile: ProfileOpt = None,
    json_output: JsonOpt = False,
    output_format_: FormatOpt = "text",
    trace: TraceOpt = False,
    scripted: ScriptedOpt = None,
    wide: WideOpt = False,
) -> None:
    """Decide whether PREDICATE holds. Exit 0 true, 1 false, 2 poorly posed, 3 cannot determine."""
    flags = EngineFlags(model, api_base, max_iterations, max_tokens, timeout, max_cost, profile)
    output = output_format(output_format_, json_output)
    if wide and output == "text":
        output = "wide"  # the text, with the evidence's lookups and excerpts whole
    raise typer.Exit(_run("check", predicate, snapshot, context, flags, output, trace, scripted))


def query(
    question: Annotated[str, typer.Argument(help="The question, in plain language.")],
    snapshot: SnapshotOpt = None,
    context: ContextOpt = None,
    model: ModelOpt = None,
    api_base: ApiBaseOpt = None,
    max_iterations: MaxIterationsOpt = None,
    max_tokens: MaxTokensOpt = None,
    timeout: TimeoutOpt = None,
    max_cost: MaxCostOpt = None,
    profile: ProfileOpt = None,
    json_output: JsonOpt = False,
    trace: TraceOpt = False,
    scripted: ScriptedOpt = None,
) -> None:
    """Answer QUESTION in text; --json prints {success, summary, findings, tools_used, ...}."""
    flags = EngineFlags(model, api_base, max_iterations, max_tokens, timeout, max_cost, profile)
    output = "json" if json_output else "text"
    raise typer.Exit(_run("query", question, snapshot, context, flags, output, trace, scripted))


def register(app: typer.Typer) -> None:
    app.command("check")(check)
    app.command("query")(query)


def _run(
    kind: str,
    text: str,
    snapshot: Path | None,
    context: str | None,
    flags: EngineFlags,
    output: str,
    trace: bool,
    scripted: Path | None,
) -> int:
    require_one_target(snapshot, context)
    check_profile(flags.profile)
    check_text(text, "QUESTION" if kind == "query" else "PREDICATE")
    from schemas.policy import policy_reference  # pydantic models: not for `assay --help`

    if kind == "check" and policy_reference(text) is not None:
        raise typer.BadParameter(
            f"{text.strip()} names an imported policy, which runs by its probes, not a model: "
            f"use `assay probe test {text.strip()} --snapshot PATH` here, or submit, batch or "
            "schedule it on the fleet"
        )
    refuse_a_future_instant(kind, text)
    settings = settings_or_usage(**flags.settings_overrides())
    budget = _time_budget(settings)
    if budget is not None and command_clock.owns_process():  # watched from here, start-up in
        _end_at(command_clock.started() + budget)
    if snapshot is not None:
        snapshot = confined_snapshot(snapshot, settings)
        _require_objects(snapshot)
    _configure_logging(settings)
    if scripted is not None:
        return _run_scripted(kind, text, snapshot, context, settings, output, trace, scripted)
    if not settings.model:
        raise typer.BadParameter(NO_MODEL_MESSAGE)
    require_routable_model(settings.model, settings.api_base, flags.model is not None)
    require_model_key(settings)
    return _evaluate(kind, text, snapshot, context, settings, output, trace)


def refuse_a_future_instant(kind: str, text: str) -> None:
    """Refuse (64) a text that opens with an instant still to come ("on 2030-01-01, ...").

    Every front door that queues holds such a predicate until its instant; `check` and
    `query` answer now, and sleeping in the foreground until 2030 helps no one, while
    answering now would answer another question. So they say where it can wait.
    """
    from assay.commands.fleet_common import iso_utc
    from scheduler.when import deferral_for

    due = deferral_for(text)
    if due is not None:
        raise typer.BadParameter(
            f"this {kind} is about {iso_utc(due)}, which is still to come, and `assay {kind}` "
            f"answers now: queue it with `assay submit` (the fleet evaluates it then), or drop "
            "the date to ask about the cluster as it is"
        )


def require_routable_model(model: str, api_base: str | None, from_flag: bool) -> None:
    """Refuse (64) a model name litellm cannot route to any provider, before the run starts.

    Run, it would end ``cannot_determine`` (3) after the model call failed: a CI job
    reads that as "the cluster could not be judged", not "fix the --model". The
    scripted model never comes here (its name and endpoint are assay's own). `assay
    eval` asks too; the fleet commands ask ``assay.model_check``.
    """
    from workers.engine.llm import unroutable_model  # imports litellm: not for `--help`

    problem = unroutable_model(model, api_base)
    if problem is not None:
        hint = "--model" if from_flag else "--model / ASSAY_MODEL"
        raise typer.BadParameter(problem, param_hint=hint)


def require_model_key(settings: AssaySettings) -> None:
    """Refuse (64), before the run, a model whose provider wants an API key none set
    (``workers.engine.provider_keys``): run, it would end 3 after retrying the provider's
    "missing credentials" as a server error, and name a variable assay does not use."""
    from workers.engine.provider_keys import missing_key

    problem = missing_key(settings.model or "", settings)
    if problem is not None:
        raise SetupProblem(problem)


def _require_objects(snapshot: Path) -> None:
    """Refuse a folder that is not a snapshot (empty, no YAML, nothing parses) with 64,
    and warn on stderr about one that has problems (files skipped, an object captured
    twice differently): the model is told in every tool output, the user should be too.

    The engine would end the run with 3 anyway; on the command line the folder is
    the user's typo, so it is a usage error. The parse is cached for the run.
    """
    from workers.engine.toolsets.factory import snapshot_cache
    from workers.engine.toolsets.snapshot_backend import SnapshotError

    try:
        backend = snapshot_cache.get(snapshot, resolved=True)
    except SnapshotError as exc:
        raise typer.BadParameter(str(exc), param_hint="--snapshot") from None
    if backend.problems:
        more = f" (and {len(backend.problems) - 1} more)" if len(backend.problems) > 1 else ""
        print_line(
            f"assay: warning: snapshot {snapshot} has {len(backend.problems)} problem(s), "
            f"e.g. {backend.problems[0]}{more}; the rest is served",
            sys.stderr,
        )


def _run_scripted(
    kind: str,
    text: str,
    snapshot: Path | None,
    context: str | None,
    settings: AssaySettings,
    output: str,
    trace: bool,
    script: Path,
) -> int:
    from assay.testing.scripted_model import SCRIPTED_MODEL_NAME, ScriptedModel, ScriptError

    try:
        server = ScriptedModel(script)
    except ScriptError as exc:
        raise typer.BadParameter(str(exc), param_hint="--scripted") from None
    print(f"SCRIPTED MODEL - replaying {script}, not a real LLM", file=sys.stderr, flush=True)
    with server:
        scripted_settings = settings.model_copy(
            update={"model": SCRIPTED_MODEL_NAME, "api_base": server.url, "api_key": None}
        )
        return _evaluate(kind, text, snapshot, context, scripted_settings, output, trace)


def _evaluate(
    kind: str,
    text: str,
    snapshot: Path | None,
    context: str | None,
    settings: AssaySettings,
    output: str,
    trace: bool,
) -> int:
    from pydantic import ValidationError
    from rich.console import Console

    from assay.output_scrubbing import RunScrubber
    from assay.render import step_line
    from assay.terminal_text import visible
    from schemas.request import ContextTarget, EvaluationRequest, SnapshotTarget
    from workers.engine.engine import EngineDeps, effective_budget, evaluate

    target: Target
    if snapshot is not None:
        target = SnapshotTarget(path=str(snapshot))
    else:
        assert context is not None
        target = ContextTarget(context=context, kubeconfig=settings.kubeconfig)
    try:
        request = EvaluationRequest(
            kind="query" if kind == "query" else "check",
            text=text,
            target=target,
            profile=settings.profile,
            model=settings.model,
            api_base=settings.api_base,
        )
    except ValidationError as exc:
        raise typer.BadParameter(
            f"the {kind} cannot be evaluated: {validation_detail(exc)}"
        ) from None

    errors = Console(stderr=True, highlight=False, soft_wrap=True)

    scrubbing = RunScrubber()  # model text is printed only through the run's scrubber

    def show_step(step: Step) -> None:
        errors.print(visible(scrubbing.text(step_line(step))), markup=False)

    deps = EngineDeps(
        settings=settings, tools=scrubbing.tools, on_step=show_step if trace else None
    )
    started = command_clock.elapsed()
    budget = effective_budget(request, settings).timeout_seconds
    if budget is not None:
        deps.not_after = command_clock.started() + budget - WRAP_UP_SECONDS
    if trace:
        errors.print(
            f"start-up  {started:.2f}s (imports, settings, the snapshot), charged to the run's "
            f"{budget:g}s time budget",
            markup=False,
        )
    report = evaluate(request, deps, spent_seconds=started)
    _print_result(kind, scrubbing.model(report), output)
    return report.verdict.exit_code if report.verdict else 3


WRAP_UP_SECONDS = 0.5
"""What writing a run's report and exiting may take: the run ends this much before its budget."""


def _time_budget(settings: AssaySettings) -> float | None:
    """The run's time budget in seconds: ``--timeout``/``ASSAY_TIMEOUT_SECONDS``, else the
    profile's (what the engine will enforce: workers.engine.engine.effective_budget)."""
    from schemas.budget import PROFILES

    profile = PROFILES.get(settings.profile)
    return settings.timeout_seconds or (profile.budget.timeout_seconds if profile else None)


def _end_at(instant: float) -> None:
    """At ``instant`` (``time.monotonic()``), end the process with 3 if it is still running:
    a run that overran its deadline (a slow host, a reply arriving just then) must not hold a
    CI job past ``--timeout``, and running out of time is "cannot determine", never a verdict."""

    def out_of_time() -> None:
        sys.stderr.write(
            "assay: error: the run's time budget ran out before its report was written; "
            "exit 3 (cannot determine): raise --timeout\n"
        )
        sys.stderr.flush()
        os._exit(3)

    timer = threading.Timer(max(0.0, instant - time.monotonic()), out_of_time)
    timer.daemon = True
    timer.start()


def _print_result(kind: str, report: RunReport, output: str) -> None:
    """stdout: the Verdict JSON (--json), JUnit XML (--format junit), the query answer JSON,
    or the rendered verdict (``wide``: its evidence whole, not cut to the terminal).

    ``report`` is already scrubbed (see assay/output_scrubbing.py)."""
    import json

    from assay.render import query_summary, render_answer, render_verdict

    verdict = report.verdict
    console = stdout_console(wide=output == "wide")
    if kind == "query":
        if output == "json":  # the answer JSON: {success, summary, findings, tools_used, ...}
            print(json.dumps(query_summary(report), indent=2))
        else:
            render_answer(report, console)
    elif output == "json" and verdict is not None:
        print(verdict.model_dump_json(indent=2))
    elif output == "junit" and verdict is not None:
        from assay import junit

        sys.stdout.write(junit.render([junit.case_of(verdict, report.request.text)], "assay check"))
    elif verdict is not None:
        render_verdict(verdict, console, wide=output == "wide")


def _configure_logging(settings: AssaySettings) -> None:
    """Engine logs go to stderr; on the CLI only warnings unless a log level was asked for."""
    from workers.engine.logs import configure_logging

    if "log_level" not in settings.model_fields_set:
        settings = settings.model_copy(update={"log_level": "WARNING"})
    configure_logging(settings)
