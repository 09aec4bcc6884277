"""One sink's view of the verdict-change stream: its consumer group, retries, dead letters.

The verdict store writes ``P:changes`` (workers/fleet/store.py); this module is the only
code that reads it through consumer groups and the only code that touches the
notifier's own keys (``P`` = the key prefix, ``S`` = the sink name)::

    P:changes                  stream  the store's; here only its consumer group notify:S
    P:notify:S:attempts        hash    entry id -> delivery attempts made so far
    P:notify:S:dead            stream  changes given up on: the change's fields plus
                                       entry_id, attempts, error, dead_at (MAXLEN ~ 10,000)
    P:notify:S:stats           hash    counters: delivered, filtered, retries, dead_lettered
    P:notify:S:told            hash    check id -> "AT_MS VERDICT": the newest change this
                                       sink was told of (or knows it need not hear)
    P:notify:S:reports         hash    target -> JSON list of the reports a policyreport
                                       sink wrote there: {namespace (null: cluster-scoped),
                                       name, uid (the server's, null: unknown)}

Spend-ceiling events (80% and 100% of a ceiling) reach the same sinks the same way:
:func:`spend_feed` reads the spend guard's stream ``P:spend:events``
(workers/fleet/spend.py) through the sink's group ``notify:S`` on it, with keys of
their own: ``P:notify:S:spend:attempts``, ``:dead`` and ``:stats``.

How delivery stays at least once per sink: one consumer group per sink, so every
sink reads every change; a notifier reads new entries with ``XREADGROUP >``, which
puts them in its pending list, and acknowledges an entry only after the sink took
it (or it was filtered out, or dead-lettered). While a notifier lives it keeps its
pending entries fresh (:meth:`SinkFeed.keep`, ``XCLAIM ... JUSTID`` to itself);
when it dies they go idle and another replica takes them over with ``XAUTOCLAIM``
(:meth:`SinkFeed.claim_stale`). Acknowledging, counting and remembering what was
told happen in one script, so a restart resends nothing that was acknowledged.
Attempts are counted in Redis before each try, so a change that crashes its
notifier every time is still dead-lettered after the bound. Those steps are the
scripts ``notify_keep``, ``notify_ack``, ``notify_attempt`` and ``notify_dead`` (``.lua``
files beside this module, each naming its keys and arguments).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from schemas.notify import SinkStatus
from schemas.verdict import VerdictKind
from workers.fleet.lua_scripts import lua_source
from workers.fleet.redis_client import group_entries, stream_entries, text
from workers.fleet.spend import events_key
from workers.fleet.store import change_from_fields

if TYPE_CHECKING:
    from schemas.fleet import VerdictChange
    from workers.fleet.store import VerdictStore

DEAD_LETTER_MAXLEN = 10_000
RELEASE_IDLE_MS = 24 * 3600 * 1000  # "idle for a day": any replica's XAUTOCLAIM takes it at once


def epoch_ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


@dataclass(frozen=True)
class WrittenReport:
    """A report a policyreport sink wrote: where, and the uid the API server gave it (so a
    delete never removes a report someone else has since made under that name)."""

    namespace: str | None
    name: str
    uid: str | None = None


LEGACY_REPORT_NAME = "assay-checks"  # what every report was named before names had targets


@dataclass(frozen=True)
class FeedEntry:
    """One change as a sink's group handed it over; ``change`` None when unreadable."""

    entry_id: str
    fields: dict[str, str]
    change: VerdictChange | None

    @property
    def position(self) -> tuple[int, int]:
        """The entry's place in the stream (its id as numbers: ms, sequence)."""
        ms, _, sequence = self.entry_id.partition("-")
        return int(ms), int(sequence or 0)


@dataclass(frozen=True)
class Told:
    """The newest change a sink heard of for one check: its verdict and instant."""

    verdict: VerdictKind
    at_ms: int

    def encode(self) -> str:
        return f"{self.at_ms} {self.verdict.value}"

    @classmethod
    def decode(cls, raw: str) -> Told:
        at_ms, verdict = raw.split(" ", 1)
        return cls(VerdictKind(verdict), int(at_ms))


def _entry(entry_id: str, fields: dict[str, str] | None) -> FeedEntry:
    fields = fields or {}
    try:
        change = change_from_fields(fields)
    except (KeyError, ValueError):
        change = None
    return FeedEntry(entry_id, fields, change)


