"""What the Kubernetes CEL libraries share: the overload record, opaque values, errors."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from workers.policy_engine.cel.lib import values

# Kinds a parameter or result may have: CEL's, and the library values' (values.py). "dyn"
# as a parameter is expanded by the adapter into one overload per concrete kind (the runtime
# dispatches Python functions on concrete kinds).
KINDS = frozenset(
    {"int", "uint", "double", "string", "bool", "bytes", "null", "list", "map", "dyn",
     "timestamp", "duration", *values.TYPE_NAMES}
)  # fmt: skip


class CelLibraryError(ValueError):
    """An evaluation error of a library function (a bad argument, an index out of range)."""


class TooCostly(CelLibraryError):
    """A call would take more than the evaluation's steps, or build a result past
    :data:`MAX_RESULT_CHARS`: the evaluation is refused whatever its value (cel/programs.py)."""


class NoSuchOverload(CelLibraryError):
    """The argument is not of this overload's opaque kind: when two libraries share a
    function and signature (``isGreaterThan`` on quantities and semvers), the next one is
    tried."""


# What a call costs, in the steps of workers/policy_engine/probes/cost.py (about 5 us each). The
# runtime calls these functions while it holds the GIL and cannot be interrupted, and the
# static cost check cannot see their work: each call is costed over its actual arguments
# before it runs (and a loop over its input charges as it goes), against the same steps as
# the expression's comprehensions (cel/programs.py binds the meter around each evaluation). Each
# figure is about half what bench/bench_cel_calls.py measures, for a loaded host: a string
# converted to Python and scanned at C speed up to ~11 ns a character (find, replace,
# parsing), a Python loop over it up to ~380 ns a character (url's checks and getQuery), a
# list element converted and compared in Python up to ~640 ns (lists' indexOf), or
# converted back as a result ~150 ns (split).
READ_CHARS_PER_STEP = 256
LOOPED_CHARS_PER_STEP = 8
ELEMENTS_PER_STEP = 4
MAX_RESULT_CHARS = 10_000_000  # the longest string (or total of a list's) a call may build


def _sizes(args: tuple[Any, ...]) -> tuple[int, int]:
    """Characters of the strings and elements of the lists and maps in the arguments, at any
    depth (an opaque value such as a URL is a map holding its text)."""
    chars, items, todo = 0, 0, list(args)
    while todo:
        item = todo.pop()
        if isinstance(item, str | bytes):
            chars += len(item)
        elif isinstance(item, dict):
            items += len(item)
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            items += len(item)
            todo.extend(item)
    return chars, items


def reads(*args: Any) -> int:
    """A call that reads each argument once, at C speed (``indexOf``, ``trim``, parsing)."""
    chars, items = _sizes(args)
    return 1 + chars // READ_CHARS_PER_STEP + items // ELEMENTS_PER_STEP


def loops(*args: Any) -> int:
    """A call that loops over each character (or element) in Python (url's checks)."""
    chars, items = _sizes(args)
    return 1 + chars // LOOPED_CHARS_PER_STEP + items // ELEMENTS_PER_STEP


@dataclass(frozen=True)
class Overload:
    """One overload of a library function: ``receiver.function(args)`` when ``member``.
    ``cost``: its steps for these arguments (:func:`reads` unless said)."""

    function: str
    id: str
    params: tuple[str, ...]
    result: str
    impl: Callable[..., Any]
    member: bool = False
    cost: Callable[..., int] = reads


class CallMeter:
    """The steps library calls may take in one evaluation, and why one was refused."""

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed
        self.spent = 0
        self.refused: str | None = None

    def charge(self, steps: int, what: str) -> None:
        self.spent += steps
        if self.spent > self.allowed:
            self.refuse(f"{what} would take more than the {self.allowed:,} steps left")

    def refuse(self, why: str) -> None:
        if self.refused is None:
            self.refused = why
        raise TooCostly(f"too costly: {why}")


_current = threading.local()


def charge(steps: int, what: str) -> None:
    """Charge ``steps`` to the evaluation under way (none outside one: a direct call)."""
    meter: CallMeter | None = getattr(_current, "meter", None)
    if meter is not None:
        meter.charge(steps, what)


def refuse(why: str) -> None:
    """Refuse the call for its cost: the whole evaluation is refused (cel/programs.py), whatever
    value it would come to."""
    meter: CallMeter | None = getattr(_current, "meter", None)
    if meter is None:
        raise TooCostly(f"too costly: {why}")
    meter.refuse(why)


def check_result(chars: int, what: str) -> None:
    """Refuse a call whose result would hold more than :data:`MAX_RESULT_CHARS`."""
    if chars > MAX_RESULT_CHARS:
        why = f"{what} would build {chars:,} characters (at most {MAX_RESULT_CHARS:,})"
        meter: CallMeter | None = getattr(_current, "meter", None)
        if meter is None:
            raise TooCostly(f"too costly: {why}")
        meter.refuse(why)


@contextmanager
def metered(allowed: int) -> Iterator[CallMeter]:
    """Library calls made in this thread within the block charge a new meter of ``allowed``
    steps (the runtime calls them back on the thread that evaluates)."""
    previous = getattr(_current, "meter", None)
    meter = CallMeter(allowed)
    _current.meter = meter
    try:
        yield meter
    finally:
        _current.meter = previous


def opaque(kind: str, **fields: Any) -> Any:
    """A Kubernetes library value of ``kind`` (values.py) with these parts."""
    return values.make(kind, fields)


def unwrap(value: Any, kind: str) -> dict[str, Any]:
    """The parts of a library value of ``kind``; CelLibraryError for anything else."""
    found = values.parts(value, kind)
    if found is None:
        raise NoSuchOverload(f"no such overload: expected a {kind}")
    return found


def holds_nul(value: Any) -> bool:
    """Whether a string, bytes or map key in ``value`` holds a NUL character.

    The CEL runtime's bindings hand strings and bytes to C++ cut at their first NUL:
    ``"a\\x00evil"`` would reach CEL as ``"a"`` (``contains('evil')`` false, ``== 'a'``
    true) and two keys that differ only after one would collide. Such a value is refused
    before it is converted, never judged as cut. JSON text escapes a NUL as ``\\u0000``,
    so the encoder (C speed) answers for almost every value; only a value whose text
    has that sequence, or that is not JSON, is walked."""
    try:
        if "\\u0000" not in json.dumps(value):
            return False
    except (TypeError, ValueError, RecursionError):
        pass
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list | tuple):
            todo.extend(item)
        elif isinstance(item, bytes | bytearray):
            todo.append(item.decode("latin-1"))  # a NUL byte is a NUL character so
        elif isinstance(item, str) and "\x00" in item:
            return True
    return False


def converted_values(value: Any) -> int:
    """How many values converting ``value`` between Python and CEL makes: each list, map,
    key and scalar one, a string one more per KB (what a conversion is charged by)."""
    total, todo = 0, [value]
    while todo:
        item = todo.pop()
        total += 1
        if isinstance(item, dict):
            total += len(item)
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, str | bytes):
            total += len(item) // 1024
    return total
