"""Where in the author's text a problem the runtime found lies.

assay compiles a text of its own, unparsed from the author's trees after its rewrites
(probe variables bound around the expression, library calls rewritten): the runtime's
messages name lines and columns of that text, which the author never wrote. The text is
parsed again (the runtime's parser places every node of it) and walked beside the tree it
was written from; each node of that tree still carries where the author wrote it, and in
which text (the expression, or one of its variables). A problem is then told at the
author's line and column of the node the runtime placed it on, or of the nearest node
around it that the author wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from workers.policy_engine.cel.syntax.nodes import LOGICAL, Call, Node, children, operands
from workers.policy_engine.cel.syntax.parser import (
    CelSyntaxError,
    line_column,
    offset_of,
    parse,
    problems_of,
)


@dataclass(frozen=True)
class Place:
    """A problem at a node the author wrote: in which text (its label), and where."""

    source: str
    line: int
    column: int
    message: str

    def text(self) -> str:
        if self.line <= 0:
            return self.message
        return f"line {self.line}, column {self.column}: {self.message}"


def _pairs(written: Node, reread: Node) -> list[tuple[Node, Node]]:
    """The nodes of ``written`` beside those of ``reread`` (its text parsed again)."""
    out: list[tuple[Node, Node]] = []
    todo = [(written, reread)]
    while todo:
        a, b = todo.pop()
        out.append((a, b))
        if (
            isinstance(a, Call)
            and isinstance(b, Call)
            and a.function == b.function
            and a.function in LOGICAL
            and a.target is None
            and b.target is None
        ):
            left, right = operands(a, a.function), operands(b, b.function)
            if len(left) == len(right):
                todo.extend(zip(left, right, strict=True))
            continue
        left_children, right_children = children(a), children(b)
        if len(left_children) == len(right_children):
            todo.extend(zip(left_children, right_children, strict=True))
    return out


def locate(
    program: Node,
    program_text: str,
    message: str,
    sources: Mapping[int, tuple[str, str]],
    default: tuple[str, str],
) -> list[Place]:
    """The problems of the runtime's ``message`` about ``program_text`` (the unparse of
    ``program``), placed in the authors' texts. ``sources``: by ``id()`` of a subtree of
    ``program``, the (label, text) it was parsed from; ``default``: the text of the rest."""
    problems = problems_of(message)
    try:
        reread = parse(program_text).root
    except CelSyntaxError:
        reread = None
    # (label, text, author's offset) of each node of the reread text, by its offset there
    placed: dict[int, tuple[str, str, int]] = {}
    if reread is not None:
        origin: dict[int, tuple[str, str, int]] = {}
        todo: list[tuple[Node, tuple[str, str, int]]] = [(program, (*default, -1))]
        while todo:  # where each node of the written tree comes from (nearest known)
            node, (label, text, at) = todo.pop()
            if id(node) in sources:
                label, text = sources[id(node)]
            if node.at >= 0:
                at = node.at
            origin[id(node)] = (label, text, at)
            todo.extend((child, (label, text, at)) for child in children(node))
        for written, again in _pairs(program, reread):
            if again.at >= 0 and again.at not in placed and id(written) in origin:
                placed[again.at] = origin[id(written)]
    out = []
    for line, column, text in problems:
        where = placed.get(offset_of(program_text, line, column)) if line > 0 else None
        if where is None or where[2] < 0:
            label = default[0] if where is None else where[0]
            out.append(Place(label, 0, 0, text))
            continue
        label, source, at = where
        author_line, author_column = line_column(source, at)
        out.append(Place(label, author_line, author_column, text))
    return out
