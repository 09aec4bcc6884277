"""The one adapter to the CEL runtime (``cel-expr-python``, the official bindings of cel-cpp).

Nothing else imports the runtime. It is set up as the environment a Kubernetes
ValidatingAdmissionPolicy is evaluated in (cel/environment.py: Kubernetes 1.33 and 1.34,
docs/probes.md), library by library: the runtime's own extensions where they behave as
Kubernetes' (optional types, cel-go's strings version 2, sets, two-variable
comprehensions), Kubernetes' libraries the runtime lacks written in Python in ``cel/lib/``
(lists, regex, url, ip/cidr, quantity, semver, format), and Kubernetes' cross-type numeric
comparisons (``1 < 1.5``). The runtime's extensions Kubernetes does not enable (math,
encoders, protos, regex, strings past version 2) are not loaded, so a probe never depends on
something an admission controller would not have. ``cel.bind`` is loaded for one internal
use only: a probe's ``variables`` (``variables.NAME``) are bound around the expression that
reads them, which the runtime initialises lazily (only when read, at most once per
evaluation), as the API server evaluates a policy's variables.

The contract is fail-safe: :class:`BoolProgram` returns a ``bool`` or raises
:class:`CelError` - a parse or type error, a missing field, a division by zero, a value that is
not a boolean, an expression over the cost bound (cost.py). The runtime reports most errors
as error *values*; they are turned into ``CelError`` here, never into a result. Callers treat
every ``CelError`` as "the probe could not run", which never yields ``true``.

Objects are passed as plain JSON-like values (dicts, lists, str, int, float, bool, None),
the shapes the Kubernetes API returns.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from cel_expr_python import cel as runtime

from workers.policy_engine.cel import environment as cel_env
from workers.policy_engine.cel.environment import KUBERNETES_VERSIONS, PROBE_VERSION
from workers.policy_engine.cel.lib import (
    CallRewrite,
    NoSuchOverload,
    Overload,
    rewrite_calls,
)
from workers.policy_engine.cel.lib import overloads as library_overloads
from workers.policy_engine.cel.lib import rewrites as library_rewrites
from workers.policy_engine.cel.lib import values as library_values
from workers.policy_engine.cel.lib.base import (
    CelLibraryError,
    charge,
    converted_values,
    holds_nul,
    metered,
)
from workers.policy_engine.cel.lib.rewrite import base, computed_presence, optional_fallbacks
from workers.policy_engine.cel.syntax import reads as tree_reads
from workers.policy_engine.cel.syntax.locate import locate
from workers.policy_engine.cel.syntax.nodes import (
    Call,
    Ident,
    Index,
    ListExpr,
    Literal,
    Node,
    Select,
    binding,
    transform,
    transform_down,
    walk,
)
from workers.policy_engine.cel.syntax.parser import CelSyntaxError, Tree, parse
from workers.policy_engine.cel.syntax.unparser import unparse
from workers.policy_engine.probes.cost import (
    MAX_STEPS,
    CelCostError,
    CostModel,
    Extents,
    analyse_tree,
)

__all__ = ["KUBERNETES_VERSIONS", "PROBE_VERSION", "BoolProgram", "CelError", "Expression",
           "StepMeter", "evaluate_bool", "field_paths", "unsupported_calls"]  # fmt: skip
MAX_EXPRESSION_CHARS = 4000
# The runtime stops any evaluation after this many comprehension iterations (fixed in the
# bindings); an expression that reaches it cannot run (fail-safe), like one over the cost bound.
RUNTIME_ITERATION_BUDGET = 10_000
# the inputs an evaluation may be given (an imported policy's admission inputs among them:
# probes/admission_inputs.py)
ROOTS = ("object", "results", "params", "request", "oldObject", "namespaceObject")
# Where the run's constants are bound (:class:`Slots`): values the same for every object of
# a probe run (constant variables, parts of expressions that read only params and them),
# each computed once per run and bound in a runtime variable of its own, so that an
# evaluation converts only the constants it reads (the runtime converts a variable's whole
# value from Python on its first read in each evaluation).
SLOT_PREFIX = "assay_slot_"
MAX_SLOTS = 256
# A value converted from Python for an evaluation: about this many of its values per step
# (~300-550 ns a value on a loaded host, bench/bench_cel_calls.py).
CONVERTED_VALUES_PER_STEP = 8
_VARIABLE_PREFIX = "assay_variable_"
# Names of the adapter's own (bound variables, rewritten calls, constants) start so; an
# author's identifier or function may not, and a macro variable of the author's that does is
# renamed (:func:`_renamed`).
RESERVED_PREFIX = "assay_"
_RENAMED_PREFIX = "assay_author_"
# Kyverno's ``exceptions`` (a ValidatingPolicy's PolicyException grants, per object): where
# an expression reads it free, it reads this variable instead, which only the importer of a
# Kyverno ValidatingPolicy declares (policies/kyverno_exceptions.py); anywhere else
# ``exceptions`` is undeclared, as in Kubernetes.
KYVERNO_EXCEPTIONS = "exceptions"
EXCEPTIONS_VARIABLE = RESERVED_PREFIX + "exceptions"
_CONCRETE = ("int", "uint", "double", "string", "bool", "bytes", "list", "map",
             "timestamp", "duration")  # fmt: skip


class CelError(ValueError):
    """The expression could not be compiled or evaluated to a boolean."""


def _type(kind: str) -> Any:
    types = runtime.Type
    if kind in library_values.TYPE_NAMES:
        return types(library_values.TYPE_NAMES[kind])
    return {
        "int": types.INT, "uint": types.UINT, "double": types.DOUBLE, "string": types.STRING,
        "bool": types.BOOL, "bytes": types.BYTES, "null": types.NULL, "dyn": types.DYN,
        "timestamp": types.TIMESTAMP, "duration": types.DURATION,
        "list": types.List(types.DYN), "map": types.Map(types.DYN, types.DYN),
    }[kind]  # fmt: skip


def _costed(overload: Overload) -> Callable[..., Any]:
    """``overload``'s implementation, charging its cost over the actual arguments first (to
    the meter :meth:`Expression.evaluate` binds): a call over the bound never runs."""
    impl, cost, what = overload.impl, overload.cost, f"{overload.function}()"

    def call(*args: Any) -> Any:
        charge(cost(*args), what)
        result = impl(*args)
        if holds_nul(result):  # the runtime would cut it there (base.py)
            raise CelLibraryError(
                f"{what} gave a string with a NUL character, which CEL cannot hold"
            )
        return result

    return call


def _dispatcher(impls: list[Callable[..., Any]]) -> Callable[..., Any]:
    """One implementation for overloads two libraries share (``isGreaterThan`` of quantities
    and of semvers): the first whose opaque kind the argument has."""
    if len(impls) == 1:
        return impls[0]

    def dispatch(*args: Any) -> Any:
        for impl in impls[:-1]:
            try:
                return impl(*args)
            except NoSuchOverload:
                continue
        return impls[-1](*args)

    return dispatch


def _declarations(overloads: Sequence[Overload]) -> list[Any]:
    """The runtime's function declarations: one per function name (the runtime refuses a
    name declared twice), a ``dyn`` parameter expanded into each concrete kind (the runtime
    dispatches Python functions on concrete kinds only)."""
    grouped: dict[str, dict[tuple[tuple[str, ...], bool], tuple[str, list[Any], str]]] = (
        defaultdict(dict)
    )
    for overload in overloads:
        expanded: list[tuple[str, ...]] = [()]
        for param in overload.params:
            kinds = _CONCRETE if param == "dyn" else (param,)
            expanded = [(*prefix, kind) for prefix in expanded for kind in kinds]
        for params in expanded:
            key = (params, overload.member)
            entry = grouped[overload.function].get(key)
            if entry is None:
                suffix = "_".join(params) if len(expanded) > 1 else ""
                entry = (f"{overload.id}_{suffix}".rstrip("_"), [], overload.result)
                grouped[overload.function][key] = entry
            entry[1].append(_costed(overload))
    declarations = []
    for function, entries in grouped.items():
        runtime_overloads = [
            runtime.Overload(
                ident,
                _type(result),
                [_type(kind) for kind in params],
                is_member=member,
                impl=_dispatcher(impls),
            )
            for (params, member), (ident, impls, result) in entries.items()
        ]
        declarations.append(runtime.FunctionDecl(function, runtime_overloads))
    return declarations


# Kubernetes' cross-type numeric comparisons (cel-go's CrossTypeNumericComparisons, 1.28+):
# `1 < 1.5` type-checks. The runtime evaluates such comparisons already; its checker declares
# them only when asked, which its Python bindings cannot, so the four operators are taken out
# of the standard declarations and declared again with the cross-type overloads added (the
# runtime's own implementations run them).
_ORDERED = ("int", "uint", "double", "bool", "string", "bytes", "duration", "timestamp")
_CROSS = (("int", "uint"), ("int", "double"), ("uint", "int"), ("uint", "double"),
          ("double", "int"), ("double", "uint"))  # fmt: skip
_OVERLOAD_KIND = {"int": "int64", "uint": "uint64"}
_OPERATORS = {"_<_": "less", "_<=_": "less_equals", "_>_": "greater", "_>=_": "greater_equals"}


def _comparison_yaml() -> list[str]:
    lines: list[str] = []
    for operator, prefix in _OPERATORS.items():
        lines += [f'  - name: "{operator}"', "    overloads:"]
        pairs = [(kind, kind) for kind in _ORDERED] + list(_CROSS)
        for left, right in pairs:
            suffix = _OVERLOAD_KIND.get(left, left)
            if left != right:
                suffix += "_" + _OVERLOAD_KIND.get(right, right)
            lines += [
                f"      - id: {prefix}_{suffix}",
                f"        args: [{{type_name: {left}}}, {{type_name: {right}}}]",
                "        return: {type_name: bool}",
            ]
    return lines


# Standard functions a library adds overloads to (ip and cidr to `string`): taken out of the
# standard declarations and declared again with the standard overloads (run by the runtime)
# and the library's (run by its Python implementation).
_STANDARD_OVERLOADS = {
    "string": (("int", "int64_to_string"), ("uint", "uint64_to_string"),
               ("double", "double_to_string"), ("bool", "bool_to_string"),
               ("bytes", "bytes_to_string"), ("string", "string_to_string"),
               ("timestamp", "timestamp_to_string"), ("duration", "duration_to_string")),
}  # fmt: skip
_YAML_TYPE = {"list": "{type_name: list, params: [{type_name: dyn}]}",
              "map": "{type_name: map, params: [{type_name: dyn}, {type_name: dyn}]}"}  # fmt: skip


def _yaml_type(kind: str) -> str:
    kind = library_values.TYPE_NAMES.get(kind, kind)
    return _YAML_TYPE.get(kind, f"{{type_name: {kind}}}")


def _standard_yaml(added: Sequence[Overload]) -> tuple[list[str], list[str]]:
    """Declarations (YAML) of the functions ``added`` overloads (standard functions with
    their own overloads too), and their names."""
    names = sorted({overload.function for overload in added})
    lines: list[str] = []
    for name in names:
        lines += [f'  - name: "{name}"', "    overloads:"]
        for kind, ident in _STANDARD_OVERLOADS.get(name, ()):
            lines += [f"      - id: {ident}", f"        args: [{_yaml_type(kind)}]",
                      f"        return: {_yaml_type('string')}"]  # fmt: skip
        for (function, params, member), same in _by_signature(added).items():
            if function != name:
                continue
            lines.append(f"      - id: {same[0].id}")
            if member:
                lines.append(f"        target: {_yaml_type(params[0])}")
                params = params[1:]
            args = ", ".join(_yaml_type(kind) for kind in params)
            lines += [f"        args: [{args}]", f"        return: {_yaml_type(same[0].result)}"]
    return lines, names


def _by_signature(
    added: Sequence[Overload],
) -> dict[tuple[str, tuple[str, ...], bool], list[Overload]]:
    """Overloads by function and parameters: one declaration each (the runtime refuses two
    of one signature), ``string`` of an IP and of a CIDR sharing one."""
    grouped: dict[tuple[str, tuple[str, ...], bool], list[Overload]] = defaultdict(list)
    for overload in added:
        grouped[(overload.function, overload.params, overload.member)].append(overload)
    return grouped


def _runtime_kinds(overload: Overload) -> tuple[str, ...]:
    """The kinds the runtime dispatches a Python function on: every library value is a
    message to it (``isGreaterThan`` of two quantities and of two semvers are one)."""
    return tuple("message" if k in library_values.TYPE_NAMES else k for k in overload.params)


def _split(overloads: Sequence[Overload]) -> tuple[list[Overload], list[Overload]]:
    """Library overloads declared in the adapter's extension, and those declared in the
    environment's configuration: the overloads of standard functions (``string`` of an IP),
    and of functions with overloads the runtime cannot tell apart by their arguments' kinds
    (``isGreaterThan`` of quantities and of semvers), declared there each with its type and
    run by one implementation (:func:`_implementations`)."""
    kinds: dict[tuple[str, tuple[str, ...], bool], set[tuple[str, ...]]] = defaultdict(set)
    for o in overloads:
        kinds[(o.function, _runtime_kinds(o), o.member)].add(o.params)
    shared = {function for (function, _, _), params in kinds.items() if len(params) > 1}
    configured = set(_STANDARD_OVERLOADS) | shared
    added = [o for o in overloads if o.function in configured]
    return [o for o in overloads if o.function not in configured], added


def environment_config(version: str = PROBE_VERSION) -> str:
    """The runtime's environment configuration (YAML) for Kubernetes ``version``: its own
    extensions that Kubernetes enables, the options it has at that version, and the
    standard functions its libraries add overloads to."""
    parts = cel_env.parts(version)
    lines = [f"name: kubernetes-{version}", "extensions:", "  - name: cel.lib.ext.bindings"]
    for part in parts:
        if part.native:
            lines += [f"  - name: {part.native}", f"    version: {part.native_version}"]
    excluded: list[str] = []
    functions: list[str] = []
    if any(part.option == "cross_type_numeric_comparisons" for part in parts):
        excluded += list(_OPERATORS)
        functions += _comparison_yaml()
    _, added = _split(library_overloads(cel_env.modules(version)))
    standard, names = _standard_yaml(added)
    excluded += [name for name in names if name in _STANDARD_OVERLOADS]
    functions += standard
    if excluded:
        lines += ["stdlib:", "  exclude_functions:"]
        lines += [f'    - name: "{name}"' for name in excluded]
    if functions:
        lines += ["functions:", *functions]
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=len(KUBERNETES_VERSIONS))
def _environment(version: str) -> Any:
    modules = cel_env.modules(version)
    new, added = _split(library_overloads(modules))
    return runtime.NewEnv(
        descriptor_pool=library_values.pool(),  # the library values' types
        config=runtime.NewEnvConfigFromYaml(environment_config(version)),
        variables={
            name: runtime.Type.DYN
            for name in (*ROOTS, *(f"{SLOT_PREFIX}{i}" for i in range(MAX_SLOTS)))
        },
        # one extension, merged with the runtime's own (lists' indexOf with strings' indexOf)
        extensions=[runtime.CelExtension("kubernetes", _declarations(new))],
        function_impls=_implementations(added),
    )


def _implementations(added: Sequence[Overload]) -> dict[str, Callable[..., Any]]:
    """The Python implementation of the overloads declared in the configuration, by id:
    one for all those the runtime dispatches alike (``string`` of an IP and of a CIDR),
    trying each library's in turn (:func:`_dispatcher`)."""
    grouped: dict[tuple[str, tuple[str, ...], bool], list[Overload]] = defaultdict(list)
    for overload in added:
        grouped[(overload.function, _runtime_kinds(overload), overload.member)].append(overload)
    return {same[0].id: _dispatcher([_costed(o) for o in same]) for same in grouped.values()}


