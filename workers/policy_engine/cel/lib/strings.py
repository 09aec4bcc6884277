"""cel-go's strings extension at version 2, as Kubernetes 1.29+ enables it.

Functions: ``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``,
``replace``, ``split``, ``substring``, ``trim``, ``join``, ``format``, ``strings.quote``.
Indexes count code points, as CEL's ``size()`` does. Not here: ``reverse`` (version 3; not
in Kubernetes' environment).

Written here rather than taken from the runtime's own strings extension (which has the
same functions) because that one differs from cel-go where a probe would notice:
``'abc'.substring(1, 3)`` (an end at the string's end after a start past 0) is an error
there, and ``indexOf``/``lastIndexOf`` with a start at or past the end are errors there
where cel-go gives -1 (docs/probes.md).
"""

from __future__ import annotations

import datetime
import json
import math
import re
from typing import Any

from workers.policy_engine.cel.lib.base import (
    ELEMENTS_PER_STEP,
    LOOPED_CHARS_PER_STEP,
    MAX_RESULT_CHARS,
    READ_CHARS_PER_STEP,
    CelLibraryError,
    Overload,
    check_result,
    reads,
)

# Unicode White_Space, which Go's strings.TrimSpace (cel-go's trim) removes.
_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


_PRECISION = re.compile(r"%\.([0-9]+)")


def _check_index(text: str, index: int, what: str = "index") -> None:
    if index < 0 or index > len(text):
        raise CelLibraryError(f"{what} out of range: {index}")


def char_at(text: str, index: int) -> str:
    _check_index(text, index)
    return text[index : index + 1]


def index_of(text: str, sub: str, start: int = 0) -> int:
    """cel-go's: an empty ``sub`` is found where the search starts; a start at or past the
    end finds nothing (-1); a negative start is an error."""
    if sub == "":
        return start
    if start < 0:
        raise CelLibraryError(f"index out of range: {start}")
    if start >= len(text):
        return -1
    return text.find(sub, start)


def last_index_of(text: str, sub: str, start: int | None = None) -> int:
    """cel-go's: the last match starting at or before ``start`` (the end by default); an
    empty ``sub`` is found at ``start``; a start past the end finds nothing (-1)."""
    if start is None:
        if sub == "":
            return len(text)
        start = len(text) - 1
    if sub == "":
        return start
    if start < 0:
        raise CelLibraryError(f"index out of range: {start}")
    if start >= len(text):
        return -1
    start = min(start, len(text) - len(sub))
    return text.rfind(sub, 0, start + len(sub)) if start >= 0 else -1


_UPPER, _LOWER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"
_TO_LOWER, _TO_UPPER = str.maketrans(_UPPER, _LOWER), str.maketrans(_LOWER, _UPPER)


def lower_ascii(text: str) -> str:
    """Only ASCII letters change (translated at C speed)."""
    return text.translate(_TO_LOWER)


def upper_ascii(text: str) -> str:
    return text.translate(_TO_UPPER)


def replace(text: str, old: str, new: str, limit: int = -1) -> str:
    return text.replace(old, new, limit if limit >= 0 else -1)


def _replaced_chars(text: str, old: str, new: str, limit: int = -1) -> int:
    """How long ``replace`` makes the string (counting is cheap; building may not be)."""
    count = text.count(old)
    if limit >= 0:
        count = min(count, limit)
    return len(text) + count * (len(new) - len(old))


def replace_cost(text: str, old: str, new: str, limit: int = -1) -> int:
    """Reading the string, and building the result (refused past its bound)."""
    chars = _replaced_chars(text, old, new, limit)
    check_result(chars, "replace()")
    return reads(text, old) + chars // READ_CHARS_PER_STEP


