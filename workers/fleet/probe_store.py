"""Probes stored with their check, in Redis; the only code that touches ``probe`` keys.

Key layout (``P`` = ``settings.key_prefix``; ids checked with schemas/ids.py)::

    P:probe:{check_id}              string  the current ProbeRecord (JSON): version, probe,
                                            compiling run, agreement counts, active or retired
    P:probe:{check_id}:version      string  the last version number handed out (INCR)
    P:probe:{check_id}:versions     list    every version as compiled (JSON), newest last
    P:probe:{check_id}:agreement    list    AgreementEntry JSON, newest last, capped
    P:batchprobe:{batch_id}         string  the ProbeRecord a batch compiled on its first
                                            target that reached a verdict       TTL run_ttl
    P:probe:{check_id}:compiling    string  single-flight compile lock: an owner token while
    P:batchprobe:{batch_id}:compiling       a run asks the model with no probe yet, "done"
                                            once it finished       TTL compile_lock_seconds

Version numbers come from INCR, so two runs compiling at once get different versions;
the current record is last-writer-wins (the newer compile replaces the older).

Single-flight compilation: the first run of a check (or of a batch) with no probe claims the
``compiling`` key (SET NX EX) and asks the model; runs arriving meanwhile see ``compiling`` and
wait for its probe instead of asking the model too (workers/fleet/probe_rerun.py). When the
holder ends it writes ``done`` (keeping the TTL), so later runs that still find no probe (the
model proposed none, or it did not reproduce the verdict) go straight to the model instead of
queueing behind one another; after the TTL the next run may try once more. A holder that dies
leaves the key to expire: no one waits longer than the TTL.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from schemas.budget import ProfileName
from schemas.ids import check_id as valid_id
from schemas.probe import AgreementEntry, ProbeOutcome, ProbeRecord, normalised_predicate
from schemas.verdict import VerdictKind

if TYPE_CHECKING:
    import redis

    from schemas.settings import AssaySettings
    from workers.fleet.store import VerdictStore


CompileState = Literal["compiling", "done", "free"]
# Compare-and-set: only the holder's own token becomes "done"; an expired lock another run
# claimed since is left alone. KEEPTTL: "done" lasts only as long as the claim would have.
_FINISH = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], 'done', 'KEEPTTL')
end
return nil
"""
# Everything a run needs to know before it starts, in one round trip (issue 15: the separate
# GETs and the claim were five of a batch run's eight Redis round trips, each a GIL hand-over
# in a busy worker). KEYS: the check's probe, the batch's probe (the check's again when there
# is no batch), the compile claim. ARGV: a claim token ('' = do not claim), its TTL in ms.
# It claims only when there is no probe at all and no claim: a retired probe (its JSON says
# so, which this script does not parse) takes the long way, ProbeStore.claim_compile.
_LOOKUP = """
local own = redis.call('GET', KEYS[1])
local batch = false
if KEYS[2] ~= KEYS[1] then batch = redis.call('GET', KEYS[2]) end
local state = redis.call('GET', KEYS[3])
local claimed = 0
if ARGV[1] ~= '' and not own and not batch and not state then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
  claimed = 1
end
return {own, batch, state, claimed}
"""


@dataclass(frozen=True)
class ProbeLookup:
    """What one :meth:`ProbeStore.lookup` found: the check's probe and its batch's (which of
    them may answer a run is the caller's rule), the compile claim's state, and this run's
    token if it claimed."""

    own: ProbeRecord | None
    batch: ProbeRecord | None
    state: CompileState
    token: str | None


