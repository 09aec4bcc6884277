"""A cost bound for probe expressions: the CEL runtime has none, and cannot be interrupted.

The runtime (``cel-expr-python``, cel-cpp's bindings, cel/programs.py) has no cost limit,
only a fixed cap of 10,000 comprehension iterations per evaluation; it evaluates in C++ and cannot
be cancelled, so neither a watchdog thread nor the task time limit can stop a costly
evaluation once it runs. The model still counts ``map`` and ``filter`` as copying their
accumulator per element (the previous runtime did, quadratically): an upper bound.

So the bound is enforced before evaluation, in two steps:

* **at compile time** (:func:`analyse`), a static shape check: at most
  :data:`MAX_COMPREHENSIONS` comprehensions (nested as deep as the API server allows: their
  nesting is costed over the input, below, as its cost limit does),
  :data:`MAX_CONCATENATIONS` ``+`` operators (the only way to grow a string or a list
  without a comprehension), comprehension variables that are plain names, and a literal
  ``matches`` pattern's length (every ``matches`` is run and charged per call by the
  regex library, cel/lib/regex.py, over its text and compiled program);
* **at run time** (:meth:`CostModel.estimate`), an upper estimate of the evaluation's steps
  over the actual input: each comprehension's range is measured on the input (a plain
  path such as ``results[0]`` or ``p.spec.containers`` is navigated in Python; a computed
  range counts as the largest list in the input times the concatenations), nested ranges
  multiply, ``map``/``filter`` count their quadratic copying, a reference to a whole
  input list inside a comprehension body (``x in results[1]``, ``results[0] == ...``)
  counts its length per iteration, and a whole input string its characters. The runtime's
  own ``sets`` functions compare every pair of their lists' elements: each call counts
  those pairs, its lists' lengths bounded over the input (:class:`ListArgument`).
  Variables that hold one another more than :data:`FREE_COPIES` times (list or map
  literals of them, in a chain) charge each further copy of the input as walked whole.
  Over :data:`MAX_STEPS` the expression is refused.

The Kubernetes libraries written in Python (``cel/lib/``) are charged to the same steps as
each call is made, over its actual arguments (``cel/lib/base.py``).

A refusal is a :class:`CostExceeded` (a ``CelError``): the probe "cannot run", never ``true``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from workers.policy_engine.cel.syntax.nodes import (
    Call,
    Ident,
    Index,
    ListExpr,
    Literal,
    MapExpr,
    Node,
    Select,
    binding,
    children,
    walk,
)
from workers.policy_engine.cel.syntax.parser import CelSyntaxError, parse
from workers.policy_engine.cel.syntax.reads import variables_read

MAX_COMPREHENSIONS = 16
MAX_CONCATENATIONS = 32
# Steps one probe run may cost (about one comprehension body evaluation or one element
# copied each). Measured on 2 shared cores: ~200,000 small bodies/s, ~8,000,000 copies/s,
# so the bound keeps a run within seconds while 50,000 objects in one `all` stay well in.
MAX_STEPS = 2_000_000
# Compiling a 2,483-character pattern takes ~1 ms (~500 body steps): a `matches` pattern
# costs its length / PATTERN_CHARS_PER_STEP steps per call (a literal one here, statically,
# on top of what cel/lib/regex.py charges as the call is made).
PATTERN_CHARS_PER_STEP = 4
# A step is ~5 us of evaluation; copying 16 KB of string takes about as long.
STRING_CHARS_PER_STEP = 16_384
# A list element copied by `+` counts as this many characters of a string copied.
LIST_ELEMENT_CHARS = 16
# Variables reading one another (``[variables.a, variables.a]``) hold copies of the input:
# past this many, read by one expression, each further copy is charged as walked whole
# (compared, converted), ~100 ns an element (26 levels of doubling, 2^27 lists: 7 s).
FREE_COPIES = 64
COPIED_ELEMENTS_PER_STEP = 32
# Past any bound: where counting the `+` of variables read through one another stops.
_INLINED_CAP = 10**12
# Reading a whole string of the input inside a comprehension body (``size(object.s)`` counts
# its code points, ``object.s + 'a'`` copies it) takes up to ~2-4 ns a character on a loaded
# host (bench/bench_cel_calls.py): each iteration costs its length / this many steps.
STRING_SCAN_CHARS_PER_STEP = 1_024
# cel-go's sets (the runtime's own, which cannot be charged as it runs) compare every element
# of one list with every element of the other: ~10-20 ns a pair of scalars (20,000 x 20,000
# disjoint strings: sets.intersects 7-9 s, uninterruptible), counted as 50 ns.
SET_PAIRS_PER_STEP = 100
# Each function's passes over the pairs: equivalent is contains both ways.
SET_FUNCTIONS = {"contains": 1, "intersects": 1, "equivalent": 2}
# Calls whose list may be longer than any list in the input: a string's characters or parts.
_STRING_TO_LIST = frozenset({"split", "findAll"})
COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "existsOne", "map", "filter",
                            "transformList", "transformMap", "transformMapEntry"})  # fmt: skip
# Two-variable comprehensions (index and element of a list, key and value of a map).
TWO_VARIABLE = frozenset({"all", "exists", "exists_one", "existsOne", "transformList",
                          "transformMap", "transformMapEntry"})  # fmt: skip
_COPYING = frozenset({"map", "filter", "transformList", "transformMap", "transformMapEntry"})


class CelCostError(ValueError):
    """Base for cost refusals (cel/programs.py re-raises them as CelError)."""


class CostExceeded(CelCostError):
    """The expression's shape or its estimated cost over this input is over the bound."""


