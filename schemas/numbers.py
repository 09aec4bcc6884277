"""Numbers as people type them on a command line: one strict reader for every limit.

Why strict: Python's ``int()`` and ``float()`` read ``5_000``, ``+5000``, `` 5000 ``
and digits of other scripts (Arabic-Indic, Devanagari), and a flag reader that also dropped commas
read ``5,000`` (and ``5,0,0``). A limit must be exactly what was meant, and the
documentation says a value that is not a number is refused. So a number here is what
JSON writes: ASCII digits, an optional leading ``-`` (read, so that the range check
can say which bound applies), a decimal point and an exponent for an amount. The
API's bodies are JSON already, and ``assay apply`` documents are read the same way
(``workers.engine.toolsets.yaml_documents.StrictNumbersLoader``).
"""

from __future__ import annotations

import re

_WHOLE = re.compile(r"-?[0-9]+", re.ASCII)
_AMOUNT = re.compile(r"-?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", re.ASCII)


class NotANumber(ValueError):
    """Text that is not a number as JSON writes one; the message says what is taken."""


def whole_number(text: str) -> int:
    """``text`` as an int, if it is digits 0-9 (an optional ``-``), else :class:`NotANumber`."""
    if not _WHOLE.fullmatch(text):
        raise NotANumber(
            f"takes a whole number written with the digits 0-9, e.g. 200000; got {text!r}"
        )
    return int(text)


def amount(text: str) -> float:
    """``text`` as a float, if it is a JSON number (``5``, ``2.50``, ``1e-3``), else
    :class:`NotANumber`; never NaN or infinity (those are not numbers JSON writes)."""
    if not _AMOUNT.fullmatch(text):
        raise NotANumber(
            f"takes a number written with the digits 0-9 and a '.', e.g. 5 or 2.50; got {text!r}"
        )
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise NotANumber(f"takes a finite number; {text!r} is too large to hold")
    return value


def integral(value: object) -> object:
    """A JSON number without a fraction as an int (JSON Schema's ``integer`` is any number
    without one: ``5000.0`` is one), for a strict integer field's ``before`` validator;
    anything else unchanged, for the field to judge (text stays text, and is refused)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
