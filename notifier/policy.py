"""Which changes a sink hears about, and when: pure functions of the change and the store's view.

Two steps. :func:`matches` applies the static filter (checks, targets, from/to
verdicts) the moment a change is read. :func:`decide_message` runs when the
change is due (its ``min_duration_seconds`` passed) and judges it against the
check's state now and what this sink was last told, so that

- a flap shorter than the minimum duration is not delivered at all (neither
  the change away nor the change back);
- with ``cannot_determine`` off, a change to cannot_determine is not delivered
  and the next verdict is judged against the last one the sink heard of
  (true -> cannot_determine -> true says nothing; -> false says true -> false);
- a change older than one the sink already heard of (delivered out of order by
  another replica) is dropped rather than overwriting newer news.

Alertmanager needs none of this: it is kept in sync with the check's current
state (notifier/alertmanager.py), so only :func:`matches` and the delay apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Literal

from schemas.fleet import CheckSummary, VerdictChange
from schemas.notify import SinkFilter
from schemas.request import target_names
from schemas.verdict import VerdictKind
from workers.fleet.notify_feed import Told, epoch_ms

CD = VerdictKind.CANNOT_DETERMINE


def _any_match(value: str, patterns: list[str]) -> bool:
    return not patterns or any(fnmatchcase(value, pattern) for pattern in patterns)


def _target_match(target: str, patterns: list[str]) -> bool:
    """A bare name or glob (``prod-*``) also means the snapshot of that name, as elsewhere."""
    return not patterns or any(
        fnmatchcase(target, name) for pattern in patterns for name in target_names(pattern)
    )


def matches(sink: SinkFilter, change: VerdictChange, name: str | None = None) -> bool:
    """The static filter: check ids / globs, targets / globs, from and to verdicts.

    A change whose run routes it to this sink by ``name`` (a check's or schedule's
    ``notify`` routes) passes the check and target filters: the route chose the check.
    The verdict filters still apply: they say what the sink wants to hear of any check.
    """
    routed = name is not None and name in change.notify
    return (
        (routed or _any_match(change.check_id, sink.checks))
        and (routed or _target_match(change.target, sink.targets))
        and (not sink.from_verdicts or change.from_verdict in sink.from_verdicts)
        and (not sink.to_verdicts or change.to_verdict in sink.to_verdicts)
    )


def due_at(sink: SinkFilter, change: VerdictChange) -> datetime:
    """When the change may be delivered: its instant plus the sink's minimum duration."""
    return change.at + timedelta(seconds=sink.min_duration_seconds)


@dataclass(frozen=True)
class Decision:
    """What to do with a due change; ``remember`` is written when it is acknowledged."""

    deliver: bool
    reason: Literal["deliver", "flapped", "cannot_determine", "first", "stale", "unchanged"]
    presented_from: VerdictKind | None = None
    remember: Told | None = None
    remember_mode: Literal["newer", "absent"] = "newer"


def still_in_new_state(change: VerdictChange, current: CheckSummary | None) -> bool:
    """Whether no later change of the check happened since ``change``."""
    return (
        current is not None
        and current.verdict == change.to_verdict
        and current.changed_at is not None
        and epoch_ms(current.changed_at) == epoch_ms(change.at)
    )


def decide_message(
    sink: SinkFilter,
    change: VerdictChange,
    current: CheckSummary | None,
    told: Told | None,
) -> Decision:
    """Deliver a due change to a webhook or Slack sink, or say why not."""
    at_ms = epoch_ms(change.at)
    # What the sink believes before this change, when it never heard of the check:
    # the verdict the change moved away from (unless that is a verdict it ignores).
    assumed = None
    if told is None and (sink.cannot_determine or change.from_verdict != CD):
        assumed = Told(change.from_verdict, at_ms)
    if sink.min_duration_seconds > 0 and not still_in_new_state(change, current):
        return Decision(False, "flapped", remember=assumed, remember_mode="absent")
    if not sink.cannot_determine and change.to_verdict == CD:
        return Decision(False, "cannot_determine", remember=assumed, remember_mode="absent")
    if not sink.cannot_determine and told is None and change.from_verdict == CD:
        # The check never had a verdict this sink cares about: like a first verdict,
        # this one is not a change for it.
        return Decision(
            False, "first", remember=Told(change.to_verdict, at_ms), remember_mode="absent"
        )
    if told is not None and told.at_ms > at_ms:
        return Decision(False, "stale")
    if told is not None and told.verdict == change.to_verdict:
        return Decision(False, "unchanged", remember=Told(told.verdict, at_ms))
    presented = told.verdict if told is not None else change.from_verdict
    return Decision(
        True, "deliver", presented_from=presented, remember=Told(change.to_verdict, at_ms)
    )
