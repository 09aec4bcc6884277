"""Kubernetes' semver library (1.33+, version 1): ``semver(s)``, ``semver(s, normalize)``,
``isSemver(s)``, ``isSemver(s, normalize)``, and on a version ``major()``, ``minor()``,
``patch()``, ``isGreaterThan(v)``, ``isLessThan(v)``, ``compareTo(v)``; ``==`` compares
versions (build metadata ignored). Semantic Versioning 2.0.0; ``normalize`` accepts a
leading ``v`` and missing minor/patch (``v1.2`` is 1.2.0) and drops leading zeros."""

from __future__ import annotations

import re
from typing import Any

from workers.policy_engine.cel.lib.base import CelLibraryError, Overload, opaque, unwrap

KIND = "semver"
_STRICT = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


def _normalized(text: str) -> str:
    """``text`` normalised as the API server does before parsing: a leading ``v`` dropped,
    leading zeros dropped from each dot-separated part, missing minor and patch added as
    ``0``; a short version with a pre-release or build part is refused."""
    parts = (text[1:] if text.startswith("v") else text).split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            parts[index] = stripped if stripped[:1].isdigit() else "0" + stripped
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise CelLibraryError(f"invalid semver: {text!r}: a short version has no pre-release")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def parse(text: str, normalize: bool = False) -> tuple[int, int, int, str]:
    candidate = _normalized(text) if normalize else text
    match = _STRICT.match(candidate)
    if not match:
        raise CelLibraryError(f"invalid semver: {text!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3)), match.group(4) or ""


def to_semver(text: str, normalize: bool = False) -> dict[str, Any]:
    major, minor, patch, pre = parse(text, normalize)
    return opaque(KIND, major=major, minor=minor, patch=patch, pre=pre)


def is_semver(text: str, normalize: bool = False) -> bool:
    try:
        parse(text, normalize)
    except CelLibraryError:
        return False
    return True


def _fields(value: Any) -> dict[str, Any]:
    return unwrap(value, KIND)


def major(value: Any) -> int:
    return int(_fields(value)["major"])


def minor(value: Any) -> int:
    return int(_fields(value)["minor"])


def patch(value: Any) -> int:
    return int(_fields(value)["patch"])


def _pre_key(pre: str) -> tuple[Any, ...]:
    if not pre:
        return (1,)  # a release ranks above any of its pre-releases
    ids = [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")]
    return (0, *ids)


def compare_to(value: Any, other: Any) -> int:
    a, b = _fields(value), _fields(other)
    key_a = (a["major"], a["minor"], a["patch"], _pre_key(str(a["pre"])))
    key_b = (b["major"], b["minor"], b["patch"], _pre_key(str(b["pre"])))
    return (key_a > key_b) - (key_a < key_b)


def is_greater_than(value: Any, other: Any) -> bool:
    return compare_to(value, other) > 0


def is_less_than(value: Any, other: Any) -> bool:
    return compare_to(value, other) < 0


OVERLOADS = [
    Overload("semver", "string_to_semver", ("string",), KIND, to_semver),
    Overload("semver", "string_bool_to_semver", ("string", "bool"), KIND, to_semver),
    Overload("isSemver", "is_semver_string", ("string",), "bool", is_semver),
    Overload("isSemver", "is_semver_string_bool", ("string", "bool"), "bool", is_semver),
    Overload("major", "semver_major", (KIND,), "int", major, True),
    Overload("minor", "semver_minor", (KIND,), "int", minor, True),
    Overload("patch", "semver_patch", (KIND,), "int", patch, True),
    Overload("isGreaterThan", "semver_is_greater_than", (KIND, KIND), "bool", is_greater_than,
             True),
    Overload("isLessThan", "semver_is_less_than", (KIND, KIND), "bool", is_less_than, True),
    Overload("compareTo", "semver_compare_to", (KIND, KIND), "int", compare_to, True),
]  # fmt: skip