@lru_cache(maxsize=len(KUBERNETES_VERSIONS))
def _rewrites(version: str) -> tuple[CallRewrite, ...]:
    return tuple(library_rewrites(cel_env.modules(version)))


class _NotCompiled(Exception):
    """The runtime refused a program text; ``message`` is its own words."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@lru_cache(maxsize=512)
def _compiled(source: str, version: str = PROBE_VERSION) -> Any:
    """The runtime's program for ``source`` (assay's text, written from a tree)."""
    try:
        return _environment(version).compile(source)
    except Exception as exc:
        raise _NotCompiled(str(exc)) from None


def _tree(expression: str, what: str) -> Tree:
    """The expression's syntax tree; CelError when it is too long, does not parse, or uses
    what Kubernetes' environment does not have (naming which)."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CelError(f"{what} is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = parse(expression)
    except CelSyntaxError as exc:
        raise CelError(f"{what} does not compile: {exc}") from None
    refused = _unsupported(tree.root)
    if refused:
        raise CelError(
            f"{what} uses what Kubernetes' CEL environment does not have: {', '.join(refused)}"
        )
    return tree


def _unsupported(root: Node) -> list[str]:
    """``cel.bind`` (Kubernetes' environment has none: variables are the way), and inputs
    or functions named as the adapter's own (``assay_*``; a field of that name is fine)."""
    found: set[str] = set()
    for node, bound in tree_reads.scoped(root):
        if isinstance(node, Ident) and node.name not in bound:
            if node.name.startswith(RESERVED_PREFIX):
                found.add(node.name)
        elif isinstance(node, Call):
            if node.function.startswith(RESERVED_PREFIX):
                found.add(node.function)
            target = node.target
            if (
                node.function == "bind"
                and isinstance(target, Ident)
                and target.name == "cel"
                and "cel" not in bound
            ):
                found.add("cel.bind")
    return sorted(found)


