"""How the fleet's tables look on a terminal: history, checks, batch tally and results.

Single verdicts and run reports are drawn by ``assay.render`` (shared with
`assay check`); this module adds the many-row views of the fleet commands.

Every table fits 80 columns by default: one line per row (long text is cut
with an ellipsis), run ids shortened to their first 8 characters, and rows
sorted failures first (false, poorly posed, cannot determine, pending, true).
``wide=True`` (the commands' ``--wide``) adds full ids and the longer columns.
Piped output has no box drawing (``assay.render.make_table``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from assay.render import VERDICT_STYLES, make_table, safe_markup
from schemas.fleet import BatchResult, BatchStatus, CheckSummary
from schemas.spend import CeilingState, ScopeSpend, SpendReport
from schemas.verdict import Verdict, VerdictKind

TEXT_CELL_CHARS = 60
SHORT_ID_CHARS = 8
# Failures first: what a person scanning the table must act on comes on top.
VERDICT_ORDER: dict[VerdictKind | None, int] = {
    VerdictKind.FALSE: 0,
    VerdictKind.POORLY_POSED: 1,
    VerdictKind.CANNOT_DETERMINE: 2,
    None: 3,
    VerdictKind.TRUE: 4,
}


def failures_first(rank: VerdictKind | None) -> int:
    return VERDICT_ORDER.get(rank, 3)


VERDICT_WIDTH = max(len(label) for label, _style in VERDICT_STYLES.values())


def keep_whole(table: Table, widths: list[int]) -> None:
    """Give every column but the last its full width; the last one takes what is left
    (cut with an ellipsis), so a row stays one line at 80 columns."""
    for column, width in zip(table.columns[:-1], widths, strict=False):
        column.no_wrap = True
        column.min_width = width


def short_id(value: str, wide: bool) -> str:
    return value if wide or len(value) <= SHORT_ID_CHARS + 1 else value[:SHORT_ID_CHARS] + "…"


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


def render_history(verdicts: list[Verdict], console: Console, wide: bool = False) -> None:
    table = make_table(console, "finished", "verdict", "run", "steps", "explanation")
    run_width = max((len(short_id(v.run_id, wide)) for v in verdicts), default=3)
    keep_whole(table, [19, VERDICT_WIDTH, run_width, 5])
    table.columns[4].no_wrap = not wide
    table.columns[4].overflow = "ellipsis"
    for verdict in verdicts:
        table.add_row(
            verdict.finished_at.strftime("%Y-%m-%d %H:%M:%S"),
            verdict_cell(verdict.verdict),
            short_id(verdict.run_id, wide),
            str(verdict.iterations),
            safe_markup(
                _cut(verdict.reason or verdict.explanation, 200 if wide else TEXT_CELL_CHARS)
            ),
        )
    console.print(table, soft_wrap=False)


def render_checks(rows: list[CheckSummary], console: Console, wide: bool = False) -> None:
    """One line per check, failures first; ``wide`` adds the last change and full text."""
    headers = ["check", "verdict", "target", "age", *(["changed"] if wide else []), "predicate"]
    table = make_table(console, *headers)
    ids = [row.check_id if wide else _cut(row.check_id, 24) for row in rows]
    keep_whole(
        table,
        [
            max((len(i) for i in ids), default=5),
            VERDICT_WIDTH,
            max((len(row.target) for row in rows), default=6),
            4,
            *([40] if wide else []),
        ],
    )
    table.columns[-1].no_wrap = not wide
    table.columns[-1].overflow = "ellipsis"
    for row in sorted(rows, key=lambda r: failures_first(r.verdict)):
        changed = "-"
        if row.changed_at is not None and row.previous_verdict is not None:
            changed = (
                f"{row.previous_verdict.value} → {row.verdict.value}, {age(row.changed_at)} ago"
            )
        table.add_row(
            safe_markup(row.check_id if wide else _cut(row.check_id, 24)),
            verdict_cell(row.verdict),
            safe_markup(row.target),
            age(row.finished_at),
            *([safe_markup(changed)] if wide else []),
            safe_markup(row.text if wide else _cut(row.text)),
        )
    console.print(table, soft_wrap=False)
    console.print(f"[dim]{len(rows)} check(s)[/]")


def batch_state(status: BatchStatus, now: datetime | None = None) -> str:
    """``done``, ``enqueueing``, ``running``, or ``waiting until T`` for a deferred batch;
    a batch whose fan-out stopped part way says so after it (``done, incomplete: ...``)."""
    state = _progress_state(status, now)
    if not status.incomplete:
        return state
    why = f" ({status.stop_reason})" if status.stop_reason else ""
    return (
        f"{state}, incomplete: the fan-out stopped after {status.total} targets{why}; "
        "the targets after them were not submitted"
    )


def _progress_state(status: BatchStatus, now: datetime | None) -> str:
    if status.done:
        return "done"
    if not status.sealed:
        return "enqueueing"
    if status.not_before is not None and status.not_before > (now or datetime.now(UTC)):
        return f"waiting until {status.not_before.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    return "running"


def render_batch_status(status: BatchStatus, console: Console) -> None:
    state = batch_state(status)
    finished = status.total - status.pending
    console.print(
        f"batch {status.batch_id} · {state} · {finished}/{status.total} done · "
        f"{safe_markup(_cut(status.text, 40))}"
    )
    table = make_table(console, "pending", "true", "false", "poorly posed", "cannot determine")
    table.add_row(
        str(status.pending),
        str(status.true),
        str(status.false),
        str(status.poorly_posed),
        str(status.cannot_determine),
    )
    console.print(table, soft_wrap=False)
    if status.spend is not None:
        console.print(f"spend: {safe_markup(spend_summary(status.spend))}")


def render_batch_results(
    results: Iterable[BatchResult], console: Console, wide: bool = False
) -> int:
    """The per-target table, failures first; returns the row count.

    Run ids take a column only with ``wide``; `assay batch results ID --json`
    always has them.
    """
    rows = sorted(results, key=lambda r: failures_first(r.verdict))
    table = make_table(console, "target", "verdict", "explanation", *(["run"] if wide else []))
    keep_whole(table, [max((len(row.target) for row in rows), default=6), VERDICT_WIDTH])
    table.columns[2].no_wrap = not wide
    table.columns[2].overflow = "ellipsis"
    for row in rows:
        cells = [
            safe_markup(row.target),
            verdict_cell(row.verdict),
            safe_markup(_cut(row.explanation or "", 200)),
        ]
        table.add_row(*cells, *([row.run_id] if wide else []))
    console.print(table, soft_wrap=False)
    return len(rows)


# --- spend (assay spend, schedule show, batch status, checks) -------------------------------------


def _money(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 or value == 0 else f"${value:,.4f}"


def _ceiling_text(ceiling: CeilingState) -> str:
    if ceiling.resource == "tokens":
        text = f"{int(ceiling.limit):,} tokens"
        left = f"{int(ceiling.remaining):,} left"
    else:
        text, left = _money(ceiling.limit), f"{_money(ceiling.remaining)} left"
    return f"{text} ({'reached' if ceiling.reached else left})"


def spend_summary(spend: ScopeSpend) -> str:
    """One line: what was spent, each ceiling and what is left of it, the skipped fires.

    ``12,345 tokens, $0.41 · ceiling 50,000 tokens (37,655 left) · 3 fires skipped``
    """
    parts = [f"{spend.tokens:,} tokens, {_money(spend.cost_usd)}"]
    if spend.unpriced_calls:
        parts[0] += f" (+{spend.unpriced_calls} calls at no known price)"
    if spend.ceilings:
        parts.append("ceiling " + ", ".join(_ceiling_text(c) for c in spend.ceilings))
    if spend.refused:
        parts.append(f"{spend.refused} calls stopped")
    if spend.skipped_fires:
        parts.append(f"{spend.skipped_fires:,} fires skipped")
    if spend.expired:
        parts.append(f"{spend.expired} reservations of stopped workers charged")
    return " · ".join(parts)


def _scope_cell(row: ScopeSpend, wide: bool) -> str:
    if row.scope == "fleet":
        return "fleet"
    if row.scope == "schedule":
        name = row.name or row.scope_id or ""
        return f"schedule {name}" + (f" ({row.scope_id})" if wide and row.name else "")
    return f"batch {short_id(row.scope_id or '', wide)}"


def render_spend(report: SpendReport, console: Console, wide: bool = False) -> None:
    """`assay spend`: the fleet's hour and day now, then spend by UTC day and scope."""
    for now in report.fleet_now:
        period = f"this hour ({now.period} UTC)" if "T" in now.period else f"today ({now.period})"
        console.print(f"fleet {period}: {safe_markup(spend_summary(now))}")
    headers = ["day", "scope", "tokens", "cost", "calls", "stopped", "skipped", "ceiling"]
    table = make_table(console, *headers)
    for column in table.columns[2:7]:
        column.justify = "right"
    table.columns[-1].overflow = "ellipsis"
    for row in report.rows:
        table.add_row(
            row.period,
            safe_markup(_scope_cell(row, wide)),
            f"{row.tokens:,}",
            _money(row.cost_usd),
            str(row.calls),
            str(row.refused),
            f"{row.skipped_fires:,}" if row.scope == "schedule" else "-",
            ", ".join(_ceiling_text(c) for c in row.ceilings) or "-",
        )
    console.print(table, soft_wrap=False)
    if not report.rows:
        console.print("no model calls recorded in this period")