class SinkFeed:
    """The change stream as one sink's consumer group sees it, for one consumer."""

    def __init__(
        self,
        store: VerdictStore,
        sink: str,
        consumer: str,
        *,
        stream: str | None = None,
        channel: str | None = None,
    ) -> None:
        """The verdict changes by default; ``stream`` and ``channel`` name another stream
        and the part of the sink's keys that holds its attempts, dead letters and counters
        (:func:`spend_feed`)."""
        self.client = store.client
        self.sink = sink
        self.consumer = consumer
        self.stream = stream or store.key("changes")
        self.group = f"notify:{sink}"
        base = ("notify", sink) if channel is None else ("notify", sink, channel)
        self._attempts = store.key(*base, "attempts")
        self._dead = store.key(*base, "dead")
        self._stats = store.key(*base, "stats")
        self._told = store.key(*base, "told")
        self._reports = store.key(*base, "reports")
        self._claim_cursor = "0-0"
        self._keep_script = self.client.register_script(lua_source("notify_keep"))
        self._ack_script = self.client.register_script(lua_source("notify_ack"))
        self._attempt_script = self.client.register_script(lua_source("notify_attempt"))
        self._dead_script = self.client.register_script(lua_source("notify_dead"))

    # --- the group ---------------------------------------------------------------------------
    def ensure_group(self) -> bool:
        """Create the sink's group at the stream's end (True) unless it exists (False).

        A new sink hears of changes recorded from its first start on, not of the
        whole history.
        """
        import redis as redis_lib

        try:
            self.client.xgroup_create(self.stream, self.group, id="$", mkstream=True)
        except redis_lib.ResponseError as exc:
            if "BUSYGROUP" in str(exc):
                return False
            raise
        return True

    def read_new(self, count: int, block_ms: int | None) -> list[FeedEntry]:
        """Up to ``count`` changes no consumer of this sink has seen yet (now pending here)."""
        reply = self.client.xreadgroup(
            self.group, self.consumer, {self.stream: ">"}, count=count, block=block_ms
        )
        return [_entry(entry_id, fields) for entry_id, fields in group_entries(reply)]

    def claim_stale(self, min_idle_ms: int, count: int) -> list[FeedEntry]:
        """Take over changes another consumer has held for ``min_idle_ms`` without a sign of life.

        Walks the group's pending list with XAUTOCLAIM's cursor across calls; entries
        trimmed from the stream meanwhile are dropped by Redis and forgotten here.
        """
        reply = self.client.xautoclaim(
            self.stream,
            self.group,
            self.consumer,
            min_idle_time=min_idle_ms,
            start_id=self._claim_cursor,
            count=count,
        )
        cursor, entries = reply[0], reply[1]
        deleted = reply[2] if len(reply) > 2 else []
        self._claim_cursor = cursor or "0-0"
        if deleted:
            self.client.hdel(self._attempts, *deleted)
        return [_entry(entry_id, fields) for entry_id, fields in entries if entry_id]

    def keep(self, entry_ids: list[str]) -> list[str]:
        """Reset the idle time of those entries still held here; returns those ids."""
        return self._keep(entry_ids, "")

    def release(self, entry_ids: list[str]) -> list[str]:
        """Let other replicas take these entries at once (a clean shutdown)."""
        return self._keep(entry_ids, str(RELEASE_IDLE_MS))

    def _keep(self, entry_ids: list[str], idle: str) -> list[str]:
        kept: list[str] = []
        for start in range(0, len(entry_ids), 500):
            chunk = entry_ids[start : start + 500]
            kept += self._keep_script(
                keys=[self.stream], args=[self.group, self.consumer, idle, *chunk]
            )
        return kept

    def leave(self) -> None:
        """Remove this consumer from the group if it holds nothing (a clean shutdown)."""
        for row in self.client.xinfo_consumers(self.stream, self.group):
            if row["name"] == self.consumer and int(row["pending"]) == 0:
                self.client.xgroup_delconsumer(self.stream, self.group, self.consumer)

    def prune_consumers(self, idle_ms: int) -> int:
        """Forget consumers that hold nothing and were silent for ``idle_ms`` (dead replicas)."""
        removed = 0
        for row in self.client.xinfo_consumers(self.stream, self.group):
            if row["name"] == self.consumer or int(row["pending"]) or int(row["idle"]) < idle_ms:
                continue
            self.client.xgroup_delconsumer(self.stream, self.group, row["name"])
            removed += 1
        return removed

    # --- one entry's fate ------------------------------------------------------------------------
    def attempts(self, entry_id: str) -> int:
        return int(self.client.hget(self._attempts, entry_id) or 0)

    def begin_attempt(self, entry_id: str) -> int:
        """Count a delivery attempt before making it; returns its number (1 = first)."""
        return int(self._attempt_script(keys=[self._attempts, self._stats], args=[entry_id]))

    def ack(
        self,
        entry: FeedEntry,
        outcome: Literal["delivered", "filtered"],
        told: Told | None = None,
        told_mode: Literal["newer", "absent"] = "newer",
    ) -> bool:
        """Acknowledge an entry, count its outcome and remember ``told`` for its check."""
        check_id = entry.change.check_id if entry.change else ""
        return bool(
            self._ack_script(
                keys=[self.stream, self._attempts, self._stats, self._told],
                args=[
                    self.group,
                    entry.entry_id,
                    outcome,
                    check_id,
                    told.encode() if told and check_id else "",
                    told_mode,
                    told.at_ms if told else 0,
                ],
            )
        )

    def dead_letter(self, entry: FeedEntry, attempts: int, error: str) -> bool:
        """Give up on an entry: keep it in the sink's dead-letter stream and acknowledge it."""
        fields: dict[str, Any] = {
            **entry.fields,
            "entry_id": entry.entry_id,
            "attempts": attempts,
            "error": error[:500],
            "dead_at": datetime.now(UTC).isoformat(),
        }
        pairs = [str(item) for pair in fields.items() for item in pair]
        return bool(
            self._dead_script(
                keys=[self.stream, self._dead, self._attempts, self._stats],
                args=[self.group, entry.entry_id, DEAD_LETTER_MAXLEN, *pairs],
            )
        )

    def told(self, check_id: str) -> Told | None:
        raw = self.client.hget(self._told, check_id)
        return Told.decode(text(raw)) if raw else None

    # --- what a policyreport sink wrote, so it can delete what it no longer needs ---------------
    def written_reports(self) -> dict[str, list[WrittenReport]]:
        """Target -> the reports this sink wrote there (an older entry, a bare namespace,
        names the one report per namespace written then)."""
        import json

        out: dict[str, list[WrittenReport]] = {}
        for target, value in self.client.hgetall(self._reports).items():
            out[text(target)] = [
                WrittenReport(item["namespace"], item["name"], item.get("uid"))
                if isinstance(item, dict)
                else WrittenReport(item, LEGACY_REPORT_NAME)
                for item in json.loads(text(value))
            ]
        return out

    def remember_reports(self, target: str, reports: list[WrittenReport]) -> None:
        import json

        if reports:
            body = [{"namespace": r.namespace, "name": r.name, "uid": r.uid} for r in reports]
            self.client.hset(self._reports, target, json.dumps(body))
        else:
            self.client.hdel(self._reports, target)

    # --- reading ---------------------------------------------------------------------------------
    def dead_letters(self, count: int = 20) -> list[dict[str, str]]:
        """The newest dead letters, newest first."""
        return [
            fields for _, fields in stream_entries(self.client.xrevrange(self._dead, count=count))
        ]

    def status(self, sink_type: str) -> SinkStatus:
        """Lag, pending, retries and dead letters of this sink, for `assay notify status`."""
        import redis as redis_lib

        stats = self.client.hgetall(self._stats)
        counts = {
            "delivered": int(stats.get("delivered", 0)),
            "filtered": int(stats.get("filtered", 0)),
            "retries": int(stats.get("retries", 0)),
            "dead_letters": int(self.client.xlen(self._dead)),
        }
        try:
            groups = self.client.xinfo_groups(self.stream)
        except redis_lib.ResponseError:  # no stream yet
            groups = []
        group = next((g for g in groups if g["name"] == self.group), None)
        if group is None:
            return SinkStatus(sink=self.sink, type=sink_type, started=False, **counts)
        summary = self.client.xpending(self.stream, self.group)
        oldest = None
        if summary.get("pending") and summary.get("min"):
            oldest = max(0.0, time.time() - int(str(summary["min"]).split("-")[0]) / 1000)
        lag = group.get("lag")
        return SinkStatus(
            sink=self.sink,
            type=sink_type,
            started=True,
            lag=int(lag) if lag is not None else None,
            pending=int(group.get("pending") or 0),
            oldest_pending_seconds=oldest,
            consumers=int(group.get("consumers") or 0),
            **counts,
        )


def spend_feed(store: VerdictStore, sink: str, consumer: str) -> SinkFeed:
    """One sink's view of the spend guard's threshold events (80% / 100% of a ceiling)."""
    return SinkFeed(store, sink, consumer, stream=events_key(store.prefix), channel="spend")