def unsupported_calls(expression: str) -> list[str]:
    """What the expression uses that Kubernetes' environment does not have (``cel.bind``)
    or that is reserved for the adapter (``assay_*`` names); none when it does not parse
    (compiling it says why)."""
    try:
        return _unsupported(parse(expression).root)
    except CelSyntaxError:
        return []


def _renamed(root: Node) -> Node:
    """``root`` with each macro variable named as the adapter's names start
    (``xs.all(assay_x, ...)``, legal in Kubernetes) renamed, so no name of the adapter's can
    be shadowed or read by it."""
    taken = [
        name for call in walk(root) if isinstance(call, Call)
        for name in (binding(call) or ((), ()))[0] if name.startswith(RESERVED_PREFIX)
    ]  # fmt: skip
    if not taken:
        return root
    fresh = {name: f"{_RENAMED_PREFIX}{number}" for number, name in enumerate(dict.fromkeys(taken))}
    bound = {
        id(node) for node, names in tree_reads.scoped(root)
        if isinstance(node, Ident) and node.name in names
    }  # fmt: skip
    macro_names = {
        id(arg) for call in walk(root) if isinstance(call, Call) and binding(call)
        for arg in call.args if isinstance(arg, Ident)
    }  # fmt: skip

    def change(node: Node) -> Node | None:
        renamed = id(node) in bound or id(node) in macro_names
        if isinstance(node, Ident) and node.name in fresh and renamed:
            return Ident(fresh[node.name], at=node.at)
        return None

    return transform_down(root, change)