@dataclass(frozen=True)
class Path:
    """A plain path: a root name then ``.field`` / ``[int]`` / ``['key']`` steps."""

    root: str
    steps: tuple[str | int, ...]


@dataclass
class Comprehension:
    macro: str
    variable: str  # bound to each element (a list's element, a map's key; with two
    # variables, a list's element or a map's value)
    receiver: Path | None  # None: a computed range (a call, a literal, a parenthesis)
    parent: int | None  # index of the enclosing comprehension
    refs: list[Path] = field(default_factory=list)  # plain paths read in the body itself
    extra: int = 0  # steps per iteration beyond one (regex patterns compiled in the body)
    index_variable: str | None = None  # with two variables: the index or key


@dataclass(frozen=True)
class ListArgument:
    """What a list argument of a ``sets`` call is, to bound its length before evaluation.

    ``form``: ``literal`` (``length`` elements), ``path`` (a plain path, measured), ``mapped``
    (a comprehension over a plain path: no longer than its list), ``split`` (a plain path's
    string split, at a literal ``separator`` or any), or ``computed``: no longer than the
    longest list of the input (or the longest string, ``from_strings``, when it splits or
    finds in one or reads a variable) plus ``length`` literal elements, times one more than
    its ``plus`` operators."""

    form: str
    path: Path | None = None
    length: int = 0
    separator: str | None = None
    from_strings: bool = False
    plus: int = 0


@dataclass(frozen=True)
class SetCall:
    """A ``sets.contains/equivalent/intersects(a, b)`` call and where it is."""

    passes: int
    arguments: tuple[ListArgument, ListArgument]
    comprehension: int | None  # the innermost comprehension whose body makes the call


@dataclass
class CostModel:
    """The loop skeleton of an expression, for estimating its cost over an input."""

    comprehensions: list[Comprehension]
    concatenations: int
    base: int = 0  # steps per evaluation outside any comprehension (regex patterns)
    set_calls: list[SetCall] = field(default_factory=list)
    literal_list: int = 0  # the most elements of a list written in the expression
    # per probe variable: the `+` operators of its definition and of those it reads (a list
    # it holds is at most the input's longest times one more than that)
    variable_plus: dict[str, int] = field(default_factory=dict)
    # its `+` operators and, as often as read, those of the probe variables it reads
    inlined_concatenations: int = 0
    literal_chars: int = 0  # the longest string written in it or in the variables
    # the copies of the input its value may hold through the variables it reads
    # (:func:`_variable_shapes`), as often as read
    copies: int = 0

    def estimate(
        self,
        variables: Mapping[str, Any],
        limit: int = MAX_STEPS,
        extents: Extents | None = None,
    ) -> int:
        """Upper estimate of the steps evaluating over ``variables`` costs; CostExceeded
        as soon as it passes ``limit``. ``extents``: the inputs measured so far in this run
        (an input the same for every object, as params, is walked once, not per object)."""
        return _Estimate(self, variables, limit, extents).total()


