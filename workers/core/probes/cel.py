"""The one adapter to the CEL library (``common-expression-language``, Rust-backed).

Nothing else imports the library, so swapping it (for the official ``cel-expr-python``
once its iteration budget can be raised; docs/probes.md has the comparison) touches
this file only.

The contract is fail-safe: :func:`evaluate_bool` returns a ``bool`` or raises
:class:`CelError` - a parse error, a missing field, a type mismatch, a division by
zero, a value that is not a boolean, an expression over the cost bound (cost.py: the library
has no limit of its own and cannot be interrupted). Callers treat every ``CelError`` as "the probe
could not run", which never yields ``true``.

Objects are passed as plain JSON-like values (dicts, lists, str, int, float, bool,
None), the shapes the Kubernetes API returns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import cel

from workers.core.probes.cost import MAX_STEPS, CelCostError, CostModel, analyse

MAX_EXPRESSION_CHARS = 4000
# The documented subset: words a probe expression may call or use as a macro.
SUPPORTED_FUNCTIONS = frozenset(
    {
        "all",
        "exists",
        "exists_one",
        "map",
        "filter",
        "has",
        "size",
        "startsWith",
        "endsWith",
        "contains",
        "matches",
        "int",
        "uint",
        "double",
        "string",
        "type",
        "timestamp",
        "duration",
        "dyn",
    }
)
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_FIELD_PATH = re.compile(r"\b(?:object|results\[\d+\]|[a-z]\w*)((?:\.[A-Za-z_]\w*)+)")
_BOUND_VARIABLE = re.compile(r"\b(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")


class CelError(ValueError):
    """The expression could not be compiled or evaluated to a boolean."""


def _without_strings(expression: str) -> str:
    return _STRING.sub("''", expression)


def unsupported_calls(expression: str) -> list[str]:
    """Functions the expression calls that are outside the documented subset."""
    names = {m.group(1) for m in re.finditer(r"([A-Za-z_]\w*)\s*\(", _without_strings(expression))}
    return sorted(names - SUPPORTED_FUNCTIONS)


@lru_cache(maxsize=256)
def _compiled(expression: str) -> Any:
    return cel.compile(expression)


def compile_expression(expression: str) -> Any:
    """A compiled program; CelError when it is too long, calls outside the subset, or fails."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CelError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    unknown = unsupported_calls(expression)
    if unknown:
        raise CelError(f"functions outside the supported subset: {', '.join(unknown)}")
    cost_model(expression)
    try:
        return _compiled(expression)
    except Exception as exc:
        raise CelError(f"the expression does not compile: {_short(exc)}") from None


def cost_model(expression: str) -> CostModel:
    """The expression's loop skeleton; CelError when its shape is over the static cost bounds."""
    try:
        return analyse(expression)
    except CelCostError as exc:
        raise CelError(f"the expression is too costly to run: {exc}") from None


class BoolProgram:
    """An expression checked and compiled once, evaluated many times (one call per object).

    Every evaluation is first costed over its input (cost.py); the steps add up over the
    program's life (one probe run), and past ``max_steps`` evaluation is refused.
    """

    def __init__(self, expression: str, *, max_steps: int = MAX_STEPS) -> None:
        self.expression = expression
        self.max_steps = max_steps
        self.steps = 0
        self._cost = cost_model(expression)
        self._program = compile_expression(expression)

    def _charge(self, variables: Mapping[str, Any]) -> None:
        try:
            self.steps += 1 + self._cost.estimate(variables, self.max_steps - self.steps)
        except CelCostError as exc:
            raise CelError(f"the expression is too costly to run: {exc}") from None
        if self.steps > self.max_steps:
            raise CelError(
                f"the expression is too costly to run: more than {self.max_steps:,} "
                "evaluation steps in this probe run"
            )

    def value(self, variables: Mapping[str, Any]) -> Any:
        """The expression's value; CelError on any failure, or when it would cost too much."""
        self._charge(variables)
        try:
            return self._program.execute(dict(variables))
        except Exception as exc:
            kind = type(exc).__name__
            raise CelError(f"the expression failed: {kind}: {_short(exc)}") from None

    def __call__(self, variables: Mapping[str, Any]) -> bool:
        """The expression's boolean value; CelError for anything that is not exactly a bool."""
        value = self.value(variables)
        if not isinstance(value, bool):
            kind = type(value).__name__
            raise CelError(f"the expression gave {kind} {value!r:.80}, not a boolean")
        return value


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """The expression's value; CelError on any failure."""
    return BoolProgram(expression).value(variables)


def evaluate_bool(expression: str, variables: Mapping[str, Any]) -> bool:
    """The expression's boolean value; CelError for anything that is not exactly a bool."""
    return BoolProgram(expression)(variables)


def reads_variable(expression: str, name: str) -> bool:
    """Whether ``expression`` reads the input variable ``name`` (``results`` or ``object``).

    An expression that never names it (``true``, ``1 == 1``, ``size([]) == 0``), or
    rebinds the name as a comprehension variable (``[1].all(results, results == 1)``),
    has a value that cannot depend on the cluster. A field of that name (``x.results``)
    is not the variable. Best effort: a tautology over the input
    (``size(results) >= 0``) still reads it.
    """
    code = _without_strings(expression)
    if any(match.group(1) == name for match in _BOUND_VARIABLE.finditer(code)):
        return False
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", code) is not None


def field_paths(expression: str) -> list[str]:
    """Field paths the expression reads (``.spec.replicas`` ...), for evidence; best effort."""
    seen: dict[str, None] = {}
    for match in _FIELD_PATH.finditer(_without_strings(expression)):
        path = match.group(1).lstrip(".")
        for call in SUPPORTED_FUNCTIONS:
            if path.endswith("." + call):
                path = path[: -len(call) - 1]
        if path:
            seen.setdefault(path, None)
    return list(seen)[:50]


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]
