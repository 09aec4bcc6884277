"""Source rewrites of calls, for the few Kubernetes forms the runtime parses but cannot run
as written (a library declares them; the adapter applies them before compiling).

Each rewrite replaces one call by an expression that gives the same value and the same
errors (the library that declares it says why), so it works on the call's text: its
receiver is kept as written and only the call and its arguments change. Text inside string
literals is never read or rewritten.
"""

from __future__ import annotations

import itertools
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


def _matching_open(tokens: list[_Token], close_at: int) -> int | None:
    """The index of the bracket ``tokens[close_at]`` closes; None when none does."""
    depth = 0
    for i in range(close_at, -1, -1):
        text = tokens[i].text if tokens[i].kind == "other" else ""
        if text and text in _CLOSE:
            depth += 1
        elif text and text in _OPEN:
            depth -= 1
            if depth == 0:
                return i
    return None


def _ends_operand(token: _Token) -> bool:
    """Whether ``token`` may end an operand (``in`` does not: ``x in [..]`` opens a list)."""
    return (
        (token.kind == "id" and token.text != "in")
        or token.kind == "str"
        or (token.kind == "other" and token.text in _CLOSE)
    )


def receiver_start(tokens: list[_Token], dot_at: int) -> int | None:
    """The index of the first token of the receiver of the member call whose ``.`` is
    ``tokens[dot_at]``: the postfix expression before it (an identifier or literal, a call,
    a parenthesised or literal group, then selections, optional selections, indexes and
    member calls). None when it is not one this reads (a number: the call is left as it is)."""
    j = dot_at - 1
    while j >= 0:
        token = tokens[j]
        if token.kind == "other" and token.text in _CLOSE:
            opened = _matching_open(tokens, j)
            if opened is None:
                return None
            j = opened
            before = tokens[j - 1] if j > 0 else None
            if token.text in ")}" and before is not None and before.kind == "id":
                j -= 1  # a call `f(...)`, or a message `T{...}`
            elif token.text == "]" and before is not None and _ends_operand(before):
                j -= 1  # an index: what it indexes comes before
                continue
        elif token.kind not in ("id", "str") or token.text == "in":
            return None
        # tokens[j] starts a segment; a `.` or `.?` before it continues the chain
        if j >= 1 and tokens[j - 1].text == ".":
            j -= 2
        elif j >= 2 and tokens[j - 1].text == "?" and tokens[j - 2].text == ".":
            j -= 3
        else:
            return j
    return None


def rewrite_with_receiver(
    source: str, names: frozenset[str], rewrite: Callable[[str, str, list[str]], str]
) -> str:
    """``source`` with every member call ``receiver.name(args)`` of ``names`` replaced by
    ``rewrite(name, receiver, args)``: receivers (to the left) are rewritten before the calls
    on them, arguments before their call."""
    position = 0
    while True:
        tokens = _tokens(source)
        for i, token in enumerate(tokens):
            if (
                token.start < position
                or token.kind != "id"
                or token.text not in names
                or i == 0
                or tokens[i - 1].text != "."
                or i + 1 >= len(tokens)
                or tokens[i + 1].text != "("
            ):
                continue
            found = _arguments(source, tokens, i + 1)
            start = receiver_start(tokens, i - 1)
            if found is None or start is None:
                continue
            args, close_at = found
            inner = [rewrite_with_receiver(arg, names, rewrite).strip() for arg in args]
            receiver = source[tokens[start].start : tokens[i - 1].start].strip()
            replaced = rewrite(token.text, receiver, inner)
            begin = tokens[start].start
            source = source[:begin] + replaced + source[tokens[close_at].end :]
            position = begin + len(replaced)
            break
        else:
            return source


# cel-go's `or` and `orValue` return a receiver that is not an optional as it is (its
# evalOptionalOr / evalOptionalOrValue: `x.orValue(y)` is `x` for a map `x`); the runtime
# has no overload for it and errs. Kubernetes' environment applies cel-go's behaviour
# wherever the receiver's type is not known to be optional (dyn, as Kyverno's `object` and
# every variable are), so a policy such as `c.resources.requests.orValue({}).cpu` runs there.
OPTIONAL_FALLBACKS = frozenset({"or", "orValue"})
_FALLBACK = "assay_optional"


def optional_fallbacks(source: str) -> str:
    """``source`` (a whole compiled source) with each ``r.or(x)`` / ``r.orValue(x)`` giving
    ``r`` itself when ``r`` is not an optional (cel-go), and the optional library's value
    when it is. ``r`` is evaluated once, as the one element a comprehension maps (its
    errors and cost are the call's): not with ``cel.bind``, whose lazily initialised value,
    inside a comprehension in a variable's scope, was kept from one iteration to the next by
    the runtime (a container's field read for the next container)."""
    if not any(name in source for name in OPTIONAL_FALLBACKS):
        return source
    numbers = itertools.count()

    def fallback(name: str, receiver: str, args: list[str]) -> str:
        bound = f"{_FALLBACK}_{next(numbers)}"
        call = f"{bound}.{name}({', '.join(args)})"
        return (
            f"[{receiver}].map({bound}, "
            f"type({bound}) == optional_type ? dyn({call}) : dyn({bound}))[0]"
        )

    return rewrite_with_receiver(source, OPTIONAL_FALLBACKS, fallback)


# cel-go's presence test is false on a value that is neither a map nor a list (null, a
# string: its refQualify), where the runtime errs ("Applying SELECT to non-message type").
# Gatekeeper's `variables.params` is null for a constraint without parameters, and its
# templates test `has(variables.params.exemptImages)`.
_PRESENT = "assay_present"


def computed_presence(source: str, roots: str) -> str:
    """``source`` (a whole compiled source) with each ``has(e.f)`` whose ``e`` starts at one
    of ``roots`` (a regular expression: the computed values, which may be null) false when
    ``e`` is neither a map nor a list, as cel-go's; ``e`` evaluated once, its error kept."""
    if "has" not in source:
        return source
    operand = re.compile(rf"^(?P<e>(?:{roots})\b.*?)\s*\.\s*(?P<field>[A-Za-z_]\w*)$", re.DOTALL)
    numbers = itertools.count()

    def presence(args: list[str]) -> str:
        found = operand.match(args[0].strip())
        if found is None:
            return f"has({args[0].strip()})"
        bound = f"{_PRESENT}_{next(numbers)}"  # one element mapped, as optional_fallbacks
        return (
            f"[{found.group('e')}].map({bound}, type({bound}) == map || "
            f"type({bound}) == list ? has({bound}.{found.group('field')}) : false)[0]"
        )

    return rewrite_calls(source, [Call("has", member=False, rewrite=presence, arities=(1,))])
