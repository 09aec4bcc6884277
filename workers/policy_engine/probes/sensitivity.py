"""Sensitivity: does a probe's value depend on the objects it reads at all?

A probe that agrees with the model's verdict is accepted and then answers its check for
0 tokens until the next re-validation (up to ``probe_revalidate_runs`` runs or a day). An
expression that reads its input but whose value never depends on it
(``size(results) >= 0``, ``object.metadata.name == object.metadata.name``,
``results[0].all(d, true)``) agrees with any ``true`` and would repeat it whatever the
cluster does. So before a probe is accepted, the engine itself looks for a
**counterfactual**: objects, built from the real ones it just read, under which the probe
would give the opposite verdict. A probe for which none of a bounded set of counterfactuals
flips the verdict is refused (workers/policy_engine/probes/acceptance.py); the model's verdict is
unaffected, and later runs ask the model.

The field paths the expression reads are taken from its syntax tree (the runtime's own
parse, workers/policy_engine/cel/syntax/: ``c.image`` inside
``d.spec.template.spec.containers.all(c, ...)`` inside ``results[0].all(d, ...)`` is
``results[0][*].spec.template.spec.containers[*].image``), with the literal each is
compared to. Counterfactuals, in the order tried (the cheapest and likeliest first):

* the real objects themselves: a sample of them (a listing's first objects; for
  ``each_object`` each object alone, since a listing of that object alone is a cluster state);
* every mentioned path set so that its comparison holds, and so that it fails, all at once,
  then each combination of that for up to :data:`MAX_COMBINED` paths;
* each mentioned path set to values of its type (numbers 0, -1, n+-1, a large number, the
  literals and their neighbours; strings "", another string, the literals, other objects'
  values, an early and a late timestamp; booleans negated; lists emptied, an element
  duplicated, a literal added; maps emptied, a key removed, a literal key added; absent
  paths created) or removed, on every element of a list it ranges over and on the first;
* every leaf whose key the expression names, mutated by its type (this reaches what a
  computed range such as ``filter(...).all(x, x.f)`` reads);
* whole-object variants: every named leaf mutated at once, the object stripped to its kind,
  name and namespace;
* (``results``) listing variants: only the first object, the first dropped, an extra
  mutated copy, a duplicate.

Not counterfactuals: an emptied listing (an empty listing gives no verdict, vacuous truth is
not evidence: runner.py), a change the lookup itself rules out (``kind`` and ``apiVersion``,
the namespace of a namespaced listing, the name of a named ``get``, a ``key=value`` label or
field selector's value, an event's involved object), an empty or removed
``metadata.name``. A counterfactual under which the expression errors or gives no boolean is
not a flip.

Bounded: at most :data:`MAX_EVALUATIONS` evaluations and :data:`BUDGET_SECONDS` of wall
time over a sample of at most :data:`SAMPLE` objects per listing; a search that reaches the
bound without a flip counts as insensitive (the probe is refused: fail-safe).
"""

from __future__ import annotations

import itertools
import re
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from schemas.probe import ProposedProbe
from workers.policy_engine.cel.programs import CelError
from workers.policy_engine.cel.syntax.nodes import (
    Call,
    Ident,
    Index,
    Literal,
    Node,
    Select,
    binding,
    children,
    is_loop,
    walk,
)
from workers.policy_engine.cel.syntax.parser import CelSyntaxError, parse
from workers.policy_engine.probes.cost import MAX_STEPS, Path
from workers.policy_engine.probes.program import ProbeProgram

