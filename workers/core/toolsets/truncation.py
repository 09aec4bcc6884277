"""The size cap on tool output, with an explicit marker when text was cut.

Every tool result is capped, so a prompt never grows past what the budget
allows; the marker ("... truncated, N more chars not shown") tells the model
that it did not see everything, so it can narrow the lookup instead of
concluding from a part.
"""

from __future__ import annotations


def cap_text(text: str, limit: int, *, keep: str = "head") -> tuple[str, bool]:
    """Cut ``text`` to about ``limit`` chars on a line boundary, saying how much was cut.

    ``keep="tail"`` keeps the end (logs: the newest lines matter most).
    """
    if len(text) <= limit:
        return text, False
    budget = max(limit - 80, limit // 2)  # room for the marker
    if keep == "tail":
        kept = text[-budget:]
        newline = kept.find("\n")
        if 0 <= newline < len(kept) - 1:
            kept = kept[newline + 1 :]
        omitted = len(text) - len(kept)
        return f"... truncated, {omitted} earlier chars not shown\n{kept}", True
    kept = text[:budget]
    newline = kept.rfind("\n")
    if newline > 0:
        kept = kept[: newline + 1]
    omitted = len(text) - len(kept)
    return f"{kept.rstrip()}\n... truncated, {omitted} more chars not shown", True