@dataclass(frozen=True)
class _Definition:
    """A source (the expression, a variable) prepared for the runtime: its tree after the
    adapter's rewrites, the probe variables it reads, and its own text (for errors)."""

    label: str
    text: str
    node: Node
    used: tuple[str, ...]


def _prepared(
    tree: Tree,
    known: Sequence[str],
    what: str,
    direct: Mapping[str, Node],
    version: str,
    numbers: itertools.count[int],
) -> _Definition:
    """``tree`` as the runtime compiles it: each ``variables.NAME`` read as the name it is
    bound to (or as ``direct`` says: a constant's slot, an input the variable is an alias
    of), ``has(variables.NAME)`` as the API server tests it, a free ``exceptions`` as
    :data:`EXCEPTIONS_VARIABLE` where it is declared (no ``variables.assay_*`` of the
    author's), macro variables named as the adapter's renamed, the libraries' call
    rewrites, presence tests on computed values and cel-go's ``or``/``orValue`` on values
    that are not optional (cel/lib/rewrite.py)."""
    root = _renamed(tree.root)
    unbound = tree_reads.free_names(root)
    free = {id(node) for node in unbound if node.name == tree_reads.VARIABLES}
    granted = (
        {id(node) for node in unbound if node.name == KYVERNO_EXCEPTIONS}
        if EXCEPTIONS_VARIABLE in known
        else set()
    )
    used: list[str] = []

    def variable(node: Node) -> str | None:
        if (
            isinstance(node, Select)
            and not node.optional
            and isinstance(node.operand, Ident)
            and id(node.operand) in free
        ):
            return node.field
        return None

    def read(name: str, at: int, own: bool = False) -> Node:
        if name not in known or (name.startswith(RESERVED_PREFIX) and not own):
            raise CelError(
                f"{what} reads variables.{name}, which is not defined before it (a variable "
                "may read only the variables listed before it)"
            )
        if name in direct:
            return direct[name]
        if name not in used:
            used.append(name)
        return Ident(_VARIABLE_PREFIX + name, at=at)

    def change(node: Node) -> Node | None:
        # `has(variables.NAME)`: the API server's `variables` is a map of the declared
        # variables (k8s.io/apiserver/pkg/cel/lazy): present when declared, the variable
        # evaluated (its error is the test's)
        if (
            isinstance(node, Call)
            and node.function == "has"
            and node.target is None
            and len(node.args) == 1
        ):
            name = variable(node.args[0])
            if name is not None:
                value = read(name, node.args[0].at)
                size = Call("size", (ListExpr((value,)),), at=node.at)
                return Call("_==_", (size, Literal(1, "int")), at=node.at)
        name = variable(node)
        if name is not None:
            return read(name, node.at)
        if id(node) in granted:
            return read(EXCEPTIONS_VARIABLE, node.at, own=True)
        return None

    root = transform_down(root, change)
    root = rewrite_calls(root, _rewrites(version))
    root = computed_presence(root, _computed, numbers)
    root = _null_input_optionals(root)
    root = optional_fallbacks(root, numbers)
    return _Definition(what, tree.text, root, tuple(used))


