"""How the fleet's tables look on a terminal: history, checks, batch tally and results.

Single verdicts and run reports are drawn by ``assay.render`` (shared with
`assay check`); this module adds the many-row views of the fleet commands.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from assay.render import VERDICT_STYLES
from schemas.fleet import BatchResult, BatchStatus, CheckSummary
from schemas.verdict import Verdict, VerdictKind

TEXT_CELL_CHARS = 60
WIDE_TERMINAL = 140


def verdict_cell(kind: VerdictKind | None) -> str:
    if kind is None:
        return "[dim]pending[/]"
    label, style = VERDICT_STYLES[kind]
    return f"[{style}]{label}[/]"


def age(instant: datetime | None, now: datetime | None = None) -> str:
    """``42s``, ``5m``, ``3h``, ``2d``: how long ago."""
    if instant is None:
        return "-"
    seconds = max(0.0, ((now or datetime.now(UTC)) - instant).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _cut(text: str, limit: int = TEXT_CELL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_history(verdicts: list[Verdict], console: Console) -> None:
    table = Table("finished", "verdict", "run", "steps", "explanation", title="history")
    for column in table.columns[:3]:
        column.no_wrap = True
    for verdict in verdicts:
        table.add_row(
            verdict.finished_at.strftime("%Y-%m-%d %H:%M:%S"),
            verdict_cell(verdict.verdict),
            verdict.run_id,
            str(verdict.iterations),
            escape(_cut(verdict.reason or verdict.explanation)),
        )
    console.print(table)


def render_checks(rows: list[CheckSummary], console: Console) -> None:
    table = Table("check", "verdict", "target", "age", "changed", "predicate")
    for column in table.columns[:4]:
        column.no_wrap = True
    for row in rows:
        changed = "-"
        if row.changed_at is not None and row.previous_verdict is not None:
            changed = (
                f"{row.previous_verdict.value} → {row.verdict.value}, {age(row.changed_at)} ago"
            )
        table.add_row(
            row.check_id,
            verdict_cell(row.verdict),
            escape(row.target),
            age(row.finished_at),
            escape(changed),
            escape(_cut(row.text)),
        )
    console.print(table)
    console.print(f"[dim]{len(rows)} check(s)[/]")


def render_batch_status(status: BatchStatus, console: Console) -> None:
    state = "done" if status.done else ("running" if status.sealed else "enqueueing")
    console.print(
        f"batch {status.batch_id} · {state} · {status.total} target(s) · "
        f"{escape(_cut(status.text, 100))}"
    )
    table = Table("pending", "true", "false", "poorly posed", "cannot determine")
    table.add_row(
        str(status.pending),
        str(status.true),
        str(status.false),
        str(status.poorly_posed),
        str(status.cannot_determine),
    )
    console.print(table)


def render_batch_results(results: Iterable[BatchResult], console: Console) -> int:
    """Stream the per-target table (rows arrive page by page); returns the row count.

    Run ids take a column only on a wide terminal; `assay batch results ID --json`
    always has them.
    """
    wide = console.width >= WIDE_TERMINAL
    table = Table("target", "verdict", "explanation", *(["run"] if wide else []))
    table.columns[0].no_wrap = True
    table.columns[1].no_wrap = True
    count = 0
    for row in results:
        cells = [
            escape(row.target),
            verdict_cell(row.verdict),
            escape(_cut(row.explanation or "", 200)),
        ]
        table.add_row(*cells, *([row.run_id] if wide else []))
        count += 1
    console.print(table)
    return count
