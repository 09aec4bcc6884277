"""Kyverno's ``json`` library: JSON text to CEL values and back, for a Kyverno
ValidatingPolicy.

* ``json.unmarshal(text)``: the value the JSON text holds, as Go's ``encoding/json`` decodes
  it into an untyped value: objects become maps, arrays lists, and every number a double
  (``json.unmarshal('{"a": 1}').a`` is ``1.0``). Text that is not one JSON value (or holds
  ``NaN``, or a number past a double's range) is an evaluation error.
* ``json.marshal(value)``: the JSON text of a map, list or scalar, as Go's encoder writes
  it: no spaces, map keys sorted, ``<``, ``>`` and ``&`` escaped as ``\\u003c`` ...,
  bytes as base64, doubles in Go's shortest form (``1.0`` is ``1``, ``1e21`` is ``1e+21``).
  A value JSON cannot hold (a map with keys that are not strings, a timestamp, a library
  value) is an evaluation error, and so is a null anywhere in it (Go's encoder is given
  CEL's null as protobuf's NullValue, whose text is not JSON's ``null``).

Both answer only while an imported Kyverno ValidatingPolicy is run (kyverno_resource.py
binds that). Each call is charged by its argument's size, and what ``unmarshal`` returns
also by the values converting it into CEL makes.
"""

from __future__ import annotations

import base64
import json
import math
from decimal import Decimal
from typing import Any

from workers.policy_engine.cel.lib.base import (
    CelLibraryError,
    Overload,
    charge,
    check_result,
)
from workers.policy_engine.cel.lib.kyverno_resource import (
    CONVERTED_VALUES_PER_STEP,
    converted_values,
    require_kyverno_policy,
)

# Go's encoder escapes these for HTML safety, and the two line separators for JavaScript.
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
               "\u2028": "\\u2028", "\u2029": "\\u2029"}  # fmt: skip


def _number(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise CelLibraryError(f"json.unmarshal: the number {text[:40]} is past a double's range")
    return value


def _no_constant(text: str) -> float:
    raise CelLibraryError(f"json.unmarshal: {text} is not JSON")


def unmarshal(text: str) -> Any:
    require_kyverno_policy("json.unmarshal")
    try:
        value = json.loads(
            text, parse_int=_number, parse_float=_number, parse_constant=_no_constant
        )
    except json.JSONDecodeError as error:
        raise CelLibraryError(f"json.unmarshal: the text is not JSON ({error.msg})") from None
    except RecursionError:
        raise CelLibraryError("json.unmarshal: the text nests too deeply") from None
    charge(1 + converted_values(value) // CONVERTED_VALUES_PER_STEP, "json.unmarshal()")
    return value


def _go_double(value: float) -> str:
    """A double as Go's encoder writes it: shortest digits, fixed notation between 1e-6 and
    1e21, else an exponent without leading zeros."""
    if math.isnan(value) or math.isinf(value):
        raise CelLibraryError(f"json.marshal: {value} has no JSON form")
    exact = Decimal(repr(value)).normalize()
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        return format(exact, "e")
    return format(exact, "f")


def _string(text: str) -> str:
    out = json.dumps(text, ensure_ascii=False)
    for char, escaped in _GO_ESCAPES.items():
        out = out.replace(char, escaped)
    return out


def _encode(value: Any, out: list[str], depth: int = 0) -> None:
    """Append ``value``'s JSON text as Go's encoder writes it; an error for what it refuses."""
    if depth > 1000:
        raise CelLibraryError("json.marshal: the value nests too deeply")
    if value is None:
        raise CelLibraryError(
            "json.marshal: a null is not served (Kyverno's encoder is given CEL's null as "
            "protobuf's NullValue, not as JSON's null)"
        )
    if isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_go_double(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, bytes | bytearray):
        out.append(_string(base64.b64encode(value).decode("ascii")))
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out, depth + 1)
        out.append("]")
    elif isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise CelLibraryError("json.marshal: a map's keys must be strings")
        out.append("{")
        for index, key in enumerate(sorted(value)):
            if index:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _encode(value[key], out, depth + 1)
        out.append("}")
    else:
        raise CelLibraryError(f"json.marshal: a {type(value).__name__} has no JSON form here")


def marshal(value: Any) -> str:
    require_kyverno_policy("json.marshal")
    out: list[str] = []
    _encode(value, out)
    text = "".join(out)
    check_result(len(text), "json.marshal()")
    return text


OVERLOADS = [
    Overload("json.unmarshal", "kyverno_json_unmarshal_string", ("string",), "dyn", unmarshal),
    Overload("json.marshal", "kyverno_json_marshal", ("dyn",), "string", marshal),
]
