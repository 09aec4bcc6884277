"""The eval report: building it, saving and loading it, and printing it as tables.

The JSON file (``schemas.eval.EvalReport``) is the record; the tables are a
view of it, so ``--compare`` works from two files and prints the same rows.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console

from assay.eval.scoring import arm_metrics
from assay.eval.suite import Suite
from assay.render import make_table
from schemas.eval import ARM_TITLES, ArmMetrics, ArmReport, Attempt, EvalReport
from schemas.verdict import Usage, VerdictKind

MISSES_SHOWN = 10


class ReportError(ValueError):
    """A report file cannot be read; the message says which and why."""


def build_report(
    *,
    suite: Suite,
    model: str,
    scripted: bool,
    profile: str,
    repeat: int,
    concurrency: int,
    arms: dict[str, tuple[str, list[Attempt]]],
    spent: Usage,
    started_at: datetime,
    finished_at: datetime,
    skipped: int,
    stopped: str | None,
    token_cap: int | None,
    cost_cap_usd: float | None,
    notes: list[str],
    assay_version: str,
) -> EvalReport:
    """``arms`` maps an arm name to (the model it asked, its attempts)."""
    arm_reports = [
        ArmReport(
            arm=name,
            model=arm_model,
            metrics=arm_metrics(attempts),
            attempts=sorted(attempts, key=lambda a: (a.repeat, a.case_id)),
        )
        for name, (arm_model, attempts) in arms.items()
    ]
    return EvalReport(
        suite=suite.info(),
        model=model,
        scripted=scripted,
        profile=profile,
        repeat=repeat,
        concurrency=concurrency,
        token_cap=token_cap,
        cost_cap_usd=cost_cap_usd,
        complete=skipped == 0 and stopped is None,
        stopped=stopped,
        skipped=skipped,
        spent=spent,
        notes=notes,
        assay_version=assay_version,
        started_at=started_at,
        finished_at=finished_at,
        arms=arm_reports,
    )


def save_report(report: EvalReport, path: Path) -> None:
    """Write atomically, so an interrupted write never leaves half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(report.model_dump_json(indent=2))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_report(path: Path) -> EvalReport:
    try:
        return EvalReport.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"cannot read report {path}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the top level"
        raise ReportError(f"{path} is not an assay eval report ({where}: {first['msg']})") from None


# ----------------------------------------------------------------------------- tables

_ROWS: list[tuple[str, str]] = [
    ("accuracy", "accuracy"),
    ("false_true_rate", "false-true rate *"),
    ("false_false_rate", "false-false rate"),
    ("cannot_determine_rate", "cannot_determine rate"),
    ("stability", "stability"),
    ("tokens_per_case", "tokens / case"),
    ("cost_per_case_usd", "cost / case"),
    ("probe_compile_rate", "probe compile rate"),
    ("attempts", "attempts"),
]
_ARM_COLUMNS = {"engine": "engine", "no_tools": "no-tools", "oracle": "oracle"}
_LEGEND = (
    "* headline: of the attempts whose label is not true, the share answered true. "
    "engine: the model with lookups, through assay's engine; no-tools: the same model asked "
    "once, without lookups; oracle: scripted from the suite's labels (plumbing, not a model). "
    "Definitions: docs/eval.md."
)


def cell(metric: str, metrics: ArmMetrics) -> str:
    value = getattr(metrics, metric)
    if value is None:
        return "n/a"
    if metric == "tokens_per_case":
        return f"{value:,.0f}"
    if metric == "cost_per_case_usd":
        return f"${value:.4f}"
    if metric == "attempts":
        return str(value)
    return f"{value:.1%}"


def _heading(report: EvalReport) -> str:
    suite = report.suite
    scripted = " (SCRIPTED, not an LLM)" if report.scripted else ""
    return (
        f"assay eval: suite {suite.name} ({suite.cases} cases, {suite.digest[:12]}), "
        f"model {report.model}{scripted}, profile {report.profile}, repeat {report.repeat}"
    )


