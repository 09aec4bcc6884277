"""The syntax tree of a CEL expression, as the runtime's parser built it.

Nodes are immutable; a rewrite builds new ones around the parts it keeps. Macros are not
expanded (the parser runs with them off, syntax/parser.py): ``xs.all(x, p)`` is a
:class:`Call` of ``all`` on ``xs`` whose first argument is the variable, ``has(a.b)`` a
call of ``has``, exactly as written; :func:`binding` says which calls bind variables and
over which arguments, as the runtime's macros would. Operators are calls named as the
runtime names them (``_&&_``, ``_==_``, ``!_``, ``-_``, ``_?_:_``, ``@in``); a field
selection is a :class:`Select` and an index an :class:`Index`, each possibly optional
(``a.?b``, ``a[?0]``).

``at`` is where the parser put the node in its text, in code points (an identifier's first
character, a selection's ``.``, a call's ``(``, an operator's first character); -1 for a
node assay built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    at: int = -1


@dataclass(frozen=True, slots=True)
class Literal(Node):
    """A constant: ``kind`` is null, bool, int, uint, double, string or bytes."""

    value: Any
    kind: str


@dataclass(frozen=True, slots=True)
class Ident(Node):
    name: str


@dataclass(frozen=True, slots=True)
class Select(Node):
    operand: Node
    field: str
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Index(Node):
    operand: Node
    index: Node
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Call(Node):
    """``function(args)``, or ``target.function(args)`` when ``target`` is set."""

    function: str
    args: tuple[Node, ...] = ()
    target: Node | None = None


@dataclass(frozen=True, slots=True)
class ListExpr(Node):
    elements: tuple[Node, ...] = ()
    optional: frozenset[int] = frozenset()  # indexes of ``?x`` elements


@dataclass(frozen=True, slots=True)
class MapEntry(Node):
    key: Node
    value: Node
    optional: bool = False


@dataclass(frozen=True, slots=True)
class MapExpr(Node):
    entries: tuple[MapEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class StructField(Node):
    name: str
    value: Node
    optional: bool = False


@dataclass(frozen=True, slots=True)
class StructExpr(Node):
    """``Name{field: value}``: a message, which Kubernetes' environment declares none of."""

    message: str
    fields: tuple[StructField, ...] = ()


LOGICAL = frozenset({"_&&_", "_||_"})
COMPARISONS = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"})
# The macros that loop over a list or map (the runtime expands them into comprehensions).
LOOPS = frozenset({"all", "exists", "exists_one", "existsOne", "map", "filter", "transformList",
                   "transformMap", "transformMapEntry"})  # fmt: skip
# Member macros binding one variable (``xs.map(x, ...)``) or two (``xs.all(i, v, ...)``).
_ONE_VARIABLE = LOOPS | {"optMap", "optFlatMap", "sortBy"}
_TWO_VARIABLES = frozenset({"all", "exists", "exists_one", "existsOne", "transformList",
                            "transformMap", "transformMapEntry"})  # fmt: skip


