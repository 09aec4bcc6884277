"""The ``policyreport`` sink: one report per (target cluster, namespace), kept up to date.

Like Alertmanager, a report is state, not a message: what it must hold is the latest
verdict of every check on that target (notifier/policy_reports.py builds it). So the
sink rewrites a target's reports when one of its checks changes verdict, and every
``resync_seconds`` rewrites all of them (one replica per interval): first verdicts are
not changes, a report someone deleted by hand comes back, and a check pruned or a policy
dropped since (notifier/reported_checks.py) leaves the reports. A report whose results
are gone (a namespace without results, a part no longer needed) is deleted; which reports
the sink wrote, with their uids, is remembered in Redis (``SinkFeed.written_reports``), so
the writer needs no list or read access. A report another engine owns under the same name
(409 Conflict) is left alone, logged, and not remembered as the sink's.

The sink's ``checks`` and ``targets`` filters choose what goes into the reports (a check
routed to the sink by its notify routes is in too), its ``excluded_namespaces`` which
objects' results are left out; the verdict filters and the minimum duration are about
changes and do not apply to a state. The documents are those `assay report` prints for
the same store (notifier/policy_reports.py builds both).
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

import structlog

from notifier.policy_reports import CheckResult, documents, gather
from notifier.sinks import DeliveryError
from schemas.request import target_names
from workers.fleet.notify_feed import WrittenReport

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
        reports = documents(checks, target, self.config.api, self.config.excluded_namespaces)
        before = {(r.namespace, r.name): r for r in self.feed.written_reports().get(target, [])}
        written: list[WrittenReport] = []
        try:
            for document in reports:
                where = (document["metadata"].get("namespace"), document["metadata"]["name"])
                known = before.pop(where, None)
                try:
                    uid = self.writer.apply(target, document)
                except DeliveryError as exc:
                    if exc.status != 409:
                        if known is not None:
                            before[where] = known
                        raise
                    self._left_to_owner(target, where, exc)
                    continue
                written.append(WrittenReport(*where, uid or (known.uid if known else None)))
            for where, stale in list(before.items()):
                try:
                    self.writer.delete(target, stale.namespace, stale.name, stale.uid)
                except DeliveryError as exc:
                    if exc.status != 409:
                        raise
                    self._left_to_owner(target, where, exc)
                del before[where]
        finally:  # what it wrote, and what it has yet to delete
            self.feed.remember_reports(target, [*written, *before.values()])
        _log.info("reports written", sink=self.name, target=target, reports=len(written))
        return len(written)

    def _left_to_owner(
        self, target: str, where: tuple[str | None, str], exc: DeliveryError
    ) -> None:
        _log.warning(
            "report left to its owner",
            sink=self.name,
            target=target,
            namespace=where[0],
            report=where[1],
            error=str(exc),
        )
