"""Kyverno's json library (``json.unmarshal`` / ``json.marshal``), against Go's
``encoding/json`` behaviour Kyverno documents by using it: numbers decode as doubles, maps
encode with sorted keys and no spaces, HTML characters escaped; only inside a Kyverno
ValidatingPolicy."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.kyverno_support import in_kyverno_policy
from tests.policy_engine.cel.lib.support import fails, holds, value
from workers.policy_engine.cel.programs import CelError, Expression, StepMeter

TRUE = [
    # Kyverno's conformance case: a label compared with a value of a JSON object
    """json.unmarshal('{"env":"prod", "foo":"baz"}')['env'] == 'prod'""",
    """json.unmarshal('{"a": 1}').a == 1.0""",
    """type(json.unmarshal('{"a": 1}').a) == double""",  # every number is a double
    """json.unmarshal('[1, "x", true, null]') == [1.0, 'x', true, null]""",
    """json.unmarshal(' "text" ') == 'text'""",
    """json.unmarshal('{"a": {"b": [2.5]}}').a.b[0] == 2.5""",
    """json.unmarshal('{"a": 1, "a": 2}').a == 2.0""",  # the last of a repeated key
    """json.unmarshal(json.marshal({'k': ['v', 1]})) == {'k': ['v', 1.0]}""",
]
MARSHALLED = [
    ("json.marshal({'b': 1, 'a': 'x'})", '{"a":"x","b":1}'),
    ("json.marshal([1.0, 1.5, -0.0, 100.0])", "[1,1.5,-0,100]"),
    ("json.marshal([1e21, 1e-7, 0.000001])", "[1e+21,1e-7,0.000001]"),
    ("json.marshal('<a href=\"x\">&</a>')",
     '"\\u003ca href=\\"x\\"\\u003e\\u0026\\u003c/a\\u003e"'),
    ("json.marshal('line\\nnext')", '"line\\nnext"'),
    ("json.marshal(true)", "true"),
    ("json.marshal(b'hi')", '"aGk="'),  # bytes as base64
    ("json.marshal({})", "{}"),
]  # fmt: skip
ERRORS = [
    ("json.unmarshal('{\"a\": }')", "not JSON"),
    ("json.unmarshal('{\"a\": 1} x')", "not JSON"),
    ("json.unmarshal('NaN')", "not JSON"),
    ("json.unmarshal('1e400')", "past a double"),
    ("json.unmarshal('')", "not JSON"),
    ("json.marshal({1: 'a'})", "keys must be strings"),
    # a CEL null reaches Go's encoder as protobuf's NullValue, not as JSON's null
    ("json.marshal({'a': null})", "null"),
    ("json.marshal(null)", "(?i)no matching overload"),
    ("json.marshal(timestamp('2024-01-01T00:00:00Z'))", "no matching overload|no JSON form"),
    ("json.marshal(quantity('1Gi'))", "no matching overload|no JSON form"),
]


@pytest.mark.parametrize("expression", TRUE)
def test_unmarshal_gives_go_s_values(expression: str) -> None:
    with in_kyverno_policy():
        holds(expression)


@pytest.mark.parametrize(("expression", "expected"), MARSHALLED)
def test_marshal_writes_go_s_text(expression: str, expected: str) -> None:
    with in_kyverno_policy():
        assert value(expression) == expected


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_what_is_not_json_gives_no_value(expression: str, reason: str) -> None:
    with in_kyverno_policy():
        fails(expression, match=reason)


def test_outside_a_kyverno_policy_a_call_gives_no_value() -> None:
    fails("json.unmarshal('{}') == {}", match="Kyverno's library")
    fails("json.marshal({}) == '{}'", match="Kyverno's library")


def test_what_unmarshal_returns_is_charged_by_its_size() -> None:
    """A 100,000-element array decoded for each of four items is refused by the cost bound."""
    expression = Expression("[1, 2, 3, 4].all(i, size(json.unmarshal(object.text)) > 0)")
    data = {"object": {"text": "[" + ",".join(["0"] * 100_000) + "]"}}
    refused = pytest.raises(CelError, match=r"too costly.*json\.unmarshal\(\)")
    with in_kyverno_policy(), refused:
        expression.evaluate(data, StepMeter(20_000))
