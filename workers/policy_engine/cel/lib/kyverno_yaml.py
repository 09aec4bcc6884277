"""Kyverno's ``yaml`` library: ``yaml.parse(text)``, for a Kyverno ValidatingPolicy.

Kyverno reads the text with ``sigs.k8s.io/yaml``: go-yaml v2 (YAML 1.1) decodes the first
document, which is turned into JSON and decoded again, so the value is what JSON can hold:

* every number is a double (``yaml.parse('a: 1').a`` is ``1.0``); ``0x1F``, ``017``
  (octal), ``0b101``, ``1_000``, ``+5`` and ``1e3`` are numbers, ``1:30`` and ``1e400`` are
  text; ``y``, ``yes``, ``on`` (and ``n``, ``no``, ``off``) are booleans, as go-yaml v2
  reads them; an unquoted timestamp (``2024-01-02``) is its text;
* map keys become text: ``1: a`` is ``{'1': 'a'}``, ``true: a`` is ``{'true': 'a'}``, a
  double key is written as Go writes a float32 (``1e6`` as ``1e+06``); a null key, an
  integer key past int64 and a map or list as a key are evaluation errors, as in Kyverno;
* ``.nan`` and ``.inf`` as values are evaluation errors (JSON has no such number); the
  empty text (or a document of nothing) is null; a later repeated key wins; a merge key
  (``<<``) sets the merged keys where it stands (later keys win, earlier ones are
  replaced), as go-yaml v2 does.

Differences, each an evaluation error rather than another value: an explicit tag other than
``!!str``, ``!!int``, ``!!float``, ``!!bool``, ``!!null``, ``!!map`` and ``!!seq``
(``!!binary``, ``!!timestamp``, a custom tag), a string holding a NUL character (``"\\0"``:
the runtime's strings end at it), and text PyYAML reads otherwise than
go-yaml (it is PyYAML's parser, with the resolution of plain scalars above, go-yaml's).

Bounded: the text is charged by its length before it is read (PyYAML's parser runs in
Python), documents nested past ``MAX_NESTING_DEPTH`` and aliases that expand past
``MAX_EXPANDED_VALUES`` (or into themselves) are refused while the text is composed, and the
value is charged by its size. It answers only while an imported Kyverno ValidatingPolicy is
run.
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from workers.engine.toolsets.yaml_documents import (
    WrittenLoader,
    check_expansion,
    describe_yaml_error,
)
from workers.policy_engine.cel.lib.base import (
    LOOPED_CHARS_PER_STEP,
    CelLibraryError,
    Overload,
    charge,
)
from workers.policy_engine.cel.lib.kyverno_resource import (
    CONVERTED_VALUES_PER_STEP,
    require_kyverno_policy,
)

_PLAIN = "tag:assay.kyverno,2026:plain"  # an untagged, unquoted scalar: resolved as go-yaml v2
_CORE = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ, _MERGE = (f"{_CORE}{name}" for name in ("str", "map", "seq", "merge"))
_TRUE = frozenset({"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})
_FALSE = frozenset({"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})
_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_SPECIAL = {
    **{text: math.nan for text in (".nan", ".NaN", ".NAN")},
    **{text: math.inf for text in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")},
    **{text: -math.inf for text in ("-.inf", "-.Inf", "-.INF")},
}
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}
_PREFIXES = {"b": 2, "o": 8, "x": 16}


class _Loader(WrittenLoader):
    """PyYAML's safe composer with the nesting limit of documents people write
    (:class:`WrittenLoader`), keeping a repeated key (go-yaml keeps the last), and every
    plain scalar left for go-yaml's resolution (:func:`_plain`)."""

    def compose_mapping_node(self, anchor: Any) -> Any:
        self._descend()
        try:
            return Composer.compose_mapping_node(self, anchor)
        finally:
            self._depth -= 1

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode and implicit[0]:
            return _PLAIN
        return super().resolve(kind, value, implicit)


def _go_uint(text: str) -> int | None:
    """Go's ``strconv.ParseUint(text, 0, 64)`` (its base prefixes; no sign)."""
    if not text:
        return None
    base, digits = 10, text
    if text[0] == "0":
        base, digits = 8, text[1:]
        if len(text) >= 3 and text[1].lower() in _PREFIXES:
            base, digits = _PREFIXES[text[1].lower()], text[2:]
    if any(char not in _DIGITS[base] for char in digits):
        return None
    number = int(digits, base) if digits else 0
    return number if number < 1 << 64 else None


def _go_integer(text: str) -> int | None:
    """go-yaml v2's integer: ``strconv.ParseInt`` (int64), else ``ParseUint`` (uint64)."""
    if text[:1] in ("+", "-"):
        number = _go_uint(text[1:])
        if number is None:
            return None
        if text[0] == "-":
            return -number if number <= 1 << 63 else None
        return number if number < 1 << 63 else None
    return _go_uint(text)


