"""Kyverno's ``transform`` library: ``listObjToMap`` (also ``transform.listObjToMap``).

``listObjToMap(keys, values, keyName, valueName)`` pairs two lists of maps element by
element: the map from each ``keys[i][keyName]`` to ``values[i][valueName]`` (null where
``values[i]`` has no such field; the last of a repeated key wins), as Kyverno builds it.
Lists of different lengths, an element that is not a map, a ``keyName`` field that is
missing or not a string, and a map whose keys are not strings are evaluation errors, as in
Kyverno. It answers only while an imported Kyverno ValidatingPolicy is run.
"""

from __future__ import annotations

from typing import Any

from workers.policy_engine.cel.lib.base import CelLibraryError, Overload
from workers.policy_engine.cel.lib.kyverno_resource import require_kyverno_policy


def _string_keyed(entry: Any, what: str) -> dict[str, Any]:
    if not isinstance(entry, dict) or not all(isinstance(key, str) for key in entry):
        raise CelLibraryError(f"listObjToMap: {what}")
    return entry


def list_obj_to_map(keys: list[Any], values: list[Any], key_name: str, value_name: str) -> Any:
    require_kyverno_policy("listObjToMap")
    if len(keys) != len(values):
        raise CelLibraryError(
            "listObjToMap must take lists of equal length. "
            f"list1: {len(keys)}, list2: {len(values)}"
        )
    out: dict[str, Any] = {}
    for key_entry, value_entry in zip(keys, values, strict=True):
        named = _string_keyed(key_entry, "an element of the key list is not a map of strings")
        key = named.get(key_name)
        if not isinstance(key, str):
            raise CelLibraryError(
                "the passed key name cannot be handled as a string in the key object list"
            )
        source = _string_keyed(
            value_entry,
            "object cannot be handled as a map string to any in the value object list",
        )
        out[key] = source.get(value_name)
    return out


OVERLOADS = [
    Overload(name, f"list_of_object_to_map_{suffix}", ("list", "list", "string", "string"),
             "map", list_obj_to_map)
    for name, suffix in (("listObjToMap", "non_prefixed"),
                         ("transform.listObjToMap", "prefixed"))
]  # fmt: skip
