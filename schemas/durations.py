"""Durations as people write them (``90s``, ``15m``, ``1h30m``, ``1d``): one reader for all.

The CLI's ``--every`` / ``--in`` / ``--jitter``, the API's ages and the declarative
files of ``assay apply`` (``every: 15m``) read a duration the same way, so this lives
with the contract and everything above it calls it.
"""

from __future__ import annotations

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
