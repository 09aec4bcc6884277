"""A GlobalContextEntry's projections (``spec.projections[].jmesPath``), run as Kyverno runs
them: with the ``jmespath`` library, made to answer as Kyverno's Go JMESPath does.

Kyverno runs a projection over the entry's objects as its informer holds them, where an
integer is a Go ``int64`` and a number the query writes (`` `1` ``) or a function returns
(``length``) is a ``float64``; Go's JMESPath treats only a ``float64`` as a number. So here:

* a written number is a float, an object's integer stays an int (Go's ``int64``);
* ``<``, ``<=``, ``>``, ``>=`` compare two floats only (anything else is null, as in Go);
  ``==`` / ``!=`` compare types too (an object's ``2`` is not the written `` `2` ``);
* a function that takes a number takes a float only (an object's integer is an error, as
  in Go); ``length``, ``abs``, ``ceil``, ``floor``, ``avg`` and ``to_number`` answer floats;
  ``contains`` compares as Go does; ``to_string`` writes JSON as Go's encoder does.

Kyverno adds functions of its own (``to_upper``, ``split``, ``time_since``...) and replaces
``sum``: a projection that calls one, or a function no JMESPath has, is refused
(:func:`problem`), never given a value the library computes differently. So is ``type`` of
an object's integer, and ``to_number`` of a text Go's number parser and Python's read apart.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any

import jmespath
from jmespath import exceptions, functions, visitor

# The standard functions served, as Kyverno has them (it replaces ``sum`` with its own).
SERVED_FUNCTIONS = frozenset(
    {"abs", "avg", "ceil", "contains", "ends_with", "floor", "join", "keys", "length", "map",
     "max", "max_by", "merge", "min", "min_by", "not_null", "reverse", "sort", "sort_by",
     "starts_with", "to_array", "to_number", "to_string", "type", "values"}
)  # fmt: skip
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


MAX_TO_STRING_VALUES = 1_000_000


def values_within(value: Any, limit: int) -> int | None:
    """How many values ``value`` holds when written out (each list, map, key and scalar
    one, a shared part once per place it appears), or None past ``limit``: counted without
    ever walking more than ``limit`` of them."""
    total, todo = 0, [value]
    while todo:
        item = todo.pop()
        total += 1
        if total > limit:
            return None
        if isinstance(item, dict):
            total += len(item)
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return total


class ProjectionError(ValueError):
    """The projection fails, as it would in Kyverno (which then has no value for it), or
    reaches what is not served here."""


def problem(query: str) -> str | None:
    """Why ``query`` cannot be run here as Kyverno runs it, or None."""
    try:
        parsed = _compiled(query)
    except exceptions.JMESPathError as exc:
        return f"its JMESPath {query!r} does not parse ({str(exc).splitlines()[0]})"
    for name in sorted(_function_names(parsed.parsed)):
        if name not in SERVED_FUNCTIONS:
            return (
                f"its JMESPath {query!r} calls {name}(), one of Kyverno's own JMESPath "
                "functions (or of none), which the JMESPath library does not run as Kyverno does"
            )
    return None


def search(query: str, data: Any) -> Any:
    """``query`` over ``data`` as Kyverno's JMESPath answers; ProjectionError when it fails
    (as in Kyverno) or is not served (:func:`problem`)."""
    reason = problem(query)
    if reason:
        raise ProjectionError(reason)
    try:
        return _GoInterpreter().visit(_compiled(query).parsed, data)
    except (
        exceptions.JMESPathError, TypeError, ValueError, KeyError, IndexError, AttributeError,
        RecursionError,
    ) as exc:  # fmt: skip
        raise ProjectionError(f"JMESPath {query!r} failed: {exc}") from None


@lru_cache(maxsize=256)
def _compiled(query: str) -> Any:
    return jmespath.compile(query)


def _function_names(node: Any) -> set[str]:
    found: set[str] = set()
    todo = [node]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            if item.get("type") == "function_expression":
                found.add(str(item.get("value")))
            todo.extend(item.get("children") or [])
    return found


def _is_go_number(value: Any) -> bool:
    return type(value) is float


def _floats(value: Any) -> Any:
    """A written literal as Go decodes it: every number a float."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, list):
        return [_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    return value


def _go_equal(a: Any, b: Any) -> bool:
    """Go's reflect.DeepEqual over decoded JSON: types must agree (int64 is no float64)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_go_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_go_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _go_json(value: Any) -> str:
    """``value`` as Go's encoding/json writes it: keys sorted, ``<>&`` escaped, a float in
    its shortest form (``2`` for 2.0)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ProjectionError("Go's JSON encoder refuses a non-finite number")
        if value != 0 and not 1e-6 <= abs(value) < 1e21:
            raise ProjectionError("a number Go writes in exponent form is not served")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                              ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):  # fmt: skip
            text = text.replace(char, escaped)
        return text
    if isinstance(value, list):
        return "[" + ",".join(_go_json(v) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items())
        return "{" + ",".join(f"{_go_json(str(k))}:{_go_json(v)}" for k, v in items) + "}"
    raise ProjectionError(f"a {type(value).__name__} has no JSON form")


