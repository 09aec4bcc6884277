"""The ``policyreport`` sink: one report per (target cluster, namespace), kept up to date.

Like Alertmanager, a report is state, not a message: what it must hold is the latest
verdict of every check on that target (notifier/policy_reports.py builds it). So the
sink rewrites a target's reports when one of its checks changes verdict, and every
``resync_seconds`` rewrites all of them (one replica per interval): first verdicts are
not changes, and a report someone deleted by hand comes back. A namespace whose
results are gone has its report deleted; which reports the sink wrote is remembered
in Redis (``SinkFeed.written_reports``), so the writer needs no list or read access.

The sink's ``checks`` and ``targets`` filters choose what goes into the reports (a check
routed to the sink by its notify routes is in too); the verdict filters and the
minimum duration are about changes and do not apply to a state.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

import structlog

from notifier.policy_reports import REPORT_NAME, CheckResult, documents, gather
from schemas.request import target_names

if TYPE_CHECKING:
    from notifier.policy_report_writer import ReportWriter
    from schemas.notify import PolicyReportSink
    from workers.fleet.notify_feed import SinkFeed
    from workers.fleet.store import VerdictStore

_log = structlog.get_logger(__name__)


class ReportSync:
    """Writes one sink's reports from the store's latest verdicts."""

    def __init__(
        self,
        name: str,
        config: PolicyReportSink,
        store: VerdictStore,
        writer: ReportWriter,
        feed: SinkFeed,
    ) -> None:
        self.name = name
        self.config = config
        self.store = store
        self.writer = writer
        self.feed = feed

    def wanted(self, check: CheckResult) -> bool:
        if self.name in check.notify:
            return True
        config = self.config
        checks_ok = not config.checks or any(fnmatchcase(check.check_id, p) for p in config.checks)
        return checks_ok and (
            not config.targets
            or any(fnmatchcase(check.target, n) for p in config.targets for n in target_names(p))
        )

    def sync_target(self, target: str) -> int:
        """Rewrite ``target``'s reports; returns how many were written (0: no cluster)."""
        if not self.writer.writes_to(target):
            return 0
        checks = [c for c in gather(self.store, target) if c.target == target and self.wanted(c)]
        return self._write(target, checks)

    def resync(self) -> int:
        """Rewrite every target's reports (and delete those no longer needed)."""
        by_target: dict[str, list[CheckResult]] = {}
        for check in gather(self.store):
            if self.wanted(check):
                by_target.setdefault(check.target, []).append(check)
        targets = set(by_target) | set(self.feed.written_reports())
        written = 0
        for target in sorted(t for t in targets if self.writer.writes_to(t)):
            written += self._write(target, by_target.get(target, []))
        return written

    def _write(self, target: str, checks: Iterable[CheckResult]) -> int:
        reports = documents(checks, target, self.config.api)
        for document in reports:
            self.writer.apply(target, document)
        now = [d["metadata"].get("namespace") for d in reports]
        before = self.feed.written_reports().get(target, [])
        for namespace in before:
            if namespace not in now:
                self.writer.delete(target, namespace, REPORT_NAME)
        self.feed.remember_reports(target, now)
        _log.info("reports written", sink=self.name, target=target, reports=len(reports))
        return len(reports)
