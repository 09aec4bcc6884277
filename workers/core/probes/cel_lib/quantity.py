"""Kubernetes' quantity library (1.28+): ``quantity(s)``, ``isQuantity(s)``, ``sign(q)``, and
on a quantity ``isInteger()``, ``asInteger()`` (an error when it is no integer or overflows
int64), ``asApproximateFloat()``, ``add(q or int)``, ``sub(q or int)``,
``isGreaterThan(q)``, ``isLessThan(q)``, ``compareTo(q)``; ``==`` compares values
(``quantity('1') == quantity('1000m')``). Not in 1.33/1.34: ``mul``, ``div``, ``divInt``.

The grammar is the API server's: a signed decimal number then a binary suffix (Ki Mi Gi Ti
Pi Ei), a decimal suffix (n u m k M G T P E) or a decimal exponent (``1e3``, ``1E-3``).
Values are exact fractions.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from workers.core.probes.cel_lib.base import CelLibraryError, Overload, opaque, unwrap

KIND = "quantity"
INT64_MAX = 2**63 - 1
_GRAMMAR = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse(text: str) -> Fraction:
    match = _GRAMMAR.match(text)
    if not match:
        raise CelLibraryError(f"not a quantity (a number and a suffix, as 500m or 1Gi): {text!r}")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * 1024 ** _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * Fraction(10) ** _DECIMAL[suffix]
    return number * Fraction(10) ** int(suffix[1:])


def _value(number: Fraction) -> dict[str, Any]:
    return opaque(KIND, value=f"{number.numerator}/{number.denominator}")


def _number(value: Any) -> Fraction:
    return Fraction(str(unwrap(value, KIND)["value"]))


def to_quantity(text: str) -> dict[str, Any]:
    return _value(parse(text))


def is_quantity(text: str) -> bool:
    try:
        parse(text)
    except CelLibraryError:
        return False
    return True


def is_integer(value: Any) -> bool:
    number = _number(value)
    return number.denominator == 1 and -INT64_MAX - 1 <= number.numerator <= INT64_MAX


def as_integer(value: Any) -> int:
    if not is_integer(value):
        raise CelLibraryError("cannot convert value to integer")
    return _number(value).numerator


def as_approximate_float(value: Any) -> float:
    """The value as a double; +/-Inf past a double's range, as the API server gives."""
    number = _number(value)
    try:
        return float(number)
    except OverflowError:
        return math.inf if number > 0 else -math.inf


def sign(value: Any) -> int:
    number = _number(value)
    return (number > 0) - (number < 0)


def _operand(other: Any) -> Fraction:
    return Fraction(other) if isinstance(other, int) else _number(other)


def add(value: Any, other: Any) -> dict[str, Any]:
    return _value(_number(value) + _operand(other))


def sub(value: Any, other: Any) -> dict[str, Any]:
    return _value(_number(value) - _operand(other))


def compare_to(value: Any, other: Any) -> int:
    a, b = _number(value), _number(other)
    return (a > b) - (a < b)


def is_greater_than(value: Any, other: Any) -> bool:
    return compare_to(value, other) > 0


def is_less_than(value: Any, other: Any) -> bool:
    return compare_to(value, other) < 0


OVERLOADS = [
    Overload("quantity", "string_to_quantity", ("string",), "map", to_quantity),
    Overload("isQuantity", "is_quantity_string", ("string",), "bool", is_quantity),
    Overload("isInteger", "quantity_is_integer", ("map",), "bool", is_integer, True),
    Overload("asInteger", "quantity_as_integer", ("map",), "int", as_integer, True),
    Overload("asApproximateFloat", "quantity_as_float", ("map",), "double",
             as_approximate_float, True),
    # a global function in Kubernetes (``sign(quantity('-1'))``), though its reference page
    # lists it with the member functions: ``quantity('-1').sign()`` does not compile there
    Overload("sign", "quantity_sign", ("map",), "int", sign),
    Overload("add", "quantity_add", ("map", "map"), "map", add, True),
    Overload("add", "quantity_add_int", ("map", "int"), "map", add, True),
    Overload("sub", "quantity_sub", ("map", "map"), "map", sub, True),
    Overload("sub", "quantity_sub_int", ("map", "int"), "map", sub, True),
    Overload("isGreaterThan", "quantity_is_greater_than", ("map", "map"), "bool",
             is_greater_than, True),
    Overload("isLessThan", "quantity_is_less_than", ("map", "map"), "bool", is_less_than, True),
    Overload("compareTo", "quantity_compare_to", ("map", "map"), "int", compare_to, True),
]  # fmt: skip