class Extents:
    """The longest list and string of each input value measured in one probe run, kept
    with the value itself (so an identity is never taken for another value's)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[Any, tuple[int, int]]] = {}

    def of(self, value: Any) -> tuple[int, int]:
        known = self._known.get(id(value))
        if known is None or known[0] is not value:
            known = (value, _extent(value))
            if isinstance(value, dict | list):
                self._known[id(value)] = known
        return known[1]


def plain_path(node: Node) -> Path | None:
    """The plain path ``node`` reads (an identifier, then fields, optional fields and
    literal indexes), or None when it is computed."""
    steps: list[str | int] = []
    while True:
        if isinstance(node, Ident):
            return Path(node.name, tuple(reversed(steps)))
        if isinstance(node, Select):
            steps.append(node.field)
            node = node.operand
        elif isinstance(node, Index) and isinstance(node.index, Literal):
            index = node.index
            if index.kind == "int" and isinstance(index.value, int):
                steps.append(index.value)
            elif index.kind == "string":
                steps.append(str(index.value))
            else:
                return None
            node = node.operand
        else:
            return None


def _parsed(expression: str) -> Node:
    return parse(expression).root


def analyse(expression: str, variables: Mapping[str, str] | None = None) -> CostModel:
    """The expression's loop skeleton, from its syntax tree; CostExceeded when its shape is
    over the static bounds (CelSyntaxError when it does not parse). ``variables``: the
    probe's variables by name, to bound a ``sets`` argument read from one."""
    return analyse_tree(_parsed(expression), variables)


def analyse_tree(root: Node, variables: Mapping[str, str] | None = None) -> CostModel:
    """:func:`analyse` of a tree (an expression as it runs: a run's constant parts read
    from their slots, measured there, not computed again)."""
    skeleton = _Skeleton(variables or {})
    skeleton.visit(root, None)
    found = skeleton.comprehensions
    if len(found) > MAX_COMPREHENSIONS:
        raise CostExceeded(f"the expression has more than {MAX_COMPREHENSIONS} comprehensions")
    concatenations = _count(root, "_+_")
    if concatenations > MAX_CONCATENATIONS:
        raise CostExceeded(f"the expression has more than {MAX_CONCATENATIONS} '+' operators")
    plus, copies, literal, chars = _variable_shapes(tuple((variables or {}).items()))
    literal = max(literal, _longest_literal(root))
    inlined = dict(plus)
    read = variables_read(root)
    # the variables it reads concatenate too: their values are copied as often as read
    through = sum(inlined.get(name, 0) for name in read)
    return CostModel(
        found, concatenations, skeleton.base, skeleton.set_calls, literal, inlined,
        inlined_concatenations=min(concatenations + through, _INLINED_CAP),
        literal_chars=max(chars, _longest_string(root)),
        copies=min(sum(dict(copies).get(name, 0) for name in read), _INLINED_CAP),
    )  # fmt: skip


