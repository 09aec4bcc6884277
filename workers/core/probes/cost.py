"""A cost bound for probe expressions: the CEL runtime has none, and cannot be interrupted.

The runtime (``cel-expr-python``, cel-cpp's bindings, cel.py) has no cost limit, only a fixed
cap of 10,000 comprehension iterations per evaluation; it evaluates in C++ and cannot be
cancelled, so neither a watchdog thread nor the task time limit can stop a costly
evaluation once it runs. The model still counts ``map`` and ``filter`` as copying their
accumulator per element (the previous runtime did, quadratically): an upper bound.

So the bound is enforced before evaluation, in two steps:

* **at compile time** (:func:`analyse`), a static shape check: at most
  :data:`MAX_COMPREHENSIONS` comprehensions (nested as deep as the API server allows: their
  nesting is costed over the input, below, as its cost limit does),
  :data:`MAX_CONCATENATIONS` ``+`` operators (the only way to grow a string or a list
  without a comprehension), comprehension variables that are plain names, and a literal
  ``matches`` pattern's length (every ``matches`` is run and charged per call by the
  regex library, cel_lib/regex.py, over its text and compiled program);
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

The Kubernetes libraries written in Python (``cel_lib/``) are charged to the same steps as
each call is made, over its actual arguments (``cel_lib/base.py``).

A refusal is a :class:`CostExceeded` (a ``CelError``): the probe "cannot run", never ``true``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

MAX_COMPREHENSIONS = 16
MAX_CONCATENATIONS = 32
# Steps one probe run may cost (about one comprehension body evaluation or one element
# copied each). Measured on 2 shared cores: ~200,000 small bodies/s, ~8,000,000 copies/s,
# so the bound keeps a run within seconds while 50,000 objects in one `all` stay well in.
MAX_STEPS = 2_000_000
# Compiling a 2,483-character pattern takes ~1 ms (~500 body steps): a `matches` pattern
# costs its length / PATTERN_CHARS_PER_STEP steps per call (a literal one here, statically,
# on top of what cel_lib/regex.py charges as the call is made).
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
_TOKEN = re.compile(
    r"\s+|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")|(?P<num>\d+(?:\.\d+)?[uU]?)"
    r"|(?P<id>[A-Za-z_]\w*)|(?P<op>&&|\|\||[=!<>]=|.)",
    re.DOTALL,
)


class CelCostError(ValueError):
    """Base for cost refusals (cel.py re-raises them as CelError)."""


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

    def estimate(self, variables: Mapping[str, Any], limit: int = MAX_STEPS) -> int:
        """Upper estimate of the steps evaluating over ``variables`` costs; CostExceeded
        as soon as it passes ``limit``."""
        return _Estimate(self, variables, limit).total()


def _tokens(expression: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(expression):
        kind = match.lastgroup
        if kind is not None:
            out.append((kind, match.group()))
    return out


def _literal_step(kind: str, text: str) -> str | int | None:
    if kind == "num" and text.isdigit():
        return int(text)
    if kind == "str":
        return text[1:-1]
    return None


def _path_before(tokens: list[tuple[str, str]], end: int) -> Path | None:
    """The plain path ending just before token ``end`` (a ``.``), or None when computed."""
    steps: list[str | int] = []
    i = end - 1
    while i >= 0:
        kind, text = tokens[i]
        if kind == "id":
            before = tokens[i - 1][1] if i > 0 else ""
            if before == ".":
                steps.append(text)
                i -= 2
                continue
            return Path(text, tuple(reversed(steps)))
        if text == "]" and i >= 3 and tokens[i - 2][1] == "[":
            step = _literal_step(*tokens[i - 1])
            if step is None:
                return None
            steps.append(step)
            i -= 3
            continue
        return None
    return None


def _path_after(tokens: list[tuple[str, str]], start: int) -> tuple[Path | None, int]:
    """The plain path starting at token ``start``; None when it is not one."""
    if start >= len(tokens) or tokens[start][0] != "id":
        return None, start
    root, i = tokens[start][1], start + 1
    steps: list[str | int] = []
    while i < len(tokens):
        text = tokens[i][1]
        if text == "." and i + 1 < len(tokens) and tokens[i + 1][0] == "id":
            if i + 2 < len(tokens) and tokens[i + 2][1] == "(":
                break  # a method call: the path ends before it
            steps.append(tokens[i + 1][1])
            i += 2
        elif text == "[" and i + 2 < len(tokens) and tokens[i + 2][1] == "]":
            step = _literal_step(*tokens[i + 1])
            if step is None:
                break
            steps.append(step)
            i += 3
        else:
            break
    return Path(root, tuple(steps)), i


def analyse(expression: str, variables: Mapping[str, str] | None = None) -> CostModel:
    """The expression's loop skeleton; CostExceeded when its shape is over the static bounds.
    ``variables``: the probe's variables by name, to bound a ``sets`` argument read from one."""
    tokens = _tokens(expression)
    found: list[Comprehension] = []
    set_calls: list[SetCall] = []
    base = 0
    stack: list[int | None] = []  # per open bracket: the comprehension it is the body of
    enclosing: list[int] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        is_macro = (
            text == "."
            and i + 2 < len(tokens)
            and tokens[i + 1][1] in COMPREHENSIONS
            and tokens[i + 2][1] == "("
        )
        if is_macro:
            if i + 3 >= len(tokens) or tokens[i + 3][0] != "id":
                raise CostExceeded(
                    f"the {tokens[i + 1][1]}() comprehension needs a variable name first"
                )
            two = (
                tokens[i + 1][1] in TWO_VARIABLE
                and i + 6 < len(tokens)
                and tokens[i + 4][1] == ","
                and tokens[i + 5][0] == "id"
                and tokens[i + 6][1] == ","
            )
            found.append(
                Comprehension(
                    macro=tokens[i + 1][1],
                    variable=tokens[i + 5][1] if two else tokens[i + 3][1],
                    receiver=_path_before(tokens, i),
                    parent=enclosing[-1] if enclosing else None,
                    index_variable=tokens[i + 3][1] if two else None,
                )
            )
            index = len(found) - 1
            stack.append(index)
            enclosing.append(index)
            i += 6 if two else 4  # past the variables' names: binding them reads nothing
            continue
        set_call = _set_call(tokens, i, enclosing[-1] if enclosing else None, variables or {})
        if set_call is not None:
            set_calls.append(set_call)
        if text == "matches" and i + 1 < len(tokens) and tokens[i + 1][1] == "(":
            steps = _pattern_steps(tokens, i)
            if enclosing:
                found[enclosing[-1]].extra += steps
            else:
                base += steps
        if text in "([{":
            stack.append(None)
        elif text in ")]}" and stack:
            if stack.pop() is not None:
                enclosing.pop()
        elif kind == "id" and (i == 0 or tokens[i - 1][1] != "."):
            path, end = _path_after(tokens, i)
            # a comprehension's range is costed as one; `.size()` reads a length, not the list
            receiver = (
                end + 1 < len(tokens)
                and tokens[end][1] == "."
                and (tokens[end + 1][1] in COMPREHENSIONS or tokens[end + 1][1] == "size")
            )
            if path is not None and enclosing and not receiver:
                found[enclosing[-1]].refs.append(path)
        i += 1
    if len(found) > MAX_COMPREHENSIONS:
        raise CostExceeded(f"the expression has more than {MAX_COMPREHENSIONS} comprehensions")
    concatenations = sum(1 for _, text in tokens if text == "+")
    if concatenations > MAX_CONCATENATIONS:
        raise CostExceeded(f"the expression has more than {MAX_CONCATENATIONS} '+' operators")
    plus, copies, literal, chars = _variable_shapes(tuple((variables or {}).items()))
    literal = max(literal, _longest_literal(tokens))
    inlined = dict(plus)
    read = _variables_read(tokens)
    # the variables it reads concatenate too: their values are copied as often as read
    through = sum(inlined.get(name, 0) for name in read)
    return CostModel(
        found, concatenations, base, set_calls, literal, inlined,
        inlined_concatenations=min(concatenations + through, _INLINED_CAP),
        literal_chars=max(chars, _longest_string(tokens)),
        copies=min(sum(dict(copies).get(name, 0) for name in read), _INLINED_CAP),
    )  # fmt: skip


