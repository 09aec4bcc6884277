"""The one adapter to the CEL runtime (``cel-expr-python``, the official bindings of cel-cpp).

Nothing else imports the runtime. It is set up as the environment a Kubernetes
ValidatingAdmissionPolicy is evaluated in (cel_env.py: Kubernetes 1.33 and 1.34,
docs/probes.md), library by library: the runtime's own extensions where they behave as
Kubernetes' (optional types, cel-go's strings version 2, sets, two-variable
comprehensions), Kubernetes' libraries the runtime lacks written in Python in ``cel_lib/``
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

import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from cel_expr_python import cel as runtime

from workers.core.probes import cel_env
from workers.core.probes.cel_env import KUBERNETES_VERSIONS, PROBE_VERSION
from workers.core.probes.cel_lib import Call, NoSuchOverload, Overload, rewrite_calls
from workers.core.probes.cel_lib import overloads as library_overloads
from workers.core.probes.cel_lib import rewrites as library_rewrites
from workers.core.probes.cel_lib.base import charge, metered
from workers.core.probes.cel_lib.rewrite import computed_presence, optional_fallbacks
from workers.core.probes.cost import MAX_STEPS, CelCostError, CostModel, analyse

__all__ = ["KUBERNETES_VERSIONS", "PROBE_VERSION", "BoolProgram", "CelError", "Expression",
           "StepMeter", "compile_expression", "evaluate", "evaluate_bool", "field_paths",
           "reads_variable", "unsupported_calls"]  # fmt: skip
MAX_EXPRESSION_CHARS = 4000
# The runtime stops any evaluation after this many comprehension iterations (fixed in the
# bindings); an expression that reaches it cannot run (fail-safe), like one over the cost bound.
RUNTIME_ITERATION_BUDGET = 10_000
ROOTS = ("object", "results", "params")
# Where the values of a probe's constant variables are bound (Expression's ``constants``).
CONSTANTS = "assay_constants"
_VARIABLE_PREFIX = "assay_variable_"
# What a presence test may meet null or a scalar in (cel-go: false, the runtime: an error):
# a probe variable (bound, or a constant), or params' contents.
_COMPUTED_ROOTS = rf"{_VARIABLE_PREFIX}\w+|{CONSTANTS}\s*\.\s*\w+|params\s*\.\s*\w+"
_MODULES = tuple(p.module for p in cel_env.parts(max(KUBERNETES_VERSIONS)) if p.module)
# Words of the standard definitions, macros and the runtime's extensions, to tell a function
# call from a field in field_paths (evidence).
SUPPORTED_FUNCTIONS = frozenset(
    {"all", "exists", "exists_one", "existsOne", "map", "filter", "has", "size", "startsWith",
     "endsWith", "contains", "matches", "int", "uint", "double", "string", "bytes", "bool",
     "type", "timestamp", "duration", "dyn", "orValue", "hasValue", "value", "or", "optMap",
     "optFlatMap", "first", "last", "transformList", "transformMap", "transformMapEntry",
     "charAt", "indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "replace", "split",
     "substring", "trim", "join", "format", "distinct", "flatten", "reverse", "slice", "sort",
     "sortBy"}
    | {overload.function for overload in library_overloads(_MODULES)}
)  # fmt: skip
# Kubernetes' environment has no cel.bind: a probe may not call it (variables are the way);
# assay_* names are the adapter's own (variables, rewritten calls).
_REFUSED = re.compile(r"(?<![\w.])cel\s*\.\s*bind\s*\(|(?<!\w)assay_\w*")
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_STRING_OR_VARIABLE = re.compile(
    r"(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?<![\w.])variables\s*\.\s*(?P<name>[A-Za-z_]\w*)"
)
_FIELD_PATH = re.compile(r"\b(?:object|results\[\d+\]|[a-z]\w*)((?:\??\.[A-Za-z_]\w*)+)")
_BOUND_VARIABLE = re.compile(
    r"\b(?:all|exists|exists_one|existsOne|map|filter|transformList|transformMap"
    r"|transformMapEntry|optMap|optFlatMap|sortBy)\s*\(\s*([A-Za-z_]\w*)\s*,"
    r"(?:\s*([A-Za-z_]\w*)\s*,)?"
)
_CONCRETE = ("int", "uint", "double", "string", "bool", "bytes", "list", "map",
             "timestamp", "duration")  # fmt: skip


class CelError(ValueError):
    """The expression could not be compiled or evaluated to a boolean."""


def _type(kind: str) -> Any:
    types = runtime.Type
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
        return impl(*args)

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
    return _YAML_TYPE.get(kind, f"{{type_name: {kind}}}")


def _standard_yaml(added: Sequence[Overload]) -> tuple[list[str], list[str]]:
    """Declarations (YAML) of the standard functions ``added`` overloads, and their names."""
    names = sorted({overload.function for overload in added})
    lines: list[str] = []
    for name in names:
        lines += [f'  - name: "{name}"', "    overloads:"]
        for kind, ident in _STANDARD_OVERLOADS[name]:
            lines += [f"      - id: {ident}", f"        args: [{_yaml_type(kind)}]",
                      f"        return: {_yaml_type('string')}"]  # fmt: skip
        for (function, params), same in _by_signature(added).items():
            if function == name:
                args = ", ".join(_yaml_type(kind) for kind in params)
                lines += [f"      - id: {same[0].id}", f"        args: [{args}]",
                          f"        return: {_yaml_type(same[0].result)}"]  # fmt: skip
    return lines, names


def _by_signature(added: Sequence[Overload]) -> dict[tuple[str, tuple[str, ...]], list[Overload]]:
    """Overloads by function and parameters: one declaration each (the runtime refuses two
    of one signature), ``string`` of an IP and of a CIDR sharing one."""
    grouped: dict[tuple[str, tuple[str, ...]], list[Overload]] = defaultdict(list)
    for overload in added:
        grouped[(overload.function, overload.params)].append(overload)
    return grouped


def _split(overloads: Sequence[Overload]) -> tuple[list[Overload], list[Overload]]:
    """Library overloads of new functions, and those added to standard functions."""
    added = [o for o in overloads if o.function in _STANDARD_OVERLOADS]
    return [o for o in overloads if o.function not in _STANDARD_OVERLOADS], added


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
    _, added = _split(library_overloads([p.module for p in parts if p.module]))
    standard, names = _standard_yaml(added)
    excluded += names
    functions += standard
    if excluded:
        lines += ["stdlib:", "  exclude_functions:"]
        lines += [f'    - name: "{name}"' for name in excluded]
        lines += ["functions:", *functions]
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=len(KUBERNETES_VERSIONS))
def _environment(version: str) -> Any:
    modules = [part.module for part in cel_env.parts(version) if part.module]
    new, added = _split(library_overloads(modules))
    return runtime.NewEnv(
        config=runtime.NewEnvConfigFromYaml(environment_config(version)),
        variables={root: runtime.Type.DYN for root in (*ROOTS, CONSTANTS)},
        # one extension, merged with the runtime's own (lists' indexOf with strings' indexOf)
        extensions=[runtime.CelExtension("kubernetes", _declarations(new))],
        function_impls=_implementations(added),
    )


def _implementations(added: Sequence[Overload]) -> dict[str, Callable[..., Any]]:
    """The Python implementation of each overload added to a standard function, by id; one
    signature shared by two libraries (``string`` of an IP and of a CIDR) dispatches."""
    return {same[0].id: _dispatcher([_costed(o) for o in same])
            for same in _by_signature(added).values()}  # fmt: skip


@lru_cache(maxsize=len(KUBERNETES_VERSIONS))
def _rewrites(version: str) -> tuple[Call, ...]:
    return tuple(library_rewrites([p.module for p in cel_env.parts(version) if p.module]))


@lru_cache(maxsize=512)
def _compiled(source: str, version: str = PROBE_VERSION) -> Any:
    try:
        rewritten = rewrite_calls(source, _rewrites(version))
        rewritten = optional_fallbacks(computed_presence(rewritten, _COMPUTED_ROOTS))
        return _environment(version).compile(rewritten)
    except Exception as exc:
        raise CelError(f"the expression does not compile: {_short(exc)}") from None


def _without_strings(expression: str) -> str:
    return _STRING.sub("''", expression)


def unsupported_calls(expression: str) -> list[str]:
    """What the expression uses that Kubernetes' environment does not have (``cel.bind``)
    or that is reserved for the adapter (``assay_*`` names)."""
    return sorted({m.group(0).split("(")[0].strip() for m in _REFUSED.finditer(
        _without_strings(expression))})  # fmt: skip


def _check_text(expression: str, what: str) -> None:
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CelError(f"{what} is longer than {MAX_EXPRESSION_CHARS} characters")
    refused = unsupported_calls(expression)
    if refused:
        raise CelError(
            f"{what} uses what Kubernetes' CEL environment does not have: {', '.join(refused)}"
        )


# `has(variables.NAME)`: the API server's `variables` is a map of the declared variables
# (k8s.io/apiserver/pkg/cel/lazy): present when declared, the variable evaluated (its error
# is the test's). `has(e.f)` on a computed value that is null or a scalar: rewrite.py's
# computed_presence, on the compiled source.
_HAS_VARIABLE = re.compile(r"^variables\s*\.\s*([A-Za-z_]\w*)$")


def _has(args: list[str]) -> str:
    operand = args[0].strip()
    if _HAS_VARIABLE.match(operand):
        return f"(size([{operand}]) == 1)"
    return f"has({operand})"


_HAS_CALLS = (Call("has", member=False, rewrite=_has, arities=(1,)),)


@lru_cache(maxsize=2048)
def _presence_tests(expression: str) -> str:
    """``expression`` with ``has(variables.NAME)`` rewritten (:func:`_has`)."""
    return rewrite_calls(expression, _HAS_CALLS)


def _rewrite(
    expression: str, known: Sequence[str], what: str, direct: Mapping[str, str] | None = None
) -> tuple[str, list[str]]:
    """``expression`` with each ``variables.NAME`` read as the bound name, and the names
    (``has()`` of a variable, or of a field of a computed value, as the API server tests
    it: above). ``direct``: variables read as another text (a constant's entry, an input
    the variable is an alias of), bound nowhere."""
    used: list[str] = []
    direct = direct or {}
    if "has" in expression:
        expression = _presence_tests(expression)

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name is None:
            return match.group(0)
        if name not in known:
            raise CelError(
                f"{what} reads variables.{name}, which is not defined before it (a variable "
                "may read only the variables listed before it)"
            )
        if name in direct:
            return direct[name]
        if name not in used:
            used.append(name)
        return _VARIABLE_PREFIX + name

    return _STRING_OR_VARIABLE.sub(replace, expression), used


def cost_model(expression: str, variables: Sequence[tuple[str, str]] = ()) -> CostModel:
    """The expression's loop skeleton; CelError when its shape is over the static cost bounds.
    ``variables``: the probe's, to bound a ``sets`` argument or a range read from one."""
    return _cost_model(expression, tuple(variables))


