"""CEL text from a syntax tree: what the runtime compiles after assay's rewrites.

The text parses back to the same tree (tests/policy_engine/test_cel_syntax.py holds it to that over
the corpus and the policy libraries): parentheses only where precedence needs them, literals
written so that they read back as the same value, ``&&`` and ``||`` chains written flat
(the parser balances a chain itself; both operators are associative in CEL). Comments
and the author's layout are not kept: the text is for the runtime, never shown as the
author's (error positions are mapped back to the author's text, syntax/locate.py).
"""

from __future__ import annotations

import math

from workers.policy_engine.cel.syntax.nodes import (
    LOGICAL,
    Call,
    Ident,
    Index,
    ListExpr,
    Literal,
    MapExpr,
    Node,
    Select,
    StructExpr,
    operands,
)

_BINARY = {
    "_||_": ("||", 1), "_&&_": ("&&", 2),
    "_==_": ("==", 3), "_!=_": ("!=", 3), "_<_": ("<", 3), "_<=_": ("<=", 3),
    "_>_": (">", 3), "_>=_": (">=", 3), "@in": ("in", 3),
    "_+_": ("+", 4), "_-_": ("-", 4),
    "_*_": ("*", 5), "_/_": ("/", 5), "_%_": ("%", 5),
}  # fmt: skip
_UNARY = {"!_": "!", "-_": "-"}
_TERNARY, _UNARY_LEVEL, _MEMBER_LEVEL = 0, 6, 7
# Words the grammar reserves: a field of that name is written quoted (``a.`in` ``).
RESERVED = frozenset({"as", "break", "const", "continue", "else", "false", "for", "function",
                      "if", "import", "in", "let", "loop", "package", "namespace", "null",
                      "return", "true", "var", "void", "while"})  # fmt: skip


def unparse(node: Node) -> str:
    """CEL text that parses to ``node``."""
    out: list[str] = []
    _emit(node, out)
    return "".join(out)


def level(node: Node) -> int:
    """How tightly the node's text binds (a bigger number binds tighter)."""
    if isinstance(node, Call) and node.target is None:
        if node.function == "_?_:_":
            return _TERNARY
        if node.function in _BINARY and len(node.args) == 2:
            return _BINARY[node.function][1]
        if node.function in _UNARY and len(node.args) == 1:
            return _UNARY_LEVEL
    if isinstance(node, Literal) and node.kind in ("int", "double") and _negative(node.value):
        return _UNARY_LEVEL  # `-1` is read as a negation before a member call
    return _MEMBER_LEVEL


def _negative(value: float) -> bool:
    return value < 0 or (isinstance(value, float) and math.copysign(1.0, value) < 0)


def _wrapped(node: Node, out: list[str], tighter_than: int) -> None:
    if level(node) < tighter_than:
        out.append("(")
        _emit(node, out)
        out.append(")")
    else:
        _emit(node, out)


def _emit(node: Node, out: list[str]) -> None:
    if isinstance(node, Literal):
        out.append(literal_text(node))
    elif isinstance(node, Ident):
        out.append(node.name)
    elif isinstance(node, Select):
        _wrapped(node.operand, out, _MEMBER_LEVEL)
        out.append(".?" if node.optional else ".")
        out.append(field_text(node.field))
    elif isinstance(node, Index):
        _wrapped(node.operand, out, _MEMBER_LEVEL)
        out.append("[?" if node.optional else "[")
        _emit(node.index, out)
        out.append("]")
    elif isinstance(node, Call):
        _emit_call(node, out)
    elif isinstance(node, ListExpr):
        out.append("[")
        for number, element in enumerate(node.elements):
            if number:
                out.append(", ")
            if number in node.optional:
                out.append("?")
            _emit(element, out)
        out.append("]")
    elif isinstance(node, MapExpr):
        out.append("{")
        for number, entry in enumerate(node.entries):
            if number:
                out.append(", ")
            if entry.optional:
                out.append("?")
            _emit(entry.key, out)
            out.append(": ")
            _emit(entry.value, out)
        out.append("}")
    elif isinstance(node, StructExpr):
        out.append(node.message + "{")
        for number, item in enumerate(node.fields):
            if number:
                out.append(", ")
            out.append(("?" if item.optional else "") + field_text(item.name) + ": ")
            _emit(item.value, out)
        out.append("}")
    else:
        raise ValueError(f"cannot write a {type(node).__name__} as CEL")


def _emit_call(node: Call, out: list[str]) -> None:
    function, args = node.function, node.args
    if node.target is None and function in LOGICAL and len(args) == 2:
        text, own = _BINARY[function]
        for number, operand in enumerate(operands(node, function)):
            if number:
                out.append(f" {text} ")
            _wrapped(operand, out, own + 1)
    elif node.target is None and function in _BINARY and len(args) == 2:
        text, own = _BINARY[function]
        _wrapped(args[0], out, own)  # left-associative: an equal left operand needs none
        out.append(f" {text} ")
        _wrapped(args[1], out, own + 1)
    elif node.target is None and function in _UNARY and len(args) == 1:
        out.append(_UNARY[function])
        operand = args[0]
        # `--x` and `-1` would read as other tokens, and `-` before a number as a
        # negative number: keep them apart
        numeric = isinstance(operand, Literal) and operand.kind in ("int", "uint", "double")
        if level(operand) <= _UNARY_LEVEL or numeric:
            out.append("(")
            _emit(operand, out)
            out.append(")")
        else:
            _emit(operand, out)
    elif node.target is None and function == "_?_:_" and len(args) == 3:
        _wrapped(args[0], out, _TERNARY + 1)
        out.append(" ? ")
        _wrapped(args[1], out, _TERNARY + 1)
        out.append(" : ")
        _emit(args[2], out)
    else:
        if node.target is not None:
            _wrapped(node.target, out, _MEMBER_LEVEL)
            out.append(".")
        out.append(function + "(")
        for number, arg in enumerate(args):
            if number:
                out.append(", ")
            _emit(arg, out)
        out.append(")")


def field_text(name: str) -> str:
    """A field name as written after ``.``: quoted when it is no plain identifier."""
    plain = (
        name
        and (name[0].isascii() and (name[0].isalpha() or name[0] == "_"))
        and all(c.isascii() and (c.isalnum() or c == "_") for c in name)
    )
    return name if plain and name not in RESERVED else f"`{name}`"


def literal_text(node: Literal) -> str:
    """A literal written so that it reads back as the same value and kind."""
    value = node.value
    if node.kind == "null":
        return "null"
    if node.kind == "bool":
        return "true" if value else "false"
    if node.kind == "int":
        return str(value)
    if node.kind == "uint":
        return f"{value}u"
    if node.kind == "double":
        if math.isinf(value):
            return "1e999" if value > 0 else "-1e999"
        if math.isnan(value):
            return "double('NaN')"
        text = repr(float(value))
        return text if any(c in text for c in ".en") else text + ".0"
    if node.kind == "bytes":
        return 'b"' + "".join(_byte(b) for b in bytes(value)) + '"'
    return '"' + "".join(_character(c) for c in str(value)) + '"'


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _character(c: str) -> str:
    if c in _ESCAPES:
        return _ESCAPES[c]
    code = ord(c)
    if 0x20 <= code < 0x7F:
        return c
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _byte(b: int) -> str:
    c = chr(b)
    if c in _ESCAPES:
        return _ESCAPES[c]
    return c if 0x20 <= b < 0x7F else f"\\x{b:02x}"
