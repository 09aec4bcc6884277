"""cel-go's sets extension, as Kubernetes 1.29+ enables it.

``sets.contains(a, b)``: every element of ``b`` is in ``a``; ``sets.equivalent(a, b)``: each
contains the other (duplicates and order do not matter); ``sets.intersects(a, b)``: they
share an element. Elements compare with CEL equality (1 == 1.0).
"""

from __future__ import annotations

from typing import Any

from workers.core.probes.cel_lib.base import Overload, pairs


def _member(value: Any, items: list[Any]) -> bool:
    return any(
        isinstance(value, bool) == isinstance(item, bool) and value == item for item in items
    )


def contains(a: list[Any], b: list[Any]) -> bool:
    return all(_member(item, a) for item in b)


def equivalent(a: list[Any], b: list[Any]) -> bool:
    return contains(a, b) and contains(b, a)


def intersects(a: list[Any], b: list[Any]) -> bool:
    return any(_member(item, a) for item in b)


OVERLOADS = [
    Overload("sets.contains", "list_sets_contains_list", ("list", "list"), "bool", contains,
             cost=pairs),
    Overload("sets.equivalent", "list_sets_equivalent_list", ("list", "list"), "bool",
             equivalent, cost=lambda a, b: 2 * pairs(a, b)),
    Overload("sets.intersects", "list_sets_intersects_list", ("list", "list"), "bool",
             intersects, cost=pairs),
]  # fmt: skip
