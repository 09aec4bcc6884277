"""How the fleet's tables look on a terminal: history, checks, batch tally and results.

Single verdicts and run reports are drawn by ``assay.render`` (shared with
`assay check`); this module adds the many-row views of the fleet commands.

Every table fits 80 columns by default: one line per row (``assay.render.line_table``:
rich cuts long cells with an ellipsis, ids and targets giving way before the predicate or
explanation), run and batch ids shortened to their first 8 characters (after a ``batch-``
or ``chk-``), and rows sorted failures first (false, poorly posed, cannot determine,
pending, true). A cut id can be pasted back: every command taking a run, check or batch
id takes a unique prefix of one (``assay.id_prefixes``). ``wide=True`` (the commands'
``--wide``) adds full ids and the longer columns, on a console as wide as the cells
(``fleet_common.stdout_console``), piped or not. Piped output has no box drawing
(``assay.render.make_table``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from rich.console import Console
from rich.text import Text

from assay.render import VERDICT_STYLES, Col, add_line, line_table, make_table, safe_markup
from schemas.fleet import BatchResult, BatchStatus, CheckSummary
from schemas.spend import CeilingState, ScopeSpend, SpendReport, dollars
from schemas.verdict import Verdict, VerdictKind

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


def short_id(value: str, wide: bool) -> str:
    """``value`` cut to :data:`SHORT_ID_CHARS` characters after its kind (``batch-``,
    ``chk-``, ``sch-``), with an ellipsis; whole with ``wide``. The cut id is a prefix the
    commands take back."""
    kind, dash, _rest = value.partition("-")
    keep = SHORT_ID_CHARS + (len(kind) + 1 if dash and kind.isalpha() and len(kind) <= 6 else 0)
    return value if wide or len(value) <= keep + 1 else value[:keep] + "…"


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


def render_history(verdicts: list[Verdict], console: Console, wide: bool = False) -> None:
    table = line_table(
        console, Col("finished"), Col("verdict"), Col("run"), Col("steps"),
        Col("explanation", "main", least=20), wide=wide,
    )  # fmt: skip
    for verdict in verdicts:
        add_line(
            table,
            verdict.finished_at.strftime("%Y-%m-%d %H:%M:%S"),
            verdict_cell(verdict.verdict),
            short_id(verdict.run_id, wide),
            str(verdict.iterations),
            safe_markup(verdict.reason or verdict.explanation),
        )
    console.print(table, soft_wrap=False)


PREDICATE_MIN_CHARS = 24  # what the predicate keeps at 80 columns; ids and targets give way


def render_checks(
    rows: list[CheckSummary], console: Console, wide: bool = False, changes: bool = False
) -> None:
    """One line per check, failures first: its id, verdict, target, age and predicate.

    ``changes`` (``--changed-since``: the rows are verdict changes) shows what each row's
    verdict was before, and when it changed, in place of the age; ``wide`` shows both,
    and every id, target and predicate in full. At 80 columns the predicate keeps at
    least :data:`PREDICATE_MIN_CHARS`: check ids and targets are cut to make room (a cut
    check id is a prefix the commands take back).
    """
    when = [Col("age"), Col("changed")] if wide else [Col("changed")] if changes else [Col("age")]
    table = line_table(
        console, Col("check", "gives"), Col("verdict"), Col("target", "gives"), *when,
        Col("predicate", "main", least=PREDICATE_MIN_CHARS), wide=wide,
    )  # fmt: skip
    ranked = sorted(rows, key=lambda row: failures_first(row.verdict))
    for row in ranked:
        change = _change(row, wide)
        cells = [age(row.finished_at)] if wide or not changes else []
        cells += [safe_markup(change)] if wide or changes else []
        add_line(
            table,
            safe_markup(row.check_id),
            verdict_cell(row.verdict),
            safe_markup(row.target),
            *cells,
            safe_markup(row.text),
        )
    console.print(table, soft_wrap=False)
    console.print(f"[dim]{len(rows)} check(s)[/]")


def _change(row: CheckSummary, wide: bool) -> str:
    """``true → false, 3m ago`` (``wide``) or ``was true 3m``; ``-`` for no change."""
    if row.changed_at is None or row.previous_verdict is None:
        return "-"
    before = row.previous_verdict.value
    if wide:
        return f"{before} → {row.verdict.value}, {age(row.changed_at)} ago"
    return f"was {before} {age(row.changed_at)}"


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
    # The id, state and counts are never cut (an incomplete batch's reason is the news); the
    # predicate fills what is left of the line and gives way first.
    head = Text(f"batch {status.batch_id} · {state} · {finished}/{status.total} done")
    room = console.width - head.cell_len - 3
    if room >= 10:
        text = Text(status.text)
        text.truncate(room, overflow="ellipsis")
        head.append(" · ").append(text)
    console.print(head, soft_wrap=True)
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
    table = line_table(
        console, Col("target", "gives"), Col("verdict"), *([Col("run")] if wide else []),
        Col("explanation", "main", least=20), wide=wide,
    )  # fmt: skip
    for row in rows:
        add_line(
            table,
            safe_markup(row.target),
            verdict_cell(row.verdict),
            *([row.run_id] if wide else []),
            safe_markup(row.explanation or ""),
        )
    console.print(table, soft_wrap=False)
    return len(rows)


# --- spend (assay spend, schedule show, batch status, checks) -------------------------------------


def _ceiling_text(ceiling: CeilingState) -> str:
    if ceiling.resource == "tokens":
        text = f"{int(ceiling.limit):,} tokens"
        left = f"{int(ceiling.remaining):,} left"
    else:
        text, left = dollars(ceiling.limit), f"{dollars(ceiling.remaining)} left"
    return f"{text} ({'reached' if ceiling.reached else left})"


def spend_summary(spend: ScopeSpend) -> str:
    """One line: what was spent, each ceiling and what is left of it, the skipped fires.

    ``12,345 tokens, $0.41 · ceiling 50,000 tokens (37,655 left) · 3 fires skipped``
    """
    parts = [f"{spend.tokens:,} tokens, {dollars(spend.cost_usd)}"]
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
        left, limit = dollars(ceiling.remaining), dollars(ceiling.limit)
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
            dollars(row.cost_usd),
            *([str(row.calls)] if wide else []),
            str(row.refused),
            f"{row.skipped_fires:,}" if row.scope == "schedule" else "-",
            ", ".join(_ceiling_cell(c, wide) for c in row.ceilings) or "-",
        ]
        for row in report.rows
    ]
    numbers = ["tokens", "cost", *(["calls"] if wide else []), "stops", "skips"]
    table = line_table(
        console, Col("day"), Col("scope", "gives", most=16),
        *(Col(header, justify="right") for header in numbers), Col("left", "main", least=8),
        wide=wide,
    )  # fmt: skip
    for cells in rows:
        add_line(table, *cells)
    console.print(table, soft_wrap=False)
    if not report.rows:
        console.print("no model calls recorded in this period")