@lru_cache(maxsize=256)
def _variable_shapes(
    variables: tuple[tuple[str, str], ...],
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...], int, int]:
    """Per variable its concatenations and the copies of the input its value may hold
    (:func:`_through_reads`), the longest list written in any of them, and the longest
    string."""
    tokens = {name: _tokens(source) for name, source in variables}
    reads = {
        name: [other for other in _variables_read(found) if other in tokens]
        for name, found in tokens.items()
    }
    # ``a + a`` over ``a``'s one `+` has three; a chain of variables each doubling the one
    # before has exponentially many, as its value's size grows (a variable is evaluated
    # once, but a value concatenated with itself is copied, and doubled, all the same)
    own_plus = {name: sum(1 for _, text in found if text == "+") for name, found in tokens.items()}
    plus = _through_reads(own_plus, reads)
    # ``[variables.a, variables.a]`` in a chain holds exponentially many copies without a
    # `+`: the runtime shares them, but a comparison, a membership test or a conversion
    # walks every one
    copies = _through_reads(dict.fromkeys(tokens, 1), reads)
    literal = max((_longest_literal(found) for found in tokens.values()), default=0)
    chars = max((_longest_string(found) for found in tokens.values()), default=0)
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


def _variables_read(tokens: list[tuple[str, str]]) -> list[str]:
    """The names of ``variables.NAME`` in ``tokens``, once per occurrence."""
    return [
        tokens[i + 2][1]
        for i in range(len(tokens) - 2)
        if tokens[i] == ("id", "variables")
        and tokens[i + 1][1] == "."
        and (i == 0 or tokens[i - 1][1] != ".")
    ]


def _longest_string(tokens: list[tuple[str, str]]) -> int:
    """The characters of the longest string literal in ``tokens``."""
    return max((len(text) - 2 for kind, text in tokens if kind == "str"), default=0)


