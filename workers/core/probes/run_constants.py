"""A probe run's constants: what is the same for every object, computed once per run.

A probe (a model's, or an imported policy) evaluates its expressions once per object. What
they read of ``params`` and of the constant variables (those that read no object,
cel.py's ``constant_variables``) is the same every time; the runtime, though, converts a
variable's whole value from Python on its first read in each evaluation, so a large
``params`` read by every object was converted again and again (2 MB of params over 3,000
objects: minutes, stopped only by the deadline).

So before the objects are judged, each largest part of an expression that reads only
``params`` and constant variables (``params.spec.allowed``, ``variables.params.exempt``,
``params.items.map(i, i.name)``) is evaluated once, over ``params``, and bound in a slot of
its own (cel.py's :class:`Slots`): an evaluation then converts only the constants it reads,
and each conversion is charged (cel.py's ``Expression.conversion_steps``). A part that errs
(``params.missing``) is left where it is, its own constant parts bound instead: the error
is then raised where it stood, as before. A value that would not come back from Python as
the CEL value it was (a uint, an optional, a type, a map with keys other than strings)
stays where it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workers.core.probes.cel import (
    BoolProgram,
    CelError,
    Slots,
    StepMeter,
    constant_variables,
    may_give_uint,
    places,
    plain,
)
from workers.core.probes.syntax.nodes import Call, Ident, Node, Select, binding, children
from workers.core.probes.syntax.parser import CelSyntaxError, parse
from workers.core.probes.syntax.reads import VARIABLES, free_names, variables_read
from workers.core.probes.syntax.unparser import unparse

# Inputs a part may read and still be a constant of the run.
CONSTANT_INPUTS = frozenset({"params", VARIABLES})


def run_constants(
    variables: Sequence[tuple[str, str]],
    expressions: Sequence[str],
    data: Mapping[str, Any],
    meter: StepMeter,
) -> Slots:
    """The run's constants over ``data`` (``params``, when bound): the constant variables,
    then the largest constant parts of the other variables and of ``expressions``, each
    evaluated once (charged to ``meter``)."""
    constants = constant_variables(variables, data, meter)
    slots = Slots().with_variables(constants)
    hoister = _Hoister(variables, data, meter, slots)
    for name, source in variables:
        if name not in constants:
            hoister.hoist(source)
    for text in expressions:
        hoister.hoist(text)
    return hoister.slots


class _Hoister:
    def __init__(
        self,
        variables: Sequence[tuple[str, str]],
        data: Mapping[str, Any],
        meter: StepMeter,
        slots: Slots,
    ) -> None:
        self.variables = list(variables)
        self.data = data
        self.meter = meter
        self.slots = slots
        self.constants = set(slots.variable_values())
        self.done: dict[str, Any] = {}  # a part's text -> its value (or _FAILED)

    def hoist(self, text: str) -> None:
        try:
            root = parse(text).root
        except CelSyntaxError:
            return  # compiling it says why
        numbers = {id(node): number for number, node in enumerate(places(root))}
        todo = [root]
        while todo:
            node = todo.pop()
            if self.slots.next_slot() is None:
                return
            if self._constant(node):
                value = self._value(node)
                if value is not _FAILED:
                    self.slots = self.slots.with_node(text, numbers[id(node)], value)
                    continue
            todo.extend(reversed(_parts(node)))

    def _constant(self, node: Node) -> bool:
        """A part worth computing once: it reads params or a constant variable (more than
        the name alone), and nothing else (no object, no macro variable bound outside it)."""
        if isinstance(node, Ident) or (
            isinstance(node, Call) and node.function == "has" and node.target is None
        ):
            return False
        names = free_names(node)
        if not names or any(ident.name not in CONSTANT_INPUTS for ident in names):
            return False
        read = variables_read(node)
        uses = sum(1 for ident in names if ident.name == VARIABLES)
        if uses != len(read) or not set(read) <= self.constants:
            return False
        if _is_variable_read(node):
            return False  # a constant variable is in its slot already
        return not may_give_uint(node)

    def _value(self, node: Node) -> Any:
        text = unparse(node)
        if text not in self.done:
            try:
                program = BoolProgram(
                    text, variables=self.variables, meter=self.meter,
                    what="a constant part", constants=self.slots.variable_values(),
                )  # fmt: skip
                value = program.value(self.data)
            except CelError:
                value = _FAILED
            self.done[text] = value if plain(value) else _FAILED
        return self.done[text]


_FAILED = object()


def _is_variable_read(node: Node) -> bool:
    return (
        isinstance(node, Select)
        and isinstance(node.operand, Ident)
        and node.operand.name == VARIABLES
    )


def _parts(node: Node) -> list[Node]:
    """The parts of ``node`` that may be computed on their own: not a macro's variable
    names, not the selection ``has()`` tests (its operand may)."""
    parts = list(children(node))
    if isinstance(node, Call):
        bound = binding(node)
        if bound is not None:
            offset = 1 if node.target is not None else 0
            parts = [p for n, p in enumerate(parts) if not (0 <= n - offset < len(bound[0]))]
        if node.function == "has" and node.target is None:
            parts = [grand for part in parts for grand in children(part)]
    return parts