def split(text: str, separator: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    if separator == "":
        chars = list(text)
        if 0 < limit < len(chars):
            return [*chars[: limit - 1], "".join(chars[limit - 1 :])]
        return chars
    return text.split(separator, limit - 1 if limit > 0 else -1)


def split_cost(text: str, separator: str, limit: int = -1) -> int:
    """Reading the string, and the parts it gives (each converted back as a list element)."""
    parts = len(text) if separator == "" else text.count(separator) + 1
    if limit >= 0:
        parts = min(parts, limit)
    return reads(text, separator) + parts // ELEMENTS_PER_STEP


def substring(text: str, start: int, end: int | None = None) -> str:
    end = len(text) if end is None else end
    _check_index(text, start, "start")
    _check_index(text, end, "end")
    if start > end:
        raise CelLibraryError(f"invalid substring range. start: {start}, end: {end}")
    return text[start:end]


def trim(text: str) -> str:
    return text.strip(_SPACE)


def join(items: list[Any], separator: str = "") -> str:
    if not all(isinstance(item, str) for item in items):
        raise CelLibraryError("join: the list must hold strings only")
    return separator.join(items)


def join_cost(items: list[Any], separator: str = "") -> int:
    """A pass over the items, and the result they make (refused past its bound)."""
    chars = sum(len(item) for item in items if isinstance(item, str))
    chars += len(separator) * max(len(items) - 1, 0)
    check_result(chars, "join()")
    return reads(items, separator) + chars // READ_CHARS_PER_STEP


_ESCAPES = str.maketrans({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                          "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'})  # fmt: skip


def quote(text: str) -> str:
    return '"' + text.translate(_ESCAPES) + '"'


def quote_cost(text: str) -> int:
    """Reading the string, and the result (each character escaped at most: twice as long)."""
    check_result(2 * len(text) + 2, "strings.quote()")
    return reads(text) + 2 * len(text) // READ_CHARS_PER_STEP


def _timestamp(value: datetime.datetime) -> str:
    text = value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    return text


def _duration(value: datetime.timedelta) -> str:
    seconds = value.total_seconds()
    return f"{seconds:g}s" if seconds != int(seconds) else f"{int(seconds)}s"


def _as_string(value: Any) -> str:
    """``%s`` of a value, as cel-go writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return repr(value) if value != int(value) else f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(_member(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = sorted((_member(k), _member(v)) for k, v in value.items())
        return "{" + ", ".join(f"{k}:{v}" for k, v in pairs) + "}"
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, datetime.datetime):
        return _timestamp(value)
    if isinstance(value, datetime.timedelta):
        return _duration(value)
    return str(value)


def _member(value: Any) -> str:
    """A list's element or a map's key or value inside ``%s``: written as a CEL literal
    (strings quoted, doubles with six decimals, timestamps and durations as calls)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes | bytearray):
        return "b" + json.dumps(bytes(value).decode("utf-8", errors="replace"), ensure_ascii=False)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return json.dumps(_as_string(value))
        return f"{value:.6f}"
    if isinstance(value, datetime.datetime):
        return f'timestamp("{_timestamp(value)}")'
    if isinstance(value, datetime.timedelta):
        return f'duration("{_duration(value)}")'
    return _as_string(value)


def _number(value: Any, verb: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CelLibraryError(f"format: %{verb} needs a number, got {type(value).__name__}")
    return value


def _shown_chars(args: list[Any]) -> int:
    """An upper bound on the characters ``format`` prints its arguments as: a string as it is,
    one inside a list or map as a JSON literal (a control character takes 6)."""
    total, todo = 0, [(arg, False) for arg in args]
    while todo:
        item, nested = todo.pop()
        if isinstance(item, str | bytes):
            total += len(item) * (6 if nested else 2 if isinstance(item, bytes) else 1) + 3
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            todo.extend((part, True) for pair in item.items() for part in pair)
        elif isinstance(item, list):
            total += 2 + 2 * len(item)
            todo.extend((element, True) for element in item)
        else:
            total += 32  # a number, a bool, null, a timestamp, a duration
    return total


def format_cost(template: str, args: list[Any]) -> int:
    """The template's loop, and the result: the template, each argument as printed and each
    precision asked for (``%.1000000000f`` is a gigabyte); refused past the bound."""
    precisions = sum(
        int(p) if len(p) <= 9 else MAX_RESULT_CHARS for p in _PRECISION.findall(template)
    )
    chars = len(template) + _shown_chars(args) + precisions
    check_result(chars, "format()")
    return reads(args) + len(template) // LOOPED_CHARS_PER_STEP + chars // READ_CHARS_PER_STEP


def format_string(template: str, args: list[Any]) -> str:
    """``'%s and %d'.format([a, b])``: verbs %s %d %f %e %b %o %x %X and %%, with a
    precision for %f and %e (``%.2f``; 6 by default)."""
    out: list[str] = []
    index, position = 0, 0
    while position < len(template):
        char = template[position]
        if char != "%":
            out.append(char)
            position += 1
            continue
        position += 1
        if position < len(template) and template[position] == "%":
            out.append("%")
            position += 1
            continue
        precision: int | None = None
        if position < len(template) and template[position] == ".":
            digits_end = position + 1
            while digits_end < len(template) and template[digits_end].isdigit():
                digits_end += 1
            precision = int(template[position + 1 : digits_end] or 0)
            position = digits_end
        if position >= len(template):
            raise CelLibraryError("format: unfinished formatting clause at the end")
        verb = template[position]
        position += 1
        if index >= len(args):
            raise CelLibraryError(f"format: index {index} out of range")
        arg = args[index]
        index += 1
        out.append(_clause(verb, arg, precision))
    return "".join(out)


def _clause(verb: str, arg: Any, precision: int | None) -> str:
    if verb == "s":
        return _as_string(arg)
    if verb == "d":
        if isinstance(arg, float):
            raise CelLibraryError("format: %d needs an integer")
        return str(int(_number(arg, verb)))
    if verb in "fe":
        number = float(_number(arg, verb))
        if math.isnan(number) or math.isinf(number):
            return _as_string(number)
        return f"{number:.{6 if precision is None else precision}{verb}}"
    if verb in "boxX":
        if isinstance(arg, str) and verb in "xX":
            hexed = arg.encode().hex()
            return hexed.upper() if verb == "X" else hexed
        number = int(_number(arg, verb))
        if isinstance(arg, float):
            raise CelLibraryError(f"format: %{verb} needs an integer")
        return format(number, verb)
    raise CelLibraryError(f"format: unrecognized formatting clause %{verb}")


OVERLOADS = [
    Overload("charAt", "string_char_at_int", ("string", "int"), "string", char_at, True),
    Overload("indexOf", "string_index_of_string", ("string", "string"), "int", index_of, True),
    Overload("indexOf", "string_index_of_string_int", ("string", "string", "int"), "int",
             index_of, True),
    Overload("lastIndexOf", "string_last_index_of_string", ("string", "string"), "int",
             last_index_of, True),
    Overload("lastIndexOf", "string_last_index_of_string_int", ("string", "string", "int"),
             "int", last_index_of, True),
    Overload("lowerAscii", "string_lower_ascii", ("string",), "string", lower_ascii, True),
    Overload("upperAscii", "string_upper_ascii", ("string",), "string", upper_ascii, True),
    Overload("replace", "string_replace_string_string", ("string", "string", "string"),
             "string", replace, True, replace_cost),
    Overload("replace", "string_replace_string_string_int",
             ("string", "string", "string", "int"), "string", replace, True, replace_cost),
    Overload("split", "string_split_string", ("string", "string"), "list", split, True,
             split_cost),
    Overload("split", "string_split_string_int", ("string", "string", "int"), "list", split,
             True, split_cost),
    Overload("substring", "string_substring_int", ("string", "int"), "string", substring, True),
    Overload("substring", "string_substring_int_int", ("string", "int", "int"), "string",
             substring, True),
    Overload("trim", "string_trim", ("string",), "string", trim, True),
    Overload("join", "list_join", ("list",), "string", join, True, join_cost),
    Overload("join", "list_join_string", ("list", "string"), "string", join, True, join_cost),
    Overload("format", "string_format_list", ("string", "list"), "string", format_string, True,
             format_cost),
    Overload("strings.quote", "strings_quote", ("string",), "string", quote, False, quote_cost),
]  # fmt: skip
