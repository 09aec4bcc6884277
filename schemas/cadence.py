"""What a schedule's cron expression and time zone may be: one rule each, as published.

The OpenAPI document states every rule the server applies to a request, so a client (or a
fuzzer) that follows the document is never refused for a rule it could not read. "An
expression croniter takes, that fires" and "a zone the machine's time zone database knows"
are no rules a schema can state; here they are a ``pattern`` and an ``enum``, and every door
(API, CLI, apply; the stored ``Schedule`` declares its fields with these types) checks
exactly those:

* ``CRON_PATTERN``: five fields (numbers, ``*``, ranges, lists, steps, month and weekday
  names in upper or lower case, one space between fields) or an ``@alias``. An expression
  is taken when croniter takes it, it fires and it matches the pattern; every expression
  the pattern admits is one croniter takes and that fires (tests/schemas/test_cadence.py
  draws them from the pattern), so the accepted language is the pattern's. A day of month
  over 29 is taken only with every month (``*``): with chosen months it could name a day
  none of them has.
* ``iana_zones()``: the zones of the ``tzdata`` package (pinned), not of the machine's own
  database, so the published list is the same on every machine; ``zoneinfo`` reads the
  package's data when the machine has no zone of that name.

``valid_cron`` and ``known_zone`` are croniter's and zoneinfo's own, wider rules: an apply
document's fields are read with them first, for their sentences, and a schedule read back
from the store is read with them (``STORED``), so one stored before the published rules
still loads and fires, and a change of its other fields keeps it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import AfterValidator, Field, ValidationInfo


def known_zone(zone: str) -> str:
    """``zone`` if it names an IANA time zone, else a ``ValueError`` saying what to write."""
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {zone!r}; use an IANA name such as Europe/Paris or UTC"
        ) from None
    return zone


def valid_cron(expr: str | None) -> str | None:
    """``expr`` with its whitespace folded, if it is a five-field cron expression or @alias."""
    if expr is None:
        return None
    expr = " ".join(expr.split())
    if not expr.startswith("@") and len(expr.split(" ")) != 5:
        raise ValueError(
            f"cron expression {expr!r} must have five fields "
            "(minute hour day-of-month month day-of-week)"
        )
    if not croniter.is_valid(expr):
        raise ValueError(f"invalid cron expression {expr!r}")
    return expr


def cron_fires(expr: str) -> str:
    """``expr`` (folded, see ``valid_cron``) if croniter takes it and it fires: an expression
    such as ``0 0 30 2 *`` is valid syntax but names no day."""
    folded = valid_cron(expr) or expr
    try:
        croniter(folded, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except Exception:
        raise ValueError(f"cron expression {folded!r} never fires") from None
    return folded


def _names(*names: str) -> str:
    """The names in any case (``MON``, ``mon``, ``Mon``), as croniter reads them."""
    return "|".join("".join(f"[{c}{c.lower()}]" for c in name) for name in names)


_MINUTE = "(?:[0-5]?[0-9])"
_HOUR = "(?:[01]?[0-9]|2[0-3])"
_DAY = "(?:0?[1-9]|[12][0-9]|3[01])"
_DAY_IN_EVERY_MONTH = "(?:0?[1-9]|1[0-9]|2[0-9])"  # 1-29: some year has it in every month
_MONTH = "(?:0?[1-9]|1[0-2]|" + _names(
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"
) + ")"  # fmt: skip
_WEEKDAY = "(?:0?[0-7]|" + _names("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT") + ")"
_STEP = "(?:/[1-9][0-9]?)"


def _field(value: str) -> str:
    """``*`` or ``*/N``, or a list of values and ranges, each with an optional step."""
    item = f"{value}(?:-{value})?{_STEP}?"
    return rf"(?:\*{_STEP}?|{item}(?:,{item})*)"


# croniter's day forms, each alone in its field: the last day of the month (``L``, which
# every month has), and with any day (``*`` or ``?``) the Nth such weekday of the month
# (``MON#1``, N 1-5: some month has a fifth) or the last one (``L5``); croniter wants both
# day fields to hold for these, so they go with no day of month.
_ANY_DAY = r"(?:\*|\?)"
_WEEKDAY_OF_MONTH = rf"(?:{_WEEKDAY}#[1-5]|L[0-7])"
_ALIASES = "@(?:yearly|annually|monthly|weekly|daily|midnight|hourly)"
CRON_PATTERN = (
    f"^(?:{_ALIASES}|{_field(_MINUTE)} {_field(_HOUR)} (?:"
    rf"(?:{_field(_DAY)}|L) \* {_field(_WEEKDAY)}"
    rf"|(?:{_field(_DAY_IN_EVERY_MONTH)}|L) {_field(_MONTH)} {_field(_WEEKDAY)}"
    f"|{_ANY_DAY} {_field(_MONTH)} (?:{_field(_WEEKDAY)}|{_WEEKDAY_OF_MONTH})))$"
)
MAX_CRON_LENGTH = 200
_CRON = re.compile(CRON_PATTERN)


def published_cron(expression: str) -> str:
    """``expression`` if croniter takes it, it fires, and it matches ``CRON_PATTERN`` (croniter
    is asked first only for its sentences; the language is the intersection either way)."""
    cron_fires(expression)
    if not _CRON.fullmatch(expression):
        raise ValueError(
            f"cron expression {expression[:MAX_CRON_LENGTH]!r} is not five fields of numbers, "
            "names, '*', ranges, lists and steps, or L, ?, MON#1, L5 (one space apart; a day "
            "of month over 29 only with every month) or an @alias such as @hourly"
        )
    return expression


@cache
def iana_zones() -> tuple[str, ...]:
    """Every zone of the ``tzdata`` package, sorted: the list the API publishes and checks."""
    text = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return tuple(sorted(set(text.split())))


def published_zone(zone: str) -> str:
    """``zone`` if it is one of ``iana_zones()`` (and ``zoneinfo`` loads it)."""
    if zone not in iana_zones():
        raise ValueError(f"unknown time zone {zone[:100]!r}; use an IANA name such as Europe/Paris")
    return known_zone(zone)


# Validation context key: the fields of a schedule read back from the store (or kept
# unchanged by a change of it), taken under the rules they were stored under.
STORED_FIELDS = "stored_fields"
STORED = {STORED_FIELDS: frozenset({"cron", "timezone"})}


def _stored(info: ValidationInfo) -> bool:
    """Whether the field is one read back from the store: a schedule stored under wider rules
    (croniter's and zoneinfo's own, before the published ones) still loads and fires, and a
    change of another field keeps it, rather than every read of it failing."""
    fields = (info.context or {}).get(STORED_FIELDS) or ()
    return info.field_name in fields


def _cron(expression: str, info: ValidationInfo) -> str:
    return cron_fires(expression) if _stored(info) else published_cron(expression)


def _zone(zone: str, info: ValidationInfo) -> str:
    return known_zone(zone) if _stored(info) else published_zone(zone)


PublishedCron = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_CRON_LENGTH,
        description="Five cron fields (minute hour day-of-month month day-of-week) one space "
        "apart, or an @alias such as @hourly; read in `timezone`.",
        json_schema_extra={"pattern": CRON_PATTERN},
    ),
    AfterValidator(_cron),
]
PublishedZone = Annotated[
    str,
    Field(
        description="IANA zone the cron expression is read in (the tzdata package's list).",
        json_schema_extra={"enum": list(iana_zones())},
    ),
    AfterValidator(_zone),
]