_NULLABLE_INPUTS = ("oldObject", "namespaceObject")


def _null_input_optionals(root: Node) -> Node:
    """``root`` with each ``oldObject.?f`` / ``oldObject[?k]`` (and ``namespaceObject``'s)
    none where the input is null, as cel-go's optional selection on null (the runtime errs:
    no ``_?._`` overload on null): ``oldObject.?spec.replicas.orValue(0)`` on a CREATE."""

    def change(node: Node) -> Node | None:
        if not isinstance(node, Select | Index) or not node.optional:
            return None
        operand = node.operand
        if not (isinstance(operand, Ident) and operand.name in _NULLABLE_INPUTS):
            return None
        is_null = Call("_==_", (Ident(operand.name, at=operand.at), Literal(None, "null")))
        none = Call("none", (), Ident("optional"), at=node.at)
        return Call("_?_:_", (is_null, none, node), at=node.at)

    return transform(root, change)


def _computed(node: Node) -> bool:
    """A value a presence test may meet null or a scalar in (cel-go: false, the runtime: an
    error): a probe variable (bound, or a constant), params' contents, and ``oldObject`` and
    ``namespaceObject`` (null on a CREATE, for a cluster-scoped object: ``has(oldObject.x)``
    is false there, as in the API server)."""
    start = base(node)
    if not isinstance(start, Ident):
        return False
    if start.name.startswith((_VARIABLE_PREFIX, SLOT_PREFIX)):
        return True
    if start.name in ("oldObject", "namespaceObject"):
        return True
    return start.name == "params" and start is not node


def _cost_of(root: Node, variables: tuple[tuple[str, str], ...]) -> CostModel:
    """The loop skeleton of a tree as it runs; CelError when its shape is over the static
    cost bounds. ``variables``: the probe's, to bound a ``sets`` argument read from one."""
    try:
        return analyse_tree(root, dict(variables))
    except CelCostError as exc:
        raise CelError(f"the expression is too costly to run: {exc}") from None