@lru_cache(maxsize=1024)
def _cost_model(expression: str, variables: tuple[tuple[str, str], ...]) -> CostModel:
    """Cached: a probe's expressions are costed with the same variables every time it is
    compiled (the model is only read by its estimates)."""
    try:
        return analyse(expression, dict(variables))
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
    ) -> None:
        self.text = text
        self.version = version
        self.constants = dict(constants or {})
        _check_text(text, what)
        definitions: dict[str, tuple[str, list[str]]] = {}
        names: list[str] = []
        direct: dict[str, str] = {}
        for name, source in variables:
            label = f"variable {name}"
            _check_text(source, label)
            if name in self.constants:
                direct[name] = f"{CONSTANTS}.{name}"
            elif source.strip() in ROOTS:
                direct[name] = source.strip()
            definitions[name] = _rewrite(source, names, label, direct)
            names.append(name)
        body, used = _rewrite(text, names, what, direct)
        needed = _closure(used, definitions)
        self.costs = [cost_model(text, variables)] + [
            cost_model(source, variables) for name, source in variables if name in needed
        ]
        for name in needed:  # each variable it reads compiles on its own: an error names it
            own = _bound(definitions[name][0], definitions, names, name)
            _compiled_as(own, f"variable {name}", version)
        self.source = _bound(body, definitions, names, None, needed)
        self._program = _compiled_as(self.source, what, version)

    def reads(self, name: str) -> bool:
        """Whether the expression (with its variables) reads the input ``name``."""
        return reads_variable(self.source, name)

    def estimate(self, data: Mapping[str, Any], limit: int) -> int:
        if self.constants:  # measured as they are, as the input is
            data = {**data, "variables": self.constants}
        try:
            return sum(cost.estimate(data, limit) for cost in self.costs)
        except CelCostError as exc:
            raise CelError(f"the expression is too costly to run: {exc}") from None

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
        if self.constants:
            data = {**data, CONSTANTS: self.constants}
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
        if kinds is not None and kind not in kinds:
            return _Opaque(kind)
        try:
            return result.plain_value()
        except Exception:
            return _Opaque(kind)


