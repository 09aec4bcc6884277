"""`assay eval`: measure a model against a labelled suite, or compare two reports.

    assay eval --model openai/gpt-4o-mini                # the shipped suite
    assay eval --model openai/qwen2.5-32b --api-base http://vllm:8000/v1 --repeat 3
    assay eval --oracle                                   # plumbing check, no LLM
    assay eval --compare A.json B.json --chart ab.html
    assay eval --check-suite --suite my-cases/

Exit codes: 0 the run finished (the report says whether a cap made it partial), 1
``--check-suite`` found problems, 64 the command line or the suite is wrong, 130
Ctrl-C (the partial report is written first).
Heavy modules are imported inside the command so ``assay --help`` stays fast.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/assay/test_cli_check.py keeps the engine out).
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from assay.commands.fleet_common import EXIT_INTERRUPTED
from assay.commands.options import (
    ApiBaseOpt,
    EngineFlags,
    MaxCostOpt,
    MaxIterationsOpt,
    MaxTokensOpt,
    ModelOpt,
    ProfileOpt,
    TimeoutOpt,
    check_profile,
    settings_or_usage,
)
from assay.terminal_text import print_line, visible_line

if TYPE_CHECKING:
    from rich.console import Console

    from assay.eval.session import EvalPlan
    from assay.eval.suite import Suite
    from schemas.eval import EvalReport
    from schemas.settings import AssaySettings

SuiteOpt = Annotated[
    Path | None,
    typer.Option(
        "--suite",
        help="A case file or a folder of them (default: the shipped suite, examples/eval/cases).",
    ),
]
RepeatOpt = Annotated[
    int, typer.Option("--repeat", min=1, max=100, help="Answer every case N times (stability).")
]
ConcurrencyOpt = Annotated[
    int, typer.Option("--concurrency", min=1, max=256, help="Attempts running at once.")
]
TokenCapOpt = Annotated[
    int | None,
    typer.Option(
        "--token-cap", min=1, help="Tokens for the whole run; no case starts once reached."
    ),
]
CostCapOpt = Annotated[
    float | None,
    typer.Option("--cost-cap", min=0.0, help="USD for the whole run; no case starts once reached."),
]
OnlyOpt = Annotated[
    list[str] | None,
    typer.Option("--only", help="Run only these case ids (globs) or categories; repeatable."),
]
OutOpt = Annotated[
    Path | None, typer.Option("--out", help="Report path (default: ./eval-TIMESTAMP.json).")
]
ChartOpt = Annotated[
    Path | None, typer.Option("--chart", help="Also write a self-contained HTML/SVG chart here.")
]
CompareOpt = Annotated[
    tuple[Path, Path] | None,
    typer.Option("--compare", help="Show two reports side by side instead of running."),
]


def eval_command(
    suite: SuiteOpt = None,
    model: ModelOpt = None,
    api_base: ApiBaseOpt = None,
    profile: ProfileOpt = None,
    max_iterations: MaxIterationsOpt = None,
    max_tokens: MaxTokensOpt = None,
    timeout: TimeoutOpt = None,
    max_cost: MaxCostOpt = None,
    repeat: RepeatOpt = 1,
    concurrency: ConcurrencyOpt = 4,
    token_cap: TokenCapOpt = None,
    cost_cap: CostCapOpt = None,
    only: OnlyOpt = None,
    no_baseline: Annotated[
        bool, typer.Option("--no-baseline", help="Skip the no-tools one-shot baseline.")
    ] = False,
    no_oracle: Annotated[
        bool, typer.Option("--no-oracle", help="Skip the scripted-oracle plumbing arm.")
    ] = False,
    oracle: Annotated[
        bool,
        typer.Option("--oracle", help="Test the scripted oracle itself (no LLM; plumbing check)."),
    ] = False,
    scripted: Annotated[
        Path | None,
        typer.Option(
            "--scripted",
            help="Test a SCRIPTED model replaying this script (not a real LLM).",
            exists=True,
            dir_okay=False,
            resolve_path=True,
        ),
    ] = None,
    out: OutOpt = None,
    chart: ChartOpt = None,
    compare: CompareOpt = None,
    check_suite: Annotated[
        bool,
        typer.Option("--check-suite", help="Check the suite against its snapshots and exit."),
    ] = False,
) -> None:
    """Measure a model on a labelled suite: accuracy, false-true rate, stability, cost."""
    from rich.console import Console

    stdout = Console(highlight=False, soft_wrap=True)
    if compare is not None:
        raise typer.Exit(_compare(compare, chart, stdout))
    check_profile(profile)
    flags = EngineFlags(model, api_base, max_iterations, max_tokens, timeout, max_cost, profile)
    settings = settings_or_usage(**flags.settings_overrides())
    _configure_logging(settings)
    selected = _load_suite(suite, only or [])
    settings = _with_suite_roots(settings, selected)
    if check_suite:
        raise typer.Exit(_check_suite(selected, settings, stdout))
    if oracle and scripted is not None:
        raise typer.BadParameter("give one of --oracle and --scripted, not both")
    if not (oracle or scripted is not None or settings.model):
        raise typer.BadParameter(
            "no model is configured: pass --model (e.g. --model openai/gpt-4o-mini) or set "
            "ASSAY_MODEL, or check the plumbing with --oracle"
        )
    if not oracle and scripted is None:
        from assay.commands.evaluate import require_model_key, require_routable_model

        require_routable_model(settings.model or "", settings.api_base, model is not None)
        require_model_key(settings)
    from assay.eval.runner import Caps
    from assay.eval.session import EvalPlan

    plan = EvalPlan(
        suite=selected,
        settings=settings,
        budget=flags.budget(),
        repeat=repeat,
        concurrency=concurrency,
        caps=Caps(tokens=token_cap, cost_usd=cost_cap),
        baseline=not no_baseline,
        oracle_arm=not no_oracle,
        scripted=scripted,
        oracle_as_model=oracle,
    )
    path = out or Path(f"eval-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json")
    for target, flag in ((path, "--out"), (chart, "--chart")):
        if target is not None:
            _check_writable(target, flag)
    report = _run(plan)
    from assay.eval.report import render_report

    render_report(report, stdout)
    _write(report, path, chart)
    from assay.eval.runner import INTERRUPTED

    raise typer.Exit(EXIT_INTERRUPTED if report.stopped == INTERRUPTED else 0)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


def _configure_logging(settings: AssaySettings) -> None:
    """Engine logs go to stderr, warnings only unless a log level was asked for."""
    from assay.eval import seam

    if "log_level" not in settings.model_fields_set:
        settings = settings.model_copy(update={"log_level": "WARNING"})
    seam.configure_logging(settings)


def _load_suite(path: Path | None, only: list[str]) -> Suite:
    from assay.eval.suite import DEFAULT_SUITE, SuiteError, load_suite

    if path is None and not DEFAULT_SUITE.is_dir():
        raise typer.BadParameter(
            "the shipped suite (examples/eval/cases in the assay repository) is not next to "
            "this installation: pass --suite PATH",
            param_hint="--suite",
        )
    try:
        return load_suite(path or DEFAULT_SUITE).select(only)
    except SuiteError as exc:
        raise typer.BadParameter(str(exc), param_hint="--suite") from None


def _with_suite_roots(settings: AssaySettings, suite: Suite) -> AssaySettings:
    """The settings with the suite's own snapshot folders added to the snapshot roots.

    The suite names its snapshots (relative to its case files); they are what the run
    reads, wherever it is started from. Otherwise, outside the checkout every case would
    end cannot_determine ("outside the snapshot roots") and the report would measure
    nothing while looking like a result.
    """
    folders = sorted({case.snapshot for case in suite.cases})
    current = settings.snapshot_roots if settings.snapshot_roots is not None else [Path.cwd()]
    return settings.model_copy(update={"snapshot_roots": [*current, *folders]})


def _check_suite(suite: Suite, settings: AssaySettings, console: Console) -> int:
    from assay.eval.suite import check_suite

    problems = check_suite(suite, settings)
    for problem in problems:
        console.print(visible_line(problem), markup=False)
    info = suite.info()
    labels = ", ".join(f"{count} {label}" for label, count in info.labels.items())
    verdict = f"{len(problems)} problem(s)" if problems else "every case is supported by its data"
    said = f"suite {info.name}: {info.cases} cases ({labels}); {verdict}"
    console.print(visible_line(said), markup=False)
    return 1 if problems else 0


def _run(plan: EvalPlan) -> EvalReport:
    from rich.console import Console

    from assay.eval.progress import EvalProgress
    from assay.eval.session import cost_cap_note, run_eval

    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    if (note := cost_cap_note(plan)) is not None:
        errors.print(visible_line(f"warning: {note}"), markup=False)
    if plan.scripted is not None:
        errors.print(f"SCRIPTED MODEL - replaying {plan.scripted}, not a real LLM", markup=False)
    if plan.oracle_as_model:
        errors.print("SCRIPTED ORACLE - the suite's own labels, not a real LLM", markup=False)
    with EvalProgress(plan.totals(), errors) as progress:
        return run_eval(plan, on_done=progress.advance)


def _check_writable(path: Path, flag: str) -> None:
    """Refuse a path the report could not be written to before spending anything on a run."""
    import os

    parent = path.resolve().parent
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a folder: give a file path", param_hint=flag)
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise typer.BadParameter(
            f"cannot write {path}: folder {parent} does not exist or is not writable",
            param_hint=flag,
        )


def _write(report: EvalReport, path: Path, chart: Path | None) -> None:
    """Write the report (and chart); if that fails after all, keep the report in a temp file."""
    import tempfile

    from assay.eval.chart import render_chart
    from assay.eval.report import save_report

    try:
        save_report(report, path)
    except OSError as exc:
        fallback = Path(tempfile.gettempdir()) / path.name
        save_report(report, fallback)
        print(
            f"could not write {path} ({exc.strerror or exc}); the report is in {fallback}",
            file=sys.stderr,
        )
    else:
        print(f"report written to {path}", file=sys.stderr)
    if chart is not None:
        chart.write_text(render_chart([("", report)]), encoding="utf-8")
        print(f"chart written to {chart}", file=sys.stderr)


def _compare(paths: tuple[Path, Path], chart: Path | None, console: Console) -> int:
    from assay.eval.chart import render_chart
    from assay.eval.report import (
        ReportError,
        comparison_warning,
        load_report,
        render_comparison,
    )

    try:
        first, second = (load_report(path) for path in paths)
    except ReportError as exc:
        raise typer.BadParameter(str(exc), param_hint="--compare") from None
    if (warning := comparison_warning(first, second)) is not None:
        print_line(f"assay: warning: {warning}", sys.stderr)
    render_comparison(first, second, console)
    if chart is not None:
        chart.write_text(render_chart([("A: ", first), ("B: ", second)]), encoding="utf-8")
    return 0
