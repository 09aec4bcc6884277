"""Kubernetes' regex library: ``'abc 123'.find('[0-9]+')`` (the first match, or ``''``) and
``.findAll(pattern[, limit])`` (every match, at most ``limit`` when one is given and not
negative). Patterns are RE2 (linear time, as in the API server), compiled once each.

Also the standard ``matches`` with a pattern that is not a string literal (read from
params or the object, as ``s.matches(entry.allowedRegex)``): the API server accepts it and
bounds its cost; the runtime would compile the pattern on every call, which the static cost
check cannot see. And the standard ``contains`` (``'abc'.contains('b')``), rewritten to
``assay_contains``: the runtime's search is quadratic in the worst case, this one linear
and charged over its strings. Every ``matches`` call is rewritten to ``assay_matches``
(:data:`REWRITES`): RE2 here too (the same partial-match semantics), without capture
groups, each pattern compiled once, costed per call over its text times its compiled
program (a literal pattern as well: ``[ab]{1000}`` is short to write and long to run), and
one over :data:`MAX_PATTERN_CHARS` refused."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

import re2

from workers.policy_engine.cel.lib.base import (
    CelLibraryError,
    Overload,
    charge,
    reads,
    refuse,
)
from workers.policy_engine.cel.lib.rewrite import CallRewrite
from workers.policy_engine.cel.syntax.nodes import Call
from workers.policy_engine.probes.cost import PATTERN_CHARS_PER_STEP

MATCH_STEPS = 5  # ~12 us a match found and converted: a string of 'a's matches per character
MATCHES = "assay_matches"
CONTAINS = "assay_contains"
# The longest pattern a computed `matches` compiles (RE2 builds its program in memory
# proportional to the pattern; a pattern from the input could be megabytes).
MAX_PATTERN_CHARS = 32_768


# Each compiled pattern's memory (its program and its DFA's cache) is at most this much,
# and the cache keeps so many: a listing of distinct hostile patterns holds at most
# _CACHED x _MAX_MEM. A search whose DFA runs out of it falls back to the NFA, charged for
# (search_cost).
_MAX_MEM = 2 << 20
_CACHED = 128


def _options() -> Any:
    options = re2.Options()
    options.max_mem = _MAX_MEM
    # no capture groups: a match is tested, or its whole text taken (group 0); RE2 tracking
    # thousands of groups per NFA thread took minutes a call (6,500 groups, 8,000 chars)
    options.never_capture = True
    # "DFA out of memory" would be written to stderr on every such search (a log flood)
    options.log_errors = False
    return options


@lru_cache(maxsize=_CACHED)
def _compiled(pattern: str) -> Any:
    if len(pattern) > MAX_PATTERN_CHARS:
        refuse(f"a regular expression pattern of {len(pattern):,} characters "
               f"(at most {MAX_PATTERN_CHARS:,})")  # fmt: skip
    try:
        return re2.compile(pattern, _options())
    except Exception as exc:
        raise CelLibraryError(f"invalid regular expression {pattern[:200]!r}: {exc}") from None


def matches(text: str, pattern: str) -> bool:
    return _compiled(pattern).search(text) is not None


def _matches_member(call: Call) -> Call:
    # a literal pattern too: its cost is its compiled program over the text (``[ab]{1000}``
    # is 9 characters, 1,000 instructions), which only the call sees
    return replace(call, function=MATCHES)


def _matches_global(call: Call) -> Call:
    return replace(call, function=MATCHES, target=call.args[0], args=call.args[1:])


def contains(text: str, sub: str) -> bool:
    """The standard ``contains``, searched in linear time (the runtime's searches position
    by position: a long needle that almost matches everywhere, from the object, takes
    seconds for one call, which no step counted)."""
    return sub in text


def _contains(call: Call) -> Call:
    return replace(call, function=CONTAINS)


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


# RE2 matches in linear time with its DFA, but a long pattern may run the DFA out of memory
# (an alternation of 1,500 repeats: 27,000 characters), and the search falls back to the
# NFA, which steps every state of the program for every character: ~0.6 s for a
# 2,000-character text on a loaded host, about this many text x pattern characters a step.
NFA_PAIRS_PER_STEP = 256


def search_cost(text: str, pattern: str, limit: int = -1) -> int:
    """Reading the text, compiling the pattern (a pattern from the input may be long), and
    the search as RE2's NFA may do it (text x the compiled program: a counted repetition
    is short to write, long to run); each match ``findAll`` gives is charged as it is
    found. A pattern over :data:`MAX_PATTERN_CHARS` is refused before it is compiled."""
    program = max(len(pattern), _compiled(pattern).programsize)
    return (
        reads(text)
        + len(pattern) // PATTERN_CHARS_PER_STEP
        + len(text) * program // NFA_PAIRS_PER_STEP
    )


REWRITES = [
    CallRewrite("matches", True, _matches_member, (1,), MATCHES),
    CallRewrite("matches", False, _matches_global, (2,), MATCHES),
    CallRewrite("contains", True, _contains, (1,), CONTAINS),
]
OVERLOADS = [
    Overload(CONTAINS, "assay_string_contains_string", ("string", "string"), "bool", contains,
             True, reads),
    Overload(MATCHES, "assay_string_matches_string", ("string", "string"), "bool", matches,
             True, search_cost),
    Overload("find", "string_find_string", ("string", "string"), "string", find, True,
             search_cost),
    Overload("findAll", "string_find_all_string", ("string", "string"), "list", find_all, True,
             search_cost),
    Overload("findAll", "string_find_all_string_int", ("string", "string", "int"), "list",
             find_all, True, search_cost),
]  # fmt: skip