def children(node: Node) -> tuple[Node, ...]:
    """The node's direct sub-expressions, in source order."""
    if isinstance(node, Select):
        return (node.operand,)
    if isinstance(node, Index):
        return (node.operand, node.index)
    if isinstance(node, Call):
        return node.args if node.target is None else (node.target, *node.args)
    if isinstance(node, ListExpr):
        return node.elements
    if isinstance(node, MapExpr):
        return node.entries
    if isinstance(node, MapEntry):
        return (node.key, node.value)
    if isinstance(node, StructExpr):
        return node.fields
    if isinstance(node, StructField):
        return (node.value,)
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree, parents before children, in source order."""
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        todo.extend(reversed(children(current)))


def binding(call: Call) -> tuple[tuple[str, ...], tuple[int, ...]] | None:
    """The variables a macro call binds and the indexes of the arguments they are bound in,
    as the runtime's macros do; None for any other call. ``xs.all(x, p)`` binds ``x`` in
    ``p``; ``xs.all(i, v, p)`` (two-variable comprehensions) ``i`` and ``v``; ``xs.map(x,
    f, t)`` one variable; ``cel.bind(x, init, body)`` ``x`` in ``body`` only."""
    args = call.args
    names = [arg.name if isinstance(arg, Ident) else None for arg in args]
    if call.target is None:
        return None
    if call.function == "bind" and isinstance(call.target, Ident) and call.target.name == "cel":
        return ((names[0],), (2,)) if len(args) == 3 and names[0] else None
    arity = len(args) == 3 or (len(args) == 4 and call.function.startswith("transform"))
    if call.function in _TWO_VARIABLES and arity and names[0] and names[1]:
        return (names[0], names[1]), tuple(range(2, len(args)))
    arity = len(args) == 2 or (call.function == "map" and len(args) == 3)
    if call.function in _ONE_VARIABLE and arity and names[0]:
        return (names[0],), tuple(range(1, len(args)))
    return None


def is_loop(call: Node) -> bool:
    """Whether ``call`` is a macro that loops over its target (a comprehension)."""
    return isinstance(call, Call) and call.function in LOOPS and binding(call) is not None


def rebuild(node: Node, parts: tuple[Node, ...]) -> Node:
    """``node`` with its children (as :func:`children` lists them) replaced by ``parts``;
    ``node`` itself when every part is the same object."""
    if all(a is b for a, b in zip(parts, children(node), strict=True)):
        return node
    if isinstance(node, Select):
        return replace(node, operand=parts[0])
    if isinstance(node, Index):
        return replace(node, operand=parts[0], index=parts[1])
    if isinstance(node, Call):
        if node.target is None:
            return replace(node, args=parts)
        return replace(node, target=parts[0], args=parts[1:])
    if isinstance(node, ListExpr):
        return replace(node, elements=parts)
    if isinstance(node, MapExpr):
        return replace(node, entries=tuple(p for p in parts if isinstance(p, MapEntry)))
    if isinstance(node, MapEntry):
        return replace(node, key=parts[0], value=parts[1])
    if isinstance(node, StructExpr):
        return replace(node, fields=tuple(p for p in parts if isinstance(p, StructField)))
    if isinstance(node, StructField):
        return replace(node, value=parts[0])
    return node


def transform(node: Node, change: Callable[[Node], Node | None]) -> Node:
    """``node`` rewritten bottom-up: each node, its children rewritten first, is replaced by
    ``change(node)`` unless that is None."""
    parts = tuple(transform(child, change) for child in children(node))
    rebuilt = rebuild(node, parts)
    changed = change(rebuilt)
    return rebuilt if changed is None else changed


def operands(node: Node, function: str) -> list[Node]:
    """The operands of a chain of one logical operator (``_&&_``, ``_||_``), left to right
    however it is grouped: both are associative in CEL, and the parser balances a chain."""
    out, todo = [], [node]
    while todo:
        current = todo.pop()
        if (
            isinstance(current, Call)
            and current.target is None
            and current.function == function
            and len(current.args) == 2
        ):
            todo.extend(reversed(current.args))
        else:
            out.append(current)
    return out


def transform_down(node: Node, change: Callable[[Node], Node | None]) -> Node:
    """``node`` rewritten top-down: a node ``change`` replaces (not None) is not entered;
    the children of any other are. ``change`` sees the nodes as they were, so it may tell
    them by ``id()`` from an earlier walk."""
    changed = change(node)
    if changed is not None:
        return changed
    return rebuild(node, tuple(transform_down(child, change) for child in children(node)))


def _logical(node: Node) -> bool:
    return isinstance(node, Call) and node.target is None and node.function in LOGICAL


def same(a: Node, b: Node) -> bool:
    """Whether two trees are the same expression, wherever their nodes were written (a chain
    of ``&&`` or ``||`` however grouped)."""
    if type(a) is not type(b):
        return False
    if _logical(a) and _logical(b) and a.function == b.function:  # type: ignore[attr-defined]
        left, right = operands(a, a.function), operands(b, b.function)  # type: ignore[attr-defined]
        return len(left) == len(right) and all(same(x, y) for x, y in zip(left, right, strict=True))
    for item in fields(a):
        if item.name == "at":
            continue
        left, right = getattr(a, item.name), getattr(b, item.name)
        if isinstance(left, Node):
            if not (isinstance(right, Node) and same(left, right)):
                return False
        elif isinstance(left, tuple):
            if len(left) != len(right) or not all(
                same(x, y) for x, y in zip(left, right, strict=True)
            ):
                return False
        elif isinstance(a, Literal) and item.name == "value":
            if type(left) is not type(right) or left != right:
                return False
        elif left != right:
            return False
    return True
