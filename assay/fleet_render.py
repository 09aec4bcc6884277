"""How the fleet's tables look on a terminal: history, checks, batch tally and results.

Single verdicts and run reports are drawn by ``assay.render`` (shared with
`assay check`); this module adds the many-row views of the fleet commands.

Every table fits 80 columns by default: one line per row (long text is cut
with an ellipsis), run ids shortened to their first 8 characters, and rows
sorted failures first (false, poorly posed, cannot determine, pending, true).
``wide=True`` (the commands' ``--wide``) adds full ids and the longer columns, on
a console as wide as the cells (``fleet_common.stdout_console``), piped or not.
Piped output has no box drawing (``assay.render.make_table``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from rich.console import Console
from rich.padding import Padding
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


def keep_whole(
    table: Table, widths: list[int], console: Console, *, wide: bool = False, last_min: int = 12
) -> int | None:
    """Give every column but the last its width (never less than its header's), and the
    last one exactly what is left of the console's width, at least ``last_min``: a row
    stays one line at 80 columns. Returns the last column's width, to cut its text to;
    None with ``wide``, where the last column is as wide as its longest cell.

    Fixed widths, not rich's own fitting: a table wider than the console makes rich
    shrink every column, down to dropping narrow ones (a check id, an age) entirely.
    """
    for column, width in zip(table.columns[:-1], widths, strict=False):
        column.no_wrap = True
        column.width = max(width, len(str(column.header)))
    last = table.columns[-1]
    last.no_wrap = True
    last.overflow = "ellipsis"
    if wide:
        return None
    used = sum(column.width or 0 for column in table.columns[:-1]) + _overhead(table)
    last.width = max(last_min, len(str(last.header)), console.width - used)
    return last.width


def _overhead(table: Table) -> int:
    """The characters a table adds to its cells' widths: padding, edges, separators."""
    count = len(table.columns)
    _top, right, _bottom, left = Padding.unpack(table.padding)
    edges = 2 if table.box and table.show_edge else 0
    separators = count - 1 if table.box else 0
    return edges + separators + count * (left + right)


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


def _cut(text: str, limit: int | None = TEXT_CELL_CHARS) -> str:
    """``text`` cut with an ellipsis to ``limit`` characters (None: whole)."""
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def render_history(verdicts: list[Verdict], console: Console, wide: bool = False) -> None:
    table = make_table(console, "finished", "verdict", "run", "steps", "explanation")
    run_width = max((len(short_id(v.run_id, wide)) for v in verdicts), default=3)
    room = keep_whole(table, [19, VERDICT_WIDTH, run_width, 5], console, wide=wide)
    for verdict in verdicts:
        table.add_row(
            verdict.finished_at.strftime("%Y-%m-%d %H:%M:%S"),
            verdict_cell(verdict.verdict),
            short_id(verdict.run_id, wide),
            str(verdict.iterations),
            safe_markup(_cut(verdict.reason or verdict.explanation, room)),
        )
    console.print(table, soft_wrap=False)


PREDICATE_MIN_CHARS = 24  # what the predicate keeps at 80 columns; ids and targets give way
NAME_MIN_CHARS = 10  # the least a check id or a target is cut to


def render_checks(
    rows: list[CheckSummary], console: Console, wide: bool = False, changes: bool = False
) -> None:
    """One line per check, failures first: its id, verdict, target, age and predicate.

    ``changes`` (``--changed-since``: the rows are verdict changes) shows what each row's
    verdict was before, and when it changed, in place of the age; ``wide`` shows both,
    and every id, target and predicate in full. At 80 columns the predicate keeps at
    least :data:`PREDICATE_MIN_CHARS`: check ids and targets are cut to make room.
    """
    changed = [_change(row, wide) for row in rows]
    headers = ["check", "verdict", "target"]
    headers += ["age", "changed"] if wide else ["changed"] if changes else ["age"]
    table = make_table(console, *headers, "predicate")
    labels = [_verdict_label(row.verdict) for row in rows]
    fixed = [max(map(len, ["verdict", *labels]))]
    if wide or not changes:
        fixed.append(4)
    if wide or changes:
        fixed.append(max(map(len, ["changed", *changed])))
    check_width = max([len("check"), *(len(row.check_id) for row in rows)])
    target_width = max([len("target"), *(len(row.target) for row in rows)])
    if not wide:
        free = console.width - _overhead(table) - sum(fixed)
        check_width, target_width = _share(free - PREDICATE_MIN_CHARS, check_width, target_width)
    room = keep_whole(table, [check_width, fixed[0], target_width, *fixed[1:]], console, wide=wide)
    ranked = sorted(zip(rows, changed, strict=True), key=lambda rc: failures_first(rc[0].verdict))
    for row, change in ranked:
        when = [age(row.finished_at)] if wide or not changes else []
        table.add_row(
            safe_markup(row.check_id if wide else _cut(row.check_id, check_width)),
            verdict_cell(row.verdict),
            safe_markup(row.target if wide else _cut(row.target, target_width)),
            *when,
            *([safe_markup(change)] if wide or changes else []),
            safe_markup(_cut(row.text, room)),
        )
    console.print(table, soft_wrap=False)
    console.print(f"[dim]{len(rows)} check(s)[/]")


def _verdict_label(kind: VerdictKind | None) -> str:
    return "pending" if kind is None else VERDICT_STYLES[kind][0]


def _change(row: CheckSummary, wide: bool) -> str:
    """``true → false, 3m ago`` (``wide``) or ``was true 3m``; ``-`` for no change."""
    if row.changed_at is None or row.previous_verdict is None:
        return "-"
    before = row.previous_verdict.value
    if wide:
        return f"{before} → {row.verdict.value}, {age(row.changed_at)} ago"
    return f"was {before} {age(row.changed_at)}"


def _share(room: int, first: int, second: int) -> tuple[int, int]:
    """Widths for two cut-able columns wanting ``first`` and ``second`` within ``room``
    (each at least :data:`NAME_MIN_CHARS`, or its whole width when that is less)."""
    if first + second <= room:
        return first, second
    floor_first, floor_second = min(first, NAME_MIN_CHARS), min(second, NAME_MIN_CHARS)
    half = max(room // 2, NAME_MIN_CHARS)
    if first <= half:
        return first, max(floor_second, room - first)
    if second <= half:
        return max(floor_first, room - second), second
    return max(floor_first, half), max(floor_second, room - half)


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
    table = make_table(console, "target", "verdict", *(["run"] if wide else []), "explanation")
    widths = [max((len(row.target) for row in rows), default=6), VERDICT_WIDTH]
    if wide:
        widths.append(max((len(row.run_id) for row in rows), default=3))
    room = keep_whole(table, widths, console, wide=wide)
    for row in rows:
        table.add_row(
            safe_markup(row.target),
            verdict_cell(row.verdict),
            *([row.run_id] if wide else []),
            safe_markup(_cut(row.explanation or "", room)),
        )
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
        parts.append(_count(spend.refused, "call") + " stopped")
    if spend.skipped_fires:
        parts.append(_count(spend.skipped_fires, "fire") + " skipped")
    if spend.expired:
        parts.append(
            _count(spend.expired, "reservation") + f" of stopped workers charged "
            f"({spend.expired_tokens:,} tokens)"
        )
    return " · ".join(parts)


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}" + ("" if n == 1 else "s")


def _short(value: float) -> str:
    """``155k``, ``1.2M``: a token count in a narrow cell."""
    for size, unit in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}"


