"""Parse CEL with the runtime's own parser into a :class:`Tree` (syntax/nodes.py).

The CEL runtime (cel-cpp's bindings) parses an expression and hands back its parse as a
``cel.expr.ParsedExpr`` (syntax/parsed_expr.py). It parses here in an environment of its
own: the standard library with its macros off, and the optional types extension for the
``.?`` / ``[?`` / ``{?`` syntax, so the tree holds what the author wrote (``xs.all(x, p)``
as a call, not its expansion) and every other parser rule is the runtime's: comments,
string and bytes literals of every form, reserved words, escapes, its nesting limit. The
two macros of the optional types extension (``optMap``, ``optFlatMap``) it cannot turn off
are folded back into their calls.

This is, with cel/programs.py, the only code that imports the runtime (lazily, when an expression
is first parsed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from workers.policy_engine.cel.syntax import parsed_expr
from workers.policy_engine.cel.syntax.nodes import (
    Call,
    Ident,
    Index,
    ListExpr,
    Literal,
    MapEntry,
    MapExpr,
    Node,
    Select,
    StructExpr,
    StructField,
)

_PARSE_CONFIG = """\
name: assay-parse
extensions:
  - name: optional
    version: 2
stdlib:
  disable_macros: true
"""
# One message per problem: ``ERROR: <input>:LINE:COLUMN: text`` (the runtime's own format).
_PROBLEM = re.compile(r"ERROR: <input>:(-?\d+):(-?\d+): ([^\n]*)")
_NO_LINE = 4294967295  # the runtime's line for a problem with no place (nesting too deep)


class CelSyntaxError(ValueError):
    """The text is not a CEL expression the runtime parses; ``problems`` are its messages,
    each with the 1-based line and column it names (0, 0: no place)."""

    def __init__(self, problems: list[tuple[int, int, str]]) -> None:
        self.problems = problems
        super().__init__(describe(problems))


def describe(problems: list[tuple[int, int, str]]) -> str:
    """One line for what the runtime found: the first problem, and how many more."""
    if not problems:
        return "the runtime could not read it"
    line, column, text = problems[0]
    where = f"line {line}, column {column}: " if line > 0 else ""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}{text}{more}"


def problems_of(message: str) -> list[tuple[int, int, str]]:
    """The problems in a runtime error message, each with its line and column."""
    found = []
    for match in _PROBLEM.finditer(message):
        line, column = int(match.group(1)), int(match.group(2))
        if line >= _NO_LINE or line < 0:
            line, column = 0, 0
        found.append((line, column, match.group(3).strip()))
    if not found:
        text = " ".join(message.split())
        found.append((0, 0, text[:300] or "the runtime could not read it"))
    return found


@dataclass(frozen=True)
class Tree:
    """An expression's text and its syntax tree."""

    text: str
    root: Node

    def line_column(self, at: int) -> tuple[int, int]:
        """The 1-based line and column of code point ``at`` of the text."""
        return line_column(self.text, at)


def line_column(text: str, at: int) -> tuple[int, int]:
    before = text[: max(at, 0)]
    line = before.count("\n") + 1
    return line, at - (before.rfind("\n") + 1) + 1


def offset_of(text: str, line: int, column: int) -> int:
    """The code point at 1-based ``line`` and ``column`` of ``text``."""
    start = 0
    for _ in range(line - 1):
        found = text.find("\n", start)
        if found < 0:
            break
        start = found + 1
    return start + column - 1


@cache
def _environment() -> Any:
    from cel_expr_python import cel as runtime

    return runtime.NewEnv(config=runtime.NewEnvConfigFromYaml(_PARSE_CONFIG))