_OPTIONAL = "<optional>"


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


def _closure(used: Sequence[str], definitions: Mapping[str, tuple[str, list[str]]]) -> set[str]:
    """The variables ``used`` and, transitively, those they read."""
    needed: set[str] = set()
    todo = list(used)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(definitions[name][1])
    return needed


def _bound(
    body: str,
    definitions: Mapping[str, tuple[str, list[str]]],
    order: Sequence[str],
    own: str | None,
    needed: set[str] | None = None,
) -> str:
    """``body`` inside ``cel.bind`` of each variable it needs (lazily initialised by the
    runtime), outermost first in declaration order."""
    if needed is None:
        needed = _closure(definitions[own][1] if own else [], definitions)
    source = body
    for name in reversed([n for n in order if n in needed]):
        source = f"cel.bind({_VARIABLE_PREFIX}{name}, ({definitions[name][0]}), {source})"
    return source


def _compiled_as(source: str, what: str, version: str = PROBE_VERSION) -> Any:
    try:
        return _compiled(source, version)
    except CelError as exc:
        raise CelError(str(exc).replace("the expression", what, 1)) from None


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


def compile_expression(expression: str, variables: Sequence[tuple[str, str]] = ()) -> Any:
    """A compiled expression; CelError when it is too long, refused, or fails to compile."""
    return Expression(expression, variables)


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
    ) -> None:
        self.expression = expression
        self.meter = meter or StepMeter(max_steps)
        self.compiled = Expression(expression, variables, what=what, constants=constants)

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


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """The expression's value; CelError on any failure."""
    return BoolProgram(expression).value(variables)


