"""Keep Alertmanager in step with each check: one alert per (check, target).

An alert fires while the check is ``false`` (and ``cannot_determine`` when the
sink asks for it) and resolves only when the check is confirmed ``true``; a
``poorly_posed`` or ignored ``cannot_determine`` verdict right after a firing
one keeps it firing, because an unclear answer is no evidence that the problem
went away.

A change does not say "fire" or "resolve" by itself: delivering one posts the
check's *current* state, read from the store. So two replicas delivering a
check's changes out of order, or a delivery retried after the check moved on,
still leave Alertmanager with the truth. Firing alerts carry ``endsAt`` four
resend intervals ahead and are re-posted every interval (as Prometheus does),
so they never time out while the check stays false, and lapse on their own if
every notifier is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Literal

from notifier.events import run_url
from schemas.verdict import VerdictKind

if TYPE_CHECKING:
    from notifier.sinks import AlertmanagerClient
    from schemas.fleet import CheckSummary
    from schemas.notify import AlertmanagerSink
    from schemas.settings import AssaySettings
    from schemas.verdict import Verdict
    from workers.fleet.store import VerdictStore

AlertState = Literal["firing", "resolved"]
RESEND_LIMIT = 100_000  # firing checks read per resend
POST_CHUNK = 200  # alerts per POST
ENDS_AFTER_INTERVALS = 4
SUMMARY_CHARS = 1000
DESCRIPTION_CHARS = 2000


def firing_verdicts(fire_on_cannot_determine: bool) -> set[VerdictKind]:
    firing = {VerdictKind.FALSE}
    if fire_on_cannot_determine:
        firing.add(VerdictKind.CANNOT_DETERMINE)
    return firing


def alert_state(summary: CheckSummary, fire_on_cannot_determine: bool) -> AlertState | None:
    """``firing``, ``resolved``, or None when the alert should stay as it is."""
    firing = firing_verdicts(fire_on_cannot_determine)
    if summary.verdict == VerdictKind.TRUE:
        return "resolved"
    if summary.verdict in firing or summary.previous_verdict in firing:
        return "firing"
    return None


def check_matches(
    config: AlertmanagerSink, check_id: str, target: str, routed: bool = False
) -> bool:
    """The sink's check and target filter (from/to verdicts apply to changes only); a check
    routed to the sink by its notify routes passes it."""
    if routed:
        return True
    checks_ok = not config.checks or any(fnmatchcase(check_id, p) for p in config.checks)
    return checks_ok and (not config.targets or any(fnmatchcase(target, p) for p in config.targets))


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def build_alert(
    config: AlertmanagerSink,
    summary: CheckSummary,
    verdict: Verdict | None,
    state: AlertState,
    now: datetime,
    run_url: str | None,
) -> dict[str, Any]:
    """The API v2 ``postableAlert`` for one check; labels identify it, so it is one alert."""
    labels = {
        **config.labels,
        "alertname": config.alertname,
        "check_id": summary.check_id,
        "target": summary.target,
    }
    annotations = {
        "summary": summary.text[:SUMMARY_CHARS],
        "verdict": summary.verdict.value,
        "run_id": summary.run_id,
    }
    if verdict is not None and verdict.run_id == summary.run_id and verdict.explanation:
        annotations["description"] = verdict.explanation[:DESCRIPTION_CHARS]
    if run_url:
        annotations["run_url"] = run_url
    starts = min(summary.changed_at or summary.finished_at, now)
    if state == "firing":
        ends = now + timedelta(seconds=config.resend_seconds * ENDS_AFTER_INTERVALS)
    else:
        ends = now
    alert: dict[str, Any] = {
        "labels": labels,
        "annotations": annotations,
        "startsAt": _iso(starts),
        "endsAt": _iso(ends),
    }
    if run_url:
        alert["generatorURL"] = run_url
    return alert


class AlertSync:
    """Posts checks' current states to one Alertmanager sink."""

    def __init__(
        self,
        name: str,
        config: AlertmanagerSink,
        store: VerdictStore,
        client: AlertmanagerClient,
        settings: AssaySettings,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.name = name
        self.config = config
        self.store = store
        self.client = client
        self.settings = settings
        self.clock = clock

    def _alerts(self, summaries: list[CheckSummary], want: AlertState) -> list[dict[str, Any]]:
        now = self.clock()
        verdicts = self.store.latest_verdicts([s.check_id for s in summaries])
        return [
            build_alert(
                self.config,
                s,
                verdicts.get(s.check_id),
                want,
                now,
                run_url(self.settings, s.run_id),
            )
            for s in summaries
        ]

    def sync_check(self, check_id: str) -> AlertState | None:
        """Post the check's current state; returns what was posted (None: nothing to say)."""
        summaries = self.store.check_summaries([check_id])
        if not summaries:
            return None
        state = alert_state(summaries[0], self.config.cannot_determine)
        if state is not None:
            self.client.post_alerts(self._alerts(summaries, state))
        return state

    def settled(self, summary: CheckSummary, now: datetime) -> bool:
        """Whether the check has been in its state for the sink's minimum duration."""
        since = summary.changed_at or summary.finished_at
        return now >= since + timedelta(seconds=self.config.min_duration_seconds)

    def firing_checks(self) -> list[CheckSummary]:
        """Checks whose alert fires now, by the sink's filter and minimum duration."""
        now = self.clock()
        candidates = [VerdictKind.FALSE, VerdictKind.CANNOT_DETERMINE, VerdictKind.POORLY_POSED]
        rows: list[CheckSummary] = []
        for kind in candidates:
            rows += self.store.checks(verdict=kind, limit=RESEND_LIMIT)
        return [
            s
            for s in rows
            if check_matches(self.config, s.check_id, s.target, self.name in s.notify)
            and alert_state(s, self.config.cannot_determine) == "firing"
            and self.settled(s, now)
        ]

    def resend(self) -> int:
        """Re-post every firing alert; returns how many.

        A check that turned true while this ran gets its resolve posted again
        afterwards, so a resend racing a resolve never leaves the alert firing.
        """
        firing = self.firing_checks()
        for start in range(0, len(firing), POST_CHUNK):
            self.client.post_alerts(self._alerts(firing[start : start + POST_CHUNK], "firing"))
        if firing:
            now_true = [
                s
                for s in self.store.check_summaries([s.check_id for s in firing])
                if alert_state(s, self.config.cannot_determine) == "resolved"
            ]
            for start in range(0, len(now_true), POST_CHUNK):
                self.client.post_alerts(
                    self._alerts(now_true[start : start + POST_CHUNK], "resolved")
                )
        return len(firing)