class _Skeleton:
    """Walks a tree for :func:`analyse`: comprehensions (their ranges and what their bodies
    read), ``sets`` calls and literal ``matches`` patterns, each with the innermost
    comprehension whose body holds it."""

    def __init__(self, variables: Mapping[str, str]) -> None:
        self.variables = variables
        self.comprehensions: list[Comprehension] = []
        self.set_calls: list[SetCall] = []
        self.base = 0

    def visit(self, node: Node, enclosing: int | None) -> None:
        todo: list[tuple[Node, int | None]] = [(node, enclosing)]
        while todo:
            current, inside = todo.pop()
            todo.extend(reversed(self._step(current, inside)))

    def _step(self, node: Node, inside: int | None) -> list[tuple[Node, int | None]]:
        """Record what ``node`` is; the parts of it to visit next."""
        path = plain_path(node)
        if path is not None:
            if inside is not None:
                self.comprehensions[inside].refs.append(path)
            return []
        if not isinstance(node, Call):
            return [(child, inside) for child in children(node)]
        if node.function in COMPREHENSIONS and node.target is not None:
            return self._comprehension(node, inside)
        if node.function == "matches" and node.args:
            steps = _pattern_steps(node)
            if inside is not None:
                self.comprehensions[inside].extra += steps
            else:
                self.base += steps
        set_call = self._set_call(node, inside)
        if set_call is not None:
            self.set_calls.append(set_call)
        parts = list(node.args)
        # `.size()` reads a length, not the list
        target = node.target
        if target is not None and not (node.function == "size" and plain_path(target)):
            parts.insert(0, target)
        return [(part, inside) for part in parts]

    def _comprehension(self, call: Call, inside: int | None) -> list[tuple[Node, int | None]]:
        bound = binding(call)
        if bound is None:
            raise CostExceeded(f"the {call.function}() comprehension needs a variable name first")
        names, scope = bound
        two = len(names) == 2 and call.function in TWO_VARIABLE
        assert call.target is not None
        receiver = plain_path(call.target)
        self.comprehensions.append(
            Comprehension(
                macro=call.function,
                variable=names[1] if two else names[0],
                receiver=receiver,
                parent=inside,
                index_variable=names[0] if two else None,
            )
        )
        index = len(self.comprehensions) - 1
        # a comprehension's range is costed as one: a plain one is no read of its body
        parts = [] if receiver is not None else [(call.target, inside)]
        return parts + [(call.args[number], index) for number in scope]

    def _set_call(self, call: Call, inside: int | None) -> SetCall | None:
        """The ``sets.f(a, b)`` call, if ``call`` is one."""
        target = call.target
        is_call = (
            call.function in SET_FUNCTIONS
            and isinstance(target, Ident)
            and target.name == "sets"
            and len(call.args) == 2
        )
        if not is_call:
            return None
        first, second = (_list_argument(arg, self.variables, 0) for arg in call.args)
        return SetCall(SET_FUNCTIONS[call.function], (first, second), inside)


def _count(root: Node, function: str) -> int:
    return sum(1 for node in walk(root) if isinstance(node, Call) and node.function == function)


@lru_cache(maxsize=256)
def _variable_shapes(
    variables: tuple[tuple[str, str], ...],
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...], int, int]:
    """Per variable its concatenations and the copies of the input its value may hold
    (:func:`_through_reads`), the longest list written in any of them, and the longest
    string."""
    trees: dict[str, Node] = {}
    for name, source in variables:
        try:
            trees[name] = _parsed(source)
        except CelSyntaxError:
            continue  # compiling it says why
    reads = {
        name: [other for other in variables_read(tree) if other in trees]
        for name, tree in trees.items()
    }
    # ``a + a`` over ``a``'s one `+` has three; a chain of variables each doubling the one
    # before has exponentially many, as its value's size grows (a variable is evaluated
    # once, but a value concatenated with itself is copied, and doubled, all the same)
    own_plus = {name: _count(tree, "_+_") for name, tree in trees.items()}
    plus = _through_reads(own_plus, reads)
    # ``[variables.a, variables.a]`` in a chain holds exponentially many copies without a
    # `+`: the runtime shares them, but a comparison, a membership test or a conversion
    # walks every one
    copies = _through_reads(dict.fromkeys(trees, 1), reads)
    literal = max((_longest_literal(tree) for tree in trees.values()), default=0)
    chars = max((_longest_string(tree) for tree in trees.values()), default=0)
    return tuple(plus.items()), tuple(copies.items()), literal, chars


def _through_reads(own: Mapping[str, int], reads: Mapping[str, list[str]]) -> dict[str, int]:
    """Per variable, its ``own`` figure plus that of each variable it reads, counted as
    often as it is read (its text inlined, transitively). Capped at :data:`_INLINED_CAP`,
    far past any bound."""
    out: dict[str, int] = {}

    def inlined(name: str, seen: frozenset[str]) -> int:
        if name in out:
            return out[name]
        total = own[name]
        for other in reads[name]:
            if other not in seen:  # a cycle is the compiler's to refuse
                total = min(total + inlined(other, seen | {name}), _INLINED_CAP)
        out[name] = total
        return total

    for name in own:
        inlined(name, frozenset())
    return out


def _longest_string(root: Node) -> int:
    """The characters of the longest string (or bytes) literal in the tree."""
    return max(
        (len(n.value) for n in walk(root) if isinstance(n, Literal) and n.kind in _TEXTS),
        default=0,
    )


_TEXTS = ("string", "bytes")


def _longest_literal(root: Node) -> int:
    """The most elements a list written in the expression has (a literal list may be a
    comprehension's range, longer than any list of the input)."""
    return max((len(n.elements) for n in walk(root) if isinstance(n, ListExpr)), default=0)


