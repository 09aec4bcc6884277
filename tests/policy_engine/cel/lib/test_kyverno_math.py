"""Kyverno's math library (``math.round(double, int)``): rounding to decimal places as
Kyverno computes it (Go's ``math.Pow`` and ``math.Round``, halves away from zero); only
inside a Kyverno ValidatingPolicy."""

from __future__ import annotations

import math

import pytest

from tests.policy_engine.cel.lib.kyverno_support import (
    in_kyverno_policy,
    kyverno_value,
)
from tests.policy_engine.cel.lib.support import fails, value
from workers.policy_engine.cel.lib.kyverno_math import go_pow10, go_round

CASES = [
    ("math.round(3.14159, 3)", 3.142),
    ("math.round(2.675, 1)", 2.7),
    ("math.round(0.5, 0)", 1.0),  # a half goes away from zero
    ("math.round(-0.5, 0)", -1.0),
    ("math.round(-7.25, 1)", -7.3),
    ("math.round(98765.4321, -3)", 99000.0),  # a negative precision rounds to thousands
    ("math.round(4.0, 2)", 4.0),
    # the double of the steps Kyverno takes (x * 10^5, rounded, / 10^5), not x itself
    ("math.round(1.0e300, 5)", 1.0000000000000002e300),
]


@pytest.mark.parametrize(("expression", "expected"), CASES)
def test_round_gives_kyverno_s_double(expression: str, expected: float) -> None:
    assert kyverno_value(expression) == expected


def test_a_precision_past_a_double_gives_nan_as_in_kyverno() -> None:
    """10^400 overflows to infinity in Go too: round(x * inf) / inf is NaN, never x."""
    with in_kyverno_policy():
        assert math.isnan(value("math.round(2.5, 400)"))
        assert math.isnan(value("math.round(2.5, -400)"))  # 0 / 0


def test_go_s_power_of_ten_by_squaring() -> None:
    """Go's Pow(10, n) is exact up to 10^22 and differs from the correctly rounded double
    past it (Kyverno's shift is Go's)."""
    assert [go_pow10(n) for n in (0, 1, 5, 22, -3)] == [1.0, 10.0, 1e5, 1e22, 0.001]
    assert go_pow10(308) == 1.0000000000000006e308 != 1e308
    assert go_pow10(309) == math.inf and go_pow10(-400) == 0.0
    assert go_round(0.49999999999999994) == 0.0 and go_round(-2.5) == -3.0


def test_only_a_double_and_an_int_are_taken() -> None:
    with in_kyverno_policy():
        fails("math.round(1, 2) == 1.0", match="no matching overload")
        fails("math.round(1.5, 2.0) == 1.5", match="no matching overload")


def test_outside_a_kyverno_policy_a_call_gives_no_value() -> None:
    fails("math.round(1.25, 1) == 1.3", match="Kyverno's library")
