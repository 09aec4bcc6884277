"""Source rewrites of calls, for the few Kubernetes forms the runtime parses but cannot run
as written (a library declares them; the adapter applies them before compiling).

Each rewrite replaces one call by an expression that gives the same value and the same
errors (the library that declares it says why), so it works on the call's text: its
receiver is kept as written and only the call and its arguments change. Text inside string
literals is never read or rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
    (?P<str>[rRbB]{0,2}(?:'''(?:[^\\]|\\.)*?'''|\"\"\"(?:[^\\]|\\.)*?\"\"\"
        |'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"))
    |(?P<id>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<space>\s+)
    |(?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_OPEN, _CLOSE = "([{", ")]}"


@dataclass(frozen=True)
class Call:
    """A call to be rewritten: ``member`` (``x.name(...)``) or global (``name(...)``, the
    name possibly dotted, as ``format.named``); ``arities``: the argument counts it applies
    to (empty: any)."""

    name: str
    member: bool
    rewrite: Callable[[list[str]], str]
    arities: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    start: int
    end: int


def _tokens(source: str) -> list[_Token]:
    out = []
    for match in _TOKEN.finditer(source):
        kind = match.lastgroup or "other"
        if kind != "space":
            out.append(_Token(kind, match.group(), match.start(), match.end()))
    return out


def _name_at(tokens: list[_Token], i: int, parts: list[str]) -> int | None:
    """The index of the ``(`` when ``tokens[i:]`` spell ``a.b.c(`` for ``parts``."""
    for n, part in enumerate(parts):
        if n:
            if i >= len(tokens) or tokens[i].text != ".":
                return None
            i += 1
        if i >= len(tokens) or tokens[i].kind != "id" or tokens[i].text != part:
            return None
        i += 1
    return i if i < len(tokens) and tokens[i].text == "(" else None


def _arguments(source: str, tokens: list[_Token], open_at: int) -> tuple[list[str], int] | None:
    """The argument texts of the call whose ``(`` is ``tokens[open_at]``, and the index of
    its ``)``; None when the parentheses do not close (the compiler reports that)."""
    depth, start = 0, tokens[open_at].end
    args: list[str] = []
    for i in range(open_at, len(tokens)):
        text = tokens[i].text if tokens[i].kind == "other" else ""
        if not text:
            continue
        if text in _OPEN:
            depth += 1
        elif text in _CLOSE:
            depth -= 1
            if depth == 0:
                last = source[start : tokens[i].start]
                if args or last.strip():
                    args.append(last)
                return args, i
        elif text == "," and depth == 1:
            args.append(source[start : tokens[i].start])
            start = tokens[i].end
    return None


def rewrite_calls(source: str, calls: Sequence[Call]) -> str:
    """``source`` with every matching call rewritten, inner calls (in arguments) first."""
    if not calls:
        return source
    tokens = _tokens(source)
    out: list[str] = []
    copied = 0
    i = 0
    while i < len(tokens):
        token = tokens[i]
        matched = False
        for call in calls:
            parts = call.name.split(".")
            after_dot = i > 0 and tokens[i - 1].text == "."
            if after_dot != call.member or token.text != parts[0]:
                continue
            open_at = _name_at(tokens, i, parts)
            if open_at is None:
                continue
            found = _arguments(source, tokens, open_at)
            if found is None:
                continue
            args, close_at = found
            if call.arities and len(args) not in call.arities:
                continue
            inner = [rewrite_calls(arg, calls).strip() for arg in args]
            out.append(source[copied : token.start])
            out.append(call.rewrite(inner))
            copied = tokens[close_at].end
            i = close_at + 1
            matched = True
            break
        if not matched:
            i += 1
    out.append(source[copied:])
    return "".join(out)
