"""What the store keeps of a run, sized by what it is for (docs/fleet.md, Retention and sizing).

A fleet re-runs the same checks for months, and nearly every re-run of a probe or an
imported policy finds what the run before it found. Keeping a full report per run made
Redis grow with time; what each part is for decides how much of it is kept instead:

* **The check's latest verdict** (``P:check:{id}``): always, one per check.
* **A bounded history per check** (``P:check:{id}:history``, ``history_limit`` entries): one
  small :class:`HistoryEntry` per run (which run, when, how long, which verdict), the verdict
  itself stored once per distinct wording (``P:check:{id}:verdicts``, :func:`verdict_template`),
  so a thousand identical re-runs share one copy.
* **Full reports** (``P:run:{id}``): a run that changed its check's verdict keeps its report
  ``run_ttl_seconds`` (what an alert links to); any other run that asked a model, or found
  something the latest report does not say (another object violates), keeps it
  ``report_ttl_seconds`` (days); a probe or policy re-run that found exactly what the latest
  report says (:func:`report_fingerprint`) writes no report:
  its history entry names the run it repeated, whose report is kept alive and counts it
  (``repeats``, ``repeated_at``). :func:`repeated_report` shows such a run's report: the one it
  repeated, with this run's own identity and times.

* **Run ids** (``P:runs``): one record per run in a history (exactly one verdict per run id);
  a policy's run inside a set run has none of its own, its set run's stands for it.
* **Batches**: a row per target in the batch's runs list (verdict, template, target), kept
  ``report_ttl_seconds`` once the batch finished, ``run_ttl_seconds`` when one of its runs
  changed a verdict.

Nothing here touches Redis: the store (workers/fleet/store.py) writes and reads what these
functions build.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from schemas.policy import policy_run_id
from schemas.report import RunReport
from schemas.verdict import Verdict

# What tells two runs of one check apart without changing what they found: their ids, batch,
# attempts and clocks, wherever the report holds them. Left out of a report's fingerprint
# (pydantic's own serializer leaves them out, as fast as it dumps); a repeat shows its own.
_REQUEST_IDENTITY = {"run_id", "batch_id", "submitted_at", "scheduled_at", "not_before"}
_VERDICT_IDENTITY = {"run_id", "started_at", "finished_at", "duration_seconds"}
_RUN_TIMING = {"duration_seconds"}
IDENTITY: dict[str, Any] = {
    "run_id": True,
    "attempts": True,
    "checkpoint": True,
    "repeat_of": True,
    "request": _REQUEST_IDENTITY,
    "verdict": _VERDICT_IDENTITY,
    "probe": {"run": _RUN_TIMING},
    "policy": {"duration_seconds": True, "probes": {"__all__": {"run": _RUN_TIMING}}},
    "policy_set": {"duration_seconds": True, "policies": {"__all__": {"run_id"}}},
}
_FINGERPRINT_CHARS = 16  # 64 bits: a collision within one check's history is not a concern


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_FINGERPRINT_CHARS]


def verdict_template(verdict: Verdict) -> tuple[str, str]:
    """(fingerprint, JSON) of what ``verdict`` says, without which run said it or when."""
    text = verdict.model_dump_json(exclude=_VERDICT_IDENTITY)
    return _digest(text), text


def report_fingerprint(report: RunReport) -> str:
    """What the report found, without whose run it was or when: two runs with the same
    fingerprint have the same verdict, explanation, evidence, probe and policy results."""
    return _digest(report.model_dump_json(exclude=IDENTITY))


def micros(instant: datetime) -> int:
    """An instant as integer microseconds since the epoch (how history entries keep time)."""
    return round(instant.timestamp() * 1_000_000)


def instant(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1_000_000, UTC)


# A history entry's fields, always all of them in this order: a stream stores the field names
# once per node when every entry has the same ones. ``f`` is the finish (µs since the epoch);
# ``s``, ``q`` and ``t`` (started, submitted, scheduled) are kept as µs before it, which a
# stream packs in a few bytes where an instant takes nine.
ENTRY_FIELDS = ("run_id", "c", "s", "f", "d", "a", "b", "q", "t", "p")
# An offset is under this (31 years); an instant written whole (entries from before offsets,
# all after 2001) is above it.
_OFFSET_BOUND = 10**15  # µs


def _offset(finished_us: int, value: int | None) -> str:
    return "" if value is None else str(finished_us - value)


def _from_offset(finished_us: int, stored: str) -> int | None:
    if not stored:
        return None
    value = int(stored)
    return finished_us - value if abs(value) < _OFFSET_BOUND else value


@dataclass(frozen=True)
class HistoryEntry:
    """One run in its check's history: enough to rebuild its verdict (with the template
    ``template_id``) and its report (its own, or the one of ``repeat_of``)."""

    run_id: str
    template_id: str
    started_us: int
    finished_us: int
    duration: float
    attempts: int
    batch_id: str | None
    submitted_us: int | None
    scheduled_us: int | None
    repeat_of: str | None  # the run whose report this run's report is; None: its own

    @classmethod
    def of(cls, report: RunReport, template_id: str, repeat_of: str | None) -> HistoryEntry:
        verdict, request = report.verdict, report.request
        assert verdict is not None
        return cls(
            run_id=report.run_id,
            template_id=template_id,
            started_us=micros(verdict.started_at),
            finished_us=micros(verdict.finished_at),
            duration=verdict.duration_seconds,
            attempts=report.attempts,
            batch_id=request.batch_id,
            submitted_us=micros(request.submitted_at),
            scheduled_us=micros(request.scheduled_at) if request.scheduled_at else None,
            repeat_of=repeat_of,
        )

    def fields(self) -> list[str]:
        """The stream entry's values, in :data:`ENTRY_FIELDS` order."""
        return [
            self.run_id,
            self.template_id,
            _offset(self.finished_us, self.started_us),
            str(self.finished_us),
            repr(self.duration),
            str(self.attempts),
            self.batch_id or "",
            _offset(self.finished_us, self.submitted_us),
            _offset(self.finished_us, self.scheduled_us),
            self.repeat_of or "",
        ]

    @classmethod
    def parse(cls, fields: dict[str, str]) -> HistoryEntry | None:
        """An entry as stored; None for one written before entries were compact (it holds
        its verdict whole, ``verdict``)."""
        if "c" not in fields:
            return None
        finished = int(fields["f"])
        started = _from_offset(finished, fields["s"])
        return cls(
            run_id=fields["run_id"],
            template_id=fields["c"],
            started_us=finished if started is None else started,
            finished_us=finished,
            duration=float(fields["d"]),
            attempts=int(fields.get("a") or 1),
            batch_id=fields.get("b") or None,
            submitted_us=_from_offset(finished, fields.get("q") or ""),
            scheduled_us=_from_offset(finished, fields.get("t") or ""),
            repeat_of=fields.get("p") or None,
        )

    def verdict(self, template_json: str) -> Verdict:
        """This run's verdict: the template with this run's id and times."""
        body = json.loads(template_json)
        body.update(
            run_id=self.run_id,
            started_at=instant(self.started_us),
            finished_at=instant(self.finished_us),
            duration_seconds=self.duration,
        )
        return Verdict.model_validate(body)


def repeated_report(original: RunReport, entry: HistoryEntry, verdict: Verdict) -> RunReport:
    """The report of a run that repeated ``original``: its findings, with this run's own id,
    attempts, batch, submission and schedule instants and verdict (``repeat_of`` says whose
    report it is). A set run's policies are named by this run's own policy runs."""
    request = original.request.model_copy(
        update={
            "run_id": entry.run_id,
            "batch_id": entry.batch_id,
            "submitted_at": (
                instant(entry.submitted_us)
                if entry.submitted_us is not None
                else original.request.submitted_at
            ),
            "scheduled_at": instant(entry.scheduled_us) if entry.scheduled_us else None,
        }
    )
    update: dict[str, Any] = {
        "run_id": entry.run_id,
        "attempts": entry.attempts,
        "request": request,
        "verdict": verdict,
        "repeat_of": original.run_id,
    }
    if original.policy_set is not None:
        update["policy_set"] = original.policy_set.model_copy(
            update={
                "policies": [
                    policy.model_copy(update={"run_id": policy_run_id(entry.run_id, policy.policy)})
                    if policy.run_id
                    else policy
                    for policy in original.policy_set.policies
                ]
            }
        )
    return original.model_copy(update=update)