def _longest_literal(tokens: list[tuple[str, str]]) -> int:
    """The most elements a bracketed list in the expression has (a literal list may be a
    comprehension's range, longer than any list of the input)."""
    longest = 0
    for i, (kind, text) in enumerate(tokens):
        if kind == "op" and text == "[":
            longest = max(longest, len(_arguments(tokens, i) or []))
    return longest


def _closing(tokens: list[tuple[str, str]], open_at: int) -> int | None:
    """The index of the bracket closing ``tokens[open_at]``; None when none does."""
    depth = 0
    for i in range(open_at, len(tokens)):
        text = tokens[i][1]
        if tokens[i][0] == "op" and text in "([{":
            depth += 1
        elif tokens[i][0] == "op" and text in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _arguments(tokens: list[tuple[str, str]], open_at: int) -> list[tuple[int, int]] | None:
    """The token ranges of the arguments of the call whose ``(`` is ``tokens[open_at]``."""
    close = _closing(tokens, open_at)
    if close is None:
        return None
    ranges, start, depth = [], open_at + 1, 0
    for i in range(open_at + 1, close):
        text = tokens[i][1] if tokens[i][0] == "op" else ""
        if text and text in "([{":
            depth += 1
        elif text and text in ")]}":
            depth -= 1
        elif text == "," and depth == 0:
            ranges.append((start, i))
            start = i + 1
    if start < close:
        ranges.append((start, close))
    return ranges


def _list_argument(
    tokens: list[tuple[str, str]], start: int, end: int, variables: Mapping[str, str], depth: int
) -> ListArgument:
    """What the argument ``tokens[start:end]`` is (:class:`ListArgument`); a probe variable's
    (``variables.NAME``) is its definition's."""
    if start < end and tokens[start][1] == "[" and _closing(tokens, start) == end - 1:
        return ListArgument("literal", length=len(_arguments(tokens, start) or []))
    path, after = _path_after(tokens, start)
    if path is not None and after == end:
        source = variables.get(str(path.steps[0])) if len(path.steps) == 1 else None
        if path.root == "variables" and source is not None and depth < len(variables):
            inner = _tokens(source)
            return _list_argument(inner, 0, len(inner), variables, depth + 1)
        if path.root != "variables":
            return ListArgument("path", path)
    elif path is not None and after + 2 < end and tokens[after][1] == ".":
        method, opens = tokens[after + 1][1], after + 2
        whole_call = tokens[opens][1] == "(" and _closing(tokens, opens) == end - 1
        if whole_call and method in _COPYING:
            return ListArgument("mapped", path)
        if whole_call and method == "split":
            ranges = _arguments(tokens, opens) or []
            first = tokens[ranges[0][0]] if ranges else ("", "")
            literal = len(ranges) == 1 and ranges[0][1] == ranges[0][0] + 1 and first[0] == "str"
            return ListArgument("split", path, separator=first[1][1:-1] if literal else None)
    texts = [text for _, text in tokens[start:end]]
    reads_variables = "variables" in texts
    plus = texts.count("+")
    if reads_variables:  # the variables it reads may concatenate too
        plus += sum(_tokens(source).count(("op", "+")) for source in variables.values())
    return ListArgument(
        "computed",
        length=texts.count(",") + 1,
        from_strings=reads_variables or any(text in _STRING_TO_LIST for text in texts),
        plus=plus,
    )


def _set_call(
    tokens: list[tuple[str, str]], at: int, enclosing: int | None, variables: Mapping[str, str]
) -> SetCall | None:
    """The ``sets.f(a, b)`` call starting at ``tokens[at]``, if one does."""
    is_call = (
        tokens[at] == ("id", "sets")
        and (at == 0 or tokens[at - 1][1] != ".")
        and at + 3 < len(tokens)
        and tokens[at + 1][1] == "."
        and tokens[at + 2][1] in SET_FUNCTIONS
        and tokens[at + 3][1] == "("
    )
    if not is_call:
        return None
    ranges = _arguments(tokens, at + 3)
    if ranges is None or len(ranges) != 2:
        return None  # the compiler refuses it
    first, second = (_list_argument(tokens, *bounds, variables, 0) for bounds in ranges)
    return SetCall(SET_FUNCTIONS[tokens[at + 2][1]], (first, second), enclosing)


def _pattern_steps(tokens: list[tuple[str, str]], at: int) -> int:
    """A ``matches`` call's steps where its pattern (the last argument) is one string literal,
    which the runtime compiles on every call: its length. Any other pattern (from params or
    the object) is matched by the regex library, which charges each call over the pattern's
    actual length as it is made (cel_lib/regex.py), so it costs nothing here."""
    ranges = _arguments(tokens, at + 1) or []
    if not ranges or ranges[-1][1] != ranges[-1][0] + 1 or tokens[ranges[-1][0]][0] != "str":
        return 0
    return 1 + len(tokens[ranges[-1][0]][1]) // PATTERN_CHARS_PER_STEP


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
    def __init__(self, model: CostModel, variables: Mapping[str, Any], limit: int) -> None:
        self.model = model
        self.variables = variables
        self.limit = limit
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
            self._extent = _extent(dict(self.variables))
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
