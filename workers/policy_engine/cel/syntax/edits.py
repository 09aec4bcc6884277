"""Changes to an author's text at places its syntax tree names.

An imported policy's expression is sometimes changed before it is run (Kyverno's rules
for pod controllers read ``object.spec`` inside the pod template): the change is made in
the author's own text, so everything else (layout, comments, the text a message quotes)
stays as written. The tree says where each node is (``at``: an identifier's first
character, a selection's ``.``); the end of a token is found by reading on from there,
past the spaces and comments the grammar allows between tokens, and checked against what
the parser read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workers.policy_engine.cel.syntax.nodes import Call, Ident, Select


class NotPlaced(ValueError):
    """The text at a node's place is not what the parser read there."""


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` by ``replacement``."""

    start: int
    end: int
    replacement: str


def applied(text: str, edits: Iterable[Edit]) -> str:
    """``text`` with ``edits`` made (they must not overlap)."""
    out, last = [], 0
    for edit in sorted(edits, key=lambda e: e.start):
        if edit.start < last:
            raise NotPlaced("two changes overlap")
        out += [text[last : edit.start], edit.replacement]
        last = edit.end
    out.append(text[last:])
    return "".join(out)


def skip_blank(text: str, at: int) -> int:
    """The first position from ``at`` that is neither a space nor in a ``//`` comment."""
    while at < len(text):
        if text[at].isspace():
            at += 1
        elif text.startswith("//", at):
            end = text.find("\n", at)
            at = len(text) if end < 0 else end + 1
        else:
            return at
    return at


def _identifier_end(text: str, at: int) -> int:
    end = at
    while end < len(text) and text[end].isascii() and (text[end].isalnum() or text[end] == "_"):
        end += 1
    return end


def ident_span(text: str, ident: Ident) -> tuple[int, int]:
    """Where ``ident`` is written."""
    end = ident.at + len(ident.name)
    if ident.at < 0 or text[ident.at : end] != ident.name:
        raise NotPlaced(f"{ident.name} is not where the parser put it")
    return ident.at, end


def field_span(text: str, select: Select) -> tuple[int, int]:
    """Where the field name of ``select`` (``a.b``, ``a.?b``, ``a.`b-c```) is written."""
    at = select.at
    if at < 0 or not text.startswith(".", at):
        raise NotPlaced(f"no '.' where the parser put .{select.field}")
    at = skip_blank(text, at + 1)
    if select.optional:
        if not text.startswith("?", at):
            raise NotPlaced(f"no '.?' where the parser put .?{select.field}")
        at = skip_blank(text, at + 1)
    if text.startswith("`", at):
        end = text.find("`", at + 1) + 1
        name = text[at + 1 : end - 1] if end > 0 else None
    else:
        end = _identifier_end(text, at)
        name = text[at:end]
    if name != select.field:
        raise NotPlaced(f"the field {select.field} is not where the parser put it")
    return at, end


def global_call_span(text: str, call: Call, argument_end: int) -> tuple[int, int]:
    """Where a one-argument global call ``f(x)`` is written, given where its argument
    ends: from the function's name to its ``)``."""
    open_at = call.at
    if open_at < 0 or not text.startswith("(", open_at):
        raise NotPlaced(f"no '(' where the parser put {call.function}(")
    start = open_at
    while start > 0 and text[start - 1] in " \t\r\n":
        start -= 1
    start -= len(call.function)
    before_ok = start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "_.`")
    if start < 0 or text[start : start + len(call.function)] != call.function or not before_ok:
        raise NotPlaced(f"{call.function} is not just before its '('")
    close = skip_blank(text, argument_end)
    if not text.startswith(")", close):
        raise NotPlaced(f"no ')' after the argument of {call.function}")
    return start, close + 1
