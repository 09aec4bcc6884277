"""Kubernetes' regex library: ``'abc 123'.find('[0-9]+')`` (the first match, or ``''``) and
``.findAll(pattern[, limit])`` (every match, at most ``limit`` when one is given and not
negative). Patterns are RE2 (linear time, as in the API server), compiled once each."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

from workers.core.probes.cel_lib.base import CelLibraryError, Overload, charge, reads
from workers.core.probes.cost import PATTERN_CHARS_PER_STEP

MATCH_STEPS = 5  # ~12 us a match found and converted: a string of 'a's matches per character


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern)
    except Exception as exc:
        raise CelLibraryError(f"invalid regular expression {pattern!r}: {exc}") from None


def find(text: str, pattern: str) -> str:
    match = _compiled(pattern).search(text)
    return str(match.group(0)) if match else ""


def find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    out: list[str] = []
    for match in _compiled(pattern).finditer(text):
        charge(MATCH_STEPS, "findAll()")
        out.append(str(match.group(0)))
        if 0 < limit <= len(out):
            break
    return out


def search_cost(text: str, pattern: str, limit: int = -1) -> int:
    """Reading the text, and compiling the pattern (a pattern from the input may be long);
    each match ``findAll`` gives is charged as it is found."""
    return reads(text) + len(pattern) // PATTERN_CHARS_PER_STEP


OVERLOADS = [
    Overload("find", "string_find_string", ("string", "string"), "string", find, True,
             search_cost),
    Overload("findAll", "string_find_all_string", ("string", "string"), "list", find_all, True,
             search_cost),
    Overload("findAll", "string_find_all_string_int", ("string", "string", "int"), "list",
             find_all, True, search_cost),
]  # fmt: skip
