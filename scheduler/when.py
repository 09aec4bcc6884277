"""Reading "when" from people: ``--at`` instants, ``--in`` / ``--every`` durations,
and an explicit future instant at the head of a predicate.

Every function takes ``now`` so callers (and tests) decide the clock, and every
refusal is a :class:`WhenError` (a ``ValueError``) whose message is one
sentence a CLI can print before exiting 64.

Predicates that name their own instant: a predicate that *starts* with
``on``, ``at``, ``as of`` or ``after`` followed by an ISO-8601 date or
date-time ("on 2027-01-01, the Certificate api-tls is Ready",
"at 2027-01-01T09:00:00+01:00 the rollout is complete") is about that instant,
so submitting it defers the evaluation to it when it lies in the future. The
detector is deliberately conservative: an instant anywhere else in the text
("no certificate expires before 2027-01-01") describes cluster state, not when
to look, and is left alone. A bare date means 00:00 UTC that day; a date-time
without an offset is read as UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from schemas import durations

_LEADING_INSTANT = re.compile(
    r"^\s*(?:on|at|as\s+of|after)\s+"
    r"(?P<instant>\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?)?)"
    r"(?=$|[\s,.;:])",
    re.IGNORECASE,
)
MAX_DEFER_SECONDS = 5 * 366 * 86400


class WhenError(ValueError):
    """A time the user gave that cannot be used; the message says what to type instead."""


def parse_duration(text: str) -> float:
    """Seconds in ``"90s"``, ``"15m"``, ``"2h"``, ``"1h30m"``, ``"1d"``, ``"1w"`` or ``"45"``."""
    try:
        return durations.parse_duration(text)
    except durations.DurationError as exc:
        raise WhenError(str(exc)) from None


def parse_instant(text: str) -> datetime:
    """An ISO-8601 instant with an explicit offset or ``Z``, as UTC."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise WhenError(
            f"cannot read instant {text!r}; write it like 2027-01-01T00:00:00Z"
        ) from None
    if moment.tzinfo is None:
        raise WhenError(
            f"instant {text!r} has no time zone; add Z or an offset, e.g. 2027-01-01T00:00:00Z"
        )
    return moment.astimezone(UTC)


def resolve_not_before(
    at: str | None, in_: str | None, now: datetime | None = None
) -> datetime | None:
    """The ``not_before`` for ``--at`` / ``--in`` (at most one), refusing the past."""
    if at is not None and in_ is not None:
        raise WhenError("give --at or --in, not both")
    now = now or datetime.now(UTC)
    if at is not None:
        moment = parse_instant(at)
        if moment <= now:
            raise WhenError(
                f"instant {at} is in the past; give a future instant or drop --at to run now"
            )
    elif in_ is not None:
        moment = now + timedelta(seconds=parse_duration(in_))
    else:
        return None
    if (moment - now).total_seconds() > MAX_DEFER_SECONDS:
        raise WhenError("that is more than five years away; give a nearer instant")
    return moment


def explicit_instant(predicate: str) -> datetime | None:
    """The instant a predicate opens with ("on 2027-01-01, ..."), or None."""
    match = _LEADING_INSTANT.match(predicate)
    if match is None:
        return None
    raw = match.group("instant").replace(" ", "T")
    try:
        moment = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def deferral_for(predicate: str, now: datetime | None = None) -> datetime | None:
    """The instant to defer a predicate to: its leading instant if that is still ahead."""
    moment = explicit_instant(predicate)
    now = now or datetime.now(UTC)
    if moment is None or moment <= now:
        return None
    return moment
