"""Kubernetes' quantity library (1.28+), against its documented behaviour."""

from __future__ import annotations

import math

import pytest

from tests.policy_engine.cel.lib.support import fails, holds, value

TRUE = [
    "isQuantity('1.3G') && isQuantity('1.3Gi') && isQuantity('10000k')",
    "!isQuantity('1,3G') && !isQuantity('200K') && !isQuantity('Three') && !isQuantity('Mi')",
    "quantity('50000000G').isInteger() && quantity('50k').isInteger()",
    "!quantity('9999999999999999999999999999999999999G').isInteger()",
    "quantity('50k').asInteger() == 50000",
    "quantity('50k').sub(20000).asApproximateFloat() == 30000.0",
    "quantity('50k').add(quantity('20k')) == quantity('70k')",
    "quantity('50k').add(20) == quantity('50020')",
    "quantity('50k').sub(quantity('20k')) == quantity('30k')",
    "quantity('50k').add(20).sub(quantity('100k')).sub(-50000) == quantity('20')",
    "quantity('200M').compareTo(quantity('0.2G')) == 0",
    "quantity('50M').compareTo(quantity('50Mi')) == -1",
    "quantity('50Mi').compareTo(quantity('50M')) == 1",
    "quantity('150Mi').isGreaterThan(quantity('100Mi')) && "
    "!quantity('50Mi').isGreaterThan(quantity('100Mi'))",
    "quantity('50M').isLessThan(quantity('100M')) && !quantity('100M').isLessThan(quantity('50M'))",
    "sign(quantity('-50k')) == -1 && sign(quantity('0')) == 0 && sign(quantity('1m')) == 1",
    # equal values compare equal, whatever the suffix they were written with
    "quantity('1') == quantity('1000m') && quantity('1Ki') == quantity('1024')",
    "quantity('1e3') == quantity('1k') && quantity('500m').asApproximateFloat() == 0.5",
    # parsed as the API server parses: a non-zero value below 1n is rounded up to 1n (away
    # from zero), a binary one past the largest int64 capped there (a decimal one is not),
    # an exponent read as an int64 and cut to int32
    "quantity('1e-12') == quantity('1n') && quantity('-0.5n') == quantity('-1n') && "
    "quantity('0e-99') == quantity('0') && quantity('1.0000000001') == quantity('1000000001n')",
    "quantity('16Ei') == quantity('9223372036854775807') && "
    "quantity('-8Ei') == quantity('-9223372036854775807') && "
    "quantity('1e30').isGreaterThan(quantity('9223372036854775807'))",
    "quantity('1e4294967296') == quantity('1') && isQuantity('1e-9223372036854775808') && "
    "!isQuantity('1e9223372036854775808')",
]
ERRORS = [
    ("quantity('1.5').asInteger()", "cannot convert"),  # loses precision
    ("quantity('9999999999999999999999999999999999999G').asInteger()", "cannot convert"),
    ("quantity('200K')", "not a quantity"),
    ("quantity('Three')", "not a quantity"),
    ("quantity('Mi')", "not a quantity"),
    # sign is a global function in Kubernetes: the member form does not compile there
    ("quantity('-1').sign() == -1", "does not compile"),
    # mul, div and divInt come after 1.34
    ("quantity('1').mul(2) == quantity('2')", "does not compile"),
]


@pytest.mark.parametrize("expression", TRUE)
def test_documented_behaviour(expression: str) -> None:
    holds(expression)


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_documented_errors(expression: str, reason: str) -> None:
    fails(expression, match=reason)


def test_a_quantity_past_a_double_is_infinite() -> None:
    assert value("quantity('1e400').asApproximateFloat()") == math.inf
    assert value("quantity('-1e400').asApproximateFloat()") == -math.inf


@pytest.mark.timeout(20)
def test_a_hostile_quantity_costs_no_more_than_its_text() -> None:
    """Text in a cluster such as ``1e999999999`` once made the library compute ten to that
    power (hours, gigabytes, uninterruptible): a value too large to hold is an error here
    (the API server holds it exactly), one too small rounds up to 1n as there, and a map
    in the object that merely looks like a quantity is never parsed as text."""
    fake = {"@kubernetes": "quantity", "value": "1e999999999"}
    huge = {"q": "1e999999999", "neg": "-1e999999999", "tiny": "-1e-999999999",
            "digits": "9" * 100_000, "fake": fake}  # fmt: skip
    holds("isQuantity(object.q) && isQuantity(object.neg) && isQuantity(object.digits) && "
          "quantity(object.tiny) == quantity('-1n') && !isQuantity('1e99999999999999999999')",
          {"object": huge})  # fmt: skip
    for expression in ("quantity(object.q) == quantity('1')", "sign(quantity(object.neg)) == -1",
                       "quantity(object.digits).isInteger()"):  # fmt: skip
        fails(expression, {"object": huge}, match="1000 digits or more")
    # a map is no quantity (the API server's type is kubernetes.Quantity): no overload
    fails("sign(object.fake) == 1", {"object": huge}, match="No matching overloads")


def test_quantities_from_the_object() -> None:
    pod = {"spec": {"containers": [{"resources": {"limits": {"memory": "512Mi", "cpu": "500m"}}}]}}
    holds("object.spec.containers.all(c, quantity(c.resources.limits.memory)"
          ".isLessThan(quantity('1Gi')) && "
          "quantity(c.resources.limits.cpu).isLessThan(quantity('1')))",
          {"object": pod})  # fmt: skip
