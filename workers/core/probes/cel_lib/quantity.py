"""Kubernetes' quantity library (1.28+): ``quantity(s)``, ``isQuantity(s)``, and on a
quantity ``isInteger()``, ``asInteger()`` (an error when it is no integer or overflows
int64), ``asApproximateFloat()``, ``sign()``, ``add(q or int)``, ``sub(q or int)``,
``isGreaterThan(q)``, ``isLessThan(q)``, ``compareTo(q)``; ``==`` compares values
(``quantity('1') == quantity('1000m')``).

The grammar is the API server's: a signed decimal number then a binary suffix (Ki Mi Gi Ti
Pi Ei), a decimal suffix (n u m k M G T P E) or a decimal exponent (``1e3``, ``1E-3``).
Values are exact fractions, bounded as the API server bounds a parsed quantity: a magnitude
past the largest int64 is capped there, and a non-zero one below 1n is rounded up to 1n
(away from zero). So the text a cluster holds (``1e999999999``) costs no more to parse than
its length: the exponent is never raised to before it is known to matter.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from workers.core.probes.cel_lib.base import CelLibraryError, Overload, opaque, unwrap

KIND = "quantity"
INT64_MAX = 2**63 - 1
NANO = Fraction(1, 10**9)
_EXPONENT_DIGITS = 18  # the API server reads an exponent as an int64: more digits do not parse
_VALUE = re.compile(r"^(-?[0-9]+)/([0-9]+)$")
_GRAMMAR = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse(text: str) -> Fraction:
    match = _GRAMMAR.match(text)
    if not match:
        raise CelLibraryError(f"not a quantity (a number and a suffix, as 500m or 1Gi): {text!r}")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if number == 0:
        return Fraction(0)
    if suffix in _BINARY:
        magnitude = abs(number) * 1024 ** _BINARY[suffix]
    else:
        exponent = _DECIMAL[suffix] if suffix in _DECIMAL else _exponent(text, suffix[1:])
        magnitude = _scaled(abs(number), exponent)
    magnitude = min(Fraction(math.ceil(magnitude / NANO)) * NANO, Fraction(INT64_MAX))
    return magnitude if number > 0 else -magnitude


def _exponent(text: str, digits: str) -> int:
    sign = -1 if digits.startswith("-") else 1
    digits = digits.lstrip("+-").lstrip("0") or "0"
    if len(digits) > _EXPONENT_DIGITS:
        raise CelLibraryError(f"not a quantity (its exponent is out of range): {text!r}")
    return sign * int(digits)


def _scaled(magnitude: Fraction, exponent: int) -> Fraction:
    """``magnitude * 10**exponent``, computed only when it lies between 1n and the cap: the
    numerator and denominator have fewer digits than the text, so an exponent far past them
    settles the result (the cap, or 1n) without raising 10 to it."""
    if exponent - len(str(magnitude.denominator)) > 19:
        return Fraction(INT64_MAX)  # at least 10**19: capped
    if exponent + len(str(magnitude.numerator)) < -9:
        return NANO  # below 1n: rounded up to it
    return magnitude * Fraction(10) ** exponent


def _value(number: Fraction) -> dict[str, Any]:
    return opaque(KIND, value=f"{number.numerator}/{number.denominator}")


def _number(value: Any) -> Fraction:
    """A quantity's value, from the ``n/d`` text it travels as (never ``Fraction``'s own
    parsing of any text: a map in an object that merely looks like a quantity could hold
    ``1e999999999``)."""
    match = _VALUE.match(str(unwrap(value, KIND)["value"]))
    if not match:
        raise CelLibraryError("no such overload: not a quantity")
    return Fraction(int(match.group(1)), int(match.group(2)) or 1)


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
    return float(_number(value))


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
    Overload("sign", "quantity_sign", ("map",), "int", sign, True),
    Overload("add", "quantity_add", ("map", "map"), "map", add, True),
    Overload("add", "quantity_add_int", ("map", "int"), "map", add, True),
    Overload("sub", "quantity_sub", ("map", "map"), "map", sub, True),
    Overload("sub", "quantity_sub_int", ("map", "int"), "map", sub, True),
    Overload("isGreaterThan", "quantity_is_greater_than", ("map", "map"), "bool",
             is_greater_than, True),
    Overload("isLessThan", "quantity_is_less_than", ("map", "map"), "bool", is_less_than, True),
    Overload("compareTo", "quantity_compare_to", ("map", "map"), "int", compare_to, True),
]  # fmt: skip
