"""The cron expressions and time zones a schedule may be given over HTTP, as the API publishes them.

The OpenAPI document states every rule the server applies to a request, so a client (or a
fuzzer) that follows the document is never refused for a rule it could not read. Two of a
schedule's fields had rules no schema could read: "an expression croniter takes, that fires"
and "a zone the machine's time zone database knows". Here they are a ``pattern`` and an
``enum``, and the server checks exactly those:

* ``CRON_PATTERN``: five fields (numbers, ``*``, ranges, lists, steps, month and weekday
  names in upper or lower case, one space between fields) or an ``@alias``. The server
  matches it first, then croniter reads the expression; every expression the pattern admits
  is one croniter takes and that fires (tests/schemas/test_cadence.py draws them from the
  pattern), so the two checks accept the same language. A day of month of 30 or 31 is taken
  only with every month (``*``): with chosen months it could name a day none of them has.
* ``IANA_ZONES``: the zones of the ``tzdata`` package (pinned), not of the machine's own
  database, so the published list is the same on every machine; ``zoneinfo`` reads the
  package's data when the machine has no zone of that name.

The stored ``Schedule`` keeps the wider croniter rule (``schemas.schedule.valid_cron``): a
schedule stored from the CLI with another spelling stays readable.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Annotated

from pydantic import AfterValidator, Field

from schemas.schedule import cron_fires, known_zone


def _names(*names: str) -> str:
    return "|".join([*names, *(n.lower() for n in names)])


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


_ALIASES = "@(?:yearly|annually|monthly|weekly|daily|midnight|hourly)"
CRON_PATTERN = (
    f"^(?:{_ALIASES}|{_field(_MINUTE)} {_field(_HOUR)} "
    rf"(?:{_field(_DAY)} \*|{_field(_DAY_IN_EVERY_MONTH)} {_field(_MONTH)}) "
    f"{_field(_WEEKDAY)})$"
)
MAX_CRON_LENGTH = 200
_CRON = re.compile(CRON_PATTERN)


def published_cron(expression: str) -> str:
    """``expression`` if it matches ``CRON_PATTERN`` and croniter takes it, and it fires."""
    if not _CRON.fullmatch(expression):
        raise ValueError(
            f"cron expression {expression[:MAX_CRON_LENGTH]!r} is not five fields of numbers, "
            "names, '*', ranges, lists and steps (one space apart; a day of month over 29 only "
            "with every month) or an @alias such as @hourly"
        )
    return cron_fires(expression)


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


PublishedCron = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_CRON_LENGTH,
        description="Five cron fields (minute hour day-of-month month day-of-week) one space "
        "apart, or an @alias such as @hourly; read in `timezone`.",
        json_schema_extra={"pattern": CRON_PATTERN},
    ),
    AfterValidator(published_cron),
]
PublishedZone = Annotated[
    str,
    Field(
        description="IANA zone the cron expression is read in (the tzdata package's list).",
        json_schema_extra={"enum": list(iana_zones())},
    ),
    AfterValidator(published_zone),
]