def _commas(root: Node) -> int:
    """How many commas separate elements and arguments in the tree."""
    total = 0
    for node in walk(root):
        if isinstance(node, ListExpr):
            total += max(len(node.elements) - 1, 0)
        elif isinstance(node, Call) and node.function[:1] not in ("_", "@", "!", "-"):
            total += max(len(node.args) - 1, 0)
        elif isinstance(node, MapExpr):
            total += max(len(node.entries) - 1, 0)
    return total


def _list_argument(node: Node, variables: Mapping[str, str], depth: int) -> ListArgument:
    """What the argument ``node`` is (:class:`ListArgument`); a probe variable's
    (``variables.NAME``) is its definition's."""
    if isinstance(node, ListExpr):
        return ListArgument("literal", length=len(node.elements))
    path = plain_path(node)
    if path is not None:
        source = variables.get(str(path.steps[0])) if len(path.steps) == 1 else None
        if path.root == "variables" and source is not None and depth < len(variables):
            try:
                return _list_argument(_parsed(source), variables, depth + 1)
            except CelSyntaxError:
                pass
        elif path.root != "variables":
            return ListArgument("path", path)
    elif isinstance(node, Call) and node.target is not None:
        receiver = plain_path(node.target)
        if receiver is not None and node.function in _COPYING:
            return ListArgument("mapped", receiver)
        if receiver is not None and node.function == "split":
            separator = node.args[0] if len(node.args) == 1 else None
            literal = isinstance(separator, Literal) and separator.kind == "string"
            return ListArgument(
                "split",
                receiver,
                separator=str(separator.value) if literal else None,  # type: ignore[union-attr]
            )
    reads_variables = any(isinstance(n, Ident) and n.name == "variables" for n in walk(node))
    plus = _count(node, "_+_")
    if reads_variables:  # the variables it reads may concatenate too
        for source in variables.values():
            try:
                plus += _count(_parsed(source), "_+_")
            except CelSyntaxError:
                continue
    splits = any(isinstance(n, Call) and n.function in _STRING_TO_LIST for n in walk(node))
    return ListArgument(
        "computed",
        length=_commas(node) + 1,
        from_strings=reads_variables or splits,
        plus=plus,
    )


def _pattern_steps(call: Call) -> int:
    """A ``matches`` call's steps where its pattern (the last argument) is one string
    literal, which the runtime compiles on every call: its length. Any other pattern (from
    params or the object) is matched by the regex library, which charges each call over the
    pattern's actual length as it is made (cel/lib/regex.py), so it costs nothing here."""
    pattern = call.args[-1]
    if not (isinstance(pattern, Literal) and pattern.kind == "string"):
        return 0
    return 1 + (len(pattern.value) + 2) // PATTERN_CHARS_PER_STEP


def _navigate(value: Any, steps: tuple[str | int, ...]) -> Any:
    for step in steps:
        in_map = isinstance(value, Mapping) and step in value
        in_list = (
            isinstance(value, list) and isinstance(step, int) and -len(value) <= step < len(value)
        )
        if not (in_map or in_list):
            return None  # an evaluation error, not a cost
        value = value[step]
    return value


def _members(value: Any, values: bool = False) -> list[Any]:
    """What a comprehension's variable takes over ``value``: a list's elements; a map's
    keys, or with two variables (``values``) its values."""
    if isinstance(value, list):
        return value
    if isinstance(value, Mapping):
        return list(value.values()) if values else list(value)
    return []


def _extent(value: Any) -> tuple[int, int]:
    """The longest list or map and the longest string anywhere in ``value``."""
    longest, chars, todo = 0, 0, [value]
    while todo:
        item = todo.pop()
        if isinstance(item, Mapping):
            longest = max(longest, len(item))
            todo.extend(item.values())
        elif isinstance(item, list):
            longest = max(longest, len(item))
            todo.extend(item)
        elif isinstance(item, str):
            chars = max(chars, len(item))
    return longest, chars