class Expression:
    """One expression compiled with the variables it reads bound around it.

    ``variables``: the probe's ``(name, expression)`` pairs in order; only those the
    expression reads (and those read by them) are bound, each lazily.
    """

    def __init__(
        self,
        text: str,
        variables: Sequence[tuple[str, str]] = (),
        *,
        what: str = "the expression",
        version: str = PROBE_VERSION,
        constants: Mapping[str, Any] | None = None,
        slots: Slots | None = None,
    ) -> None:
        self.text = text
        self.version = version
        slots = slots or Slots()
        if constants:
            slots = slots.with_variables(constants)
        self.slots = slots
        built = _build(text, tuple(variables), slots.nodes, slots.variables, version, what)
        self.source = built.source
        self.tree = built.tree
        self.costs = built.costs
        self._program = built.program
        self.inputs = built.inputs
        self._free = built.free
        self._slot_values = {n: v for n, v in slots.values.items() if n in self.inputs}
        self._weights: dict[int, tuple[Any, int]] = {}
        self.constants = slots.variable_values()  # by variable name
        self._extents = Extents()  # the inputs measured in this run (params once)

    def reads(self, name: str) -> bool:
        """Whether the expression (with its variables) reads the input ``name``."""
        return name in self._free

    def estimate(self, data: Mapping[str, Any], limit: int) -> int:
        """The steps one evaluation over ``data`` may cost: its loops (cost.py) measured on
        the input and on the constants it reads, and the conversion of every value it reads
        but the object (a constant, params, a listing), each time it is made."""
        constants = self.constants
        if constants or self._slot_values:  # measured as they are, as the input is
            data = {**data, "variables": constants, **self._slot_values}
        try:
            steps = sum(cost.estimate(data, limit, self._extents) for cost in self.costs)
        except CelCostError as exc:
            raise CelError(f"the expression is too costly to run: {exc}") from None
        return steps + self.conversion_steps(data)

    def conversion_steps(self, data: Mapping[str, Any]) -> int:
        """Steps converting what one evaluation reads besides the object costs."""
        total = 0
        for name in self.inputs:
            value = self._slot_values.get(name, data.get(name))
            if value is None:
                continue
            known = self._weights.get(id(value))
            if known is None or known[0] is not value:
                known = (value, converted_values(value))
                self._weights[id(value)] = known
            total += known[1] // CONVERTED_VALUES_PER_STEP
        return total

    def evaluate(
        self,
        data: Mapping[str, Any],
        meter: StepMeter | None = None,
        kinds: tuple[str, ...] | None = None,
    ) -> Any:
        """The value; CelError for an error value or a runtime refusal.

        The Kubernetes library calls the evaluation makes are charged to ``meter`` (a fresh
        one of :data:`MAX_STEPS` when None). A call refused for its cost refuses the whole
        evaluation, whatever value it came to: CEL's ``||`` absorbs an error when its other
        side is true, and the API server's cost limit would have stopped it anyway.
        ``kinds``: the runtime's kinds of value wanted (``BOOL``, ``STRING``); any other is
        not converted to Python (a list shared 2^n times in the runtime is not built)."""
        meter = meter or StepMeter()
        with metered(max(meter.max_steps - meter.steps, 0)) as calls:
            try:
                value = self._evaluate(data, kinds)
            except CelError:
                if calls.refused is None:
                    raise
            finally:
                meter.steps += calls.spent
        if calls.refused is not None:
            raise CelError(f"the expression is too costly to run: {calls.refused}")
        return value

    def _evaluate(self, data: Mapping[str, Any], kinds: tuple[str, ...] | None = None) -> Any:
        if self._slot_values:
            data = {**data, **self._slot_values}
        try:
            result = self._program.eval(data=dict(data))
        except Exception as exc:
            text = _short(exc)
            if "Iteration budget exceeded" in text:
                raise CelError(
                    "the expression is too costly to run: more than "
                    f"{RUNTIME_ITERATION_BUDGET:,} comprehension iterations in one evaluation"
                ) from None
            raise CelError(f"the expression failed: {text}") from None
        kind = _kind(result)
        if kind == "ERROR" and "out of range for" in _error_text(result):
            # an integer past int64 in the input, which the runtime refuses: decoded as a
            # double, as the API server's JSON decoding does
            result = self._program.eval(data=_int64_safe(dict(data)))
            kind = _kind(result)
        if kind == "ERROR":
            text = _error_text(result)
            if text == _OPTIONAL:
                return _Opaque("OPTIONAL")
            raise CelError(f"the expression failed: {_short(text)}")
        if kind == "BOOL":
            return bool(result.value())
        if (kinds is not None and kind not in kinds) or kind in _LIBRARY_TYPES:
            return _Opaque(kind)
        try:
            return result.plain_value()
        except Exception:
            return _Opaque(kind)


_OPTIONAL = "<optional>"
_LIBRARY_TYPES = frozenset(library_values.TYPE_NAMES.values())


def _kind(result: Any) -> str:
    """The runtime's name for the value's type; OPAQUE for one the bindings cannot name."""
    try:
        return str(result.type().name())
    except Exception:
        return "OPAQUE"


def _error_text(result: Any) -> str:
    """An error value's message. The bindings report an optional value as of type ERROR
    but cannot give it to Python: that is no error, and never a boolean."""
    try:
        return str(result.value())
    except Exception:
        return _OPTIONAL


def _closure(used: Sequence[str], definitions: Mapping[str, _Definition]) -> set[str]:
    """The variables ``used`` and, transitively, those they read."""
    needed: set[str] = set()
    todo = list(used)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(definitions[name].used)
    return needed


def _bound(
    body: Node, definitions: Mapping[str, _Definition], order: Sequence[str], needed: set[str]
) -> Node:
    """``body`` inside ``cel.bind`` of each variable in ``needed`` (lazily initialised by
    the runtime), outermost first in declaration order."""
    program = body
    for name in reversed([n for n in order if n in needed]):
        variable = Ident(_VARIABLE_PREFIX + name)
        program = Call("bind", (variable, definitions[name].node, program), Ident("cel"))
    return program


