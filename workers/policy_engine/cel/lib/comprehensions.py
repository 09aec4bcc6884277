"""cel-go's two-variable comprehensions, as Kubernetes 1.32+ enables them.

The runtime's own extension (``cel.lib.ext.comprev2``, loaded by the adapter) parses and
runs ``all``, ``exists``, ``existsOne`` and ``transformList`` with two variables (index and
element of a list, key and value of a map). What it cannot run, or parses differently,
is written here as rewrites of the call:

* ``transformMap`` and ``transformMapEntry``: the runtime's macros expand to an internal
  ``cel.@mapInsert`` it has no implementation for (planning fails). cel-go defines them as
  a comprehension over the same range and filter that inserts ``key -> transform`` (or
  every entry of the map ``transform``) into an empty map, an insertion of a key already
  there being an error. ``transformList`` over the same range and filter produces those
  entries in the same order, evaluating the same sub-expressions (with their errors);
  building the map from them here, refusing a repeated key, gives the same value or the
  same error:

    ``r.transformMap(k, v, [filter,] t)`` is ``r.transformList(k, v, [filter,] [k, t])``
    followed by :func:`map_from_pairs`; ``r.transformMapEntry(k, v, [filter,] e)`` is
    ``r.transformList(k, v, [filter,] e)`` followed by :func:`map_from_entries`.

* ``exists_one`` with two variables: cel-go registers it as another name of ``existsOne``
  (the same macro); the runtime knows only ``existsOne``.

Keys compare with CEL equality: ``1``, ``1u`` and ``1.0`` are one key, ``true`` is not ``1``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from workers.policy_engine.cel.lib.base import CelLibraryError, Overload
from workers.policy_engine.cel.lib.rewrite import CallRewrite
from workers.policy_engine.cel.syntax.nodes import Call, ListExpr, Node

PAIRS = "assay_map_from_pairs"
ENTRIES = "assay_map_from_entries"


def _key(value: Any) -> tuple[bool, Any]:
    return (isinstance(value, bool), value)


def _insert(out: dict[Any, Any], seen: set[tuple[bool, Any]], key: Any, value: Any) -> None:
    if isinstance(key, float | list | dict) or key is None:
        raise CelLibraryError(f"unsupported map key type: {type(key).__name__}")
    marker = _key(key)
    # a Python dict cannot hold both true and 1: refused rather than merged
    if marker in seen or (key in out and marker not in seen):
        raise CelLibraryError(f"insert failed: key {key!r} already exists")
    seen.add(marker)
    out[key] = value


def map_from_pairs(pairs: list[Any]) -> dict[Any, Any]:
    """The map ``{k: t, ...}`` of ``transformMap``, from its ``[k, t]`` pairs in order."""
    out: dict[Any, Any] = {}
    seen: set[tuple[bool, Any]] = set()
    for pair in pairs:
        key, value = pair
        _insert(out, seen, key, value)
    return out


def map_from_entries(entries: list[Any]) -> dict[Any, Any]:
    """The map of ``transformMapEntry``: every entry of each map in order, none repeated."""
    out: dict[Any, Any] = {}
    seen: set[tuple[bool, Any]] = set()
    for entry in entries:
        if not isinstance(entry, dict):
            raise CelLibraryError("no such overload: transformMapEntry needs a map per element")
        for key, value in entry.items():
            _insert(out, seen, key, value)
    return out


def _transform_map(call: Call) -> Node:
    key, *rest = call.args
    *head, transform = rest
    pairs = (key, *head, ListExpr((key, transform)))
    return Call(PAIRS, (), replace(call, function="transformList", args=pairs))


def _transform_map_entry(call: Call) -> Node:
    return Call(ENTRIES, (), replace(call, function="transformList"))


def _exists_one(call: Call) -> Node:
    return replace(call, function="existsOne")


REWRITES = [
    CallRewrite("transformMap", True, _transform_map, (3, 4), PAIRS),
    CallRewrite("transformMapEntry", True, _transform_map_entry, (3, 4), ENTRIES),
    CallRewrite("exists_one", member=True, rewrite=_exists_one, arities=(3,)),
]
OVERLOADS = [
    Overload(PAIRS, "assay_list_map_from_pairs", ("list",), "map", map_from_pairs, True),
    Overload(ENTRIES, "assay_list_map_from_entries", ("list",), "map", map_from_entries, True),
]
