"""Kubernetes' quantity library (1.28+): ``quantity(s)``, ``isQuantity(s)``, ``sign(q)``, and
on a quantity ``isInteger()``, ``asInteger()`` (an error when it is no integer or overflows
int64), ``asApproximateFloat()``, ``add(q or int)``, ``sub(q or int)``,
``isGreaterThan(q)``, ``isLessThan(q)``, ``compareTo(q)``; ``==`` compares values
(``quantity('1') == quantity('1000m')``). Not in 1.33/1.34: ``mul``, ``div``, ``divInt``.

The grammar is the API server's: a signed decimal number then a binary suffix (Ki Mi Gi Ti
Pi Ei), a decimal suffix (n u m k M G T P E) or a decimal exponent (``1e3``, ``1E-3``).
Values are exact fractions, rounded as the API server's ``ParseQuantity`` rounds them: a
non-zero magnitude below 1n is rounded up to 1n (away from zero), a binary one past the
largest int64 is capped there, and an exponent is read as Go reads it (an int64, then cut to
int32). The API server keeps a decimal quantity of any size exactly (``1e999999999`` is ten
to that power); here one of :data:`MAX_DIGITS` digits or more is an error (never another
value), and the exponent is never raised to before it is known to fit: the text a cluster
holds costs no more to parse than its length.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from workers.policy_engine.cel.lib.base import CelLibraryError, Overload, opaque, unwrap

KIND = "quantity"
INT64_MAX = 2**63 - 1
NANO = Fraction(1, 10**9)
# The largest quantity here has fewer digits (the API server's have no bound): far past any
# resource, and far below Python's 4,300-digit limit on converting integers from text.
MAX_DIGITS = 1000
_LIMIT = Fraction(10**MAX_DIGITS)
_VALUE = re.compile(rf"^(-?[0-9]{{1,{MAX_DIGITS + 20}}})/([0-9]{{1,{MAX_DIGITS + 20}}})$")
_GRAMMAR = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


class OutOfRange(CelLibraryError):
    """A quantity the API server holds but this library does not (:data:`MAX_DIGITS`)."""


def _parts(text: str) -> tuple[str, str]:
    """The number and the suffix of a quantity's text; CelLibraryError when it is none (as
    the API server's, an exponent that is no int64 included)."""
    match = _GRAMMAR.match(text)
    if not match:
        raise CelLibraryError(f"not a quantity (a number and a suffix, as 500m or 1Gi): {text!r}")
    suffix = match.group(2) or ""
    if suffix not in _BINARY and suffix not in _DECIMAL:  # an exponent
        digits = suffix[1:].lstrip("+-").lstrip("0")
        if len(digits) > 19 or abs(int(digits or "0")) > INT64_MAX + suffix.startswith("-", 1):
            raise CelLibraryError(f"not a quantity (its exponent is out of range): {text!r}")
    return match.group(1), suffix


def _exponent(suffix: str) -> int:
    """A decimal exponent as the API server takes it: parsed as an int64, cut to int32."""
    value = int(suffix[1:])
    return (value + 2**31) % 2**32 - 2**31


def parse(text: str) -> Fraction:
    number_text, suffix = _parts(text)
    if len(number_text.lstrip("+-").lstrip("0").replace(".", "")) > MAX_DIGITS:
        raise _out_of_range(text)
    number = Fraction(number_text)
    if number == 0:
        return Fraction(0)
    if suffix in _BINARY:
        magnitude = min(_rounded(abs(number) * 1024 ** _BINARY[suffix]), Fraction(INT64_MAX))
    else:
        exponent = _DECIMAL[suffix] if suffix in _DECIMAL else _exponent(suffix)
        magnitude = _rounded(_scaled(abs(number), exponent, text))
    return magnitude if number > 0 else -magnitude


def _rounded(magnitude: Fraction) -> Fraction:
    """Rounded up to a whole number of nanos (a non-zero value is at least 1n)."""
    return Fraction(math.ceil(magnitude / NANO)) * NANO


def _scaled(magnitude: Fraction, exponent: int, text: str) -> Fraction:
    """``magnitude * 10**exponent``, computed only when it lies between 1n and the limit:
    the numerator and denominator have no more digits than the text, so an exponent far
    past them settles the result (1n, or out of range) without raising 10 to it."""
    if exponent - len(str(magnitude.denominator)) >= MAX_DIGITS:
        raise _out_of_range(text)
    if exponent + len(str(magnitude.numerator)) < -9:
        return NANO  # below 1n: rounded up to it
    scaled = magnitude * Fraction(10) ** exponent
    if scaled >= _LIMIT:
        raise _out_of_range(text)
    return scaled


def _out_of_range(text: str) -> OutOfRange:
    shown = text if len(text) <= 40 else text[:40] + "..."
    return OutOfRange(f"quantity {shown!r} has {MAX_DIGITS} digits or more (supported: fewer)")


def _value(number: Fraction) -> dict[str, Any]:
    if abs(number) >= _LIMIT:
        raise OutOfRange(f"a quantity of {MAX_DIGITS} digits or more (supported: fewer)")
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
    """Whether the API server would parse ``text`` (its value is not computed)."""
    try:
        _parts(text)
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
    Overload("quantity", "string_to_quantity", ("string",), KIND, to_quantity),
    Overload("isQuantity", "is_quantity_string", ("string",), "bool", is_quantity),
    Overload("isInteger", "quantity_is_integer", (KIND,), "bool", is_integer, True),
    Overload("asInteger", "quantity_as_integer", (KIND,), "int", as_integer, True),
    Overload("asApproximateFloat", "quantity_as_float", (KIND,), "double",
             as_approximate_float, True),
    # a global function in Kubernetes (``sign(quantity('-1'))``), though its reference page
    # lists it with the member functions: ``quantity('-1').sign()`` does not compile there
    Overload("sign", "quantity_sign", (KIND,), "int", sign),
    Overload("add", "quantity_add", (KIND, KIND), KIND, add, True),
    Overload("add", "quantity_add_int", (KIND, "int"), KIND, add, True),
    Overload("sub", "quantity_sub", (KIND, KIND), KIND, sub, True),
    Overload("sub", "quantity_sub_int", (KIND, "int"), KIND, sub, True),
    Overload("isGreaterThan", "quantity_is_greater_than", (KIND, KIND), "bool",
             is_greater_than, True),
    Overload("isLessThan", "quantity_is_less_than", (KIND, KIND), "bool", is_less_than, True),
    Overload("compareTo", "quantity_compare_to", (KIND, KIND), "int", compare_to, True),
]  # fmt: skip