def _ceiling_cell(ceiling: CeilingState, wide: bool) -> str:
    """One ceiling in a table cell: ``155k left`` / ``reached`` (``wide``: ``155k of 200k
    left`` / ``reached (50k)``)."""
    if ceiling.resource == "tokens":
        left, limit = _short(ceiling.remaining), _short(ceiling.limit)
    else:
        left, limit = _money(ceiling.remaining), _money(ceiling.limit)
    if not wide:
        return "reached" if ceiling.reached else f"{left} left"
    return f"reached ({limit})" if ceiling.reached else f"{left} of {limit} left"


def _scope_cell(row: ScopeSpend, wide: bool) -> str:
    if row.scope == "fleet":
        return "fleet"
    if row.scope == "schedule":
        name = row.name or row.scope_id or ""
        return f"schedule {name}" + (f" ({row.scope_id})" if wide and row.name else "")
    return f"batch {short_id(row.scope_id or '', wide)}"


def render_spend(report: SpendReport, console: Console, wide: bool = False) -> None:
    """`assay spend`: the fleet's hour and day now, then spend by UTC day and scope.

    80 columns by default (the scope cut, the ceilings' cell last and cut); ``wide`` adds
    the calls admitted, full ids and whole cells.
    """
    for now in report.fleet_now:
        period = f"this hour ({now.period} UTC)" if "T" in now.period else f"today ({now.period})"
        console.print(f"fleet {period}: {safe_markup(spend_summary(now))}")
    rows = [
        [
            row.period,
            safe_markup(_scope_cell(row, wide)),
            f"{row.tokens:,}",
            _money(row.cost_usd),
            *([str(row.calls)] if wide else []),
            str(row.refused),
            f"{row.skipped_fires:,}" if row.scope == "schedule" else "-",
            ", ".join(_ceiling_cell(c, wide) for c in row.ceilings) or "-",
        ]
        for row in report.rows
    ]
    headers = ["day", "scope", "tokens", "cost", *(["calls"] if wide else []), "stops",
               "skips", "left"]  # fmt: skip
    table = make_table(console, *headers)
    numbers = range(2, len(headers) - 1)
    for index in numbers:
        table.columns[index].justify = "right"
    if not wide:
        widths = [max([len(headers[i]), *(len(r[i]) for r in rows)]) for i in range(len(headers))]
        widths[1] = min(widths[1], 16)  # the scope gives way first, then the ceilings' cell
        keep_whole(table, widths, console)
        table.columns[1].overflow = "ellipsis"
    for cells in rows:
        table.add_row(*cells)
    console.print(table, soft_wrap=False)
    if not report.rows:
        console.print("no model calls recorded in this period")