def evaluate_bool(expression: str, variables: Mapping[str, Any]) -> bool:
    """The expression's boolean value; CelError for anything that is not exactly a bool."""
    return BoolProgram(expression)(variables)


def _variable_reads(expression: str) -> list[str]:
    """The probe variables ``expression`` reads (``variables.NAME``), once per read."""
    return [m.group("name") for m in _STRING_OR_VARIABLE.finditer(expression) if m.group("name")]


# What a variable may read and still be a constant of the probe run: nothing of the objects.
_OBJECT_INPUTS = ("object", "results", "oldObject", "request", "namespaceObject", "authorizer")
# A constant crosses into Python and back: a value that would come back as another type
# (a uint as an int, a type) is not taken.
_UINT = re.compile(r"\buint\b|\b\d+[uU]\b")
# A constant is brought into Python whole, and measured and bound again per object: one that
# holds the constants before it more than this many times (their text inlined) may be
# exponentially large (``[variables.a, variables.a]`` in a chain) and stays lazy, where the
# runtime shares the copies.
MAX_CONSTANT_COPIES = 64


def constant_variables(
    variables: Sequence[tuple[str, str]], data: Mapping[str, Any], meter: StepMeter
) -> dict[str, Any]:
    """The variables whose value is the same for every object of a probe run, evaluated
    once over ``data`` (``params``, when bound): those that read no object, only the inputs
    in ``data`` and constants before them. A variable is a deterministic function of what it
    reads, so its value read lazily per object would be this one; one that errs, gives an
    optional, or might change type on the way back stays lazy (bound, evaluated where read).

    Why: Gatekeeper's templates define a dozen variables from ``params``; bound around
    every expression, they exceeded the runtime's parser nesting of 32, and they were
    evaluated again for every object."""
    constants: dict[str, Any] = {}
    earlier: list[tuple[str, str]] = []
    copies: dict[str, int] = {}
    for name, source in variables:
        text = _without_strings(source)
        occurrences = _variable_reads(source)
        copies[name] = min(1 + sum(copies.get(other, 1) for other in occurrences), 2**62)
        lazy = (
            any(reads_variable(text, root) for root in _OBJECT_INPUTS)
            or not set(occurrences) <= set(constants)
            or _UINT.search(text) is not None
            or copies[name] > MAX_CONSTANT_COPIES
        )
        if not lazy:
            try:
                program = BoolProgram(
                    source, variables=earlier, meter=meter, what=f"variable {name}",
                    constants=constants,
                )  # fmt: skip
                value = program.value(data)
            except CelError:
                value = _Opaque("ERROR")
            if _plain(value):
                constants[name] = value
        earlier.append((name, source))
    return constants


def _plain(value: Any) -> bool:
    """A value that comes back from Python as the CEL value it was."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return True
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    return False


def reads_variable(expression: str, name: str) -> bool:
    """Whether ``expression`` reads the input variable ``name`` (``results`` or ``object``).

    An expression that never names it (``true``, ``1 == 1``, ``size([]) == 0``), or
    rebinds the name as a comprehension variable (``[1].all(results, results == 1)``),
    has a value that cannot depend on the cluster. A field of that name (``x.results``)
    is not the variable. Best effort: a tautology over the input
    (``size(results) >= 0``) still reads it.
    """
    code = _without_strings(expression)
    if any(name in match.groups() for match in _BOUND_VARIABLE.finditer(code)):
        return False
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", code) is not None


def field_paths(expression: str) -> list[str]:
    """Field paths the expression reads (``.spec.replicas`` ...), for evidence; best effort."""
    seen: dict[str, None] = {}
    for match in _FIELD_PATH.finditer(_without_strings(expression)):
        path = match.group(1).replace("?.", ".").lstrip(".")
        for call in SUPPORTED_FUNCTIONS:
            if path.endswith("." + call):
                path = path[: -len(call) - 1]
        if path:
            seen.setdefault(path, None)
    return list(seen)[:50]


def _short(exc: object) -> str:
    return " ".join(str(exc).split())[:300]