def _plain(text: str) -> Any:
    """An untagged plain scalar as go-yaml v2 resolves it: None, a bool, an int, a float
    or the text."""
    if text in _NULL:
        return None
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    if text in _SPECIAL:
        return _SPECIAL[text]
    first = text[0]
    if first == "." and text.isascii():
        try:
            number = float(text)
        except ValueError:
            return text
        return number if math.isfinite(number) else text  # Go: out of range, so text
    if first in "+-0123456789":
        plain = text.replace("_", "")
        integer = _go_integer(plain)
        if integer is not None:
            return integer
        if _YAML_FLOAT.fullmatch(plain):
            number = float(plain)
            if math.isfinite(number):
                return number
    return text


_TAGGED = {f"{_CORE}int": int, f"{_CORE}float": float, f"{_CORE}bool": bool,
           f"{_CORE}null": type(None)}  # fmt: skip


def _scalar(node: ScalarNode) -> Any:
    if node.tag == _PLAIN:
        return _plain(node.value)
    if node.tag == _STR:
        return node.value
    kind = _TAGGED.get(node.tag)
    if kind is None:
        raise CelLibraryError(f"yaml.parse: the YAML tag {node.tag[:60]} is not served")
    value = _plain(node.value)
    if kind is float and type(value) is int:
        return float(value)
    if type(value) is not kind:
        raise CelLibraryError(f"yaml.parse: cannot decode a scalar as {node.tag[len(_CORE) :]}")
    return value


def _float32_text(value: float) -> str:
    """Go's ``strconv.FormatFloat(value, 'g', -1, 32)`` (how a double key becomes text)."""
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        single = math.copysign(math.inf, value)
    if math.isnan(single):
        return ".nan"
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    if single == 0:
        return "-0" if math.copysign(1.0, single) < 0 else "0"
    for places in range(9):  # the shortest digits that give this float32 back
        written = f"{single:.{places}e}"
        if struct.unpack("f", struct.pack("f", float(written)))[0] == single:
            break
    mantissa, exponent_text = written.split("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    exponent = int(exponent_text)
    if exponent < -4 or exponent >= 6:  # Go's %e for the shortest form
        rest = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{rest}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    point = exponent + 1
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _key(node: Node) -> str:
    if not isinstance(node, ScalarNode):
        raise CelLibraryError("yaml.parse: a map or a list as a map key is not served")
    key = _scalar(node)
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        if key >= 1 << 63:
            raise CelLibraryError("yaml.parse: unsupported map key of type uint64")
        return str(key)
    if isinstance(key, float):
        return _float32_text(key)
    raise CelLibraryError("yaml.parse: unsupported map key: null")


def _merge(into: dict[str, Any], node: Node) -> None:
    """go-yaml v2's merge: the merged map's keys set where the merge key stands; of a list
    of maps, the first wins (they are set last to first)."""
    if isinstance(node, MappingNode):
        into.update(_value(node))
        return
    if isinstance(node, SequenceNode) and all(isinstance(i, MappingNode) for i in node.value):
        for item in reversed(node.value):
            into.update(_value(item))
        return
    raise CelLibraryError("yaml.parse: map merge requires map or sequence of maps as the value")


def _is_merge(node: Node) -> bool:
    return isinstance(node, ScalarNode) and (
        node.tag == _MERGE or (node.tag == _PLAIN and node.value == "<<")
    )


def _value(node: Node) -> Any:
    """``node`` as the value Kyverno's JSON round trip gives: numbers as doubles."""
    if isinstance(node, ScalarNode):
        value = _scalar(node)
        if isinstance(value, str) and "\x00" in value:  # the runtime would cut it there
            raise CelLibraryError("yaml.parse: a string holding a NUL character is not served")
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if isinstance(value, float) and not math.isfinite(value):
            raise CelLibraryError(f"yaml.parse: json: unsupported value: {value}")
        return float(value)
    if isinstance(node, SequenceNode):
        if node.tag != _SEQ:
            raise CelLibraryError(f"yaml.parse: the YAML tag {node.tag[:60]} is not served")
        return [_value(item) for item in node.value]
    if node.tag != _MAP:
        raise CelLibraryError(f"yaml.parse: the YAML tag {node.tag[:60]} is not served")
    out: dict[str, Any] = {}
    for key, item in node.value:
        if _is_merge(key):
            _merge(out, item)
        else:
            out[_key(key)] = _value(item)
    return out


def parse(text: str) -> Any:
    require_kyverno_policy("yaml.parse")
    charge(1 + len(text) // LOOPED_CHARS_PER_STEP, "yaml.parse()")
    loader = None
    try:
        loader = _Loader(text)  # a control character is refused here (ReaderError)
        node = loader.get_node() if loader.check_node() else None  # the first document
        if node is None:
            return None
        values = check_expansion(node)
    except yaml.YAMLError as error:
        why = describe_yaml_error(error)
        raise CelLibraryError(f"yaml.parse: the text is not YAML ({why})") from None
    finally:
        if loader is not None:
            loader.dispose()
    charge(1 + values // CONVERTED_VALUES_PER_STEP, "yaml.parse()")
    try:
        return _value(node)
    except RecursionError:  # aliases of aliases, each nesting one level deeper
        raise CelLibraryError("yaml.parse: its aliases nest too deeply") from None


OVERLOADS = [Overload("yaml.parse", "parse_string_dyn", ("string",), "dyn", parse)]