class _Estimate:
    def __init__(
        self,
        model: CostModel,
        variables: Mapping[str, Any],
        limit: int,
        extents: Extents | None = None,
    ) -> None:
        self.model = model
        self.variables = variables
        self.limit = limit
        self.extents = extents
        self.steps = 0
        self._extent: tuple[int, int] | None = None
        # per comprehension: its elements over the whole evaluation (None: computed range),
        # the longest range one entry has, and the iterations of its body in all
        self.elements: list[list[Any] | None] = []
        self.longest: list[int] = []
        self.iterations: list[int] = []
        self.repeats: list[int] = []  # how many times the evaluation passes over the elements
        self.plus: list[int | None] = []  # per computed range, the concatenations bounding it

    def _measure(self) -> tuple[int, int]:
        if self._extent is None:
            if self.extents is None:
                self._extent = _extent(dict(self.variables))
            else:  # each input on its own, the run's constant ones measured once
                longest, chars = len(self.variables), 0
                for value in self.variables.values():
                    found = self.extents.of(value)
                    longest, chars = max(longest, found[0]), max(chars, found[1])
                self._extent = longest, chars
        return self._extent

    def unknown(self, plus: int | None = None) -> int:
        """A computed range's bound: the largest list in the input or written in the
        expression, times one more than the concatenations (``plus``: those that may build
        it, for a probe variable's; else every one of the expression)."""
        longest = max(self._measure()[0], self.model.literal_list)
        return longest * (1 + (self.model.concatenations if plus is None else plus))

    def _plus(self, path: Path, owner: int | None) -> int | None:
        """The concatenations that may build the computed range ``path`` reads: a probe
        variable's own, or those of the range whose element ``path`` starts at."""
        if owner is None:
            if path.root == "variables" and path.steps:
                return self.model.variable_plus.get(str(path.steps[0]))
            return None
        if path.root == self.model.comprehensions[owner].index_variable:
            return None
        return self.plus[owner]

    def concatenation_steps(self) -> int:
        """Steps the ``+`` operators may cost in one pass: a chain of k copies the growing
        string k times, k(k+1)/2 times the longest string (a 1 MB annotation in a chain
        of 30: ~465 MB copied per object) or list (:data:`LIST_ELEMENT_CHARS` a element), of
        the input or written in the expression. k counts the probe variables' `+` as often as
        they are read: variables that double one another are refused here, not built."""
        k = max(self.model.concatenations, self.model.inlined_concatenations)
        if not k:
            return 0
        longest_list, chars = self._measure()
        size = max(
            chars,
            self.model.literal_chars,
            LIST_ELEMENT_CHARS * max(longest_list, self.model.literal_list),
        )
        return k * (k + 1) // 2 * size // STRING_CHARS_PER_STEP

    def _add(self, steps: int) -> None:
        self.steps += steps
        if self.steps > self.limit:
            raise CostExceeded(
                f"the expression would take more than {self.limit:,} evaluation steps over "
                "this input (nested comprehensions, map/filter or whole-list reads inside a "
                "comprehension grow with the square of the listing or worse)"
            )

    def _owner(self, index: int, name: str) -> int | None:
        """The enclosing comprehension (of ``index`` or above) whose variable is ``name``."""
        current: int | None = index
        while current is not None:
            comp = self.model.comprehensions[current]
            if name in (comp.variable, comp.index_variable):
                return current
            current = comp.parent
        return None

    def _values(self, path: Path, owner: int | None) -> tuple[list[Any] | None, int]:
        """The values ``path`` takes over the evaluation (None: unknown) and the longest."""
        if owner is None:
            constants = self.variables.get("variables")
            known = isinstance(constants, Mapping) and path.steps and path.steps[0] in constants
            if path.root == "variables" and not known:  # a probe variable: computed
                return None, self.unknown(self._plus(path, owner))
            if path.root not in self.variables:
                return [], 0
            value = _navigate(self.variables[path.root], path.steps)
            return [value], len(_members(value))
        bases = self.elements[owner]
        if bases is None or path.root == self.model.comprehensions[owner].index_variable:
            return None, self.unknown(self._plus(path, owner))  # computed, or an index or key
        values = [_navigate(base, path.steps) for base in bases]
        return values, max((len(_members(v)) for v in values), default=0)

    def _list_size(self, argument: ListArgument, comprehension: int | None) -> tuple[int, int]:
        """The most elements a list argument has in one call, and the most weight (what
        comparing its elements touches: a nested list or map counts its contents, a string 1
        a KB) where it is measured; any other list's elements count 1 each."""
        if argument.form == "literal":
            return argument.length, argument.length
        if argument.path is None:
            longest_list, longest_string = self._measure()
            if argument.from_strings:
                longest_list = max(longest_list, longest_string + 1)
            length = (longest_list + argument.length) * (1 + argument.plus)
            return length, length
        owner = None if comprehension is None else self._owner(comprehension, argument.path.root)
        values, longest = self._values(argument.path, owner)
        if values is None:  # an element of a computed range, or an index or key
            unknown = self.unknown()
            return unknown, unknown
        if argument.form == "split":
            texts = [v for v in values if isinstance(v, str)]
            sep = argument.separator
            longest = max(((t.count(sep) if sep else len(t)) + 1 for t in texts), default=0)
            return longest, longest
        if argument.form == "mapped":
            return longest, longest
        weight = max((_weight(v) - 1 for v in values if isinstance(v, list)), default=0)
        return longest, weight

    def set_call_steps(self, call: SetCall) -> int:
        """Steps a ``sets`` call may take: every pair of elements compared, per call."""
        (first, first_weight), (second, second_weight) = (
            self._list_size(argument, call.comprehension) for argument in call.arguments
        )
        pairs = min(first * second_weight, first_weight * second)
        calls = self.iterations[call.comprehension] if call.comprehension is not None else 1
        return calls * (1 + call.passes * pairs // SET_PAIRS_PER_STEP)

    def copy_steps(self) -> int:
        """Steps a whole-value walk of what the variables read may cost past
        :data:`FREE_COPIES` copies of the input: one per :data:`COPIED_ELEMENTS_PER_STEP`
        elements of the input per copy."""
        extra = self.model.copies - FREE_COPIES
        if extra <= 0:
            return 0
        return extra * _weight(dict(self.variables)) // COPIED_ELEMENTS_PER_STEP

    def total(self) -> int:
        concatenation = self.concatenation_steps()
        self._add(self.model.base + concatenation + self.copy_steps())
        for index, comp in enumerate(self.model.comprehensions):
            outer = self.iterations[comp.parent] if comp.parent is not None else 1
            owner = (
                self._owner(comp.parent, comp.receiver.root)
                if (comp.receiver is not None and comp.parent is not None)
                else None
            )
            if comp.receiver is None:
                values, longest = None, self.unknown()
                self.plus.append(None)
            else:
                values, longest = self._values(comp.receiver, owner)
                self.plus.append(None if values is not None else self._plus(comp.receiver, owner))
            if values is None:
                elements, iterations = None, outer * longest
            else:
                two = comp.index_variable is not None
                elements = [m for v in values for m in _members(v, two)]
                if owner is not None and owner == comp.parent:
                    # one entry per element of the owner: the ranges add up, they do not
                    # multiply (each container of each pod is visited once per owner pass)
                    iterations = self.repeats[owner] * len(elements)
                else:
                    iterations = outer * longest
            self.repeats.append(iterations // len(elements) if elements else outer)
            self.elements.append(elements)
            self.longest.append(longest)
            self.iterations.append(iterations)
            self._add(iterations * (1 + comp.extra + concatenation))
            if comp.macro in _COPYING:
                self._add(iterations * max(longest, 1) // 2)  # the accumulator is copied
            for ref in comp.refs:
                weight = self._weight(index, ref)
                if weight:
                    self._add(iterations * weight)
        for call in self.model.set_calls:
            self._add(self.set_call_steps(call))
        return self.steps

    def _weight(self, index: int, ref: Path) -> int:
        """Steps one read of ``ref`` may cost beyond the body's own step: the length of a
        whole input list compared, scanned or concatenated. A part of the element in hand is
        bounded by one object's size, not the listing's, and is part of the body's step."""
        if self._owner(index, ref.root) is not None:
            return 0
        values, longest = self._values(ref, None)
        if values and isinstance(values[0], str):  # a whole string read: sized, scanned
            return len(values[0]) // STRING_SCAN_CHARS_PER_STEP
        return longest


def _weight(value: Any) -> int:
    """Comparing ``value`` with an equal one touches about this many things: 1, the contents
    of a list or map, a string's kilobytes."""
    total, todo = 0, [value]
    while todo:
        item = todo.pop()
        total += 1
        if isinstance(item, Mapping):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, str):
            total += len(item) // 1024
    return total
