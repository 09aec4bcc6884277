"""Probes stored with their check, in Redis; the only code that touches ``probe`` keys.

Key layout (``P`` = ``settings.key_prefix``; ids checked with schemas/ids.py)::

    P:probe:{check_id}              string  the current ProbeRecord (JSON): version, probe,
                                            compiling run, agreement counts, active or retired
    P:probe:{check_id}:version      string  the last version number handed out (INCR)
    P:probe:{check_id}:versions     list    every version as compiled (JSON), newest last
    P:probe:{check_id}:agreement    list    AgreementEntry JSON, newest last, capped
    P:batchprobe:{batch_id}         string  the ProbeRecord a batch compiled on its first
                                            target that reached a verdict       TTL run_ttl

Version numbers come from INCR, so two runs compiling at once get different versions;
the current record is last-writer-wins (the newer compile replaces the older).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from schemas.ids import check_id as valid_id
from schemas.probe import AgreementEntry, ProbeOutcome, ProbeRecord
from schemas.verdict import VerdictKind

if TYPE_CHECKING:
    import redis

    from schemas.settings import AssaySettings
    from workers.fleet.store import VerdictStore


class ProbeStore:
    """Versioned probes per check and their agreement history."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "assay",
        history_limit: int = 200,
        batch_ttl_seconds: int = 30 * 24 * 3600,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.history_limit = history_limit
        self.batch_ttl_seconds = batch_ttl_seconds

    @classmethod
    def beside(cls, store: VerdictStore, settings: AssaySettings) -> ProbeStore:
        """The probe store on the same Redis and prefix as a verdict store."""
        return cls(
            store.client,
            prefix=store.prefix,
            history_limit=settings.probe_history_limit,
            batch_ttl_seconds=store.run_ttl_seconds,
        )

    def _key(self, check_id: str, *suffix: str) -> str:
        return ":".join((self.prefix, "probe", valid_id(check_id, "check_id"), *suffix))

    def _batch_key(self, batch_id: str) -> str:
        return ":".join((self.prefix, "batchprobe", valid_id(batch_id, "batch_id")))

    # --- reading ------------------------------------------------------------------------
    def current(self, check_id: str) -> ProbeRecord | None:
        raw = self.client.get(self._key(check_id))
        return ProbeRecord.model_validate_json(raw) if raw else None

    def active(self, check_id: str) -> ProbeRecord | None:
        record = self.current(check_id)
        return record if record is not None and record.active else None

    def versions(self, check_id: str) -> list[ProbeRecord]:
        raw = self.client.lrange(self._key(check_id, "versions"), 0, -1)
        return [ProbeRecord.model_validate_json(item) for item in raw]

    def agreement(self, check_id: str) -> list[AgreementEntry]:
        raw = self.client.lrange(self._key(check_id, "agreement"), 0, -1)
        return [AgreementEntry.model_validate_json(item) for item in raw]

    def batch_probe(self, batch_id: str) -> ProbeRecord | None:
        raw = self.client.get(self._batch_key(batch_id))
        return ProbeRecord.model_validate_json(raw) if raw else None

    # --- writing ------------------------------------------------------------------------
    def save_compiled(
        self, check_id: str, run_id: str, outcome: ProbeOutcome, verdict: VerdictKind
    ) -> ProbeRecord:
        """Store an accepted probe as the check's next version (its compile counts as agreement)."""
        now = datetime.now(UTC)
        version = int(self.client.incr(self._key(check_id, "version")))
        record = ProbeRecord(
            check_id=check_id,
            version=version,
            probe=outcome.probe,
            compiled_by_run=run_id,
            compiled_at=now,
            compiled_verdict=verdict,
            last_verdict=verdict,
            last_run_at=now,
            last_validated_at=now,
            agreements=1,
        )
        entry = AgreementEntry(
            run_id=run_id,
            at=now,
            version=version,
            probe_verdict=outcome.run.verdict,
            model_verdict=verdict,
            agreed=True,
            why="compile",
        )
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self._key(check_id), record.model_dump_json())
        pipe.rpush(self._key(check_id, "versions"), record.model_dump_json())
        self._push_entry(pipe, check_id, entry)
        pipe.execute()
        return record

    def save_batch_probe(self, batch_id: str, record: ProbeRecord) -> bool:
        """The batch's probe, set once (the first target to compile wins)."""
        return bool(
            self.client.set(
                self._batch_key(batch_id),
                record.model_dump_json(),
                nx=True,
                ex=self.batch_ttl_seconds,
            )
        )

    def put(self, record: ProbeRecord) -> None:
        """Replace the check's current record (after a probe run or a validation)."""
        self.client.set(self._key(record.check_id), record.model_dump_json())

    def record_agreement(self, record: ProbeRecord, entry: AgreementEntry) -> ProbeRecord:
        """Count one comparison with the model; a disagreement retires the probe."""
        if entry.agreed:
            record = record.model_copy(
                update={
                    "agreements": record.agreements + 1,
                    "runs_since_validation": 0,
                    "last_validated_at": entry.at,
                    "last_verdict": entry.model_verdict,
                }
            )
        else:
            record = record.model_copy(
                update={
                    "disagreements": record.disagreements + 1,
                    "active": False,
                    "retired_reason": f"run {entry.run_id}: the probe gave "
                    f"{entry.probe_verdict.value if entry.probe_verdict else 'nothing'} where "
                    f"the model concluded {entry.model_verdict.value} ({entry.why})",
                    "last_verdict": entry.model_verdict,
                }
            )
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self._key(record.check_id), record.model_dump_json())
        self._push_entry(pipe, record.check_id, entry)
        pipe.execute()
        return record

    def push_entry(self, check_id: str, entry: AgreementEntry) -> None:
        """Add a comparison to the history without touching the current record."""
        pipe = self.client.pipeline(transaction=True)
        self._push_entry(pipe, check_id, entry)
        pipe.execute()

    def _push_entry(
        self, pipe: redis.client.Pipeline, check_id: str, entry: AgreementEntry
    ) -> None:
        key = self._key(check_id, "agreement")
        pipe.rpush(key, entry.model_dump_json())
        pipe.ltrim(key, -self.history_limit, -1)

    def drop(self, check_id: str) -> bool:
        """Forget the check's probe, its versions and its history; True when there was one."""
        keys = [self._key(check_id, *s) for s in ((), ("version",), ("versions",), ("agreement",))]
        return bool(self.client.delete(*keys))
