"""What the Kubernetes CEL libraries share: the overload record, opaque values, errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KIND_KEY = "@kubernetes"
# Kinds a parameter or result may have. "dyn" as a parameter is expanded by the adapter into
# one overload per concrete kind (the runtime dispatches Python functions on concrete kinds).
KINDS = frozenset(
    {"int", "uint", "double", "string", "bool", "bytes", "null", "list", "map", "dyn",
     "timestamp", "duration"}
)  # fmt: skip


class CelLibraryError(ValueError):
    """An evaluation error of a library function (a bad argument, an index out of range)."""


class NoSuchOverload(CelLibraryError):
    """The argument is not of this overload's opaque kind: when two libraries share a
    function and signature (``isGreaterThan`` on quantities and semvers), the next one is
    tried."""


@dataclass(frozen=True)
class Overload:
    """One overload of a library function: ``receiver.function(args)`` when ``member``."""

    function: str
    id: str
    params: tuple[str, ...]
    result: str
    impl: Callable[..., Any]
    member: bool = False


def opaque(kind: str, **fields: Any) -> dict[str, Any]:
    """A Kubernetes opaque value as the map it travels as."""
    return {KIND_KEY: kind, **fields}


def unwrap(value: Any, kind: str) -> dict[str, Any]:
    """The fields of an opaque value of ``kind``; CelLibraryError for anything else."""
    if not isinstance(value, dict) or value.get(KIND_KEY) != kind:
        raise NoSuchOverload(f"no such overload: expected a {kind}")
    return value


def kind_of(value: Any) -> str | None:
    return value.get(KIND_KEY) if isinstance(value, dict) else None
