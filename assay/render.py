"""How verdicts and run reports look on a terminal (rich) and as `assay query` JSON.

Shared by `assay check` / `assay query`, and later `submit --wait`, `verdict`
and `run`, so every command shows a verdict the same way.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from assay.commands.fleet_common import iso_utc
from schemas.report import RunReport, Step
from schemas.verdict import Verdict, VerdictKind

VERDICT_STYLES: dict[VerdictKind, tuple[str, str]] = {
    VerdictKind.TRUE: ("TRUE", "bold green"),
    VerdictKind.FALSE: ("FALSE", "bold red"),
    VerdictKind.POORLY_POSED: ("POORLY POSED", "bold yellow"),
    VerdictKind.CANNOT_DETERMINE: ("CANNOT DETERMINE", "bold magenta"),
}


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with terminal control characters spelled out (ESC as ``\\x1b``).

    Why: an explanation, an excerpt or a step may quote the cluster (a log line),
    and an escape sequence printed as is moves the cursor, erases lines or sets
    the window title: a hostile cluster could rewrite the verdict a person sees.
    Rich drops a few controls (BEL, CR) but passes ESC through. Bidirectional
    overrides go too, for the same reason (text shown in another order).
    """
    return _CONTROL.sub(_spelled, text)


def _spelled(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


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


def render_verdict(verdict: Verdict, console: Console) -> None:
    """The verdict as a person reads it: headline, explanation, evidence, cost of the run."""
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
        table = make_table(
            console, "step", "lookup", "ok", "found", "excerpt", show_edge=False, pad_edge=False
        )
        for item in verdict.evidence:
            found = "structured" if item.structured else "yes" if item.verified else "no"
            table.add_row(
                str(item.step),
                safe_markup(f"{item.tool} {_short_json(item.arguments, 60)}"),
                "yes" if item.ok else "no",
                found,
                safe_markup(item.excerpt),
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


def render_report(report: RunReport, console: Console) -> None:
    """Every step of a run, then its verdict (or that it is still waiting)."""
    console.print(f"run {report.run_id} · check {report.check_id} · status {report.status}")
    if report.repeat_of:
        console.print(
            f"found exactly what run {report.repeat_of} found: its report, with this run's "
            "own id and times"
        )
    for step in report.steps:
        console.print(safe_markup(step_line(step)))
    if report.verdict is not None:
        render_verdict(report.verdict, console)
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