class _GoFunctions(functions.Functions):
    """The standard functions as Go's JMESPath has them (module docstring)."""

    def _get_allowed_pytypes(self, types: Any) -> Any:
        allowed, subtypes = super()._get_allowed_pytypes(types)
        go = ("int", "long")  # an object's integer: Go's int64, which no function takes
        return [t for t in allowed if t not in go], [
            tuple(t for t in sub if t not in go) for sub in subtypes
        ]

    def _convert_to_jmespath_type(self, pyobject: Any) -> Any:
        if pyobject in ("int", "long"):
            return "int64"
        return super()._convert_to_jmespath_type(pyobject)

    @functions.signature({"types": ["number"]})
    def _func_abs(self, arg: float) -> float:
        return float(abs(arg))

    @functions.signature({"types": ["number"]})
    def _func_ceil(self, arg: float) -> float:
        return float(math.ceil(arg))

    @functions.signature({"types": ["number"]})
    def _func_floor(self, arg: float) -> float:
        return float(math.floor(arg))

    @functions.signature({"types": ["string", "array", "object"]})
    def _func_length(self, arg: Any) -> float:
        return float(len(arg))

    @functions.signature({"types": ["array-number"]})
    def _func_avg(self, arg: list[float]) -> float:
        return float(sum(arg)) / len(arg) if arg else math.nan  # Go divides 0 by 0

    @functions.signature({"types": []})
    def _func_to_number(self, arg: Any) -> float | None:
        if isinstance(arg, float):
            return arg
        if isinstance(arg, bool) or arg is None or isinstance(arg, list | dict):
            return None
        if isinstance(arg, str):
            if _DECIMAL.fullmatch(arg):
                number = float(arg)
                return number if math.isfinite(number) else None  # Go: out of range, null
            if arg.strip().lower().lstrip("+-") in ("inf", "infinity", "nan") or "_" in arg:
                raise ProjectionError(f"to_number({arg!r}) is read apart by Go and Python")
            if arg.lower().lstrip("+-").startswith("0x"):
                raise ProjectionError(f"to_number({arg!r}) is read apart by Go and Python")
            return None
        raise ProjectionError("to_number of an object's integer fails in Go")

    @functions.signature({"types": []})
    def _func_type(self, arg: Any) -> str:
        if isinstance(arg, int) and not isinstance(arg, bool):
            raise ProjectionError("type() of an object's integer is not served")
        found: str = super()._func_type(arg)
        return found

    @functions.signature({"types": ["array", "string"]}, {"types": []})
    def _func_contains(self, subject: Any, search: Any) -> bool:
        if isinstance(subject, str):
            return isinstance(search, str) and search in subject
        for item in subject:
            if isinstance(item, list | dict) and type(item) is type(search):
                raise ProjectionError("contains() compares lists or objects, which Go cannot")
            if type(item) is type(search) and item == search:
                return True
        return False

    @functions.signature({"types": []})
    def _func_to_string(self, arg: Any) -> str:
        if isinstance(arg, str):
            return arg
        # a value that repeats itself (``@ | [@, @] | [@, @]``) is small to hold and huge to
        # write: its size is counted first, and a text past the bound is refused
        if values_within(arg, MAX_TO_STRING_VALUES) is None:
            raise ProjectionError(
                f"to_string() would write more than {MAX_TO_STRING_VALUES:,} values"
            )
        return _go_json(arg)


class _GoInterpreter(visitor.TreeInterpreter):
    """The tree interpreter with Go's literals and comparisons (module docstring)."""

    def __init__(self) -> None:
        super().__init__(visitor.Options(custom_functions=_GoFunctions()))

    def visit_literal(self, node: Any, value: Any) -> Any:
        return _floats(node["value"])

    def visit_comparator(self, node: Any, value: Any) -> Any:
        left = self.visit(node["children"][0], value)
        right = self.visit(node["children"][1], value)
        operation = node["value"]
        if operation == "eq":
            return _go_equal(left, right)
        if operation == "ne":
            return not _go_equal(left, right)
        if not (_is_go_number(left) and _is_go_number(right)):
            return None
        return {
            "lt": left < right, "lte": left <= right, "gt": left > right, "gte": left >= right,
        }[operation]  # fmt: skip
