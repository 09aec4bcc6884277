"""Kyverno's ``math`` library: ``math.round(value, precision)``, for a Kyverno ValidatingPolicy.

``math.round(d, p)`` is the double ``d`` rounded to ``p`` decimal places, halves away from
zero, computed as Kyverno computes it: ``round(d * 10^p) / 10^p`` in doubles, with Go's
``math.Pow`` (repeated squaring, so ``10^p`` past 10^22 is the same double Kyverno's is,
not the correctly rounded one) and Go's ``math.Round``. A negative ``p`` rounds to tens,
hundreds ...; a ``p`` so large that ``10^p`` overflows gives NaN (infinity over infinity),
as in Kyverno. It answers only while an imported Kyverno ValidatingPolicy is run.
"""

from __future__ import annotations

import math

from workers.policy_engine.cel.lib.base import Overload
from workers.policy_engine.cel.lib.kyverno_resource import require_kyverno_policy


def _ldexp(fraction: float, exponent: int) -> float:
    try:
        return math.ldexp(fraction, exponent)
    except OverflowError:
        return math.copysign(math.inf, fraction)


def go_pow10(power: int) -> float:
    """Go's ``math.Pow(10, float64(power))``: ``10^|power|`` by repeated squaring of 10's
    mantissa and exponent, inverted for a negative power (Go's own steps, in doubles)."""
    y = float(power)
    if y == 0:
        return 1.0
    whole = abs(y)
    if whole >= 2.0**63:  # Go: |y| past int64, x = 10 > 1
        return math.inf if y > 0 else 0.0
    a1, ae = 1.0, 0
    x1, xe = math.frexp(10.0)
    i = int(whole)
    while i != 0:
        if xe < -(1 << 12) or xe > (1 << 12):
            ae += xe  # catastrophic overflow: the answer is 0 or infinity (Ldexp says which)
            break
        if i & 1:
            a1 *= x1
            ae += xe
        x1 *= x1
        xe <<= 1
        if x1 < 0.5:
            x1 += x1
            xe -= 1
        i >>= 1
    if y < 0:
        a1 = 1 / a1
        ae = -ae
    return _ldexp(a1, ae)


def go_round(value: float) -> float:
    """Go's ``math.Round``: the nearest integer, halves away from zero; NaN, infinities and
    integers unchanged."""
    if not math.isfinite(value):
        return value
    whole = float(math.trunc(value))
    if abs(value - whole) >= 0.5:
        whole += math.copysign(1.0, value)
    return math.copysign(whole, value) if whole == 0 else whole


def round_to(value: float, precision: int) -> float:
    require_kyverno_policy("math.round")
    shift = go_pow10(precision)
    return go_round(value * shift) / shift if shift != 0 else math.nan


OVERLOADS = [
    Overload("math.round", "math_round_float_int", ("double", "int"), "double", round_to),
]