def _compile_program(
    program: Node, definitions: Sequence[_Definition], own: _Definition, version: str
) -> tuple[str, Any]:
    """The runtime's program for ``program`` and its text; CelError naming the author's
    text, line and column of the first problem the runtime found (syntax/locate.py)."""
    text = unparse(program)
    try:
        return text, _compiled(text, version)
    except _NotCompiled as exc:
        sources = {id(d.node): (d.label, d.text) for d in definitions}
        places = locate(program, text, exc.message, sources, (own.label, own.text))
        first = places[0]
        more = f" (and {len(places) - 1} more)" if len(places) > 1 else ""
        said = first.text()
        for rewrite in _rewrites(version):  # the functions the author called, by name
            if rewrite.introduces:
                said = said.replace(f"'{rewrite.introduces}'", f"'{rewrite.name}'")
        raise CelError(f"{first.source} does not compile: {said}{more}") from None


@dataclass(frozen=True)
class Slots:
    """The run's constants and where expressions read them (module docstring: SLOT_PREFIX).

    ``nodes``: (text, node, slot): in the expression ``text``, the node at that place of
    its syntax tree (:func:`node_at`) is read from the slot; ``variables``: (name, slot)
    per constant variable; ``values``: by slot."""

    nodes: tuple[tuple[str, int, str], ...] = ()
    variables: tuple[tuple[str, str], ...] = ()
    values: Mapping[str, Any] = field(default_factory=dict)

    def next_slot(self) -> str | None:
        """A free slot's name; None when every slot is taken."""
        count = len(self.values)
        return f"{SLOT_PREFIX}{count}" if count < MAX_SLOTS else None

    def with_variables(self, constants: Mapping[str, Any]) -> Slots:
        """These slots and one more per constant variable in ``constants``."""
        out = self
        for name, value in constants.items():
            slot = out.next_slot()
            if slot is None:
                break
            out = replace(out, variables=(*out.variables, (name, slot)),
                          values={**out.values, slot: value})  # fmt: skip
        return out

    def with_node(self, text: str, place: int, value: Any) -> Slots:
        """These slots and one more, for the node at ``place`` of ``text``'s tree."""
        slot = self.next_slot()
        if slot is None:
            return self
        return replace(self, nodes=(*self.nodes, (text, place, slot)),
                       values={**self.values, slot: value})  # fmt: skip

    def variable_values(self) -> dict[str, Any]:
        return {name: self.values[slot] for name, slot in self.variables}


def places(root: Node) -> list[Node]:
    """The tree's nodes in a fixed order (parents first, in source order): a node's place
    in it names the node in every parse of the same text."""
    return list(walk(root))


def _hoisted(tree: Tree, hoisted: tuple[tuple[str, int, str], ...]) -> Tree:
    """``tree`` with the nodes the run's constants hold read from their slots."""
    mine = {place: slot for text, place, slot in hoisted if text == tree.text}
    if not mine:
        return tree
    by_node = {id(node): mine[number] for number, node in enumerate(places(tree.root))
               if number in mine}  # fmt: skip

    def change(node: Node) -> Node | None:
        slot = by_node.get(id(node))
        return Ident(slot, at=node.at) if slot is not None else None

    return Tree(tree.text, transform_down(tree.root, change))


@dataclass(frozen=True)
class _Built:
    """What an expression with its variables compiles to (cached: a probe's expressions
    are built again for every run, the same way)."""

    source: str  # the text the runtime compiled
    tree: Node  # its tree
    costs: tuple[CostModel, ...]
    program: Any
    # what an evaluation converts from Python besides the object itself: the run's
    # constants it reads, params and results when it reads them
    inputs: tuple[str, ...]
    free: frozenset[str]  # every input it reads


@lru_cache(maxsize=1024)
def _build(
    text: str,
    variables: tuple[tuple[str, str], ...],
    hoisted: tuple[tuple[str, int, str], ...],
    constants: tuple[tuple[str, str], ...],
    version: str,
    what: str,
) -> _Built:
    numbers = itertools.count()
    main = _tree(text, what)
    slot_of = dict(constants)
    definitions: dict[str, _Definition] = {}
    names: list[str] = []
    direct: dict[str, Node] = {}
    running: dict[str, Node] = {}  # each variable's tree as it runs (for its cost)
    for name, source in variables:
        label = f"variable {name}"
        tree = _tree(source, label)
        if name in slot_of:
            direct[name] = Ident(slot_of[name])
        elif isinstance(tree.root, Ident) and tree.root.name in ROOTS:
            direct[name] = Ident(tree.root.name)
        tree = _hoisted(tree, hoisted)
        running[name] = tree.root
        definitions[name] = _prepared(tree, names, label, direct, version, numbers)
        names.append(name)
    main = _hoisted(main, hoisted)
    body = _prepared(main, names, what, direct, version, numbers)
    needed = _closure(body.used, definitions)
    costs = (
        _cost_of(main.root, variables),
        *(_cost_of(running[name], variables) for name, _ in variables if name in needed),
    )
    every = list(definitions.values())
    for name in names:  # each variable it reads compiles on its own: an error names it
        if name in needed:
            own = definitions[name]
            _compile_program(
                _bound(own.node, definitions, names, _closure(own.used, definitions)),
                every,
                own,
                version,
            )
    program = _bound(body.node, definitions, names, needed)
    source, compiled = _compile_program(program, [*every, body], body, version)
    free = frozenset(n.name for n in tree_reads.free_names(program))
    # the object and what comes with it (a CREATE's request, its null oldObject: a few
    # values each, made anew per object) are not weighed as shared inputs
    per_object = {"object", "request", "oldObject"}
    return _Built(source, program, costs, compiled, tuple(sorted(free - per_object)), free)


