"""What a policy's CEL reads, found from its tokens (the CEL library exposes no syntax tree).

Import needs two things of an expression it cannot get from the library: which top-level
names it reads and through which fields (``request.userInfo.username``, ``oldObject``,
``resource.Get(...)``), to refuse what a stored object cannot answer; and a rewrite of
``object.spec`` / ``object.metadata`` references, for the rules Kyverno derives from a Pod
rule for pod controllers (autogen). Both work on tokens, so text inside string literals
(``'object.spec'`` in a message) is never read or rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
    (?P<string>
        [rRbB]{0,2}(?:'''(?:[^\\]|\\.)*?'''|\"\"\"(?:[^\\]|\\.)*?\"\"\"
        |'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
    )
    |(?P<comment>//[^\n]*)
    |(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<number>\d[\w.]*)
    |(?P<space>\s+)
    |(?P<op>\.\?|\.|\(|\)|\[\?|\[|\]|.)
    """,
    re.VERBOSE | re.DOTALL,
)
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter", "transformList",
                     "transformMap", "transformMapEntry"})  # fmt: skip


@dataclass(frozen=True)
class Token:
    kind: str  # string, ident, number, op
    text: str
    start: int
    end: int


def tokens(expression: str) -> list[Token]:
    """The expression's tokens, without whitespace and comments."""
    out: list[Token] = []
    for match in _TOKEN.finditer(expression):
        kind = match.lastgroup or "op"
        if kind in ("space", "comment"):
            continue
        out.append(Token(kind, match.group(), match.start(), match.end()))
    return out


@dataclass(frozen=True)
class Reference:
    """A top-level name and the fields selected from it: ``request.userInfo.username`` is
    ``Reference("request", ("userInfo", "username"))``. ``called``: the last field is a
    method call (``resource.Get(...)`` is ``("resource", ("Get",), called=True)``)."""

    root: str
    fields: tuple[str, ...]
    called: bool = False

    @property
    def path(self) -> str:
        return ".".join((self.root, *self.fields))


def references(expression: str) -> list[Reference]:
    """Every top-level name the expression reads, with its field chain.

    A name after ``.`` is a field, not a top-level name; comprehension variables
    (``c`` in ``xs.all(c, ...)``) are left out, as are function calls (``size(x)``).
    """
    toks = tokens(expression)
    bound = _comprehension_variables(toks)
    out: list[Reference] = []
    for index, token in enumerate(toks):
        if token.kind != "ident" or token.text in bound or token.text in ("true", "false", "null"):
            continue
        before = toks[index - 1] if index else None
        if before is not None and before.kind == "op" and before.text in (".", ".?"):
            continue
        after = toks[index + 1] if index + 1 < len(toks) else None
        if after is not None and after.text == "(":
            continue  # a function call: size(...), has(...)
        fields, called = _chain(toks, index + 1)
        out.append(Reference(token.text, fields, called))
    return out


def _chain(toks: list[Token], index: int) -> tuple[tuple[str, ...], bool]:
    fields: list[str] = []
    while (
        index + 1 < len(toks)
        and toks[index].text in (".", ".?")
        and toks[index + 1].kind == ("ident")
    ):
        fields.append(toks[index + 1].text)
        index += 2
        if index < len(toks) and toks[index].text == "(":
            return tuple(fields), True
    # ``x['key']`` and ``x[?'key']`` select a field too
    while (
        index + 2 < len(toks)
        and toks[index].text in ("[", "[?")
        and toks[index + 1].kind == ("string")
    ):
        if toks[index + 2].text != "]":
            break
        fields.append(_unquote(toks[index + 1].text))
        index += 3
        more, called = _chain(toks, index)
        return tuple(fields) + more, called
    return tuple(fields), False


def _unquote(literal: str) -> str:
    body = literal.lstrip("rRbB")
    quote = body[:3] if body[:3] in ("'''", '"""') else body[:1]
    return body[len(quote) : -len(quote)]


def _comprehension_variables(toks: list[Token]) -> set[str]:
    """Names bound by ``xs.all(x, ...)`` and the like (one or two variables)."""
    names: set[str] = set()
    for index, token in enumerate(toks):
        if token.kind != "ident" or token.text not in _MACROS:
            continue
        if index == 0 or toks[index - 1].text not in (".", ".?"):
            continue
        args = toks[index + 1 : index + 6]
        if (
            len(args) >= 3
            and args[0].text == "("
            and args[1].kind == "ident"
            and args[2].text == ","
        ):
            names.add(args[1].text)
            if len(args) >= 5 and args[3].kind == "ident" and args[4].text == ",":
                names.add(args[3].text)
    return names


def rewrite_roots(
    expression: str,
    root: str,
    prefixes: dict[str, str],
    *,
    keep: frozenset[str] = frozenset(),
) -> str:
    """``expression`` with ``ROOT.FIELD`` rewritten to ``ROOT.PREFIX`` for each FIELD in
    ``prefixes``, where ROOT is the top-level name (not a field, not inside a string).

    ``rewrite_roots("object.spec.x", "object", {"spec": "spec.template.spec"})`` gives
    ``object.spec.template.spec.x``. A reference whose next field is in ``keep`` stays as
    it is (``object.metadata.namespace`` with ``keep={"namespace"}``).
    """
    toks = tokens(expression)
    pieces: list[str] = []
    last = 0
    for index in _root_positions(toks, root):
        field = toks[index + 2]
        replacement = prefixes.get(field.text)
        if replacement is None:
            continue
        following = toks[index + 4] if index + 4 < len(toks) else None
        if following is not None and toks[index + 3].text in (".", ".?") and following.text in keep:
            continue
        pieces.append(expression[last : field.start])
        pieces.append(replacement)
        last = field.end
    pieces.append(expression[last:])
    return "".join(pieces)


def _root_positions(toks: list[Token], root: str) -> Iterator[int]:
    bound = _comprehension_variables(toks)
    if root in bound:
        return
    for index, token in enumerate(toks):
        if token.kind != "ident" or token.text != root:
            continue
        if index and toks[index - 1].text in (".", ".?"):
            continue
        if (
            index + 2 < len(toks)
            and toks[index + 1].text in (".", ".?")
            and toks[index + 2].kind == "ident"
        ):
            yield index


def substitute_field(expression: str, root: str, name: str, literal: str) -> str:
    """``expression`` with the top-level ``ROOT.NAME`` read as the CEL literal ``literal``,
    and ``has(ROOT.NAME)`` as ``true`` (the field is always there). Text in strings, a
    field of that name elsewhere (``x.request.operation``) and a rebound name are left
    alone."""
    toks = tokens(expression)
    if root in _comprehension_variables(toks):
        return expression
    pieces: list[str] = []
    last = 0
    index = 0
    while index < len(toks):
        token = toks[index]
        window = [t.text for t in toks[index : index + 6]]
        if window == ["has", "(", root, ".", name, ")"] and (
            index == 0 or toks[index - 1].text not in (".", ".?")
        ):
            pieces += [expression[last : token.start], "true"]
            last = toks[index + 5].end
            index += 6
            continue
        if (
            window[:3] == [root, ".", name]
            and token.kind == "ident"
            and (index == 0 or toks[index - 1].text not in (".", ".?"))
        ):
            pieces += [expression[last : token.start], literal]
            last = toks[index + 2].end
            index += 3
            continue
        index += 1
    pieces.append(expression[last:])
    return "".join(pieces)
