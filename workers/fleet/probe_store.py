"""Probes stored with their check, in Redis; the only code that touches ``probe`` keys.

Key layout (``P`` = ``settings.key_prefix``; ids checked with schemas/ids.py)::

    P:probe:{check_id}              string  the current ProbeRecord (JSON): version, probe,
                                            compiling run, agreement counts, active or retired
    P:probe:{check_id}:version      string  the last version number handed out (INCR)
    P:probe:{check_id}:versions     list    every version as compiled (JSON), newest last
    P:probe:{check_id}:agreement    list    AgreementEntry JSON, newest last, capped
    P:batchprobe:{batch_id}         string  the probe a batch compiled (or re-ran) on its
                                            first target that reached a verdict, for its
                                            other targets while it runs: '@' and the check
                                            id whose current probe it is (a few bytes where
                                            a copy took a kilobyte per batch; a record
                                            written whole before is read as one)
                                                                     TTL report_ttl_seconds
    P:probe:{check_id}:compiling    string  single-flight compile claim: an owner token while
    P:batchprobe:{batch_id}:compiling       a run asks the model with no probe yet (TTL a
                                            short lease, renewed by the holder), "done" once
                                            it finished (TTL the rest of compile_lock_seconds)

Version numbers come from INCR, so two runs compiling at once get different versions;
the current record is last-writer-wins (the newer compile replaces the older).

Single-flight compilation: the first run of a check (or of a batch) with no probe claims the
``compiling`` key (SET NX PX) and asks the model; runs arriving meanwhile see ``compiling`` and
wait for its probe instead of asking the model too (workers/fleet/probe_rerun.py). When the
holder ends it writes ``done``, so later runs that still find no probe (the model proposed
none, or it did not reproduce the verdict) go straight to the model instead of queueing behind
one another; once ``compile_lock_seconds`` have passed since the claim, the next run may try
once more.

The claim is a lease: it is taken for :data:`COMPILE_LEASE_SECONDS` (never longer than
``compile_lock_seconds``) and the holder's :class:`CompileClaim` renews it from a daemon thread
every fifth of that while the model runs, compare-and-extend in one Lua script
(``probe_compile_renew.lua``: a holder whose claim expired and was taken by another run
extends nothing). A holder that dies (SIGKILL, OOM)
stops renewing, its claim expires within one lease, and the first waiter to poll after that
takes it over; the others wait for that new holder. Before the lease, the claim lived for the
whole ``compile_lock_seconds`` and a killed holder held its batch up that long. A live holder's
claim still ends ``compile_lock_seconds`` after it was taken, as before: renewal stops there.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

import structlog

from schemas.budget import ProfileName
from schemas.ids import check_id as valid_id
from schemas.probe import AgreementEntry, ProbeOutcome, ProbeRecord, normalised_predicate
from schemas.verdict import VerdictKind
from workers.fleet.lua_scripts import lua_source

if TYPE_CHECKING:
    import redis

    from schemas.settings import AssaySettings
    from workers.fleet.store import VerdictStore


_log = structlog.get_logger("assay.probes")
CompileState = Literal["compiling", "done", "free"]
# How long a compile claim lives without a renewal. Short, so a killed holder holds its
# waiters up for about this long rather than the whole compile wait; long enough that a
# holder's process that stalls (a probe's CEL evaluation holds the GIL for up to seconds,
# a Redis blip is retried) misses four renewals before it loses the claim, and losing it
# only costs a duplicate compile.
COMPILE_LEASE_SECONDS = 5.0
# Renewals per lease: the holder renews every lease / 5 (1 s by default).
COMPILE_RENEWALS_PER_LEASE = 5


@dataclass(frozen=True)
class ProbeLookup:
    """What one :meth:`ProbeStore.lookup` found: the check's probe and its batch's (which of
    them may answer a run is the caller's rule), the compile claim's state, and this run's
    token if it claimed."""

    own: ProbeRecord | None
    batch: ProbeRecord | None
    state: CompileState
    token: str | None


BATCH_REFERENCE = "@"  # a batch's probe stored as the check whose current probe it is


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
        compile_lease_seconds: float = COMPILE_LEASE_SECONDS,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.history_limit = history_limit
        self.batch_ttl_seconds = batch_ttl_seconds
        # How long a waiter waits at most, and how long a claim lives at most.
        self.compile_lock_seconds = compile_lock_seconds
        # How long a claim lives without a renewal (tests shorten it).
        self.compile_lease_seconds = compile_lease_seconds
        self._finish_script = client.register_script(lua_source("probe_compile_finish"))
        self._renew_script = client.register_script(lua_source("probe_compile_renew"))
        self._lookup_script = client.register_script(lua_source("probe_lookup"))

    @classmethod
    def beside(cls, store: VerdictStore, settings: AssaySettings) -> ProbeStore:
        """The probe store on the same Redis and prefix as a verdict store."""
        return cls(
            store.client,
            prefix=store.prefix,
            history_limit=settings.probe_history_limit,
            batch_ttl_seconds=min(settings.report_ttl_seconds, store.run_ttl_seconds),
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
        return self._batch_record(self.client.get(self._batch_key(batch_id)))

    def _batch_record(self, raw: str | bytes | None) -> ProbeRecord | None:
        """A batch's probe as stored: the check whose current probe it is (``@`` and its id;
        None once that probe is retired or gone), or a record written whole."""
        if not raw:
            return None
        value = raw.decode() if isinstance(raw, bytes) else raw
        if not value.startswith(BATCH_REFERENCE):
            return ProbeRecord.model_validate_json(value)
        record = self.current(value.removeprefix(BATCH_REFERENCE))
        return record if record is not None and record.active else None

    def lookup(self, check_id: str, batch_id: str | None, *, claim: bool) -> ProbeLookup:
        """The probes for a run of ``check_id`` (in ``batch_id``), and the compile claim, in one
        round trip; with ``claim``, the claim is taken when there is no probe and no claim.

        Reads what :meth:`active` and :meth:`compile_state` read (and a batch's probe), and
        claims as :meth:`claim_compile` does, but in one Lua script. A claim taken here lasts
        one lease: the caller keeps it with :meth:`hold` (no round trip before the model).
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
            self._batch_record(batch),
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
        if outcome.probe is None:
            raise ValueError("only a judged probe can be stored")
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
            sensitivity_checked=True,  # judge() accepts only a probe that passed it
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
        """The batch's probe, set once (the first target to compile wins): ``record`` is its
        check's current probe (just compiled, validated or re-run), so the batch keeps the
        check's id and reads the probe from there."""
        return bool(
            self.client.set(
                self._batch_key(batch_id),
                BATCH_REFERENCE + record.check_id,
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
        token, or None when another run holds it or finished it within the lock's lifetime.

        The claim lasts one lease: the holder keeps it with :meth:`hold`; a claim no one
        renews (its holder died) is gone within :attr:`compile_lease_seconds`."""
        if self.compile_lock_seconds <= 0:
            return None
        token = _claim_token()
        key = self._compile_key(check_id, batch_id)
        claimed = self.client.set(key, token, nx=True, px=self._claim_ttl_ms)
        return token if claimed else None

    @property
    def _claim_ttl_ms(self) -> int:
        """A compile claim's lease in milliseconds (at least 1): never longer than the wait,
        so a claim taken and never renewed outlives no waiter's patience."""
        return _ms(min(self.compile_lease_seconds, self.compile_lock_seconds))

    def hold(self, check_id: str, batch_id: str | None, token: str) -> CompileClaim:
        """Keep the claim ``token`` took alive while its holder asks the model: renewed every
        lease / :data:`COMPILE_RENEWALS_PER_LEASE` until :meth:`CompileClaim.release`, and for
        at most ``compile_lock_seconds`` from now (a live holder's claim ends when it always
        did). Call it right after the claim was taken."""
        claim = CompileClaim(
            self,
            check_id,
            batch_id,
            token,
            lease_ms=self._claim_ttl_ms,
            until=time.monotonic() + self.compile_lock_seconds,
        )
        claim.start()
        return claim

    def renew_compile(
        self, check_id: str, batch_id: str | None, token: str, ttl_ms: int | None = None
    ) -> bool:
        """Extend the claim to ``ttl_ms`` from now (default: one lease) when ``token`` still
        holds it; False when it does not (it expired, another run took it, or it is done)."""
        ttl = self._claim_ttl_ms if ttl_ms is None else max(1, ttl_ms)
        key = self._compile_key(check_id, batch_id)
        return int(self._renew_script(keys=[key], args=[token, ttl])) == 1

    def finish_compile(
        self, check_id: str, batch_id: str | None, token: str, done_ms: int | None = None
    ) -> None:
        """The holder is done: ``done`` replaces its token when it still owns it, for
        ``done_ms`` (default: ``compile_lock_seconds``; :class:`CompileClaim` passes the rest
        of the claim's lifetime)."""
        ttl = _ms(self.compile_lock_seconds) if done_ms is None else max(1, done_ms)
        self._finish_script(keys=[self._compile_key(check_id, batch_id)], args=[token, ttl])

    def compile_state(self, check_id: str, batch_id: str | None) -> CompileState:
        """``compiling`` while a holder asks the model, ``done`` after, ``free`` otherwise."""
        return _compile_state(self.client.get(self._compile_key(check_id, batch_id)))

    def drop(self, check_id: str) -> bool:
        """Forget the check's probe, its versions and its history; True when there was one."""
        keys = [self._key(check_id, *s) for s in ((), ("version",), ("versions",), ("agreement",))]
        return bool(self.client.delete(*keys))


class CompileClaim:
    """A compile claim its holder keeps: a daemon thread renews the lease until :meth:`release`.

    The thread is the heartbeat of a lease, as with Temporal's activity heartbeats or a renewed
    Redis lock: the claim outlives one lease only while the holder's process is alive to renew
    it, so a killed holder frees its waiters within a lease instead of the whole compile wait.
    Renewal stops for good when the claim is released, when a renewal finds the token gone (the
    lease ran out; the holder goes on, its probe is still stored, single-flight is lost) or
    when the claim's lifetime (``compile_lock_seconds`` from when it was held) is over.
    """

    def __init__(
        self,
        store: ProbeStore,
        check_id: str,
        batch_id: str | None,
        token: str,
        *,
        lease_ms: int,
        until: float,
    ) -> None:
        self.store = store
        self.check_id = check_id
        self.batch_id = batch_id
        self.token = token
        self.lease_ms = lease_ms  # what each renewal extends the claim to
        self.until = until  # time.monotonic() when the claim's lifetime ends
        self.interval = lease_ms / 1000 / COMPILE_RENEWALS_PER_LEASE
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="assay-compile-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _left_ms(self) -> int:
        """Milliseconds left of the claim's lifetime (0 or less: over)."""
        return int((self.until - time.monotonic()) * 1000)

    def _beat(self) -> None:
        """Renew every ``interval`` until stopped, lost, or at the end of the claim's life."""
        while not self._stopped.wait(self.interval):
            left = self._left_ms()
            if left <= 0:
                return  # as long as a claim ever lived: let it expire
            if not self._renew(min(self.lease_ms, left)):
                return

    def _renew(self, ttl_ms: int) -> bool:
        """One renewal; False when the claim is no longer this holder's (stop renewing)."""
        try:
            renewed = self.store.renew_compile(self.check_id, self.batch_id, self.token, ttl_ms)
        except Exception as exc:  # the next beat tries again; the lease covers a few misses
            _log.warning("probe_compile_renewal_failed", check_id=self.check_id, error=repr(exc))
            return True
        if not renewed and not self._stopped.is_set():
            _log.warning("probe_compile_claim_lost", check_id=self.check_id)
        return renewed

    @property
    def renewing(self) -> bool:
        """Whether the heartbeat still runs (tests; a stale holder's stops at once)."""
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop renewing without marking the claim done (it expires within a lease)."""
        self._stopped.set()

    def release(self) -> None:
        """The holder ended: stop renewing, then mark the claim ``done`` for the rest of its
        lifetime if it still holds it. A renewal in flight meanwhile is harmless: it extends
        only the token, never ``done``, and never past the lifetime."""
        self.stop()
        self.store.finish_compile(self.check_id, self.batch_id, self.token, self._left_ms())


def _ms(seconds: float) -> int:
    """``seconds`` in whole milliseconds, at least 1 (what PX and PEXPIRE accept)."""
    return max(1, int(seconds * 1000))


def _claim_token() -> str:
    """An owner token for a compile claim: only its holder can mark it done."""
    return secrets.token_hex(8)


def _compile_state(raw: bytes | str | None) -> CompileState:
    if raw is None:
        return "free"
    return "done" if raw in (b"done", "done") else "compiling"
