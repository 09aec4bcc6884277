"""What an expression reads, from its syntax tree: one answer for every part that asks.

The inputs it reads (``object``, ``request.userInfo``, ``params.spec``), the fields of each
(:class:`Reference`), the probe variables (``variables.NAME``), and the functions it calls.
A name bound by a macro (``c`` in ``xs.all(c, ...)``) is not an input inside that macro's
scope, and is one outside it; text in a string literal or a comment is no read at all (the
parser dropped it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from workers.policy_engine.cel.syntax.nodes import (
    Call,
    Ident,
    Index,
    Literal,
    Node,
    Select,
    StructField,
    binding,
    children,
    walk,
)

VARIABLES = "variables"


def scoped(root: Node) -> Iterator[tuple[Node, frozenset[str]]]:
    """Every node with the macro variables bound where it stands."""
    todo: list[tuple[Node, frozenset[str]]] = [(root, frozenset())]
    while todo:
        node, bound = todo.pop()
        yield node, bound
        parts = children(node)
        inner = binding(node) if isinstance(node, Call) else None
        if inner is None:
            todo.extend((part, bound) for part in reversed(parts))
            continue
        names, scope = inner
        assert isinstance(node, Call)
        offset = 1 if node.target is not None else 0  # children() puts the target first
        for number in reversed(range(len(parts))):
            argument = number - offset
            if argument >= 0 and argument < len(names) and argument not in scope:
                continue  # the variable's own name is no read
            within = argument in scope
            todo.append((parts[number], bound | set(names) if within else bound))


def free_names(root: Node) -> list[Ident]:
    """The identifiers that name an input (not a macro variable in its scope)."""
    return [n for n, bound in scoped(root) if isinstance(n, Ident) and n.name not in bound]


def reads(root: Node, name: str) -> bool:
    """Whether the expression reads the input ``name`` (``object``, ``results``)."""
    return any(ident.name == name for ident in free_names(root))


def variables_read(root: Node) -> list[str]:
    """The probe variables read (``variables.NAME``), once per read, in source order."""
    out = []
    for node, bound in scoped(root):
        if (
            isinstance(node, Select)
            and isinstance(node.operand, Ident)
            and node.operand.name == VARIABLES
            and VARIABLES not in bound
        ):
            out.append(node.field)
    return out


@dataclass(frozen=True)
class Reference:
    """An input and the fields read from it: ``request.userInfo.username`` is
    ``Reference("request", ("userInfo", "username"))``. ``called``: the last field is a
    member function called on what comes before (``resource.Get(...)`` is
    ``Reference("resource", ("Get",), called=True)``). A field read with a string index
    (``x['key']``, ``x[?'key']``) counts as one."""

    root: str
    fields: tuple[str, ...]
    called: bool = False

    @property
    def path(self) -> str:
        return ".".join((self.root, *self.fields))


def chain(node: Node) -> tuple[Ident, tuple[str, ...]] | None:
    """The identifier a chain of field selections starts at, and the fields; None for
    any other node."""
    fields: list[str] = []
    while True:
        if isinstance(node, Ident):
            return node, tuple(reversed(fields))
        if isinstance(node, Select):
            fields.append(node.field)
            node = node.operand
        elif (
            isinstance(node, Index)
            and isinstance(node.index, Literal)
            and node.index.kind == "string"
        ):
            fields.append(str(node.index.value))
            node = node.operand
        else:
            return None


def references(root: Node) -> list[Reference]:
    """Every input the expression reads, each with its longest chain of fields, in source
    order (one per place it is read)."""
    out: list[Reference] = []
    extended: set[int] = set()  # chains read as part of a longer one (by node identity)
    for node, bound in scoped(root):
        if id(node) in extended:
            continue
        call = node if isinstance(node, Call) and node.target is not None else None
        inner: Node | None = call.target if call is not None else node
        found = chain(inner) if inner is not None else None
        if found is None:
            continue
        ident, fields = found
        while inner is not None and inner is not ident:  # its own sub-chains are no reads
            extended.add(id(inner))
            inner = inner.operand if isinstance(inner, Select | Index) else None
        extended.add(id(ident))
        if ident.name in bound:
            continue
        if call is not None:
            out.append(Reference(ident.name, (*fields, call.function), True))
        else:
            out.append(Reference(ident.name, fields))
    return out


def functions(root: Node) -> set[str]:
    """The functions called: each by its name, and a member call on an input named by
    identifiers also by its qualified name (``sets.contains``, ``resource.Get``), as the
    checker resolves a namespaced function."""
    out: set[str] = set()
    for node, bound in scoped(root):
        if not isinstance(node, Call) or node.function.startswith(("_", "@", "!_", "-_")):
            continue
        out.add(node.function)
        if node.target is not None:
            found = chain(node.target)
            if found is not None and found[0].name not in bound:
                out.add(".".join((found[0].name, *found[1], node.function)))
    return out


def field_paths(root: Node) -> list[str]:
    """The field paths the expression reads (``spec.replicas``, ``securityContext.runAsNonRoot``
    for ``c.securityContext.runAsNonRoot``), from any identifier, each once, in source order,
    each chain at its longest (``a.b`` is read as part of ``a.b.c``); for evidence."""
    seen: dict[str, None] = {}
    inside: set[int] = set()  # the shorter chains of a chain already taken
    for node, _ in scoped(root):
        target = node.target if isinstance(node, Call) else node
        if target is None or id(target) in inside:
            continue
        found = chain(target)
        if found is None:
            continue
        inner: Node = target
        while isinstance(inner, Select | Index):
            inside.add(id(inner))
            inner = inner.operand
        if found[1]:
            seen.setdefault(".".join(found[1]), None)
    return list(seen)


def names(root: Node) -> set[str]:
    """Every name the expression spells: identifiers, selected fields, the functions it
    calls, struct fields, and the text of its string literals (a key compared with ``'data'``
    or indexed as ``o['data']`` names ``data`` as surely as ``o.data`` does). Comments are
    not in the tree, so a name in a comment is none."""
    found: set[str] = set()
    for node in walk(root):
        if isinstance(node, Ident):
            found.add(node.name)
        elif isinstance(node, Select):
            found.add(node.field)
        elif isinstance(node, Call):
            found.add(node.function)
        elif isinstance(node, StructField):
            found.add(node.name)
        elif isinstance(node, Literal) and node.kind == "string":
            found.add(str(node.value))
    return found