def render_report(report: EvalReport, console: Console) -> None:
    table = make_table(console, title=_heading(report), title_justify="left")  # plain if piped
    table.add_column("metric")
    for arm in report.arms:
        table.add_column(_ARM_COLUMNS.get(arm.arm, arm.arm), justify="right")
    for metric, title in _ROWS:
        table.add_row(title, *(cell(metric, arm.metrics) for arm in report.arms))
    console.print(table)
    console.print(_LEGEND, markup=False, style="dim")
    spent = report.spent
    cost = f", ${spent.cost_usd:.4f}" if spent.cost_usd is not None else ", cost unknown"
    console.print(f"model under test used {spent.total_tokens:,} tokens{cost}", markup=False)
    for arm in report.arms:
        _print_misses(arm, console)
    if not report.complete:
        console.print(
            f"PARTIAL: {report.stopped or 'stopped early'}; {report.skipped} attempts not run",
            markup=False,
            style="bold yellow",
        )
    for note in report.notes:
        console.print(f"note: {note}", markup=False)


def _print_misses(arm: ArmReport, console: Console) -> None:
    """The false trues by case id: the answers a deployment gate would have let through."""
    if arm.arm == "oracle" and arm.metrics.accuracy == 1.0:
        return
    misses = sorted(
        {a.case_id for a in arm.attempts if a.verdict == VerdictKind.TRUE and not a.correct}
    )
    if not misses:
        return
    shown = ", ".join(misses[:MISSES_SHOWN])
    more = f" and {len(misses) - MISSES_SHOWN} more" if len(misses) > MISSES_SHOWN else ""
    console.print(f"false trues ({arm.arm}): {shown}{more}", markup=False)


def comparison_warning(first: EvalReport, second: EvalReport) -> str | None:
    """Why two reports' figures are not directly comparable, or None (for stderr)."""
    if first.suite.digest == second.suite.digest:
        return None
    return (
        "the two reports ran different cases "
        f"({first.suite.name} {first.suite.digest[:12]}, {first.suite.cases} cases vs "
        f"{second.suite.name} {second.suite.digest[:12]}, {second.suite.cases} cases); "
        "figures are not directly comparable"
    )


def render_comparison(first: EvalReport, second: EvalReport, console: Console) -> None:
    """Two runs side by side, arm by arm, with the change from the first to the second."""
    arms = [a.arm for a in first.arms if second.arm(a.arm) is not None]
    if not arms:
        console.print("the two reports have no arm in common", markup=False)
        return
    for name in arms:
        a, b = first.arm(name), second.arm(name)
        assert a is not None and b is not None
        table = make_table(console, title=ARM_TITLES.get(name, name), title_justify="left")
        table.add_column("metric")
        table.add_column("A", justify="right")
        table.add_column("B", justify="right")
        table.add_column("B - A", justify="right")
        for metric, title in _ROWS:
            table.add_row(
                title, cell(metric, a.metrics), cell(metric, b.metrics), _change(metric, a, b)
            )
        console.print(table)
    for label, report in (("A", first), ("B", second)):
        partial = "" if report.complete else f", PARTIAL ({report.skipped} not run)"
        console.print(
            f"{label}: {report.model}, profile {report.profile}, repeat {report.repeat}, "
            f"{report.started_at:%Y-%m-%d %H:%M} UTC{partial}",
            markup=False,
        )


def _change(metric: str, a: ArmReport, b: ArmReport) -> str:
    before, after = getattr(a.metrics, metric), getattr(b.metrics, metric)
    if before is None or after is None:
        return ""
    delta = after - before
    if metric == "tokens_per_case":
        return f"{delta:+,.0f}"
    if metric == "cost_per_case_usd":
        return f"{delta:+.4f}"
    if metric == "attempts":
        return f"{delta:+d}"
    return f"{delta * 100:+.1f} pt"
