"""Kyverno's yaml library (``yaml.parse(text)``): go-yaml v2's reading of plain scalars
(YAML 1.1 booleans, Go's integer prefixes), then JSON's values (every number a double, every
key a string), Kyverno's errors, and the bounds on text, nesting and aliases; only inside a
Kyverno ValidatingPolicy."""

from __future__ import annotations

from typing import Any

import pytest

from tests.policy_engine.cel.lib.kyverno_support import (
    in_kyverno_policy,
    kyverno_fails,
    kyverno_value,
)
from tests.policy_engine.cel.lib.support import fails, value
from workers.policy_engine.cel.programs import CelError, Expression, StepMeter

PARSED: list[tuple[str, Any]] = [
    ("app: shop\nreplicas: 3\nports: [80, 443]\n",
     {"app": "shop", "replicas": 3.0, "ports": [80.0, 443.0]}),
    ("- one\n- two\n", ["one", "two"]),
    ("7", 7.0),  # every number is a double (the JSON round trip)
    ("", None),
    ("---\n", None),
    ("a: 1\n---\nb: 2\n", {"a": 1.0}),  # the first document only
    # YAML 1.1 booleans, as go-yaml v2 reads them (y and n among them)
    ("[y, Yes, ON, n, No, off, true, FALSE]", [True, True, True, False, False, False, True,
                                               False]),
    ("[~, null, Null, '']", [None, None, None, ""]),
    # Go's integers: hex, octal (0 and 0o), binary, underscores, a sign; then floats
    ("[0x1F, 017, 0o17, 0b101, -0b11, 1_000, +5, 1e3, .5, 1., 08]",
     [31.0, 15.0, 15.0, 5.0, -3.0, 1000.0, 5.0, 1000.0, 0.5, 1.0, 8.0]),
    # text, where YAML 1.1 (PyYAML) would read a number or a date
    ("[1:30, 1e400, 0x, 2024-01-02, 2024-01-02T03:04:05Z, '1']",
     ["1:30", "1e400", "0x", "2024-01-02", "2024-01-02T03:04:05Z", "1"]),
    ("18446744073709551615", 1.8446744073709552e19),  # a uint64, then a double
    # keys become text: integers, booleans, doubles as Go writes a float32
    ("{1: a, yes: b, 1.5: c, 1e6: d, 0.0001: e, 123456.0: f, 0x10: g}",
     {"1": "a", "true": "b", "1.5": "c", "1e+06": "d", "0.0001": "e", "123456": "f",
      "16": "g"}),
    # past uint64 a key is a double, written as a float32
    ("{18446744073709551616: a}", {"1.8446744e+19": "a"}),
    ("a: 1\na: 2\n", {"a": 2.0}),  # a repeated key: the last wins
    # a merge key sets the merged keys where it stands: x before it is replaced, z after stays
    # (and a key y would be the boolean true: go-yaml v2 reads y as yes)
    ("base: &b {x: 1, z: 2}\nm: {x: 9, <<: *b, z: 7}\n",
     {"base": {"x": 1.0, "z": 2.0}, "m": {"x": 1.0, "z": 7.0}}),
    ("a: &a {p: 1}\nb: &b {p: 2, q: 2}\nm: {<<: [*a, *b]}\n",
     {"a": {"p": 1.0}, "b": {"p": 2.0, "q": 2.0}, "m": {"p": 1.0, "q": 2.0}}),
    ("[!!str 12, !!int '12', !!float 3, !!bool yes, !!null '']", ["12", 12.0, 3.0, True, None]),
]  # fmt: skip
ERRORS = [
    ("a: [", "not YAML"),
    ("a: \u0007", "not YAML.*special characters"),  # control characters, refused by go-yaml too
    ("a: .nan", "unsupported value"),
    ("[-.inf]", "unsupported value"),
    ("~: a", "unsupported map key"),
    ("{18446744073709551615: a}", "uint64"),
    ("? [a]\n: b\n", "as a map key"),
    ("a: !!binary aGk=", "tag .* is not served"),
    ("a: !custom x", "tag .* is not served"),
    ("a: !!int x", "cannot decode"),
    ("m: {<<: 1}", "map merge requires map"),
    ('a: "x\\0y"', "NUL"),
]


@pytest.mark.parametrize(("text", "expected"), PARSED)
def test_parse_gives_kyverno_s_value(text: str, expected: Any) -> None:
    assert kyverno_value("yaml.parse(object.text)", {"object": {"text": text}}) == expected


@pytest.mark.parametrize(("text", "reason"), ERRORS)
def test_what_kyverno_cannot_read_gives_no_value(text: str, reason: str) -> None:
    kyverno_fails("yaml.parse(object.text) != null", {"object": {"text": text}}, match=reason)


def test_a_number_is_a_double_in_cel() -> None:
    with in_kyverno_policy():
        assert value("type(yaml.parse('v: 1').v) == double") is True
        assert value("yaml.parse('n: 1')") == {"false": 1.0}  # n is a boolean key
        fails("yaml.parse(1) == null", match="no matching overload")


def test_outside_a_kyverno_policy_a_call_gives_no_value() -> None:
    fails("yaml.parse('a: b').a == 'b'", match="Kyverno's library")


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefg", "bcdefgh", strict=True)
)
BOUNDED = [
    ("[" * 150 + "]" * 150, "nested deeper than 100"),
    ("a: &a [*a]", "refers to itself"),
    (BILLION_LAUGHS, "expand past"),
    # each anchor one level deeper than the last: 1,200 levels once expanded
    ("a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 1200)),
     "aliases nest too deeply"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "reason"), BOUNDED)
def test_deep_and_self_expanding_documents_give_no_value(text: str, reason: str) -> None:
    kyverno_fails("yaml.parse(object.text) != null", {"object": {"text": text}}, match=reason)


def test_the_text_is_charged_by_its_length_before_it_is_read() -> None:
    """A 1 MB document read for each of four items: refused by the cost bound (PyYAML's
    parser runs in Python, about 125,000 steps a MB), never parsed for a verdict."""
    expression = Expression("[1, 2, 3, 4].all(i, yaml.parse(object.text) != null)")
    data = {"object": {"text": "a: " + "x" * 1_000_000}}
    with in_kyverno_policy(), pytest.raises(CelError, match=r"too costly.*yaml\.parse\(\)"):
        expression.evaluate(data, StepMeter(200_000))
