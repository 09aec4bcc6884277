"""Kubernetes' lists library (``k8s.io/apiserver/pkg/cel/library/lists.go``).

``isSorted()``, ``sum()``, ``min()``, ``max()``, ``indexOf(x)``, ``lastIndexOf(x)`` on a list
of comparable values (numbers, strings, booleans, timestamps, durations). ``min``/``max`` of
an empty list is an error; ``sum`` of an empty list is 0.

Two differences, both errors here (never another value): a list whose elements cannot be
compared with each other (``[1, 'a']``; Kubernetes refuses such a literal list when the
policy is created, and over mixed data skips the failed comparisons), and ``sum``, ``min``
and ``max`` giving a duration or a timestamp (the runtime cannot take a duration back from
a function whose result type depends on its input).
"""

from __future__ import annotations

import datetime
from typing import Any

from workers.policy_engine.cel.lib.base import CelLibraryError, Overload

_ELEMENT_KINDS = ("int", "uint", "double", "string", "bool", "bytes", "null", "list", "map",
                  "timestamp", "duration")  # fmt: skip


def _comparable(items: list[Any]) -> list[Any]:
    numbers = all(isinstance(i, int | float) and not isinstance(i, bool) for i in items)
    kinds = {type(i) for i in items}
    comparable = (str,), (bool,), (bytes,), (datetime.datetime,), (datetime.timedelta,)
    if items and not numbers and not any(kinds <= set(group) for group in comparable):
        raise CelLibraryError("no such overload: the list's elements cannot be compared")
    return items


def is_sorted(items: list[Any]) -> bool:
    items = _comparable(items)
    return all(items[i] <= items[i + 1] for i in range(len(items) - 1))


def _no_time(value: Any) -> Any:
    if isinstance(value, datetime.timedelta | datetime.datetime):
        raise CelLibraryError(
            "sum, min and max of durations or timestamps are not supported in probes"
        )
    return value


def sum_of(items: list[Any]) -> Any:
    if not items:
        return 0
    _no_time(items[0])
    if not all(isinstance(i, int | float) and not isinstance(i, bool) for i in items):
        raise CelLibraryError("no such overload: sum() needs numbers or durations")
    if len({type(i) for i in items}) > 1:
        raise CelLibraryError("no such overload: sum() over mixed number types")
    return sum(items)


def min_of(items: list[Any]) -> Any:
    if not items:
        raise CelLibraryError("min called on empty list")
    return _no_time(min(_comparable(items)))


def max_of(items: list[Any]) -> Any:
    if not items:
        raise CelLibraryError("max called on empty list")
    return _no_time(max(_comparable(items)))


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def index_of(items: list[Any], value: Any) -> int:
    return next((i for i, item in enumerate(items) if _equal(item, value)), -1)


def last_index_of(items: list[Any], value: Any) -> int:
    return next((i for i in range(len(items) - 1, -1, -1) if _equal(items[i], value)), -1)


OVERLOADS = [
    Overload("isSorted", "list_is_sorted", ("list",), "bool", is_sorted, True),
    Overload("sum", "list_sum", ("list",), "dyn", sum_of, True),
    Overload("min", "list_min", ("list",), "dyn", min_of, True),
    Overload("max", "list_max", ("list",), "dyn", max_of, True),
    Overload("indexOf", "list_index_of", ("list", "dyn"), "int", index_of, True),
    Overload("lastIndexOf", "list_last_index_of", ("list", "dyn"), "int", last_index_of, True),
]
