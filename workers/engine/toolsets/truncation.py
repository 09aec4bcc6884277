"""The size cap on tool output, with an explicit marker when text was cut.

Every tool result is capped, so a prompt never grows past what the budget
allows; the marker ("... truncated, N more chars not shown") tells the model
that it did not see everything, so it can narrow the lookup instead of
concluding from a part.
"""

from __future__ import annotations

from workers.engine.toolsets.echo import Marked, clipped


def cap_text(text: str, limit: int, *, keep: str = "head") -> tuple[str, bool]:
    """Cut ``text`` to about ``limit`` chars on a line boundary, saying how much was cut.

    ``keep="tail"`` keeps the end (logs: the newest lines matter most).
    """
    capped, cut = cap_marked(Marked(text), limit, keep=keep)
    return capped.text, cut


def cap_marked(text: Marked, limit: int, *, keep: str = "head") -> tuple[Marked, bool]:
    """:func:`cap_text` for Marked text: the spans that repeat the model's arguments kept."""
    whole = text.text
    if len(whole) <= limit:
        return text, False
    budget = max(limit - 80, limit // 2)  # room for the marker
    if keep == "tail":
        start = len(whole) - budget if budget > 0 else 0
        newline = whole.find("\n", start)
        if 0 <= newline < len(whole) - 1:
            start = newline + 1
        kept = clipped(text, start, len(whole))
        omitted = len(whole) - len(kept)
        return f"... truncated, {omitted} earlier chars not shown\n" + kept, True
    end = budget
    newline = whole.rfind("\n", 0, budget)
    if newline > 0:
        end = newline + 1
    omitted = len(whole) - end
    kept = clipped(text, 0, end).rstrip()
    return kept + f"\n... truncated, {omitted} more chars not shown", True