MAX_EVALUATIONS = 400
BUDGET_SECONDS = 0.5
SAMPLE = 6  # objects per listing the counterfactuals are built from
MAX_COMBINED = 6  # paths whose satisfy/violate assignments are combined (2**6 worlds)
MAX_LEAVES = 60  # named leaves mutated one at a time, per object
MAX_VISITED = 5_000  # values looked at per object to find them
MAX_LITERALS = 12
LARGE = 1_000_000
OTHER = "assay-counterfactual"
EARLY, LATE = "1970-01-01T00:00:00Z", "2999-12-31T23:59:59Z"
INSENSITIVE = (
    "the expression gave the same value whatever the objects held (it does not depend on them)"
)
_log = structlog.get_logger("assay.probes")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_COMPARISONS = {"_==_": "==", "_!=_": "!=", "_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">="}
_STRING_TESTS = frozenset({"startsWith", "endsWith", "contains", "matches"})
# There on every API object of a kind or on none (the API server sets them): never created,
# removed or emptied in a counterfactual (their values may change, except _NEVER_CHANGED).
_PRESENCE_FIXED: frozenset[tuple[str, ...]] = frozenset(
    {
        ("kind",),
        ("apiVersion",),
        ("metadata",),
        ("metadata", "name"),
        ("metadata", "namespace"),
        ("metadata", "uid"),
        ("metadata", "creationTimestamp"),
        ("spec",),
    }
)
_NEVER_CHANGED: frozenset[tuple[str, ...]] = frozenset({("kind",), ("apiVersion",)})


class _Wild:
    """A path step: every element of a list (a comprehension's range)."""

    def __repr__(self) -> str:
        return "[*]"


class _Values(_Wild):
    """A path step: every element of a list or every value of a map (the second variable
    of a two-variable comprehension)."""

    def __repr__(self) -> str:
        return "[*value]"


WILD = _Wild()
VALUES = _Values()
_DELETE = object()  # a candidate "value": remove the field
Step = str | int | _Wild


@dataclass(frozen=True)
class Target:
    """A path the expression reads: from ``results``, ``object`` or ("") any object."""

    root: str
    steps: tuple[Step, ...]

    def text(self) -> str:
        return self.root + _path_text(self.steps) if self.root else _path_text(self.steps)[1:]


def _path_text(steps: tuple[Step, ...]) -> str:
    out = ""
    for step in steps:
        if isinstance(step, str) and re.fullmatch(r"[A-Za-z_]\w*", step):
            out += f".{step}"
        else:
            out += repr(step) if isinstance(step, _Wild) else f"[{step!r}]"
    return out


@dataclass
class Mentioned:
    """What the expression names: paths (with the test each is put to), keys, literals."""

    targets: list[Target] = field(default_factory=list)
    tests: dict[Target, tuple[str, Any]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    literals: list[Any] = field(default_factory=list)


@dataclass
class Sensitivity:
    """The search's result: whether a counterfactual flipped the verdict, and its cost."""

    sensitive: bool
    evaluations: int
    seconds: float
    flip: str | None = None
    exhausted: bool = False

    def reason(self) -> str:
        bound = " (the search reached its bound)" if self.exhausted else ""
        return f"{INSENSITIVE}: {self.evaluations} counterfactual(s) tried{bound}"


class _Exhausted(Exception):
    pass


# Calls that give what their receiver holds (or a literal default): ``a.?b.orValue([])``
# reads the path ``a.b``, so the same counterfactuals apply.
_UNWRAPPING = frozenset({"orValue", "value"})


def _path(node: Node) -> Path | None:
    """The plain path ``node`` reads, optional steps read as plain ones and ``.orValue(...)``
    / ``.value()`` seen through; None when it is computed."""
    steps: list[str | int] = []
    while True:
        if isinstance(node, Call) and node.function in _UNWRAPPING and node.target is not None:
            node = node.target
        elif isinstance(node, Select):
            steps.append(node.field)
            node = node.operand
        elif isinstance(node, Index) and isinstance(node.index, Literal):
            index = node.index
            if index.kind == "int":
                steps.append(int(index.value))
            elif index.kind == "string":
                steps.append(str(index.value))
            else:
                return None
            node = node.operand
        elif isinstance(node, Ident):
            return Path(node.name, tuple(reversed(steps)))
        else:
            return None


def _literal(node: Literal) -> Any:
    if node.kind in ("int", "uint", "double", "string", "bool"):
        return node.value
    return None


def mentioned(expression: str) -> Mentioned:
    """The paths, keys and literals of ``expression``, from its syntax tree."""
    found = Mentioned()
    try:
        root = parse(expression).root
    except CelSyntaxError:  # the runner refused it before this
        return found
    # each comprehension variable: the ranges it is bound to, and the step from a range to
    # it (a list's element, or with two variables a list's element or a map's value); an
    # index or key names no field
    bound: dict[str, list[tuple[Path | None, _Wild]]] = {}
    indexes: set[str] = set()
    for node in walk(root):
        if not is_loop(node):
            continue
        assert isinstance(node, Call) and node.target is not None
        names = (binding(node) or ((), ()))[0]
        two = len(names) == 2
        variable = names[1] if two else names[0]
        bound.setdefault(variable, []).append((_path(node.target), VALUES if two else WILD))
        if two:
            indexes.add(names[0])

    def resolve(path: Path, depth: int = 0) -> list[Target]:
        if path.root in ("results", "object"):
            return [Target(path.root, path.steps)]
        receivers = bound.get(path.root)
        if not receivers and path.root in indexes:
            return []
        if not receivers or depth > 4:
            return [Target("", path.steps)]
        out: list[Target] = []
        for receiver, step in receivers:
            if receiver is None:
                out.append(Target("", path.steps))
                continue
            for base in resolve(receiver, depth + 1):
                out.append(Target(base.root, (*base.steps, step, *path.steps)))
        return out

    for node in walk(root):
        if isinstance(node, Literal):
            value = _literal(node)
            numeric = node.kind in ("int", "uint", "double")
            for literal in [value, *([-value] if numeric else [])]:
                if len(found.literals) >= MAX_LITERALS or literal is None:
                    continue
                if not any(_same(literal, x) for x in found.literals):
                    found.literals.append(literal)
            if node.kind == "string":
                found.names.add(node.value)
        elif isinstance(node, Ident):
            found.names.add(node.name)
        elif isinstance(node, Select):
            found.names.add(node.field)
        elif isinstance(node, Call):
            found.names.add(node.function)
    tests = _tests(root)
    targets: dict[Target, None] = {}
    for node in _paths(root):
        path = _path(node)
        assert path is not None
        test = tests.get(id(node))
        for target in resolve(path):
            if not target.steps or (target.root == "results" and len(target.steps) == 1):
                continue  # `results` itself, or a whole lookup: listing variants cover those
            targets.setdefault(target, None)
            if test is not None:
                found.tests.setdefault(target, test)
    found.targets = list(targets)
    return found


def _paths(root: Node) -> list[Node]:
    """The nodes that read a whole plain path (not one inside a longer one), in source
    order; a macro's variable names none."""
    out: list[Node] = []
    todo = [root]
    while todo:
        node = todo.pop()
        if _path(node) is not None:
            out.append(node)
            continue
        parts = list(children(node))
        inner = binding(node) if isinstance(node, Call) else None
        if inner is not None:
            offset = 1 if node.target is not None else 0  # type: ignore[attr-defined]
            names = len(inner[0])
            parts = [p for n, p in enumerate(parts) if not (0 <= n - offset < names)]
        todo.extend(reversed(parts))
    return out


def _tests(root: Node) -> dict[int, tuple[str, Any]]:
    """The comparison each path (by ``id()``) is put to against a literal, if any."""
    out: dict[int, tuple[str, Any]] = {}
    for node in walk(root):
        if not isinstance(node, Call):
            continue
        args = node.args
        if node.target is None and node.function in _COMPARISONS and len(args) == 2:
            left, right = args
            if isinstance(right, Literal) and _literal(right) is not None:
                out.setdefault(id(left), (_COMPARISONS[node.function], _literal(right)))
            elif isinstance(left, Literal) and _literal(left) is not None:
                operator = _MIRRORED[_COMPARISONS[node.function]]
                out.setdefault(id(right), (operator, _literal(left)))
        elif node.function in _STRING_TESTS and node.target is not None and len(args) == 1:
            pattern = args[0]
            if isinstance(pattern, Literal) and pattern.kind == "string":
                out.setdefault(id(node.target), (node.function, pattern.value))
        elif node.function == "@in" and len(args) == 2:
            element = args[0]
            if isinstance(element, Literal) and element.kind == "string":
                out.setdefault(id(args[1]), ("has", element.value))
    return out


_MIRRORED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _satisfying(test: tuple[str, Any], holds: bool, present: Any) -> Any:
    """A value for which ``path <op> literal`` holds (or fails); ``present``: the value there."""
    op, lit = test
    if op == "has":  # `'lit' in path`: a list with the element, or a map with the key
        if isinstance(present, list):
            return [*present, lit] if holds else [v for v in present if v != lit]
        if isinstance(present, dict):
            return (
                {**present, lit: OTHER} if holds else {k: v for k, v in present.items() if k != lit}
            )
        return {lit: OTHER} if holds else {}
    if op in _STRING_TESTS:
        return lit if holds else ""
    if isinstance(lit, bool):
        return lit if (op == "==") == holds else (not lit)
    if isinstance(lit, int | float):
        step = 1 if isinstance(lit, int) else 0.5
        options = {
            "==": (lit, lit + step),
            "!=": (lit + step, lit),
            "<": (lit - step, lit),
            "<=": (lit, lit + step),
            ">": (lit + step, lit),
            ">=": (lit, lit - step),
        }
        return options[op][0 if holds else 1]
    if isinstance(lit, str):
        if op == "==":
            return lit if holds else OTHER
        if op == "!=":
            return OTHER if holds else lit
        low, high = (EARLY, LATE) if _TIMESTAMP.match(lit) else ("", lit + "~")
        below = op in ("<", "<=")
        return (low if below else high) if holds else (high if below else low)
    return _DELETE


# -- updating objects without copying them whole ------------------------------------------------


def _updated(node: Any, steps: tuple[Step, ...], value: Any, first_only: bool) -> Any:
    """``node`` with ``steps`` set to ``value`` (or removed: ``_DELETE``); the parts on the
    path are copied, the rest shared. Returns ``node`` itself when nothing applied."""
    step, rest = steps[0], steps[1:]
    if isinstance(step, _Values) and isinstance(node, dict):
        keys = list(node)[: min(1, len(node))] if first_only else list(node)
        changed_map = dict(node)
        for key in keys:
            new = _updated(node[key], rest, value, first_only) if rest else _set(node[key], value)
            if new is not node[key]:
                changed_map[key] = new
        return changed_map if any(changed_map[k] is not node[k] for k in keys) else node
    if isinstance(step, _Wild):
        if not isinstance(node, list):
            return node
        if not node and value is not _DELETE and rest:
            node = [{}]  # create one element so its fields can be set
        chosen = range(min(1, len(node))) if first_only else range(len(node))
        out = list(node)
        changed = False
        for i in chosen:
            new = _updated(node[i], rest, value, first_only) if rest else _set(node[i], value)
            if new is not node[i]:
                out[i], changed = new, True
        return out if changed else node
    if isinstance(step, int):
        if not isinstance(node, list) or not -len(node) <= step < len(node):
            return node
        child = node[step]
        new = _updated(child, rest, value, first_only) if rest else _set(child, value)
        if new is child:
            return node
        out = list(node)
        out[step] = new
        return out
    if not isinstance(node, dict):
        return node
    if not rest:
        if value is _DELETE:
            return {k: v for k, v in node.items() if k != step} if step in node else node
        return {**node, step: value}
    child = node.get(step)
    if child is None:
        if value is _DELETE:
            return node
        child = [] if isinstance(rest[0], _Wild) else {}
    new = _updated(child, rest, value, first_only)
    return node if new is child and step in node else {**node, step: new}


def _set(_old: Any, value: Any) -> Any:
    return value  # a wildcard's element replaced whole (the path ends at the element)


def _values_at(node: Any, steps: tuple[Step, ...]) -> Iterator[Any]:
    if not steps:
        yield node
        return
    step, rest = steps[0], steps[1:]
    if isinstance(step, _Wild):
        items = (
            list(node.values()) if isinstance(step, _Values) and isinstance(node, dict) else node
        )
        if isinstance(items, list):
            for item in items:
                yield from _values_at(item, rest)
    elif isinstance(step, int):
        if isinstance(node, list) and -len(node) <= step < len(node):
            yield from _values_at(node[step], rest)
    elif isinstance(node, dict) and step in node:
        yield from _values_at(node[step], rest)


# -- the search ----------------------------------------------------------------------------------


class _Search:
    def __init__(self, probe: ProposedProbe, want: bool, budget: float, limit: int) -> None:
        self.probe = probe
        self.want = want
        self.program = ProbeProgram(probe, max_steps=MAX_STEPS)
        self.deadline = time.monotonic() + budget
        self.limit = limit
        self.evaluations = 0

    def flips(self, variables: Mapping[str, Any]) -> bool:
        """Whether the expression gives ``want`` over ``variables`` (an error does not)."""
        if self.evaluations >= self.limit or time.monotonic() >= self.deadline:
            raise _Exhausted
        if self.probe.scope == "results" and any(
            isinstance(entry, list) and not entry for entry in variables["results"]
        ):
            return False  # an empty listing gives no verdict
        self.evaluations += 1
        try:
            judgement = self.program.judge(variables)
        except CelError:
            return False
        return judgement.judged and judgement.passed is self.want


class _Fixed:
    """Paths a lookup pins (per top-level entry): a change there is no cluster state."""

    def __init__(self, probe: ProposedProbe) -> None:
        self.per_entry: list[set[tuple[str, ...]]] = []
        for lookup in probe.lookups:
            args = lookup.args
            pinned: set[tuple[str, ...]] = set(_NEVER_CHANGED)
            namespace = str(args.get("namespace") or "").strip().lower()
            if namespace and namespace not in {"all", "*", "--all-namespaces", "all-namespaces"}:
                pinned.add(("metadata", "namespace"))
            if args.get("name"):
                pinned.add(("metadata", "name"))
            for selector, prefix in (
                (args.get("label_selector"), ("metadata", "labels")),
                (args.get("field_selector"), ()),
            ):
                for part in str(selector or "").split(","):
                    key, eq, _ = part.partition("=")
                    if eq and key.strip() and not key.endswith("!"):
                        steps = tuple(key.strip().split(".")) if not prefix else (key.strip(),)
                        pinned.add((*prefix, *steps))
            if lookup.tool == "events":
                pinned |= {("involvedObject", "kind"), ("involvedObject", "name")}
            self.per_entry.append(pinned)

    def pinned(self, entry: int | None, path: tuple[Any, ...]) -> bool:
        sets = self.per_entry if entry is None else self.per_entry[entry : entry + 1]
        return any(path in pinned for pinned in sets)


def check_sensitivity(
    probe: ProposedProbe,
    results: list[Any],
    value: bool,
    *,
    max_evaluations: int = MAX_EVALUATIONS,
    budget_seconds: float = BUDGET_SECONDS,
) -> Sensitivity:
    """Whether some counterfactual built from ``results`` (the lookups' real objects, on which
    the probe's value was ``value``) gives the opposite value. Never raises: a fault in the
    search counts as no flip (the probe is refused, never accepted by mistake)."""
    began = time.monotonic()
    try:
        search = _Search(probe, not value, budget_seconds, max_evaluations)
    except CelError:
        return Sensitivity(False, 0, 0.0)
    flip: str | None = None
    exhausted = False
    try:
        found = mentioned(" && ".join(probe.expressions()))
        fixed = _Fixed(probe)
        worlds = (
            _object_worlds(results, found, fixed)
            if probe.scope == "each_object"
            else _results_worlds(results, found, fixed)
        )
        for description, variables in worlds:
            if search.flips(variables):
                flip = description
                break
    except _Exhausted:
        exhausted = True
    except Exception as exc:
        flip, exhausted = None, True
        _log.warning("probe_sensitivity_failed", error=repr(exc))
    return Sensitivity(
        flip is not None,
        search.evaluations,
        round(time.monotonic() - began, 6),
        flip,
        exhausted and flip is None,
    )


World = tuple[str, dict[str, Any]]


def _object_worlds(results: list[Any], found: Mentioned, fixed: _Fixed) -> Iterator[World]:
    """``each_object``: a listing of one (possibly changed) object is a cluster state, and
    with a true verdict any object turned false makes the whole listing false; so each
    object is evaluated alone (the verdict of that one-object listing)."""
    sample = results[0][:SAMPLE]
    for number, obj in enumerate(sample):
        yield f"object {number} alone", {"object": obj}
    targets = [t for t in found.targets if t.root in ("object", "")]
    for description, changed in _object_variants(sample, targets, found, fixed, None):
        yield description, {"object": changed}


def _results_worlds(results: list[Any], found: Mentioned, fixed: _Fixed) -> Iterator[World]:
    base = [entry[:SAMPLE] if isinstance(entry, list) else entry for entry in results]
    if base != results:
        yield f"the first {SAMPLE} objects of each listing", {"results": base}
    for number, entry in enumerate(base):
        if isinstance(entry, list) and len(entry) > 1:
            only = _put(base, number, entry[:1])
            yield f"listing {number}: its first object only", {"results": only}
            dropped = _put(base, number, entry[1:])
            yield f"listing {number}: its first object dropped", {"results": dropped}
    targets = [t for t in found.targets if t.root == "results"]
    # Paths from `results`: changed over the whole sample at once.
    for description, changed in _assignments(base, targets, found, fixed, "results"):
        yield description, {"results": changed}
    for description, changed in _single_paths(base, targets, found, fixed, "results"):
        yield description, {"results": changed}
    # Each sample object changed alone (paths from a variable of unknown range, named
    # leaves, the whole object), then the listings' extra copies.
    places = [
        (number, index)
        for number, entry in enumerate(base)
        for index in (range(len(entry)) if isinstance(entry, list) else [None])
    ][: SAMPLE * 2]
    relative = [t for t in found.targets if t.root == ""]
    for number, index in places:
        entry = base[number]
        obj = entry[index] if index is not None else entry
        for description, changed in _object_variants([obj], relative, found, fixed, number):
            new_entry = _put(entry, index, changed) if index is not None else changed
            yield f"lookup {number}: {description}", {"results": _put(base, number, new_entry)}
    for number, entry in enumerate(base):
        if isinstance(entry, list) and entry:
            first = entry[0]
            doubled = _put(base, number, [*entry, first])
            yield f"listing {number}: a duplicate added", {"results": doubled}
            for flavour in ("zero", "other"):
                copy = _whole(first, found, fixed, number, flavour)
                yield (
                    f"listing {number}: a copy with every named field {flavour} added",
                    {"results": _put(base, number, [*entry, copy])},
                )


def _put(seq: list[Any], index: int | None, value: Any) -> list[Any]:
    out = list(seq)
    if index is not None:
        out[index] = value
    return out


def _rooted(target: Target, scope_root: str) -> list[tuple[Step, ...]]:
    """The steps of ``target`` from the variable (``results`` or ``object``) changed."""
    roots = ("object", "") if scope_root == "object" else ("results",)
    return [target.steps] if target.root in roots else []


def _assignments(
    base: Any, targets: list[Target], found: Mentioned, fixed: _Fixed, root: str
) -> Iterator[tuple[str, Any]]:
    """Every tested path made to hold, then to fail, then each mix of the two."""
    tested = [(t, found.tests[t]) for t in targets if t in found.tests and _rooted(t, root)]
    tested = [(t, test) for t, test in tested if not _pins(fixed, root, t)]
    if not tested:
        return
    combos: list[tuple[bool, ...]] = [(True,) * len(tested), (False,) * len(tested)]
    head = tested[:MAX_COMBINED]
    for mix in itertools.product((True, False), repeat=len(head)):
        full = mix + (mix[-1],) * (len(tested) - len(head))
        if full not in combos:
            combos.append(full)
    for mix in combos:
        world = base
        for (target, test), holds in zip(tested, mix, strict=True):
            for steps in _rooted(target, root):
                had = next(iter(_values_at(base, steps)), _DELETE)
                present = None if had is _DELETE else had
                new = _satisfying(test, holds, present)
                if _allowed(_plain(steps), had is not _DELETE, present, new):
                    world = _updated(world, steps, new, False)
        if world is not base:
            what = ", ".join(
                f"{t.text()} {'meets' if h else 'fails'} {test[0]} {test[1]!r}"
                for (t, test), h in zip(tested, mix, strict=True)
            )
            yield what, world


def _pins(fixed: _Fixed, root: str, target: Target) -> bool:
    """Whether the lookup pins ``target`` (``results[i][*].metadata.namespace``, ...)."""
    steps = target.steps
    entry: int | None = None
    if root == "results":
        if not steps or not isinstance(steps[0], int):
            return False
        entry, steps = steps[0], steps[1:]
        if steps and isinstance(steps[0], _Wild):
            steps = steps[1:]
    plain = _plain(steps)
    if len(plain) != len(steps):
        return False
    return fixed.pinned(entry, plain) or (plain in _NEVER_CHANGED)


def _single_paths(
    base: Any, targets: list[Target], found: Mentioned, fixed: _Fixed, root: str
) -> Iterator[tuple[str, Any]]:
    """Each mentioned path given each candidate value (or removed), everywhere and on the
    first element only."""
    for target in targets:
        if _pins(fixed, root, target):
            continue
        for steps in _rooted(target, root):
            present = [v for v in _values_at(base, steps) if v is not None]
            for candidate in _candidates(present, found, steps):
                wild = any(isinstance(step, _Wild) for step in steps)
                for first_only in (False, True) if wild else (False,):
                    world = _updated(base, steps, candidate, first_only)
                    if world is not base:
                        where = "first" if first_only else "every"
                        yield f"{target.text()} ({where}) := {_show(candidate)}", world


def _has(node: Any, plain: tuple[str, ...]) -> bool:
    for key in plain:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _allowed(plain: tuple[str, ...], had: bool, old: Any, new: Any) -> bool:
    """Whether setting the value at ``plain`` (object-relative) from ``old`` to ``new``
    (``_DELETE``: removing it) leaves what every object of the kind has (_PRESENCE_FIXED)."""
    emptied = new is _DELETE or (isinstance(new, str | list | dict) and not new)
    if plain in _PRESENCE_FIXED and (not had or emptied):
        return False
    for fixed in _PRESENCE_FIXED:
        if len(fixed) > len(plain) and fixed[: len(plain)] == plain:
            rest = fixed[len(plain) :]
            if had and _has(old, rest) and (new is _DELETE or not _has(new, rest)):
                return False
    return True


def _show(value: Any) -> str:
    return "<removed>" if value is _DELETE else repr(value)[:60]


def _candidates(present: list[Any], found: Mentioned, steps: tuple[Step, ...]) -> list[Any]:
    """Values to try at a path holding ``present`` (empty: absent)."""
    plain = _plain(steps)
    out: list[Any] = []
    numbers = [lit for lit in found.literals if isinstance(lit, int | float)]
    numbers = [n for n in numbers if not isinstance(n, bool)]
    strings = [lit for lit in found.literals if isinstance(lit, str)]
    kinds = {type(v) for v in present}
    if not present:
        out += [*found.literals, 0, 1, OTHER, True, False, [], {}]
    if int in kinds or float in kinds:
        for n in [v for v in present if isinstance(v, int | float) and not isinstance(v, bool)][:3]:
            out += [n + 1, n - 1]
        out += [0, -1, LARGE] + [m + d for m in numbers for d in (0, -1, 1)]
        if float in kinds:
            out = [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in out]
    if str in kinds:
        out += ["", OTHER, *strings]
        out += list(dict.fromkeys(v for v in present if isinstance(v, str)))[:4]
        if any(_TIMESTAMP.match(v) for v in present if isinstance(v, str)):
            out += [EARLY, LATE]
    if bool in kinds:
        out += [not v for v in present if isinstance(v, bool)][:2]
    for value in present:
        if isinstance(value, list):
            out += [[], value + value[:1], value[:1]] + [[*value, s] for s in strings[:3]]
            # a size threshold (size(x) <= 4): as many elements as each small literal, and one
            # more and one fewer
            sizes = sorted({int(n) + d for n in numbers if 0 < n <= 1000 for d in (-1, 0, 1)})
            out += [(value or [{}])[:1] * size for size in sizes if size > 0]
            break
    for value in present:
        if isinstance(value, dict):
            out.append({})
            keys = sorted(value, key=lambda k: (k not in found.names, k))[:4]
            out += [{k: v for k, v in value.items() if k != key} for key in keys]
            out += [{**value, s: OTHER} for s in strings[:3]] + [{**value, OTHER: OTHER}]
            break
    if present:
        out.append(_DELETE)
    unique: list[Any] = []
    for value in out:
        if not all(_allowed(plain, True, p, value) for p in present) or (
            not present and not _allowed(plain, False, None, value)
        ):
            continue
        if present and value is not _DELETE and all(_same(value, p) for p in present):
            continue
        if not any(_same(value, u) for u in unique):
            unique.append(value)
    return unique


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _object_variants(
    sample: list[Any], targets: list[Target], found: Mentioned, fixed: _Fixed, entry: int | None
) -> Iterator[tuple[str, Any]]:
    """Each object of ``sample`` changed, stage by stage over the sample: the paths the
    expression names (``targets``, from the object), then named leaves, then whole objects."""
    for number, obj in enumerate(sample):
        for description, changed in _assignments(obj, targets, found, fixed, "object"):
            yield f"object {number}: {description}", changed
    for number, obj in enumerate(sample):
        for description, changed in _single_paths(obj, targets, found, fixed, "object"):
            yield f"object {number}: {description}", changed
    for number, obj in enumerate(sample):
        for path, leaf in _named_leaves(obj, found, fixed, entry):
            for candidate in _leaf_mutations(leaf, path):
                changed = _updated(obj, path, candidate, False)
                if changed is not obj:
                    where = _path_text(path)[1:]
                    yield f"object {number}: {where} := {_show(candidate)}", changed
    for number, obj in enumerate(sample):
        for flavour in ("zero", "other"):
            yield (
                f"object {number}: every named field {flavour}",
                _whole(obj, found, fixed, entry, flavour),
            )
        yield f"object {number}: stripped to what every object of its kind has", _stripped(obj)


def _plain(path: tuple[Step, ...]) -> tuple[str, ...]:
    return tuple(s for s in path if isinstance(s, str))


def _named_leaves(
    obj: Any, found: Mentioned, fixed: _Fixed, entry: int | None
) -> list[tuple[tuple[Step, ...], Any]]:
    """Values under a key the expression names (bounded), outermost first."""
    out: list[tuple[tuple[Step, ...], Any]] = []
    todo: deque[tuple[tuple[Step, ...], Any]] = deque([((), obj)])
    visited = 0
    while todo and len(out) < MAX_LEAVES and visited < MAX_VISITED:
        path, node = todo.popleft()
        items: list[tuple[Step, Any]] = (
            list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        )
        for key, value in items:
            visited += 1
            sub = (*path, key)
            plain = _plain(sub)
            named = isinstance(key, str) and key in found.names
            if named and not fixed.pinned(entry, plain) and plain not in _NEVER_CHANGED:
                out.append((sub, value))
            if isinstance(value, dict | list) and len(path) < 8:
                todo.append((sub, value))
    return out[:MAX_LEAVES]


def _leaf_mutations(value: Any, path: tuple[Step, ...]) -> list[Any]:
    """A named value's mutations by type, the "zero" one first, the "other" one last."""
    options: list[Any]
    if isinstance(value, bool):
        options = [not value]
    elif isinstance(value, int | float):
        options = [0, -1, LARGE]
    elif isinstance(value, str):
        options = ["", OTHER]
    elif isinstance(value, list):
        options = [[], value + value[:1]]
    elif isinstance(value, dict):
        first = next(iter(value), None)
        shorter = {k: v for k, v in value.items() if k != first}
        options = [{}, shorter, {**value, OTHER: OTHER}]
    else:
        options = [OTHER]
    plain = _plain(path)
    return [option for option in options if _allowed(plain, True, value, option)]


def _whole(obj: Any, found: Mentioned, fixed: _Fixed, entry: int | None, flavour: str) -> Any:
    """``obj`` with every innermost named value mutated at once (zero: 0, "", [], {}; other:
    a large number, another string, a duplicated element, an added key; booleans negated)."""
    leaves = _named_leaves(obj, found, fixed, entry)
    paths = [path for path, _ in leaves]
    changed = obj
    for path, leaf in leaves:
        if any(len(other) > len(path) and other[: len(path)] == path for other in paths):
            continue  # an ancestor of another named value: mutate that one instead
        options = _leaf_mutations(leaf, path)
        if options:
            pick = options[0] if flavour == "zero" else options[-1]
            changed = _updated(changed, path, pick, False)
    return changed


def _stripped(obj: Any) -> Any:
    if not isinstance(obj, dict):
        return obj
    raw = obj.get("metadata")
    meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out = {k: obj[k] for (k, *rest) in _PRESENCE_FIXED if not rest and k in obj}
    if isinstance(raw, dict):
        out["metadata"] = {
            k[1]: meta[k[1]] for k in _PRESENCE_FIXED if len(k) == 2 and k[1] in meta
        }
    return out
