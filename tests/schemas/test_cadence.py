"""The published cron pattern and time zone list are exactly what the server accepts.

The server takes an expression when croniter takes it, it fires and it matches
``CRON_PATTERN``: that is the pattern's language only if croniter takes (and fires on) every
expression the pattern admits, which hypothesis holds by drawing them from the pattern itself
(and every day of month with every single month, which a random draw rarely reaches). Time
zones: the enum in the document is the tzdata package's list, and the server checks
membership in that list.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from assay.api import OPENAPI_PATH
from assay.api_models import ScheduleCreate, ScheduleUpdate
from schemas.cadence import (
    CRON_PATTERN,
    MAX_CRON_LENGTH,
    iana_zones,
    published_cron,
    published_zone,
)

_SCHEDULE = {"name": "n", "predicate": "p", "targets": {"contexts": ["c"]}}


# What the document publishes: the pattern and the length limit beside it.
PUBLISHED = st.from_regex(CRON_PATTERN, fullmatch=True).filter(lambda e: len(e) <= MAX_CRON_LENGTH)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(PUBLISHED)
def test_every_expression_the_pattern_admits_is_taken_by_croniter_and_fires(expr: str) -> None:
    assert croniter.is_valid(expr), expr
    assert croniter(expr, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    assert published_cron(expr) == expr
    assert ScheduleCreate.model_validate({**_SCHEDULE, "cron": expr}).cron == expr


def _fires(expr: str) -> bool:
    try:
        croniter(expr, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except Exception:
        return False
    return True


def test_a_day_with_a_month_is_published_only_if_it_fires() -> None:
    """Every day of month with every single month: the pattern admits the pair only where
    croniter finds the day in that month (a random draw rarely lands on February 30th)."""
    for day in range(1, 32):
        for month in range(1, 13):
            expr = f"0 0 {day} {month} *"
            if re.fullmatch(CRON_PATTERN, expr):
                assert _fires(expr), expr
                assert published_cron(expr) == expr
            else:
                assert day > 29, expr  # narrower than croniter only where a month lacks it
        assert re.fullmatch(CRON_PATTERN, f"0 0 {day} * *")


@pytest.mark.parametrize(
    "expr",
    [
        "*/5 * * * *",
        "0 2 * * *",
        "30 1 * * 1-5",
        "0 9 * * MON-FRI",
        "0 9 * * mon,wed",
        "0 0 1 JAN-MAR *",
        "0 0 31 * *",
        "15 3 29 2 *",
        "0 0 1/7 * 0",
        "@hourly",
        "@midnight",
        "0 9 * * Mon-Fri",  # names in any case, as croniter reads them
        "0 0 L * *",  # the last day of the month
        "0 9 ? * Mon#1",  # the first Monday
        "0 9 * 1,7 L5",  # the last Friday of January and July
    ],
)
def test_the_usual_expressions_are_published(expr: str) -> None:
    assert re.fullmatch(CRON_PATTERN, expr)
    assert published_cron(expr) == expr


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "61 * * * *",  # minute out of range
        "* * * *",  # four fields
        "*  * * * *",  # two spaces
        " * * * * *",
        "* * * * *\n",
        "0 0 30 2 *",  # a day February never has: never fires
        "0 0 31 1 *",  # over 29 with chosen months: refused by the pattern, though it fires
        "*/0 * * * *",
        "@reboot",
        "0 0 29 * 1#2",  # croniter wants both: the 29th that is a second Monday, never
        "0 0 L * L5",  # likewise
        "0 9 15W * *",  # croniter's nearest weekday: not published
    ],
)
def test_what_the_pattern_refuses_the_server_refuses(expr: str) -> None:
    assert not re.fullmatch(CRON_PATTERN, expr)
    with pytest.raises(ValueError):
        published_cron(expr)
    with pytest.raises(ValidationError):
        ScheduleCreate.model_validate({**_SCHEDULE, "cron": expr})
    with pytest.raises(ValidationError):
        ScheduleUpdate.model_validate({"cron": expr})


def _published(schema_name: str, field: str) -> dict[str, object]:
    document = json.loads(OPENAPI_PATH.read_text())
    return document["components"]["schemas"][schema_name]["properties"][field]  # type: ignore[no-any-return]


def test_the_document_publishes_the_pattern_and_the_zone_list() -> None:
    for model in ("ScheduleCreate", "ScheduleUpdate"):
        cron = _published(model, "cron")
        patterns = [cron.get("pattern")] + [b.get("pattern") for b in cron.get("anyOf", [])]  # type: ignore[attr-defined]
        assert CRON_PATTERN in patterns, cron
        assert _published(model, "timezone")["enum"] == list(iana_zones())


def test_the_zone_list_is_the_tzdata_package_and_each_is_taken() -> None:
    zones = iana_zones()
    assert {"UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"} <= set(zones)
    assert len(zones) > 500
    for zone in zones:
        assert published_zone(zone) == zone
    assert ScheduleCreate.model_validate({**_SCHEDULE, "cron": "@daily", "timezone": "Asia/Tokyo"})


@pytest.mark.parametrize("zone", ["", "Mars/Olympus_Mons", "utc", "posix/Europe/Paris", "Europe/"])
def test_a_zone_off_the_list_is_refused(zone: str) -> None:
    assert zone not in iana_zones()
    with pytest.raises(ValueError):
        published_zone(zone)
    with pytest.raises(ValidationError):
        ScheduleUpdate.model_validate({"timezone": zone})