class ProbeStore:
    """Versioned probes per check and their agreement history."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "assay",
        history_limit: int = 200,
        batch_ttl_seconds: int = 30 * 24 * 3600,
        compile_lock_seconds: float = 60.0,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.history_limit = history_limit
        self.batch_ttl_seconds = batch_ttl_seconds
        self.compile_lock_seconds = compile_lock_seconds
        self._finish_script = client.register_script(_FINISH)
        self._lookup_script = client.register_script(_LOOKUP)

    @classmethod
    def beside(cls, store: VerdictStore, settings: AssaySettings) -> ProbeStore:
        """The probe store on the same Redis and prefix as a verdict store."""
        return cls(
            store.client,
            prefix=store.prefix,
            history_limit=settings.probe_history_limit,
            batch_ttl_seconds=store.run_ttl_seconds,
            compile_lock_seconds=settings.probe_compile_wait_seconds,
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

    def lookup(self, check_id: str, batch_id: str | None, *, claim: bool) -> ProbeLookup:
        """The probes for a run of ``check_id`` (in ``batch_id``), and the compile claim, in one
        round trip; with ``claim``, the claim is taken when there is no probe and no claim.

        Reads what :meth:`active`, :meth:`batch_probe` and :meth:`compile_state` read, and
        claims as :meth:`claim_compile` does, but in one Lua script.
        """
        own_key = self._key(check_id)
        batch_key = self._batch_key(batch_id) if batch_id else own_key
        token = _claim_token() if claim and self.compile_lock_seconds > 0 else ""
        own, batch, state, claimed = self._lookup_script(
            keys=[own_key, batch_key, self._compile_key(check_id, batch_id)],
            args=[token, self._claim_ttl_ms],
        )
        return ProbeLookup(
            ProbeRecord.model_validate_json(own) if own else None,
            ProbeRecord.model_validate_json(batch) if batch else None,
            _compile_state(state),
            token if claimed else None,
        )

    # --- writing ------------------------------------------------------------------------
    def save_compiled(
        self,
        check_id: str,
        run_id: str,
        outcome: ProbeOutcome,
        verdict: VerdictKind,
        *,
        predicate: str,
        profile: ProfileName,
    ) -> ProbeRecord:
        """Store an accepted probe as the check's next version (its compile counts as agreement),
        with the predicate and profile it answers (``ProbeRecord.answers``)."""
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
            predicate=normalised_predicate(predicate),
            profile=profile,
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

    # --- single-flight compilation ---------------------------------------------------------
    def _compile_key(self, check_id: str, batch_id: str | None) -> str:
        if batch_id:
            return self._batch_key(batch_id) + ":compiling"
        return self._key(check_id, "compiling")

    def claim_compile(self, check_id: str, batch_id: str | None) -> str | None:
        """Become the one run that asks the model for this check's (batch's) probe: an owner
        token, or None when another run holds it or finished it within the lock's lifetime."""
        if self.compile_lock_seconds <= 0:
            return None
        token = _claim_token()
        key = self._compile_key(check_id, batch_id)
        claimed = self.client.set(key, token, nx=True, px=self._claim_ttl_ms)
        return token if claimed else None

    @property
    def _claim_ttl_ms(self) -> int:
        """How long a compile claim lasts, in milliseconds (at least 1)."""
        return max(1, int(self.compile_lock_seconds * 1000))

    def finish_compile(self, check_id: str, batch_id: str | None, token: str) -> None:
        """The holder is done: ``done`` replaces its token (TTL kept) when it still owns it."""
        self._finish_script(keys=[self._compile_key(check_id, batch_id)], args=[token])

    def compile_state(self, check_id: str, batch_id: str | None) -> CompileState:
        """``compiling`` while a holder asks the model, ``done`` after, ``free`` otherwise."""
        return _compile_state(self.client.get(self._compile_key(check_id, batch_id)))

    def drop(self, check_id: str) -> bool:
        """Forget the check's probe, its versions and its history; True when there was one."""
        keys = [self._key(check_id, *s) for s in ((), ("version",), ("versions",), ("agreement",))]
        return bool(self.client.delete(*keys))


def _claim_token() -> str:
    """An owner token for a compile claim: only its holder can mark it done."""
    return secrets.token_hex(8)


def _compile_state(raw: bytes | str | None) -> CompileState:
    if raw is None:
        return "free"
    return "done" if raw in (b"done", "done") else "compiling"