def _int64_safe(value: Any) -> Any:
    """``value`` with integers outside int64 as floats."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else float(value)
    if isinstance(value, dict):
        return {k: _int64_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_int64_safe(v) for v in value]
    return value


class _Opaque:
    """A value the runtime cannot give to Python (an optional): never a boolean."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}>"


class BoolProgram:
    """An expression checked and compiled once, evaluated many times (one call per object).

    Every evaluation is first costed over its input (cost.py); the steps add up over the
    program's life (one probe run), and past ``max_steps`` evaluation is refused. ``meter``:
    share one step count among the programs of one probe (variables, conditions,
    validations).
    """

    def __init__(
        self,
        expression: str,
        *,
        variables: Sequence[tuple[str, str]] = (),
        max_steps: int = MAX_STEPS,
        meter: StepMeter | None = None,
        what: str = "the expression",
        constants: Mapping[str, Any] | None = None,
        slots: Slots | None = None,
    ) -> None:
        self.expression = expression
        self.meter = meter or StepMeter(max_steps)
        self.compiled = Expression(
            expression, variables, what=what, constants=constants, slots=slots
        )

    @property
    def steps(self) -> int:
        return self.meter.steps

    def value(self, variables: Mapping[str, Any], kinds: tuple[str, ...] | None = None) -> Any:
        """The expression's value; CelError on any failure, or when it would cost too much.
        ``kinds``: those wanted, any other given as an opaque value (Expression.evaluate)."""
        self.meter.charge(self.compiled, variables)
        return self.compiled.evaluate(variables, self.meter, kinds)

    def __call__(self, variables: Mapping[str, Any]) -> bool:
        """The expression's boolean value; CelError for anything that is not exactly a bool."""
        value = self.value(variables, kinds=("BOOL",))
        if not isinstance(value, bool):
            kind = type(value).__name__
            raise CelError(f"the expression gave {kind} {value!r:.80}, not a boolean")
        return value


class StepMeter:
    """Cost steps charged over one probe run (cost.py), refused past ``max_steps``."""

    def __init__(self, max_steps: int = MAX_STEPS) -> None:
        self.max_steps = max_steps
        self.steps = 0

    def charge(self, compiled: Expression, data: Mapping[str, Any]) -> None:
        # A run whose steps are spent (an earlier refusal the caller went on from) is refused
        # at its own bound. Estimated against what was left, below zero, the refusal named a
        # bound that applies to nothing ("more than -16,126 steps").
        if self.steps >= self.max_steps:  # any expression costs at least one step more
            raise self._over()
        left = self.max_steps - self.steps
        try:
            self.steps += 1 + compiled.estimate(data, left)
        except CelError as exc:
            if left == self.max_steps:
                raise
            raise CelError(
                f"{exc}; {left:,} of this probe run's {self.max_steps:,} were left"
            ) from None
        if self.steps > self.max_steps:
            raise self._over()

    def _over(self) -> CelError:
        return CelError(
            f"the expression is too costly to run: more than {self.max_steps:,} "
            "evaluation steps in this probe run"
        )


def evaluate_bool(expression: str, variables: Mapping[str, Any]) -> bool:
    """The expression's boolean value; CelError for anything that is not exactly a bool."""
    return BoolProgram(expression)(variables)


def may_give_uint(root: Node) -> bool:
    """A constant crosses into Python and back: a value that would come back as another type
    (a uint as an int) is not taken."""
    for node in walk(root):
        if isinstance(node, Literal) and node.kind == "uint":
            return True
        if isinstance(node, Call) and node.function == "uint":
            return True
        if isinstance(node, Ident) and node.name == "uint":
            return True
    return False


def plain(value: Any) -> bool:
    """A value that comes back from Python as the CEL value it was (a map's keys strings:
    ``{1: 'a', true: 'b'}`` would be one key in Python)."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return True
    if isinstance(value, list):
        return all(plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    return False


def field_paths(expression: str) -> list[str]:
    """Field paths the expression reads (``spec.replicas`` ...), for evidence."""
    return list(_field_paths(expression))


@lru_cache(maxsize=2048)
def _field_paths(expression: str) -> tuple[str, ...]:
    try:
        return tuple(tree_reads.field_paths(parse(expression).root)[:50])
    except CelSyntaxError:
        return ()


def _short(exc: object) -> str:
    return " ".join(str(exc).split())[:300]
