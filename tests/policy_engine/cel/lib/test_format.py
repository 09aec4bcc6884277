"""Kubernetes' format library (1.31+), against its documented behaviour."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds, value

VALID = [
    ("dns1123Label", "my-label-name"),
    ("dns1123Subdomain", "apiextensions.k8s.io"),
    ("dns1035Label", "my-label-name"),
    ("qualifiedName", "apiextensions.k8s.io/v1beta1"),
    ("dns1123LabelPrefix", "my-label-prefix-"),
    ("dns1123SubdomainPrefix", "mysubdomain.prefix.-"),
    ("dns1035LabelPrefix", "my-label-prefix-"),
    ("labelValue", "My_value-1.0"),
    ("labelValue", ""),
    ("uri", "http://example.com"),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000"),
    ("byte", "aGVsbG8="),
    ("date", "2021-01-01"),
    ("datetime", "2021-01-01T00:00:00Z"),
]
INVALID = [
    ("dns1123Label", "My_Label", 1),
    ("dns1123Label", "a" * 64, 1),
    ("dns1123Label", "-" + "A" * 64, 2),  # too long and the wrong characters: two errors
    ("dns1123Label", "a.b", 1),
    ("dns1123Subdomain", "-example.com", 1),
    ("dns1035Label", "1abc", 1),
    ("qualifiedName", "/name", 1),
    ("qualifiedName", "example.com/", 1),
    ("qualifiedName", "a/b/c", 1),
    ("dns1123LabelPrefix", "my-label-prefix_", 1),
    ("labelValue", "-starts-with-dash", 1),
    ("uri", "example.com", 1),
    ("uuid", "not-a-uuid", 1),
    ("byte", "not base64!", 1),
    ("date", "2021-02-30", 1),
    ("datetime", "2021-01-01 00:00:00", 1),
]


@pytest.mark.parametrize(("name", "text"), VALID)
def test_a_valid_string_gives_none(name: str, text: str) -> None:
    holds(f"!format.{name}().validate({text!r}).hasValue()")
    holds(f"!format.named({name!r}).value().validate({text!r}).hasValue()")


@pytest.mark.parametrize(("name", "text", "errors"), INVALID)
def test_an_invalid_string_gives_its_errors(name: str, text: str, errors: int) -> None:
    found = value(f"format.{name}().validate({text!r}).value()")
    assert (
        isinstance(found, list) and len(found) == errors and all(isinstance(e, str) for e in found)
    )


def test_the_documented_rule_and_message() -> None:
    pod = {"metadata": {"name": "Web_1"}}
    assert value("format.dns1123Label().validate(object.metadata.name).hasValue()", {"object": pod})
    message = value(
        "format.dns1123Label().validate(object.metadata.name).value().join('\\n')", {"object": pod}
    )
    assert "DNS-1123 label" in message


def test_named_formats() -> None:
    holds("format.named('dns1123Label').hasValue() && !format.named('nope').hasValue()")
    holds("format.named('nope').orValue(format.uri()).validate('/path') == optional.none()")


def test_errors() -> None:
    fails("format.named('nope').value().validate('x')", match="optional.none")
    fails("format.dns1123Label().validate(1)", match="does not compile")
    fails("format.unknown().validate('x')", match="does not compile")