def parsed(text: str) -> Any:
    """The runtime's ``ParsedExpr`` of ``text``; CelSyntaxError when it does not parse."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = line_column(text, exc.start)
        raise CelSyntaxError([(*where, "the text is not valid Unicode")]) from None
    try:
        serialized = _environment().compile(text, disable_check=True).serialize()
    except Exception as exc:
        raise CelSyntaxError(problems_of(str(exc))) from None
    try:
        return parsed_expr.decode(serialized)
    except Exception:  # the protobuf decoder's own nesting limit
        raise CelSyntaxError([(0, 0, "the expression nests too deeply")]) from None


@lru_cache(maxsize=4096)
def parse(text: str) -> Tree:
    """``text``'s syntax tree (cached: a probe's expressions are parsed once per process);
    CelSyntaxError when the runtime does not parse it."""
    message = parsed(text)
    positions = dict(message.source_info.positions)
    try:
        root = _Builder(positions).node(message.expr)
    except RecursionError:
        raise CelSyntaxError([(0, 0, "the expression nests too deeply")]) from None
    return Tree(text, root)


class _Builder:
    """ParsedExpr messages into nodes."""

    def __init__(self, positions: dict[int, int]) -> None:
        self.positions = positions

    def node(self, expr: Any) -> Node:
        at = self.positions.get(expr.id, -1)
        kind = expr.WhichOneof("expr_kind")
        if kind == "const_expr":
            return _literal(expr.const_expr, at)
        if kind == "ident_expr":
            return Ident(expr.ident_expr.name, at=at)
        if kind == "select_expr":
            select = expr.select_expr
            return Select(self.node(select.operand), select.field, at=at)
        if kind == "call_expr":
            return self.call(expr.call_expr, at)
        if kind == "list_expr":
            elements = tuple(self.node(e) for e in expr.list_expr.elements)
            return ListExpr(elements, frozenset(expr.list_expr.optional_indices), at=at)
        if kind == "struct_expr":
            return self.struct(expr.struct_expr, at)
        # A comprehension comes only from the optional library's two macros, which the
        # parser expands whatever its options (folded back in :meth:`call`).
        raise CelSyntaxError([(0, 0, f"the parser gave an unexpected {kind or 'empty node'}")])

    def call(self, call: Any, at: int) -> Node:
        args = [self.node(a) for a in call.args] if call.function != "_?_:_" else []
        function = call.function
        if function == "_?_:_":
            folded = self.optional_macro(call, at)
            if folded is not None:
                return folded
            args = [self.node(a) for a in call.args]
        if function in ("_?._", "_?.?_") and len(args) == 2 and isinstance(args[1], Literal):
            return Select(args[0], str(args[1].value), optional=True, at=at)
        if function in ("_[_]", "_[?_]") and len(args) == 2:
            return Index(args[0], args[1], optional=function == "_[?_]", at=at)
        target = self.node(call.target) if call.HasField("target") else None
        return Call(function, tuple(args), target, at=at)

    def optional_macro(self, call: Any, at: int) -> Node | None:
        """``t.optMap(x, body)`` / ``t.optFlatMap(x, body)`` from their expansion
        ``t.hasValue() ? optional.of(<x = t.value()> body) : optional.none()`` (optMap) or
        the same without ``optional.of`` (optFlatMap); None for a ternary written as one."""
        if len(call.args) != 3:
            return None
        condition, then, _ = call.args
        macro, bound = "optFlatMap", then
        wrapped = then.WhichOneof("expr_kind") == "call_expr" and then.call_expr.function == (
            "optional.of"
        )
        if wrapped and len(then.call_expr.args) == 1:
            macro, bound = "optMap", then.call_expr.args[0]
        if bound.WhichOneof("expr_kind") != "comprehension_expr":
            return None
        loop = bound.comprehension_expr
        if condition.WhichOneof("expr_kind") != "call_expr" or not condition.call_expr.HasField(
            "target"
        ):
            return None
        target = self.node(condition.call_expr.target)
        body = self.node(loop.result)
        variable = Ident(loop.accu_var, at=self.positions.get(loop.accu_init.id, -1))
        return Call(macro, (variable, body), target, at=at)

    def struct(self, struct: Any, at: int) -> Node:
        if struct.message_name:
            return StructExpr(
                struct.message_name,
                tuple(
                    StructField(
                        e.field_key,
                        self.node(e.value),
                        e.optional_entry,
                        at=self.positions.get(e.id, -1),
                    )
                    for e in struct.entries
                ),
                at=at,
            )
        return MapExpr(
            tuple(
                MapEntry(
                    self.node(e.map_key),
                    self.node(e.value),
                    e.optional_entry,
                    at=self.positions.get(e.id, -1),
                )
                for e in struct.entries
            ),
            at=at,
        )


def _literal(constant: Any, at: int) -> Literal:
    kind = constant.WhichOneof("constant_kind")
    if kind == "bool_value":
        return Literal(constant.bool_value, "bool", at=at)
    if kind == "int64_value":
        return Literal(constant.int64_value, "int", at=at)
    if kind == "uint64_value":
        return Literal(constant.uint64_value, "uint", at=at)
    if kind == "double_value":
        return Literal(constant.double_value, "double", at=at)
    if kind == "string_value":
        return Literal(constant.string_value, "string", at=at)
    if kind == "bytes_value":
        return Literal(constant.bytes_value, "bytes", at=at)
    return Literal(None, "null", at=at)
