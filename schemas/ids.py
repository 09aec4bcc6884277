"""The one alphabet for ids a caller may choose: run, check, batch and schedule ids.

Every one of these ids becomes part of a Redis key (``P:run:{run_id}``,
``P:check:{check_id}:history``, ``P:batch:{batch_id}:runs``, see docs/fleet.md),
and the store separates a key's parts with ``:``. An id holding ``:`` could
name another key's suffix (check ``victim:history`` would be the history
stream of check ``victim``), so ids are limited to a small alphabet without
it, checked wherever one enters: these pydantic types (requests, schedules,
API bodies and paths), the CLI, the Python client, and the store's key
builders themselves.

    1 to 128 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit

Schedule ids use the same alphabet with at most 64 characters (a schedule's
run ids are built from its id, the fire instant and a target hash).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema

ID_MAX_LENGTH = 128
SCHEDULE_ID_MAX_LENGTH = 64
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
ID_RULE = "1 to 128 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit"

_ID = re.compile(ID_PATTERN)
_SCHEDULE_ID = re.compile(SCHEDULE_ID_PATTERN)
_SHOWN_CHARS = 80  # a hostile id is echoed back cut to this length


class InvalidId(ValueError):
    """An id outside the safe alphabet; the message says which id and what is allowed."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def check_id(value: object, what: str = "id", *, max_length: int = ID_MAX_LENGTH) -> str:
    """``value`` if it is a valid id, else ``InvalidId`` naming ``what`` and the rule."""
    pattern = _SCHEDULE_ID if max_length == SCHEDULE_ID_MAX_LENGTH else _ID
    if isinstance(value, str) and pattern.fullmatch(value):
        return value
    rule = ID_RULE.replace(str(ID_MAX_LENGTH), str(max_length))
    raise InvalidId(f"{what} {_shown(value)} is not a valid id: use {rule} (no ':' or spaces)")


def _id_schema(max_length: int, description: str) -> dict[str, Any]:
    pattern = SCHEDULE_ID_PATTERN if max_length == SCHEDULE_ID_MAX_LENGTH else ID_PATTERN
    return {
        "type": "string",
        "pattern": pattern,
        "minLength": 1,
        "maxLength": max_length,
        "description": description,
    }


def _validator(what: str, max_length: int = ID_MAX_LENGTH) -> Callable[[str], str]:
    def validate(value: str) -> str:
        return check_id(value, what, max_length=max_length)

    return validate


def _described(what: str, max_length: int = ID_MAX_LENGTH) -> WithJsonSchema:
    rule = ID_RULE.replace(str(ID_MAX_LENGTH), str(max_length))
    return WithJsonSchema(_id_schema(max_length, f"{what}: {rule}."))


RunId = Annotated[str, AfterValidator(_validator("run_id")), _described("run_id")]
CheckId = Annotated[str, AfterValidator(_validator("check_id")), _described("check_id")]
BatchId = Annotated[str, AfterValidator(_validator("batch_id")), _described("batch_id")]
ScheduleId = Annotated[
    str,
    AfterValidator(_validator("schedule_id", SCHEDULE_ID_MAX_LENGTH)),
    _described("schedule_id", SCHEDULE_ID_MAX_LENGTH),
]
