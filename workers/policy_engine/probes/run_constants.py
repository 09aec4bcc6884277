"""A probe run's constants: what is the same for every object, computed once per run.

A probe (a model's, or an imported policy) evaluates its expressions once per object. What
they read of ``params`` and of the constant variables (those that read no object) is the
same every time; the runtime, though, converts a bound value from Python whole, on its first
read in each evaluation, so a large ``params`` read by every object was converted again and
again (2 MB of params over 3,000 objects: minutes, stopped only by the deadline).

So before the objects are judged:

* each constant variable is evaluated once (:func:`constant_variables`): one that reads no
  object, only ``params``, literals and constant variables before it;
* then each largest part of an expression (or of another variable) that reads only those
  (``params.spec.allowed``, ``variables.params.exempt``, ``params.items.map(i, i.name)``)
  is evaluated once;

and each is bound in a slot of its own (cel/programs.py's :class:`Slots`): an evaluation then
converts only the constants it reads, each conversion charged (cel/programs.py's
``Expression.conversion_steps``). A plain path (``params.spec.allowed``) is read in Python,
converting nothing; any other part is evaluated by the runtime with the plain paths it reads
bound in turn, so it converts those, not the whole of ``params`` (at most
:data:`MAX_EVALUATED` such parts a run). A part that errs (``params.missing``) is left where
it is, its own constant parts bound instead: the error is then raised where it stood, as
before. A value that would not come back from Python as the CEL value it was (a uint, an
optional, a type, a map with keys other than strings) stays where it is.

Why variables at all: Gatekeeper's templates define a dozen variables from ``params``;
bound around every expression, they exceeded the runtime's parser nesting of 32, and they
were evaluated again for every object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from workers.policy_engine.cel.lib.rewrite import bound_identifiers
from workers.policy_engine.cel.programs import (
    KYVERNO_EXCEPTIONS,
    BoolProgram,
    CelError,
    Slots,
    StepMeter,
    may_give_uint,
    places,
    plain,
)
from workers.policy_engine.cel.syntax.nodes import (
    Call,
    Ident,
    Index,
    Literal,
    Node,
    Select,
    binding,
    children,
)
from workers.policy_engine.cel.syntax.parser import CelSyntaxError, parse
from workers.policy_engine.cel.syntax.reads import VARIABLES, free_names, reads, variables_read
from workers.policy_engine.cel.syntax.unparser import unparse

# What a variable may read and still be a constant of the probe run: nothing of the objects
# (Kyverno's ``exceptions`` among them: its PolicyExceptions' grants to each object).
OBJECT_INPUTS = ("object", "results", "oldObject", "request", "namespaceObject", "authorizer",
                 KYVERNO_EXCEPTIONS)  # fmt: skip
# Inputs a part may read and still be a constant of the run.
CONSTANT_INPUTS = frozenset({"params", VARIABLES})
# A constant is brought into Python whole: one that holds the constants before it more than
# this many times (their text inlined) may be exponentially large (``[variables.a,
# variables.a]`` in a chain) and stays lazy, where the runtime shares the copies.
MAX_CONSTANT_COPIES = 64
# Parts of expressions evaluated by the runtime in one run (a plain path costs nothing).
MAX_EVALUATED = 64
_FAILED = object()


def constant_variables(
    variables: Sequence[tuple[str, str]], data: Mapping[str, Any], meter: StepMeter
) -> dict[str, Any]:
    """The variables whose value is the same for every object of a probe run, evaluated
    once over ``data`` (``params``, when bound): those that read no object, only the inputs
    in ``data`` and constants before them. A variable is a deterministic function of what it
    reads, so its value read lazily per object would be this one; one that errs, gives an
    optional, or might change type on the way back stays lazy (bound, evaluated where read)."""
    return _Hoister(variables, data, meter).constant_variables()


def run_constants(
    variables: Sequence[tuple[str, str]],
    expressions: Sequence[str],
    data: Mapping[str, Any],
    meter: StepMeter,
) -> Slots:
    """The run's constants over ``data``: the constant variables, then the largest constant
    parts of the other variables and of ``expressions``, each evaluated once (charged to
    ``meter``)."""
    hoister = _Hoister(variables, data, meter)
    constants = hoister.constant_variables()
    hoister.slots = Slots().with_variables(constants)
    if "params" not in data and not constants:
        return hoister.slots  # nothing else can be a constant of the run
    for name, source in variables:
        if name not in constants:
            hoister.hoist(source)
    for text in expressions:
        hoister.hoist(text)
    return hoister.slots


@dataclass(frozen=True)
class _Candidate:
    """A constant part of an expression (by its place in the text's tree), and the
    candidates within it, tried when it errs."""

    place: int
    node: Node
    within: tuple[_Candidate, ...]


@lru_cache(maxsize=1024)
def _candidates(text: str, constants: frozenset[str]) -> tuple[_Candidate, ...]:
    """The largest constant parts of ``text`` (``constants``: the constant variables), each
    with those within it: the same for every run of a probe, worked out once."""
    try:
        root = parse(text).root
    except CelSyntaxError:
        return ()  # compiling it says why
    numbers = {id(node): number for number, node in enumerate(places(root))}

    def search(nodes: Sequence[Node]) -> tuple[_Candidate, ...]:
        out: list[_Candidate] = []
        todo = list(reversed(nodes))
        while todo:
            node = todo.pop()
            if _constant(node, constants):
                out.append(_Candidate(numbers[id(node)], node, search(_parts(node))))
            else:
                todo.extend(reversed(_parts(node)))
        return tuple(out)

    return search([root])


@lru_cache(maxsize=256)
def _variable_shapes(
    variables: tuple[tuple[str, str], ...],
) -> tuple[tuple[str, Node | None, tuple[str, ...], bool], ...]:
    """Per variable: its tree (None when it does not parse), the variables it reads, and
    whether it can never be a constant (it reads an object, may give a uint, or holds the
    variables before it too many times)."""
    copies: dict[str, int] = {}
    out: list[tuple[str, Node | None, tuple[str, ...], bool]] = []
    for name, source in variables:
        try:
            root: Node | None = parse(source).root
        except CelSyntaxError:
            out.append((name, None, (), True))  # compiling it says why
            continue
        assert root is not None
        occurrences = tuple(variables_read(root))
        copies[name] = min(1 + sum(copies.get(other, 1) for other in occurrences), 2**62)
        never = (
            any(reads(root, input_name) for input_name in OBJECT_INPUTS)
            or may_give_uint(root)
            or copies[name] > MAX_CONSTANT_COPIES
        )
        out.append((name, root, occurrences, never))
    return tuple(out)


class _Hoister:
    def __init__(
        self, variables: Sequence[tuple[str, str]], data: Mapping[str, Any], meter: StepMeter
    ) -> None:
        self.variables = list(variables)
        self.data = data
        self.meter = meter
        self.slots = Slots()
        self.constants: dict[str, Any] = {}
        self.done: dict[str, Any] = {}  # a part's text -> its value (or _FAILED)
        self.evaluated = 0

    def constant_variables(self) -> dict[str, Any]:
        shapes = _variable_shapes(tuple(self.variables))
        for number, (name, root, occurrences, never) in enumerate(shapes):
            if root is None or never or not set(occurrences) <= set(self.constants):
                continue
            value = self._value(root, self.variables[:number], f"variable {name}")
            if value is not _FAILED:
                self.constants[name] = value
        return dict(self.constants)

    def hoist(self, text: str) -> None:
        todo = list(reversed(_candidates(text, frozenset(self.constants))))
        while todo and self.slots.next_slot() is not None:
            candidate = todo.pop()
            value = self._value(candidate.node, self.variables, "a constant part")
            if value is _FAILED:
                todo.extend(reversed(candidate.within))
            else:
                self.slots = self.slots.with_node(text, candidate.place, value)

    def _value(self, node: Node, variables: Sequence[tuple[str, str]], what: str) -> Any:
        """``node``'s value over the run's data, or _FAILED."""
        text = unparse(node)
        if text not in self.done:
            value = self._path_value(node)
            if value is _FAILED:
                value = self._evaluated(text, variables, what)
            self.done[text] = value if value is not _FAILED and plain(value) else _FAILED
        return self.done[text]

    def _path_value(self, node: Node) -> Any:
        """A plain path from params or a constant variable, read in Python (no
        conversion): what the runtime would give, or _FAILED (an error there, or a step
        Python might read otherwise)."""
        steps: list[Any] = []
        while isinstance(node, Select | Index) and not node.optional:
            if isinstance(node, Select):
                steps.append(node.field)
            elif isinstance(node.index, Literal) and node.index.kind in ("string", "int"):
                steps.append(node.index.value)
            else:
                return _FAILED
            node = node.operand
        if not isinstance(node, Ident) or not steps:
            return _FAILED
        if node.name == VARIABLES:
            name = steps.pop()
            if name not in self.constants:
                return _FAILED
            value: Any = self.constants[name]
        elif node.name == "params" and "params" in self.data:
            value = self.data["params"]
        else:
            return _FAILED
        for step in reversed(steps):
            in_map = isinstance(value, dict) and isinstance(step, str) and step in value
            in_list = isinstance(value, list) and type(step) is int and 0 <= step < len(value)
            if not (in_map or in_list):
                return _FAILED  # the runtime errs (or a Python reading could differ)
            value = value[step]
        return value

    def _evaluated(self, text: str, variables: Sequence[tuple[str, str]], what: str) -> Any:
        """``text`` evaluated by the runtime once, its plain paths of params and constants
        bound (so it converts those, not the whole of params), or _FAILED."""
        if self.evaluated >= MAX_EVALUATED:
            return _FAILED
        self.evaluated += 1
        slots = Slots().with_variables(self.constants)
        root = parse(text).root
        numbers = {id(node): number for number, node in enumerate(places(root))}
        for node in _largest_paths(root):
            value = self._path_value(node)
            if value is not _FAILED and plain(value):
                slots = slots.with_node(text, numbers[id(node)], value)
        try:
            program = BoolProgram(
                text, variables=variables, meter=self.meter, what=what, slots=slots
            )
            # params measured by the cost estimate; converted only where still read
            return program.value(self.data)
        except CelError:
            return _FAILED


def _constant(node: Node, constants: frozenset[str]) -> bool:
    """A part worth computing once: it reads params or a constant variable (more than the
    name alone), and nothing else (no object, no macro variable bound outside it)."""
    if isinstance(node, Ident) or _is_variable_read(node) or _is_has(node):
        return False  # a constant variable is in its slot already
    names = free_names(node)
    if not names or any(ident.name not in CONSTANT_INPUTS for ident in names):
        return False
    read = variables_read(node)
    uses = sum(1 for ident in names if ident.name == VARIABLES)
    if uses != len(read) or not set(read) <= constants:
        return False
    return not may_give_uint(node)


def _is_variable_read(node: Node) -> bool:
    return (
        isinstance(node, Select)
        and isinstance(node.operand, Ident)
        and node.operand.name == VARIABLES
    )


def _is_has(node: Node) -> bool:
    return isinstance(node, Call) and node.function == "has" and node.target is None


def _parts(node: Node) -> list[Node]:
    """The parts of ``node`` that may be computed on their own: not a macro's variable
    names, not the selection ``has()`` tests (its operand may be)."""
    parts = list(children(node))
    if isinstance(node, Call):
        bound = binding(node)
        if bound is not None:
            offset = 1 if node.target is not None else 0
            parts = [p for n, p in enumerate(parts) if not (0 <= n - offset < len(bound[0]))]
        if _is_has(node):
            parts = [grand for part in parts for grand in children(part)]
    return parts


def _path_base(node: Node) -> Ident | None:
    """The identifier a plain path (fields, and literal string or int indexes, none of them
    optional) starts at; None for anything else."""
    while isinstance(node, Select | Index) and not node.optional:
        if isinstance(node, Index) and not (
            isinstance(node.index, Literal) and node.index.kind in ("string", "int")
        ):
            return None
        node = node.operand
    return node if isinstance(node, Ident) else None


def _largest_paths(root: Node) -> list[Node]:
    """The plain paths from params or a variable, not inside a longer one, in ``root``
    (where no macro rebinds their name)."""
    bound = bound_identifiers(root)
    out: list[Node] = []
    todo = [root]
    while todo:
        node = todo.pop()
        base = _path_base(node) if isinstance(node, Select | Index) else None
        if base is not None and base.name in CONSTANT_INPUTS and id(base) not in bound:
            out.append(node)
            continue
        todo.extend(_parts(node))
    return out
