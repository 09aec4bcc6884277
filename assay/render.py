"""How verdicts and run reports look on a terminal (rich) and as `assay query` JSON.

Shared by `assay check` / `assay query`, and later `submit --wait`, `verdict`
and `run`, so every command shows a verdict the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from assay.commands.fleet_common import iso_utc
from assay.terminal_text import visible
from schemas.report import RunReport, Step
from schemas.verdict import Verdict, VerdictKind

VERDICT_STYLES: dict[VerdictKind, tuple[str, str]] = {
    VerdictKind.TRUE: ("TRUE", "bold green"),
    VerdictKind.FALSE: ("FALSE", "bold red"),
    VerdictKind.POORLY_POSED: ("POORLY POSED", "bold yellow"),
    VerdictKind.CANNOT_DETERMINE: ("CANNOT DETERMINE", "bold magenta"),
}


def safe_markup(text: str) -> str:
    """Untrusted text as rich markup that prints literally: controls spelled out, markup escaped."""
    return escape(visible(text))


def make_table(console: Console, *headers: str, **options: Any) -> Table:
    """A table with box lines on a terminal, plain aligned columns when piped.

    Piped output is read by grep, awk and people's scripts: no box drawing
    characters, no colour (rich drops styles when stdout is not a terminal).
    """
    from rich import box

    style = box.SIMPLE_HEAVY if console.is_terminal else None
    return Table(*headers, box=style, **options)


Fit = Literal["kept", "gives", "main"]


@dataclass(frozen=True)
class Col:
    """A column of a table that keeps one line per row (:func:`line_table`).

    ``fit`` says what happens when a row is longer than the console: a ``kept`` column
    (a verdict, an age, a count) stays whole; a ``gives`` column (an id, a target, a
    name) gives way, the widest of them first (rich's own narrowing), its cells cut with
    an ellipsis; the ``main`` column (a predicate, an explanation, an excerpt) takes
    what the others leave (a rich column ratio), never under ``least`` characters, cut
    with an ellipsis. ``most`` caps a ``gives`` column.
    """

    header: str
    fit: Fit = "kept"
    least: int | None = None
    most: int | None = None
    justify: Literal["left", "right"] = "left"


def line_table(console: Console, *columns: Col, wide: bool = False, **options: Any) -> Table:
    """A table with one line per row: it fits the console (80 columns when piped) by
    cutting cells with an ellipsis, never by wrapping them. With ``wide`` nothing is cut:
    every column is as wide as its longest cell (``fleet_common.stdout_console(wide=True)``
    is a console as wide as that). Rows go in with :func:`add_line`."""
    main = any(column.fit == "main" for column in columns)
    table = make_table(console, expand=main and not wide, **options)
    for column in columns:
        flexible = column.fit == "main" and not wide
        table.add_column(
            column.header,
            justify=column.justify,
            no_wrap=wide or column.fit != "gives",  # rich narrows only wrappable columns
            overflow="ellipsis",
            ratio=1 if flexible else None,
            width=column.least if flexible else None,
            max_width=None if wide else column.most,
        )
    return table


def add_line(table: Table, *cells: str) -> None:
    """A row of rich-markup cells, each kept to one line (cut with an ellipsis, whatever
    its column allows: see :class:`Col`)."""
    table.add_row(*(one_line(cell) for cell in cells))


def one_line(markup: str) -> Text:
    text = Text.from_markup(markup, overflow="ellipsis")
    text.no_wrap = True
    return text


def _short_json(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def usage_line(verdict: Verdict) -> str:
    usage = verdict.usage
    cost = "cost unknown" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    return (
        f"{verdict.iterations} steps · {usage.total_tokens} tokens "
        f"({usage.prompt_tokens} prompt + {usage.completion_tokens} completion) · {cost} · "
        f"{verdict.duration_seconds:.2f}s"
    )


def render_verdict(verdict: Verdict, console: Console, wide: bool = False) -> None:
    """The verdict as a person reads it: headline, explanation, evidence, cost of the run.

    The evidence keeps one line per citation at 80 columns (the lookup and the excerpt cut
    with an ellipsis); ``wide`` shows them whole."""
    label, style = VERDICT_STYLES[verdict.verdict]
    console.print(
        f"[{style}]{label}[/] (exit {verdict.exit_code}) · {safe_markup(verdict.kind)} "
        f"on {safe_markup(verdict.target)}"
    )
    console.print(safe_markup(verdict.explanation))
    if verdict.reason:
        console.print(f"[dim]reason:[/] {safe_markup(verdict.reason)}")
    if verdict.wake_at:
        console.print(f"[dim]wake at:[/] {iso_utc(verdict.wake_at)}")
    if verdict.findings:
        for finding in verdict.findings:
            console.print(f"  • {safe_markup(finding)}")
    if verdict.evidence:
        table = line_table(
            console,
            Col("step"),
            Col("lookup", "gives", most=40),
            Col("ok"),
            Col("found"),
            Col("excerpt", "main", least=20),
            wide=wide,
            show_edge=False,
            pad_edge=False,
        )
        for item in verdict.evidence:
            found = "structured" if item.structured else "yes" if item.verified else "no"
            arguments = json.dumps(item.arguments, sort_keys=True, separators=(",", ":"))
            add_line(
                table,
                str(item.step),
                safe_markup(f"{item.tool} {arguments}"),
                "yes" if item.ok else "no",
                found,
                safe_markup(" ".join(item.excerpt.split())),  # an excerpt's lines on one
            )
        console.print(table, soft_wrap=False)
    if verdict.confirmed is not None:
        outcome = "confirmed" if verdict.confirmed else "not confirmed"
        console.print(f"[dim]strict: {outcome} by a separate look at the cited evidence[/]")
    console.print(
        f"[dim]{safe_markup(usage_line(verdict))} · model {safe_markup(verdict.model)} · "
        f"profile {verdict.profile} · run {verdict.run_id}[/]"
    )


def step_line(step: Step) -> str:
    """One line per step, for --trace and `assay run`."""
    usage = step.usage
    cost = f"{usage.total_tokens} tok, {usage.latency_seconds:.2f}s"
    if step.kind == "COMMAND":
        outcome = "ok" if step.ok else "failed"
        head = f"{step.tool} {_short_json(step.arguments)} -> {outcome}"
    elif step.kind in ("MALFORMED", "REPAIR"):
        head = f"rejected: {step.error}"
    elif step.action:
        body = {k: v for k, v in step.action.items() if k != "action"}
        head = _short_json(body, 120)
    else:
        head = step.error or ""
    return f"[step {step.index}] {step.kind} {head} ({cost})"


def render_report(report: RunReport, console: Console, wide: bool = False) -> None:
    """Every step of a run, one line each (cut with an ellipsis at the console's width;
    ``wide``: whole), then its verdict (or that it is still waiting)."""
    console.print(f"run {report.run_id} · check {report.check_id} · status {report.status}")
    if report.repeat_of:
        console.print(
            f"found exactly what run {report.repeat_of} found: its report, with this run's "
            "own id and times"
        )
    for step in report.steps:
        console.print(
            safe_markup(step_line(step)), no_wrap=not wide, overflow="ellipsis", crop=not wide
        )
    if report.verdict is not None:
        render_verdict(report.verdict, console, wide=wide)
    elif report.wake_at is not None:
        console.print(f"waiting until {iso_utc(report.wake_at)}")


def render_answer(report: RunReport, console: Console) -> None:
    """An `assay query` answer as a person reads it: the answer, its findings, the lookups."""
    answer = query_summary(report)
    verdict = report.verdict
    label = "ANSWERED" if answer["success"] else "NOT ANSWERED"
    style = "bold green" if answer["success"] else "bold magenta"
    exit_code = verdict.exit_code if verdict is not None else 3
    console.print(f"[{style}]{label}[/] (exit {exit_code})")
    console.print(safe_markup(str(answer["summary"])))
    for finding in answer["findings"]:
        console.print(f"  • {safe_markup(str(finding))}")
    tools = ", ".join(answer["tools_used"]) or "none"
    console.print(f"[dim]lookups: {safe_markup(tools)} · {answer['iterations']} steps[/]")
    if verdict is not None:
        console.print(
            f"[dim]{safe_markup(usage_line(verdict))} · model {safe_markup(verdict.model)} · "
            f"run {verdict.run_id}[/]"
        )


def query_summary(report: RunReport) -> dict[str, Any]:
    """The `assay query` answer: {success, summary, findings, tools_used, iterations, usage}."""
    verdict = report.verdict
    tools_used: list[str] = []
    for step in report.steps:
        if step.kind == "COMMAND" and step.tool and step.tool not in tools_used:
            tools_used.append(step.tool)
    if verdict is None:
        return {
            "success": False,
            "summary": "the run has not finished",
            "findings": [],
            "tools_used": tools_used,
            "iterations": len(report.steps),
            "usage": {},
        }
    summary = verdict.explanation
    if verdict.verdict != VerdictKind.TRUE and verdict.reason:
        summary = f"{summary} ({verdict.reason})"
    return {
        "success": verdict.verdict == VerdictKind.TRUE,
        "summary": summary,
        "findings": verdict.findings,
        "tools_used": tools_used,
        "iterations": verdict.iterations,
        "usage": verdict.usage.model_dump(mode="json"),
    }
