"""What a policy's CEL reads, and the changes import makes to it, on its syntax tree.

Import needs two things of an expression: which inputs it reads and through which fields
(``request.userInfo.username``, ``oldObject``, ``resource.Get(...)``), to refuse what a
stored object cannot answer (workers/policy_engine/cel/syntax/reads.py answers that for every
part of assay); and changes to ``object.spec`` / ``object.metadata`` references, for the
rules Kyverno derives from a Pod rule for pod controllers (autogen), made in the author's
own text at the places the tree names (syntax/edits.py). Text inside string literals or
comments is never read or changed, and a macro variable of the same name is not the input.
"""

from __future__ import annotations

from typing import Any

from workers.policy_engine.cel.syntax.edits import (
    Edit,
    NotPlaced,
    applied,
    field_span,
    global_call_span,
    ident_span,
)
from workers.policy_engine.cel.syntax.nodes import (
    Call,
    Ident,
    Literal,
    Node,
    Select,
    transform,
    transform_down,
)
from workers.policy_engine.cel.syntax.parser import CelSyntaxError, parse
from workers.policy_engine.cel.syntax.reads import Reference, scoped
from workers.policy_engine.cel.syntax.reads import references as tree_references
from workers.policy_engine.cel.syntax.unparser import unparse

__all__ = ["Reference", "global_calls", "literal_arguments", "references", "rewrite_roots",
           "substitute_field"]  # fmt: skip

_COMPUTED = object()  # an argument that is not a literal


def references(expression: str) -> list[Reference]:
    """Every input the expression reads, with its field chain (syntax/reads.py); none for
    an expression that does not parse (compiling it says why)."""
    try:
        return tree_references(parse(expression).root)
    except CelSyntaxError:
        return []


def global_calls(expression: str) -> set[str]:
    """The names of the global functions the expression calls (``image(...)``, not
    ``x.image(...)``); none for an expression that does not parse."""
    try:
        tree = parse(expression)
    except CelSyntaxError:
        return set()
    return {
        node.function for node, _ in scoped(tree.root)
        if isinstance(node, Call) and node.target is None
    }  # fmt: skip


def literal_arguments(expression: str, root: str, functions: frozenset[str]) -> list[list[Any]]:
    """The arguments of each call ``ROOT.F(...)`` (``F`` in ``functions``, ``ROOT`` the input,
    not a macro variable), each a literal's value or, for any other argument, a value that
    is no string, number, boolean or null; none for an expression that does not parse."""
    try:
        tree = parse(expression)
    except CelSyntaxError:
        return []
    out: list[list[Any]] = []
    for node, bound in scoped(tree.root):
        if not (isinstance(node, Call) and node.function in functions):
            continue
        target = node.target
        if isinstance(target, Ident) and target.name == root and root not in bound:
            out.append([arg.value if isinstance(arg, Literal) else _COMPUTED for arg in node.args])
    return out


def _free_selects(root: Node, name: str) -> list[tuple[Select, Node | None]]:
    """Each ``NAME.field`` of the input ``name`` (not a macro variable), with the node that
    selects from it in turn (None when nothing does)."""
    parent: dict[int, Node] = {}
    found: list[Select] = []
    for node, bound in scoped(root):
        if isinstance(node, Select):
            parent[id(node.operand)] = node
            operand = node.operand
            if isinstance(operand, Ident) and operand.name == name and name not in bound:
                found.append(node)
        elif isinstance(node, Call) and node.target is not None:
            parent[id(node.target)] = node
    return [(select, parent.get(id(select))) for select in found]


def rewrite_roots(
    expression: str,
    root: str,
    prefixes: dict[str, str],
    *,
    keep: frozenset[str] = frozenset(),
) -> str:
    """``expression`` with ``ROOT.FIELD`` read as ``ROOT.PREFIX`` for each FIELD in
    ``prefixes``, where ROOT is the input (not a field, not a macro variable).

    ``rewrite_roots("object.spec.x", "object", {"spec": "spec.template.spec"})`` gives
    ``object.spec.template.spec.x``. A reference whose next field is in ``keep`` stays as
    it is (``object.metadata.namespace`` with ``keep={"namespace"}``). The rest of the
    text is the author's, comments and layout included.
    """
    try:
        tree = parse(expression)
    except CelSyntaxError:
        return expression  # compiling it says why
    edits = []
    for select, after in _free_selects(tree.root, root):
        replacement = prefixes.get(select.field)
        if replacement is None:
            continue
        if isinstance(after, Select) and after.field in keep:
            continue
        try:
            start, end = field_span(expression, select)
        except NotPlaced:
            return _rewritten(tree.root, root, prefixes, keep)
        edits.append(Edit(start, end, replacement))
    return applied(expression, edits)


def _rewritten(root: Node, name: str, prefixes: dict[str, str], keep: frozenset[str]) -> str:
    """:func:`rewrite_roots` on the tree, written back whole (when the author's text could
    not be changed in place)."""
    kept = {id(select) for select, after in _free_selects(root, name)
            if isinstance(after, Select) and after.field in keep}  # fmt: skip
    moved = {id(select) for select, _ in _free_selects(root, name)} - kept

    def change(node: Node) -> Node | None:
        if id(node) not in moved or not isinstance(node, Select):
            return None
        steps = prefixes.get(node.field)
        if steps is None:
            return None
        out: Node = node.operand
        for step in steps.split("."):
            out = Select(out, step)
        return out

    return unparse(transform(root, change))


def substitute_field(expression: str, root: str, name: str, literal: str) -> str:
    """``expression`` with the input's ``ROOT.NAME`` read as the CEL literal ``literal``,
    and ``has(ROOT.NAME)`` as ``true`` (the field is always there). Text in strings, a
    field of that name elsewhere (``x.request.operation``) and a macro variable of that
    name are left alone, as is the rest of the author's text."""
    try:
        tree = parse(expression)
    except CelSyntaxError:
        return expression
    targets = {id(select): select for select, _ in _free_selects(tree.root, root)
               if select.field == name and not select.optional}  # fmt: skip
    if not targets:
        return expression
    edits: list[Edit] = []
    done: set[int] = set()
    try:
        for node in _calls(tree.root):
            argument = node.args[0]
            if id(argument) in targets:
                _, end = _select_span(expression, targets[id(argument)])
                edits.append(Edit(*global_call_span(expression, node, end), "true"))
                done.add(id(argument))
        for key, select in targets.items():
            if key not in done:
                edits.append(Edit(*_select_span(expression, select), literal))
        return applied(expression, edits)
    except NotPlaced:
        pass
    constant = parse(literal).root
    if not isinstance(constant, Literal):
        raise ValueError(f"{literal!r} is not a CEL literal")

    tests = {id(call) for call in _calls(tree.root) if id(call.args[0]) in targets}

    def change(node: Node) -> Node | None:
        if id(node) in tests:
            return Literal(True, "bool")
        return constant if id(node) in targets else None

    return unparse(transform_down(tree.root, change))


def _calls(root: Node) -> list[Call]:
    """The one-argument ``has(...)`` calls of the tree."""
    return [
        node for node, _ in scoped(root)
        if isinstance(node, Call) and node.function == "has" and node.target is None
        and len(node.args) == 1
    ]  # fmt: skip


def _select_span(text: str, select: Select) -> tuple[int, int]:
    operand = select.operand
    assert isinstance(operand, Ident)
    start, _ = ident_span(text, operand)
    _, end = field_span(text, select)
    return start, end
