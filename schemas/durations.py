"""Durations as people write them (``90s``, ``15m``, ``1h30m``, ``1d``): one reader for all.

The CLI's ``--every`` / ``--in`` / ``--jitter``, the API's ages and the declarative
files of ``assay apply`` (``every: 15m``) read a duration the same way, so this lives
with the contract and everything above it calls it.
"""

from __future__ import annotations

import math
import re

# ASCII digits only (re.ASCII): Python's \d also matches other scripts' digits, which
# float() reads (an Arabic-Indic five and "m" was five minutes); JSON Schema's \d, in the
# pattern below, is ASCII already.
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(w|d|h|ms|m|s)", re.IGNORECASE | re.ASCII)
_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
# The same rule as a JSON-Schema pattern, for editors (case as the reader allows).
DURATION_PATTERN = r"^\s*(\d+(\.\d+)?|(\d+(\.\d+)?\s*([wWdDhHsS]|[mM][sS]?)\s*)+)\s*$"


class DurationError(ValueError):
    """A duration that cannot be read; the message says how to write one."""


def parse_duration(text: str) -> float:
    """Seconds in ``"90s"``, ``"15m"``, ``"2h"``, ``"1h30m"``, ``"1d"``, ``"1w"`` or ``"45"``."""
    cleaned = text.strip().lower().replace(" ", "")
    if not cleaned:
        raise DurationError("empty duration; write it like 90s, 15m, 2h or 1d")
    if re.fullmatch(r"\d+(?:\.\d+)?", cleaned, re.ASCII):
        seconds = float(cleaned)
    else:
        position, seconds = 0, 0.0
        for match in _PART.finditer(cleaned):
            if match.start() != position:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2).lower()]
            position = match.end()
        if position != len(cleaned):
            raise DurationError(f"cannot read duration {text!r}; write it like 90s, 15m, 2h or 1d")
    if seconds <= 0:
        raise DurationError(f"duration {text!r} must be longer than zero")
    return seconds


# --- durations with bounds, as a pattern (the HTTP apply documents) -------------------------
# A JSON Schema cannot add up the parts of ``1h30m``, so a duration field with bounds is
# published in a form whose bounds a pattern can state: whole numbers, each unit at most
# once, from the largest down (``2w``, ``36h``, ``1h30m``, ``90s``: what `assay get` writes),
# the first part bounded so that the parts after it cannot pass the upper bound.
_UNIT_SECONDS = (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def _same_width(low: str, high: str) -> list[str]:
    """Patterns for the numbers ``low``..``high``, both written with as many digits."""
    if low == high:
        return [low]
    if len(low) == 1:
        return [f"[{low}-{high}]"]
    if low[0] == high[0]:
        return [low[0] + tail for tail in _same_width(low[1:], high[1:])]
    rest = len(low) - 1
    out: list[str] = []
    first = int(low[0])
    if low[1:] != "0" * rest:
        out += [low[0] + tail for tail in _same_width(low[1:], "9" * rest)]
        first += 1
    last = int(high[0]) if high[1:] == "9" * rest else int(high[0]) - 1
    if first <= last:
        out.append(f"[{first}-{last}]" + "[0-9]" * rest)
    if high[1:] != "9" * rest:
        out += [high[0] + tail for tail in _same_width("0" * rest, high[1:])]
    return out


def integer_range_pattern(low: int, high: int) -> str:
    """A regular expression (no anchors) for the whole numbers ``low``..``high`` written
    without leading zeros."""
    parts: list[str] = []
    for width in range(len(str(low)), len(str(high)) + 1):
        start = max(low, 10 ** (width - 1) if width > 1 else 0)
        end = min(high, 10**width - 1)
        if start <= end:
            parts += _same_width(str(start), str(end))
    return "(?:" + "|".join(parts) + ")"


def bounded_duration_pattern(minimum: float, maximum: float) -> str:
    """The pattern of a duration from ``minimum`` to ``maximum`` seconds (both included)
    written as whole units, largest first, each at most once (``1h30m``, ``90s``)."""
    forms: list[str] = []
    for index, (unit, size) in enumerate(_UNIT_SECONDS):
        low = max(1, math.ceil(minimum / size))
        alone = int(maximum // size)
        if low <= alone:
            forms.append(integer_range_pattern(low, alone) + unit)
        # followed by smaller parts: the first part leaves room for all of them
        led = int((maximum - size + 1) // size)
        smaller = _UNIT_SECONDS[index + 1 :]
        if low <= led and smaller:
            tail = ""
            for (name, part), (_, above) in zip(smaller, _UNIT_SECONDS[index:], strict=False):
                tail += f"(?:{integer_range_pattern(1, above // part - 1)}{name})?"
            forms.append(f"{integer_range_pattern(low, led)}{unit}{tail}")
    return "^(?:" + "|".join(forms) + ")$"
