"""The verdict store: every verdict, run, check and batch assay keeps, in Redis.

This module is the only code that reads or writes these keys. Each step that
touches more than one key is a Lua script registered once and held in a named
attribute (``_register_script``, ``_begin_script``, ``_record_script`` ...), so
it is atomic and a retried call cannot apply twice. The scripts are ``.lua`` files
beside this module (``store_*.lua`` and ``record_verdict.lua``), each naming its
``KEYS`` and ``ARGV`` in its header; every key is passed in, and every one that
writes more than a lease runs ``key_checks.lua`` first.

Key layout (``P`` = ``settings.key_prefix``; see docs/fleet.md)::

    P:run:{run_id}                     hash   status (queued|running|waiting|done), attempts,
                                              check_id, target, batch_id, request (JSON, until
                                              recorded), queued_at, updated_at, wake_at,
                                              verdict (JSON), verdict_kind, report (encoded),
                                              fence:{fire} (the scheduler token that won
                                              that fire); repeats, repeated_at (runs that
                                              repeated this report); r:{policy run id} (a
                                              set run's policy runs, until it is recorded).
                                              Deleted when a run that repeated another is
                                              recorded; a recorded
                                              report's TTL is run_ttl (it changed the
                                              verdict) or report_ttl (retention.py)
    P:check:{check_id}                 hash   latest verdict (JSON), verdict_kind, exit_code,
                                              run_id, target, kind, text, finished_at,
                                              finished_ms, changed_at, previous_verdict,
                                              source (probe|model; absent = model), notify
                                              (the latest run's notify routes), rep / rfp
                                              (the run whose report the latest runs repeat,
                                              its fingerprint), repeats, members (a set's
                                              policies: {name: check id} JSON)
    P:check:{check_id}:history         stream one compact entry per recorded run
                                              (retention.ENTRY_FIELDS; entries written before
                                              hold run_id and the verdict JSON),
                                              MAXLEN = settings.history_limit
    P:check:{check_id}:verdicts        hash   template id -> verdict JSON without its run id
                                              and times; '#' .. id -> entries naming it
    P:runs                             hash   run id -> 'check_id entry_id verdict': every
                                              run in a history, and for twice the broker's
                                              visibility timeout after it finished (a set
                                              run's record stands for its policies' runs)
    P:runs:expiring                    zset   run ids out of their history, by when (us) to
                                              forget them
    P:checks                           zset   check ids scored by latest finished_at (ms)
    P:idx:target:{target}              set    check ids whose latest run was on target
    P:idx:verdict:{verdict}            set    check ids whose latest verdict is verdict
    P:idx:tv:{verdict}:{target}        set    both at once ("all false in prod-eu")
    P:changes                          stream verdict changes: check_id, run_id, target,
                                              from, to, at, notify (the run's notify
                                              routes); first verdicts are not changes;
                                              its consumer groups (notify:{sink}) and the
                                              P:notify:{sink}:* keys belong to
                                              workers/fleet/notify_feed.py, the notifier's view
    P:batch:{batch_id}                 hash   kind, text, created_at, total, pending, true,
                                              false, poorly_posed, cannot_determine, sealed,
                                              finished_at, not_before (its runs are
                                              deferred until then), fanout_lease ('1': its
                                              fan-out holds the lease below), incomplete
                                              ('1': sealed before every target was
                                              submitted), stop_reason, changed ('1': a
                                              run of it changed its check's verdict). It,
                                              :runs and :results: TTL run_ttl while it
                                              runs or once changed, else report_ttl once
                                              finished
    P:batch:{batch_id}:fanout          string the fan-out's lease: its owner token, TTL a
                                              lease its submitter renews; gone from an
                                              unsealed batch with fanout_lease = the
                                              submitter stopped (closed as incomplete)
    P:batch:{batch_id}:runs            list   per target in fan-out order: its run id, then
                                              (recorded) its row in that place (batch_row;
                                              the run hash's batch_pos says where)
    P:batch:{batch_id}:results         hash   run_id -> result JSON (runs registered by a
                                              version before rows took their place)
    P:batches                          zset   batch ids scored by creation time (ms)
    P:unfinished                       zset   run ids without a verdict, scored by when to
                                              look for them (last sign of life, not_before or
                                              wake_at; epoch s): the lost-run sweeper reads it
    P:lock:{name}                      string short leases (one sweeper at a time)

Exactly-once rules: the first verdict recorded for a run id wins. ``record_verdict``
checks for it (the run's hash, ``P:runs``) and writes the run, the history entry, the
latest verdict, the indexes, the change event and the batch tally in one script
(``record_verdict.lua``, every key passed in), so a redelivered or duplicated task can
add nothing a second time. The store assumes one Redis (or a primary with replicas),
not Redis Cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import structlog

from schemas.exit_codes import EXIT_CODES
from schemas.fleet import BatchResult, BatchStatus, CheckSummary, RunProgress, VerdictChange
from schemas.ids import InvalidId
from schemas.ids import check_id as valid_id
from schemas.policy import policy_run_id
from schemas.report import RunReport
from schemas.request import EvaluationRequest, default_check_id
from schemas.verdict import Verdict, VerdictKind
from workers.engine.toolsets.redaction import scrubbed
from workers.fleet.checkpoints import checkpoint_key
from workers.fleet.lua_scripts import checked_script, lua_source
from workers.fleet.redis_client import connect, stream_entries, text, text_fields, texts
from workers.fleet.report_codec import UnreadableReport, decode_report, encode_report
from workers.fleet.retention import (
    HistoryEntry,
    instant,
    micros,
    repeated_report,
    report_fingerprint,
    verdict_template,
)

if TYPE_CHECKING:
    import redis

    from schemas.settings import AssaySettings, ReportCodec

_log = structlog.get_logger(__name__)

CHANGES_MAXLEN = 100_000  # approximate cap of the verdict-change stream
RESULT_EXPLANATION_CHARS = 300  # explanation kept per batch target (the full one is in the run)


def _store_script(name: str) -> str:
    """A store script (``{name}.lua`` beside this module) after the checks every one of them
    runs before its first write (``key_checks.lua``: everything that could make it fail
    halfway; a problem becomes ``StoreConflict``, nothing written)."""
    return checked_script(name)


def _batch_script(name: str) -> str:
    """A script that may finish a batch at its seal: ``store_batch_finish.lua`` defines how,
    between the checks and the script itself."""
    return _store_script("store_batch_finish") + lua_source(name)


# Why a batch was closed before every target was submitted (``stop_reason``, in words).
STOP_LAPSED = "its submitter stopped renewing the fan-out's lease (killed, or cut off)"

_CONFLICT_MARK = "ASSAY_CONFLICT "


class BatchClosed(RuntimeError):
    """A run was not registered: its batch had been closed as incomplete (its fan-out's
    lease lapsed while the submitter stalled), so the batch takes no more targets."""

    def __init__(self, batch_id: str) -> None:
        self.batch_id = batch_id
        super().__init__(
            f"batch {batch_id} was closed as incomplete while its fan-out was still running "
            "(the fan-out's lease lapsed: it stalled for longer than "
            "ASSAY_BATCH_FANOUT_LEASE_SECONDS), so the targets from here on were not "
            "submitted; the runs registered before that still run: start a new batch for "
            "the rest"
        )


class ReportExpired(UnreadableReport):
    """The run is known, but what was asked of it is no longer kept (its full report, or for
    a run far back in a busy check's history its verdict's details); the message says what
    is left and where, in one sentence."""

    def __init__(self, run_id: str, message: str) -> None:
        self.run_id = run_id
        super().__init__(message)


class StoreConflict(RuntimeError):
    """A key the store must write holds something else; the write was refused whole.

    Only data assay did not write can cause it (another program sharing the
    key prefix, a manual edit), so the message names the key and how to fix it.
    """


def scrubbed_report(report: RunReport) -> RunReport:
    """What is stored of a run: everything it produced passed through the credential patterns.

    Tool output was scrubbed with the run's known Secret values when it was
    made; this catches what a model wrote itself (a password it echoed in an
    explanation). The request stays verbatim: it is the user's own input,
    kept so the run can be evaluated again. A report the patterns left unchanged is
    stored as it is; a changed one is validated again (``scrubbed``). Fields the
    engine's own scrub left as they still are (``RunReport._scrubbed_dump``: the steps,
    mostly) are not searched again.
    """
    return scrubbed(
        report, keep=frozenset({"request"}), revalidate=False, clean=report._scrubbed_dump
    ).model


def _now() -> datetime:
    return datetime.now(UTC)


def _epoch_ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def _lease_ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _days(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:g} day{'' if days == 1 else 's'}" if days >= 1 else f"{seconds / 3600:g} h"


def _parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _set_members(report: RunReport) -> str:
    """A set run's policies, ``{name: check id}`` as JSON ('' for any other run): kept on the
    set's check, it is how a policy's run inside a set run is found by its run id."""
    if report.policy_set is None:
        return ""
    members = {p.policy: p.check_id for p in report.policy_set.policies if p.check_id}
    return json.dumps(members, sort_keys=True, separators=(",", ":")) if members else ""


def batch_row(
    request: EvaluationRequest, verdict: Verdict, template_id: str, batch_text: str | None
) -> str:
    """A batch target's row as stored, in its batch's runs list where its run id was:
    ``[run id, verdict, template id, target]`` (JSON), and the check id unless it is the one
    the batch's predicate (``batch_text``) gives the target. The exit code follows from
    the verdict; the explanation is not copied: it is the verdict template's, read from the
    check (``template_id``; '' for a run kept apart from its check's history) or the run's
    own kept verdict, for as long as either is kept."""
    row = [request.run_id, verdict.verdict.value, template_id, verdict.target]
    if batch_text is None or request.check_id != default_check_id(
        request.kind, batch_text, verdict.target
    ):
        row.append(request.check_id)
    return json.dumps(row, separators=(",", ":"))


def set_run_of(run_id: str) -> str | None:
    """The set run whose policy's run ``run_id`` could be (``schemas.policy.policy_run_id``:
    the set run's id, a dot, 12 hex digits), else None."""
    head, dot, tail = run_id.rpartition(".")
    if not dot or not head or len(tail) != POLICY_RUN_SUFFIX:
        return None
    return head if all(c in "0123456789abcdef" for c in tail) else None


POLICY_RUN_SUFFIX = 12


def _verdict_or_none(value: str | None) -> VerdictKind | None:
    return VerdictKind(value) if value else None


DEFAULT_SOURCE = "model"


def verdict_source(verdict: Verdict) -> str:
    """Where a verdict came from: ``probe`` or ``model``.

    ``Verdict.source`` says so (docs/probes.md); read defensively so a verdict stored
    before the field existed still reads as the model's.
    """
    value = getattr(verdict, "source", None)
    value = getattr(value, "value", value)  # an enum member or a plain string
    return str(value) if value else DEFAULT_SOURCE


def change_from_fields(fields: dict[str, str]) -> VerdictChange:
    """One ``P:changes`` entry as a :class:`VerdictChange`."""
    return VerdictChange(
        check_id=fields["check_id"],
        run_id=fields["run_id"],
        target=fields["target"],
        from_verdict=VerdictKind(fields["from"]),
        to_verdict=VerdictKind(fields["to"]),
        at=datetime.fromisoformat(fields["at"]),
        notify=[name for name in (fields.get("notify") or "").split(",") if name],
    )


@dataclass(frozen=True)
class CheckGauge:
    """What the per-check Prometheus gauges show of one check's latest verdict."""

    check_id: str
    target: str
    exit_code: int
    finished_at: float  # epoch seconds
    source: str


@dataclass(frozen=True)
class PersistenceReport:
    """What Redis said about durability; ``warnings`` is empty when it is production-safe."""

    maxmemory_policy: str | None
    appendonly: bool | None
    warnings: list[str]


NO_MODEL_NAMES = frozenset({"", "(none)"})


def ran_without_model(report: RunReport) -> bool:
    """True for a run that ended before any model could be asked: none was configured."""
    verdict = report.verdict
    return verdict is not None and (verdict.model or "") in NO_MODEL_NAMES


def asked_a_model(report: RunReport) -> bool:
    """Whether the run's verdict came from (or was checked by) a model: such a run always
    writes its report (the model's reasoning), never counts as a repeat of another run."""
    verdict = report.verdict
    return bool(report.steps) or (
        verdict is not None
        and (verdict_source(verdict) == "model" or verdict.usage.total_tokens > 0)
    )


DEFAULT_RUN_ID_WINDOW_SECONDS = 4 * 3600.0


def run_id_window(settings: AssaySettings) -> float:
    """How long a run id stays recorded, at least, after the run finished: twice the broker's
    visibility timeout. A message a killed worker held comes back one visibility timeout
    after its delivery (and the run finished after that delivery); the second is margin for
    a copy waiting in a busy queue. Runs stay recorded while in their check's history anyway;
    this only matters for a check that runs more than ``history_limit`` times in it."""
    return 2 * settings.broker_visibility_timeout_seconds


RECORD_ATTEMPTS = 8  # the record script refuses when the check changed since it was read
_RETRY = -1


@dataclass(frozen=True)
class _CheckNow:
    """What recording a run reads first: the check's latest verdict and the run's batch, which
    decide the keys the record script touches and whether the run repeats the latest report."""

    kind: str
    target: str
    finished_ms: int | None
    repeated: str  # the run whose report the check's latest runs repeat ('' none)
    fingerprint: str  # that report's fingerprint
    batch_id: str
    batch_text: str | None = None  # the run's batch's predicate, as the request names it

    def latest(self, finished_ms: int) -> bool:
        return not self.kind or self.finished_ms is None or finished_ms >= self.finished_ms


@dataclass(frozen=True)
class _Recorded:
    """A finished run as the history knows it: ``P:runs`` -> its check and history entry."""

    run_id: str
    check_id: str
    entry_id: str
    kind: VerdictKind


class VerdictStore:
    """Verdicts, runs, checks and batches in Redis, under one key prefix."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "assay",
        history_limit: int = 500,
        run_ttl_seconds: int = 30 * 24 * 3600,
        report_ttl_seconds: int = 3 * 24 * 3600,
        run_id_window_seconds: float = DEFAULT_RUN_ID_WINDOW_SECONDS,
        report_codec: ReportCodec = "dictionary",
    ) -> None:
        self.client = client
        self.report_codec = report_codec  # how full reports are stored (report_codec.py)
        self.prefix = prefix
        self.history_limit = history_limit
        self.run_ttl_seconds = run_ttl_seconds
        self.report_ttl_seconds = report_ttl_seconds
        # How long a run id stays recorded after its entry has left its check's history: a
        # redelivered message still finds its run recorded (retention.py).
        self.run_id_window_seconds = run_id_window_seconds
        self._register_script = client.register_script(_store_script("store_register_run"))
        self._begin_script = client.register_script(_store_script("store_begin_run"))
        self._waiting_script = client.register_script(_store_script("store_waiting_run"))
        self._record_script = client.register_script(_store_script("record_verdict"))
        self._fence_script = client.register_script(_store_script("store_fence_run"))
        self._create_batch_script = client.register_script(_store_script("store_create_batch"))
        self._seal_batch_script = client.register_script(_batch_script("store_seal_batch"))
        self._abandon_batch_script = client.register_script(_batch_script("store_abandon_batch"))
        self._renew_fanout_script = client.register_script(lua_source("store_renew_fanout"))
        self._gauges_script = client.register_script(lua_source("store_check_gauges"))

    @classmethod
    def from_settings(
        cls, settings: AssaySettings, client: redis.Redis | None = None
    ) -> VerdictStore:
        """The one way to build a store: the settings' key prefix, history limit and run TTL.

        ``client`` is the connection to use (default: a retrying client for the
        settings' Redis), so a store never runs with another component's limits.
        """
        if client is None:
            if not settings.redis_url:
                raise ValueError(
                    "no Redis is configured: set ASSAY_REDIS_URL or start local mode with "
                    "`assay up`"
                )
            client = connect(settings.redis_url)
        return cls(
            client,
            prefix=settings.key_prefix,
            history_limit=settings.history_limit,
            run_ttl_seconds=settings.run_ttl_seconds,
            report_ttl_seconds=settings.report_ttl_seconds,
            run_id_window_seconds=run_id_window(settings),
            report_codec=settings.report_compression,
        )

    # --- keys ---------------------------------------------------------------------------------
    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def _run_key(self, run_id: str, *suffix: str) -> str:
        return self.key("run", valid_id(run_id, "run_id"), *suffix)

    def _check_key(self, check_id: str, *suffix: str) -> str:
        return self.key("check", valid_id(check_id, "check_id"), *suffix)

    def _batch_key(self, batch_id: str, *suffix: str) -> str:
        return self.key("batch", valid_id(batch_id, "batch_id"), *suffix)

    @property
    def _report_ttl(self) -> int:
        """How long a report that changed no verdict is kept (never longer than one that did)."""
        return min(self.report_ttl_seconds, self.run_ttl_seconds)

    @property
    def _runs_key(self) -> str:
        """``P:runs``: every run in a check's history (and a while after), by run id."""
        return self.key("runs")

    def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """Run one of the store's scripts; a conflict it found becomes ``StoreConflict``."""
        import redis as redis_lib

        try:
            return script(keys=keys, args=args)
        except redis_lib.ResponseError as exc:
            self._raise_script_error(exc)

    @staticmethod
    def _raise_script_error(exc: Exception) -> NoReturn:
        """Raise a script's error: a conflict it found as ``StoreConflict``, else as it is."""
        text = str(exc)
        if not text.startswith(_CONFLICT_MARK):
            raise exc
        problem = text.removeprefix(_CONFLICT_MARK)
        _log.error("store_conflict", problem=problem)
        raise StoreConflict(
            f"nothing was written because {problem}; that key was not written by assay "
            "(another program shares the key prefix?): move or delete it, or give assay "
            "its own ASSAY_KEY_PREFIX"
        ) from None

    # --- runs: writes ---------------------------------------------------------------------------
    def register_run(self, request: EvaluationRequest) -> bool:
        """Mark a run queued (and count it in its batch) before its task is sent.

        Returns False when the run was registered before, so a retried fan-out
        never counts a target twice.
        """
        return self.register_runs([request])[0]

    def register_runs(self, requests: Sequence[EvaluationRequest]) -> list[bool]:
        """:meth:`register_run` for many runs in one round trip (a batch's chunk).

        Each run is still its own atomic script; they travel in one pipeline
        (not a transaction: one run's conflict must not hide the others' state).
        Any failure raises after the pipeline has run, so a caller that sends
        tasks only after this returns never queues a task for a run that is
        not registered. A run registered before answers False, as above. A new
        run of a batch closed as incomplete is refused: :class:`BatchClosed`.
        """
        if not requests:
            return []
        pipe = self.client.pipeline(transaction=False)
        for request in requests:
            self._register_script(*self._register_call(request), client=pipe)
        replies = pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception):
                self._raise_script_error(reply)
        closed = [r for r, reply in zip(requests, replies, strict=True) if reply == 2]
        if closed:
            raise BatchClosed(str(closed[0].batch_id))
        return [reply == 1 for reply in replies]

    def _register_call(self, request: EvaluationRequest) -> tuple[list[str], list[Any]]:
        """(keys, args) of the register script for ``request``."""
        batch_id = request.batch_id or ""
        batch_keys = (
            [self._batch_key(batch_id), self._batch_key(batch_id, "runs")]
            if batch_id
            else [self.key("batch", "-"), self.key("batch", "-", "runs")]  # unused without one
        )
        valid_id(request.check_id, "check_id")
        now = _now()
        return (
            [self._run_key(request.run_id), *batch_keys, self.key("unfinished"), self._runs_key],
            [
                request.run_id,
                request.check_id,
                request.target.name,
                batch_id,
                request.model_dump_json(),
                now.isoformat(),
                self.run_ttl_seconds,
                max(now, request.not_before or now).timestamp(),
            ],
        )

    def begin_delivery(self, request: EvaluationRequest) -> int | None:
        """Count one delivery of this run to a worker; None when it already has a verdict."""
        valid_id(request.check_id, "check_id")
        now = _now()
        number = int(
            self._call(
                self._begin_script,
                keys=[self._run_key(request.run_id), self.key("unfinished"), self._runs_key],
                args=[
                    request.run_id,
                    request.check_id,
                    request.target.name,
                    now.isoformat(),
                    self.run_ttl_seconds,
                    now.timestamp(),
                ],
            )
        )
        return None if number < 0 else number

    def claim_fence(self, run_id: str, fire_id: str, token: str) -> bool:
        """May the message with fencing ``token`` run fire ``fire_id`` of this run?

        The first token a worker presents for a fire wins it; the same token
        again (the broker redelivering that message) is let through; another
        token (a copy sent by a scheduler replica that had lost its claim) is
        refused. Stored on the run as ``fence:{fire_id}``.
        """
        if len(fire_id) > 300 or not 0 < len(token) <= 100:
            raise ValueError("a fence names a fire id and a token of sensible length")
        claimed = self._call(
            self._fence_script,
            keys=[self._run_key(run_id), self._runs_key],
            args=[fire_id, token, self.run_ttl_seconds, run_id],
        )
        return bool(claimed)

    def mark_waiting(self, report: RunReport) -> bool:
        """Park a run whose WAIT outlives the worker: status waiting, deliveries reset."""
        report = scrubbed_report(report)
        now = _now()
        wake_at = report.wake_at or now
        written = self._call(
            self._waiting_script,
            keys=[self._run_key(report.run_id), self.key("unfinished"), self._runs_key],
            args=[
                encode_report(report.model_dump_json(), self.report_codec),
                wake_at.isoformat() if report.wake_at else "",
                now.isoformat(),
                self.run_ttl_seconds,
                report.run_id,
                max(now, wake_at).timestamp(),
            ],
        )
        return bool(written)

    def record_verdict(self, report: RunReport, *, part_of: str | None = None) -> bool:
        """Record a finished run; True if this call wrote it, False if the run already had one.

        ``part_of`` names the set run this run is one policy's run of (recorded before it):
        such a run keeps no run-id record of its own, its set run's record stands for it
        (:meth:`_policy_runs_found`), which saves the set's every re-run that record per
        policy.

        A run that had no model to ask says nothing about its cluster: it is
        recorded on the run (and its batch), never in the check's history or
        as a verdict change (``ran_without_model``).

        What is kept is sized by what it is for (workers/fleet/retention.py): a probe or
        policy re-run that found exactly what the check's latest report says writes no
        report (it repeats that one, which counts it); any other run keeps its report
        ``run_ttl_seconds`` when it changed the check's verdict, else ``report_ttl_seconds``.
        Recording reads the check first (which keys the script touches, whether this is a
        repeat); the script refuses if the check changed since, and the read is done again.
        """
        source = verdict_source(report.verdict) if report.verdict else DEFAULT_SOURCE
        report = scrubbed_report(report)
        verdict = report.verdict
        if verdict is None:
            raise ValueError(f"run {report.run_id} has no verdict to record")
        counts = not ran_without_model(report)
        template_id, template = verdict_template(verdict)
        fingerprint = report_fingerprint(report) if counts and not asked_a_model(report) else ""
        finished_ms = _epoch_ms(verdict.finished_at)
        encoded: str | None = None
        for _ in range(RECORD_ATTEMPTS):
            now = self._check_now(report)
            repeated = (
                now.repeated
                if fingerprint
                and now.repeated
                and now.fingerprint == fingerprint
                and now.latest(finished_ms)
                else ""
            )
            if not repeated and encoded is None:
                encoded = encode_report(report.model_dump_json(), self.report_codec)
            written = self._call(
                self._record_script,
                keys=[
                    *self._record_keys(report, now, repeated),
                    self._run_key(part_of) if part_of else self.key("run", "-"),  # unused
                    self._batch_key(now.batch_id, "runs")
                    if now.batch_id
                    else self.key("batch", "-", "runs"),  # unused
                ],
                args=[
                    *self._record_args(
                        report,
                        source=source,
                        counts=counts,
                        now=now,
                        repeated=repeated,
                        encoded=encoded or "",
                        fingerprint=fingerprint,
                        template=(template_id, template),
                    ),
                    part_of or "",
                    _set_members(report),
                    self._report_ttl,
                    "1" if counts and now.kind != verdict.verdict.value else "0",
                ],
            )
            if int(written) != _RETRY:
                return bool(written)
        raise StoreConflict(
            f"run {report.run_id} was not recorded: its check {report.check_id} changed each "
            f"of the {RECORD_ATTEMPTS} times it was read (many runs of it at once); nothing "
            "was written, and the run is recorded when it is delivered again"
        )

    def _check_now(self, report: RunReport) -> _CheckNow:
        """The check's latest verdict and the run's batch, in one round trip. A key of another
        type reads as empty here: the record script then names it (``StoreConflict``)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(
            self._check_key(report.check_id),
            ["verdict_kind", "target", "finished_ms", "rep", "rfp"],
        )
        pipe.hget(self._run_key(report.run_id), "batch_id")
        asked = report.request.batch_id
        if asked:
            pipe.hget(self._batch_key(asked), "text")
        check, batch_id, *batch_text = pipe.execute(raise_on_error=False)
        if isinstance(check, Exception):
            check = [None] * 5
        kind, target, finished, repeated, fingerprint = check
        try:
            finished_ms = int(finished) if finished else None
        except ValueError:
            finished_ms = None
        return _CheckNow(
            kind=kind or "",
            target=target or "",
            finished_ms=finished_ms,
            repeated=repeated or "",
            fingerprint=fingerprint or "",
            batch_id="" if isinstance(batch_id, Exception) else batch_id or "",
            batch_text=(
                text(batch_text[0])
                if batch_text and isinstance(batch_text[0], (str, bytes))
                else None
            ),
        )

    def _record_keys(self, report: RunReport, now: _CheckNow, repeated: str) -> list[str]:
        verdict = report.verdict
        assert verdict is not None
        kind, target = verdict.verdict.value, verdict.target
        previous = (
            [
                self.key("idx", "verdict", now.kind),
                self.key("idx", "tv", now.kind, now.target),
                self.key("idx", "target", now.target),
            ]
            if now.kind
            else [self.key("idx", "verdict", kind)] * 3
        )
        batch = (
            [self._batch_key(now.batch_id), self._batch_key(now.batch_id, "results")]
            if now.batch_id
            else [self.key("batch", "-"), self.key("batch", "-", "results")]  # unused
        )
        return [
            self._run_key(report.run_id),
            self._check_key(report.check_id),
            self._check_key(report.check_id, "history"),
            self._check_key(report.check_id, "verdicts"),
            self.key("checks"),
            self.key("changes"),
            self.key("unfinished"),
            checkpoint_key(self.prefix, report.run_id),
            self._runs_key,
            self.key("runs", "expiring"),
            self.key("idx", "verdict", kind),
            self.key("idx", "target", target),
            self.key("idx", "tv", kind, target),
            *previous,
            *batch,
            self._run_key(repeated) if repeated else self.key("run", "-"),  # unused
        ]

    def _record_args(
        self,
        report: RunReport,
        *,
        source: str,
        counts: bool,
        now: _CheckNow,
        repeated: str,
        encoded: str,
        fingerprint: str,
        template: tuple[str, str],
    ) -> list[Any]:
        verdict = report.verdict
        assert verdict is not None
        template_id, template_json = template
        row = batch_row(
            report.request,
            verdict,
            template_id if counts else "",
            now.batch_text if now.batch_id and now.batch_id == report.request.batch_id else None,
        )
        changed = now.kind != verdict.verdict.value  # a first verdict included
        keep = self.run_ttl_seconds if not counts or changed else self._report_ttl
        entry = HistoryEntry.of(report, template_id, repeated or None)
        clock = _now()
        return [
            report.run_id,
            report.check_id,
            verdict.target,
            verdict.verdict.value,
            verdict.exit_code,
            verdict.model_dump_json(),
            encoded,
            _epoch_ms(verdict.finished_at),
            verdict.finished_at.isoformat(),
            self.history_limit,
            0 if repeated else keep,
            report.request.kind,
            report.request.text,
            row,
            CHANGES_MAXLEN,
            clock.isoformat(),
            source,
            "1" if counts else "0",
            ",".join(report.request.notify),
            now.kind,
            now.target,
            now.batch_id,
            "repeat" if repeated else "report",
            repeated,
            fingerprint,
            template_id,
            template_json,
            micros(clock),
            int(self.run_id_window_seconds * 1_000_000),
            self._report_ttl * 1000,
            *entry.fields(),
            self.run_ttl_seconds,
        ]

    # --- runs: reads ------------------------------------------------------------------------------
    _STATE_FIELDS = (
        "run_id",
        "check_id",
        "target",
        "status",
        "attempts",
        "batch_id",
        "queued_at",
        "updated_at",
        "wake_at",
        "verdict_kind",
    )

    def run_state(self, run_id: str) -> RunProgress | None:
        return self.run_states([run_id])[0]

    def run_states(self, run_ids: Sequence[str]) -> list[RunProgress | None]:
        """:meth:`run_state` of many runs in few round trips, in order (a batch's chunk).

        A run with its own hash (not finished, or finished with its report) reads from it;
        one recorded without a report, or whose report has expired, from its history entry.
        """
        if not run_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hmget(self._run_key(run_id), list(self._STATE_FIELDS))
        states = [
            self._state_from(dict(zip(self._STATE_FIELDS, values, strict=True)), run_id)
            for run_id, values in zip(run_ids, pipe.execute(), strict=True)
        ]
        missing = [run_id for run_id, state in zip(run_ids, states, strict=True) if state is None]
        if missing:
            found = dict(zip(missing, self._recorded_states(missing), strict=True))
            states = [state or found[run_id] for run_id, state in zip(run_ids, states, strict=True)]
        return states

    @staticmethod
    def _state_from(row: dict[str, Any], run_id: str) -> RunProgress | None:
        if not row.get("status"):
            return None
        return RunProgress(
            run_id=row.get("run_id") or run_id,
            check_id=row.get("check_id") or "",
            target=row.get("target") or "",
            status=row["status"],
            attempts=int(row.get("attempts") or 0),
            batch_id=row.get("batch_id") or None,
            queued_at=_parse_time(row.get("queued_at")),
            updated_at=_parse_time(row.get("updated_at")),
            wake_at=_parse_time(row.get("wake_at")),
            verdict=_verdict_or_none(row.get("verdict_kind")),
        )

    def run_verdicts(self, run_ids: Sequence[str]) -> dict[str, Verdict]:
        """The verdicts of these runs that are still kept (a run's own, or rebuilt from its
        check's history), in a few round trips; runs without one are left out, never raised
        for (a batch's JUnit reads its rows for those)."""
        if not run_ids:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hget(self._run_key(run_id), "verdict")
        found = {
            run_id: Verdict.model_validate_json(raw)
            for run_id, raw in zip(run_ids, pipe.execute(), strict=True)
            if raw
        }
        missing = [run_id for run_id in run_ids if run_id not in found]
        for run_id, (_place, _entry, verdict) in zip(missing, self._rebuilt(missing), strict=True):
            if verdict is not None:
                found[run_id] = verdict
        return found

    def run_verdict(self, run_id: str) -> Verdict | None:
        """The run's verdict; None while it has none (or no run has the id).

        Raises :class:`ReportExpired` for a run recorded so far back in a busy check's
        history that its verdict's details are gone (its verdict's kind is still known).
        """
        raw = self.client.hget(self._run_key(run_id), "verdict")
        if raw:
            return Verdict.model_validate_json(raw)
        [(recorded, _entry, verdict)] = self._rebuilt([run_id])
        if recorded is not None and verdict is None:
            raise ReportExpired(run_id, self._left_history(recorded))
        return verdict

    def run_report(self, run_id: str) -> RunReport | None:
        """The run's full report; None while it has none (queued, running) or no run has the
        id. A run that repeated an earlier one shows that one's report with its own identity
        (``repeat_of``); :class:`ReportExpired` when the run is known but its report is gone."""
        raw, status = self.client.hmget(self._run_key(run_id), ["report", "status"])
        if raw:
            return RunReport.model_validate_json(decode_report(raw))
        if status:
            return None
        [(recorded, entry, verdict)] = self._rebuilt([run_id])
        if recorded is None:
            return None
        if entry is None or verdict is None:
            raise ReportExpired(run_id, self._left_history(recorded))
        if entry.repeat_of:
            original = self.client.hget(self._run_key(entry.repeat_of), "report")
            if original:
                report = RunReport.model_validate_json(decode_report(original))
                return repeated_report(report, entry, verdict)
        raise ReportExpired(
            run_id,
            f"run {run_id}'s report has expired (a full report is kept "
            f"{_days(self.run_ttl_seconds)} after a run that asked a model or changed its "
            f"check's verdict, {_days(self.report_ttl_seconds)} after any other, and as long "
            f"as later runs repeat it); its verdict, {verdict.verdict.value}, stays in check "
            f"{recorded.check_id}'s history",
        )

    def _left_history(self, recorded: _Recorded) -> str:
        return (
            f"run {recorded.run_id} ended {recorded.kind.value} (exit "
            f"{EXIT_CODES[recorded.kind]}), but it has left check {recorded.check_id}'s "
            f"history (its newest {self.history_limit} runs are kept) and its report has "
            "expired"
        )

    def run_request(self, run_id: str) -> EvaluationRequest | None:
        raw = self.client.hget(self._run_key(run_id), "request")
        return EvaluationRequest.model_validate_json(raw) if raw else None

    # --- runs recorded in a check's history ------------------------------------------------
    def _recorded(self, run_ids: Sequence[str]) -> list[_Recorded | None]:
        """Where each run is recorded (``P:runs``), in one round trip; a policy's run inside
        a set run through its set run's record (:meth:`_policy_runs_found`)."""
        found = self._recorded_directly(run_ids)
        missing = [run_id for run_id, place in zip(run_ids, found, strict=True) if place is None]
        if missing and any(set_run_of(run_id) for run_id in missing):
            policy_runs = self._policy_runs_found(missing)
            found = [
                place or policy_runs.get(run_id)
                for run_id, place in zip(run_ids, found, strict=True)
            ]
        return found

    def _policy_runs_found(self, run_ids: Sequence[str]) -> dict[str, _Recorded]:
        """Policies' runs inside set runs, found through their set run's record: the set's
        check names its policies' checks (``members``), and the policy's run is in its
        check's history just before the set run's entry (a set run records its policies
        first). Runs whose set run is not recorded are left out."""
        wanted = {run_id: set_run_of(run_id) for run_id in run_ids}
        sets = sorted({s for s in wanted.values() if s})
        places = dict(zip(sets, self._recorded_directly(sets), strict=True))
        members: dict[str, dict[str, str]] = {}
        for set_check in {p.check_id for p in places.values() if p is not None}:
            raw = self.client.hget(self._check_key(set_check), "members")
            try:
                members[set_check] = json.loads(raw) if raw else {}
            except ValueError:
                members[set_check] = {}
        found: dict[str, _Recorded] = {}
        for run_id, set_run in wanted.items():
            place = places.get(set_run) if set_run else None
            if place is None or set_run is None:
                continue
            check_id = next(
                (
                    check
                    for name, check in members.get(place.check_id, {}).items()
                    if policy_run_id(set_run, name) == run_id
                ),
                None,
            )
            if check_id is not None and (hit := self._policy_entry(run_id, check_id, place)):
                found[run_id] = hit
        return found

    def _policy_entry(self, run_id: str, check_id: str, set_place: _Recorded) -> _Recorded | None:
        """The history entry of a policy's run (``run_id``) in ``check_id``: among the few
        entries before its set run's, else anywhere in the history."""
        history = self._check_key(check_id, "history")
        for count in (8, self.history_limit):
            rows = stream_entries(self.client.xrevrange(history, set_place.entry_id, "-", count))
            for entry_id, fields in rows:
                if fields.get("run_id") == run_id:
                    entry = HistoryEntry.parse(fields)
                    template = (
                        self.client.hget(self._check_key(check_id, "verdicts"), entry.template_id)
                        if entry is not None
                        else None
                    )
                    if not template:
                        return None
                    kind = VerdictKind(json.loads(template)["verdict"])
                    return _Recorded(run_id, check_id, text(entry_id), kind)
            if len(rows) < count:
                return None
        return None

    def _recorded_directly(self, run_ids: Sequence[str]) -> list[_Recorded | None]:
        """Where each run is recorded by its own record in ``P:runs`` (one round trip)."""
        values = self.client.hmget(self._runs_key, list(run_ids)) if run_ids else []
        found: list[_Recorded | None] = []
        for run_id, value in zip(run_ids, values, strict=True):
            parts = text(value).split(" ") if value else []
            found.append(
                _Recorded(run_id, parts[0], parts[1], VerdictKind(parts[2]))
                if len(parts) == 3
                else None
            )
        return found

    def _rebuilt(
        self, run_ids: Sequence[str]
    ) -> list[tuple[_Recorded | None, HistoryEntry | None, Verdict | None]]:
        """Each run's place in its check's history, its entry and its verdict (None where
        it is not recorded, or has left the history), in three round trips at most."""
        recorded = self._recorded(run_ids)
        known = [r for r in recorded if r is not None]
        entries: dict[str, HistoryEntry | None] = {}
        if known:
            pipe = self.client.pipeline(transaction=False)
            for r in known:
                pipe.xrange(self._check_key(r.check_id, "history"), r.entry_id, r.entry_id)
            for r, rows in zip(known, pipe.execute(), strict=True):
                fields = next((f for _, f in stream_entries(rows)), None)
                entries[r.run_id] = HistoryEntry.parse(fields) if fields else None
        with_entry = [r for r in known if entries.get(r.run_id) is not None]
        templates: dict[str, str | None] = {}
        if with_entry:
            pipe = self.client.pipeline(transaction=False)
            for r in with_entry:
                entry = entries[r.run_id]
                assert entry is not None
                pipe.hget(self._check_key(r.check_id, "verdicts"), entry.template_id)
            for r, template in zip(with_entry, pipe.execute(), strict=True):
                templates[r.run_id] = text(template) if template else None
        out: list[tuple[_Recorded | None, HistoryEntry | None, Verdict | None]] = []
        for place in recorded:
            if place is None:
                out.append((None, None, None))
                continue
            entry, template = entries.get(place.run_id), templates.get(place.run_id)
            verdict = entry.verdict(template) if entry is not None and template else None
            out.append((place, entry, verdict))
        return out

    def _recorded_states(self, run_ids: Sequence[str]) -> list[RunProgress | None]:
        states: list[RunProgress | None] = []
        for recorded, entry, verdict in self._rebuilt(run_ids):
            if recorded is None:
                states.append(None)
                continue
            states.append(
                RunProgress(
                    run_id=recorded.run_id,
                    check_id=recorded.check_id,
                    target=verdict.target if verdict is not None else "",
                    status="done",
                    attempts=entry.attempts if entry is not None else 0,
                    batch_id=entry.batch_id if entry is not None else None,
                    queued_at=(
                        instant(entry.submitted_us)
                        if entry is not None and entry.submitted_us is not None
                        else None
                    ),
                    updated_at=instant(entry.finished_us) if entry is not None else None,
                    verdict=recorded.kind,
                )
            )
        return states

    # --- checks -------------------------------------------------------------------------------
    def latest_verdict(self, check_id: str) -> Verdict | None:
        raw = self.client.hget(self._check_key(check_id), "verdict")
        return Verdict.model_validate_json(raw) if raw else None

    def latest_verdicts(self, check_ids: list[str]) -> dict[str, Verdict]:
        """The latest verdict of each of these checks (unknown ids are left out)."""
        pipe = self.client.pipeline(transaction=False)
        for check_id in check_ids:
            pipe.hget(self._check_key(check_id), "verdict")
        raws = pipe.execute() if check_ids else []
        return {
            check_id: Verdict.model_validate_json(raw)
            for check_id, raw in zip(check_ids, raws, strict=True)
            if raw
        }

    def history(self, check_id: str, limit: int = 20) -> list[Verdict]:
        """The check's verdicts, newest first, at most ``limit`` of them.

        Each entry names its run and times and the verdict's template (its wording, kept
        once however many runs said it); entries written before templates hold the verdict.
        """
        rows = stream_entries(
            self.client.xrevrange(self._check_key(check_id, "history"), count=limit)
        )
        entries = [(fields, HistoryEntry.parse(fields)) for _, fields in rows]
        wanted = sorted({entry.template_id for _, entry in entries if entry is not None})
        found = (
            dict(
                zip(
                    wanted,
                    self.client.hmget(self._check_key(check_id, "verdicts"), wanted),
                    strict=True,
                )
            )
            if wanted
            else {}
        )
        verdicts = []
        for fields, entry in entries:
            if entry is None:
                verdicts.append(Verdict.model_validate_json(fields["verdict"]))
                continue
            template = found.get(entry.template_id)
            if template is None:  # cannot happen: an entry holds its template's count
                _log.error("history_template_missing", check_id=check_id, run_id=entry.run_id)
                continue
            verdicts.append(entry.verdict(text(template)))
        return verdicts

    def history_length(self, check_id: str) -> int:
        return int(self.client.xlen(self._check_key(check_id, "history")))

    _CHECK_FIELDS = (
        "check_id",
        "kind",
        "text",
        "target",
        "verdict_kind",
        "exit_code",
        "run_id",
        "finished_at",
        "changed_at",
        "previous_verdict",
        "notify",
    )

    def check_summaries(self, check_ids: list[str]) -> list[CheckSummary]:
        """Summaries of these checks, in the given order; unknown ids are skipped."""
        pipe = self.client.pipeline(transaction=False)
        for check_id in check_ids:
            try:
                key = self._check_key(check_id)
            except InvalidId:  # written by an older version that allowed ':' in ids
                continue
            pipe.hmget(key, list(self._CHECK_FIELDS))
        summaries = []
        for values in pipe.execute():
            row = dict(zip(self._CHECK_FIELDS, values, strict=True))
            if not row.get("verdict_kind"):
                continue
            summaries.append(
                CheckSummary(
                    check_id=row["check_id"],
                    kind=row.get("kind") or "check",
                    text=row.get("text") or "",
                    target=row.get("target") or "",
                    verdict=VerdictKind(row["verdict_kind"]),
                    exit_code=int(row["exit_code"]),
                    run_id=row["run_id"],
                    finished_at=datetime.fromisoformat(row["finished_at"]),
                    changed_at=_parse_time(row.get("changed_at")),
                    previous_verdict=(
                        VerdictKind(row["previous_verdict"])
                        if row.get("previous_verdict")
                        else None
                    ),
                    notify=[name for name in (row.get("notify") or "").split(",") if name],
                )
            )
        return summaries

    def checks(
        self,
        *,
        verdict: VerdictKind | str | None = None,
        target: str | None = None,
        changed_since: datetime | None = None,
        limit: int = 1000,
    ) -> list[CheckSummary]:
        """Checks with their latest verdict, newest first, filtered in one index read.

        ``verdict`` and ``target`` together read the (target, verdict) set;
        ``changed_since`` keeps checks whose verdict changed at or after that instant.
        """
        kind = VerdictKind(verdict).value if verdict is not None else None
        ids: list[str]
        if changed_since is not None:
            ids = list(dict.fromkeys(c.check_id for c in self.changes(changed_since)))
        elif kind and target:
            ids = texts(self.client.smembers(self.key("idx", "tv", kind, target)))
        elif kind:
            ids = texts(self.client.smembers(self.key("idx", "verdict", kind)))
        elif target:
            ids = texts(self.client.smembers(self.key("idx", "target", target)))
        else:
            ids = texts(self.client.zrevrange(self.key("checks"), 0, limit - 1))
        rows = self.check_summaries(ids)
        if changed_since is not None:
            rows = [
                r
                for r in rows
                if (kind is None or r.verdict.value == kind)
                and (target is None or r.target == target)
            ]
        rows.sort(key=lambda r: r.finished_at, reverse=True)
        return rows[:limit]

    def ids_starting_with(
        self, kind: Literal["run", "check", "batch"], prefix: str, limit: int = 10
    ) -> list[str]:
        """Up to ``limit`` stored ids of ``kind`` that begin with ``prefix``, sorted: what an
        id a table cut short stands for (``assay.id_prefixes``).

        Checks and batches are read from their index (a ZSCAN of ``P:checks`` /
        ``P:batches`` with MATCH). A run is either recorded (``P:runs``, an HSCAN with
        MATCH) or has a hash of its own while it runs or keeps its report (a SCAN of
        ``P:run:PREFIX*``, 10,000 keys a step: its cost grows with the keyspace, 2.5 s for
        500,000 keys on a loaded two-core host). Either stops once ``limit`` ids are found.
        The id alphabet holds no glob character, so ``prefix`` matches only as written.
        """
        valid_id(prefix, f"{kind} id")
        ids: Iterable[str]
        if kind == "run":
            head = self.key("run", "")
            recorded = self.client.hscan_iter(self.key("runs"), match=f"{prefix}*", count=1000)
            keys = self.client.scan_iter(match=f"{head}{prefix}*", count=10_000)
            ids = chain(
                (text(run_id) for run_id, _value in recorded),
                (text(key).removeprefix(head) for key in keys),
            )
        else:
            index = self.key("checks" if kind == "check" else "batches")
            members = self.client.zscan_iter(index, match=f"{prefix}*", count=1000)
            ids = (text(member) for member, _score in members)
        found: set[str] = set()
        for found_id in ids:
            found.add(found_id)
            if len(found) >= limit:
                break
        return sorted(found)

    def changes(self, since: datetime, limit: int = 10_000) -> list[VerdictChange]:
        """Verdict changes recorded at or after ``since``, oldest first."""
        entries = self.client.xrange(self.key("changes"), min=f"{_epoch_ms(since)}-0", count=limit)
        return [change_from_fields(f) for _, f in stream_entries(entries)]

    def check_gauges(self, limit: int) -> list[CheckGauge]:
        """The latest verdict of the ``limit`` most recently run checks (queries left out).

        Read at every Prometheus scrape in two round trips: the newest check ids, then five
        short fields of each (never the verdict JSON) in one read-only script, so every row
        is one check's state at one instant. A check gone between the two reads has no exit
        code and is left out, as one gone before them is.
        """
        if limit <= 0:
            return []
        ids = texts(self.client.zrevrange(self.key("checks"), 0, limit - 1))
        if not ids:
            return []
        keys = [self.key("check", check_id) for check_id in ids]  # read only: any id, as stored
        flat = texts(self._gauges_script(keys=keys))
        rows = []
        for index, check_id in enumerate(ids):
            kind, target, exit_code, finished_ms, source = flat[5 * index : 5 * index + 5]
            if not exit_code or kind == "query":
                continue
            rows.append(
                CheckGauge(
                    check_id=check_id,
                    target=target or "",
                    exit_code=int(exit_code),
                    finished_at=int(finished_ms or 0) / 1000,
                    source=source or DEFAULT_SOURCE,
                )
            )
        return rows

    # --- batches ------------------------------------------------------------------------------
    def create_batch(
        self,
        batch_id: str,
        *,
        kind: str,
        text: str,
        lease_token: str | None = None,
        lease_seconds: float = 0.0,
    ) -> bool:
        """Make the batch record; False when it existed already (nothing is changed then).

        With ``lease_token``, the fan-out holds a lease on the new batch for
        ``lease_seconds``, which it renews (:meth:`renew_fanout`) until it seals the
        batch; a reader that finds the lease gone from the unsealed batch closes it as
        incomplete (:meth:`batch`). Without one (as before leases), an unsealed batch
        waits for its seal however long that takes.
        """
        created = _now()
        self._forget_gone_batches(created)
        return bool(
            self._call(
                self._create_batch_script,
                keys=[self._batch_key(batch_id), self.key("batches"), self._fanout_key(batch_id)],
                args=[
                    batch_id,
                    kind,
                    text,
                    created.isoformat(),
                    _epoch_ms(created),
                    self.run_ttl_seconds,
                    lease_token or "",
                    _lease_ms(lease_seconds),
                    _epoch_ms(created) - self.run_ttl_seconds * 1000,
                ],
            )
        )

    def _forget_gone_batches(self, now: datetime, count: int = 16) -> None:
        """Drop from ``P:batches`` the oldest few batches whose keys have expired (a finished
        batch that changed nothing is kept ``report_ttl_seconds``, not the ``run_ttl_seconds``
        the index is trimmed by), so the index holds no more than the batches kept."""
        older = _epoch_ms(now) - self._report_ttl * 1000
        ids = texts(
            self.client.zrangebyscore(self.key("batches"), "-inf", older, start=0, num=count)
        )
        if not ids:
            return
        pipe = self.client.pipeline(transaction=False)
        for batch_id in ids:
            pipe.exists(self.key("batch", batch_id))  # read only: any id, as stored
        gone = [b for b, kept in zip(ids, pipe.execute(), strict=True) if not kept]
        if gone:
            self.client.zrem(self.key("batches"), *gone)

    def _seal_keys(self, batch_id: str) -> list[str]:
        return [
            self._batch_key(batch_id),
            self._fanout_key(batch_id),
            self._batch_key(batch_id, "runs"),
            self._batch_key(batch_id, "results"),
        ]

    def _fanout_key(self, batch_id: str) -> str:
        return self._batch_key(batch_id, "fanout")

    def renew_fanout(self, batch_id: str, token: str, lease_seconds: float) -> bool:
        """Extend the fan-out's lease by ``lease_seconds`` from now while ``token`` holds it;
        False when it does not (the lease lapsed and the batch was closed, or it is sealed)."""
        reply = self._renew_fanout_script(
            keys=[self._fanout_key(batch_id)], args=[token, _lease_ms(lease_seconds)]
        )
        return int(reply) == 1

    def abandon_batch(self, batch_id: str, reason: str) -> bool:
        """The fan-out stopped before every target was submitted: seal the batch as
        incomplete with the runs registered so far (``reason`` says why, for its status).
        False when it was sealed already."""
        return self._close_incomplete(batch_id, reason, "stopped")

    def _close_incomplete(self, batch_id: str, reason: str, mode: str) -> bool:
        return bool(
            self._call(
                self._abandon_batch_script,
                keys=self._seal_keys(batch_id),
                args=[_now().isoformat(), reason, mode, self._report_ttl],
            )
        )

    def note_batch_due(self, batch_id: str, not_before: datetime) -> None:
        """The batch's runs wait until ``not_before`` (its predicate opens with that instant),
        so its status can say when they are due instead of looking stuck."""
        self.client.hset(self._batch_key(batch_id), "not_before", not_before.isoformat())

    def seal_batch(self, batch_id: str) -> None:
        """Fan-out is over: the total is final, and the batch is done once pending is 0."""
        self._call(
            self._seal_batch_script,
            keys=self._seal_keys(batch_id),
            args=[_now().isoformat(), "", "", self._report_ttl],
        )

    def batch(self, batch_id: str) -> BatchStatus | None:
        """The batch's tally. An unsealed batch whose fan-out lease is gone (its submitter
        was killed or lost Redis for longer than a lease) is closed as incomplete first, so
        every reader sees it as one that stopped and finishes with the runs it has."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self._batch_key(batch_id))
        pipe.exists(self._fanout_key(batch_id))
        raw_row, leased = pipe.execute()
        row = text_fields(raw_row)
        if not row or "created_at" not in row:
            return None
        if row.get("sealed") != "1" and row.get("fanout_lease") == "1" and not leased:
            self._close_incomplete(batch_id, STOP_LAPSED, "lapsed")
            row = text_fields(self.client.hgetall(self._batch_key(batch_id)))
        sealed = row.get("sealed") == "1"
        pending = int(row.get("pending") or 0)
        return BatchStatus(
            batch_id=batch_id,
            kind=row.get("kind") or "check",
            text=row.get("text") or "",
            created_at=datetime.fromisoformat(row["created_at"]),
            total=int(row.get("total") or 0),
            sealed=sealed,
            pending=pending,
            true=int(row.get("true") or 0),
            false=int(row.get("false") or 0),
            poorly_posed=int(row.get("poorly_posed") or 0),
            cannot_determine=int(row.get("cannot_determine") or 0),
            done=sealed and pending <= 0,
            finished_at=_parse_time(row.get("finished_at")),
            not_before=_parse_time(row.get("not_before")),
            incomplete=row.get("incomplete") == "1",
            stop_reason=row.get("stop_reason") or None,
        )

    def batch_results(self, batch_id: str, offset: int = 0, count: int = 200) -> list[BatchResult]:
        """One page of per-target results in fan-out order (pending targets included), from
        the batch's runs list: a finished target's row (:func:`batch_row`) stands where its
        run id was. Each row gives its verdict, exit code, check and target, and its
        explanation's first 300 characters come from the verdict's template (or the run's
        kept verdict) while the check keeps it; None after. Two round trips a page."""
        pipe = self.client.pipeline(transaction=False)
        pipe.lrange(self._batch_key(batch_id, "runs"), offset, offset + count - 1)
        pipe.hmget(self._batch_key(batch_id), ["kind", "text"])
        listed, (batch_kind, batch_text) = pipe.execute()
        entries = texts(listed)
        if not entries:
            return []
        rows: list[list[Any] | None] = []
        pipe = self.client.pipeline(transaction=False)
        for entry in entries:
            if entry.startswith("["):
                row = json.loads(entry)
                if len(row) == 4:  # its check is the one the batch's predicate gives it
                    row.append(
                        default_check_id(
                            text(batch_kind) if batch_kind else "check",
                            text(batch_text) if batch_text else "",
                            row[3],
                        )
                    )
                rows.append(row)
                run_id, _kind, template_id, _target, check_id = row
                if template_id:
                    pipe.hget(self._check_key(check_id, "verdicts"), template_id)
                else:
                    pipe.hget(self._run_key(run_id), "verdict")
            else:  # a run id: pending, or recorded in the results hash by an older version
                rows.append(None)
                pipe.hget(self._batch_key(batch_id, "results"), entry)
                pipe.hmget(self._run_key(entry), ["check_id", "target"])
        replies = iter(pipe.execute())
        page = []
        for entry, row in zip(entries, rows, strict=True):
            if row is None:
                legacy, (check_id, target) = next(replies), next(replies)
                page.append(
                    BatchResult.model_validate_json(legacy)
                    if legacy
                    else BatchResult(run_id=entry, check_id=check_id or "", target=target or "")
                )
                continue
            run_id, verdict_kind, _template_id, target, check_id = row
            verdict = next(replies)
            explanation = json.loads(verdict).get("explanation") if verdict else None
            kind_ = VerdictKind(verdict_kind)
            page.append(
                BatchResult(
                    run_id=run_id,
                    check_id=check_id,
                    target=target,
                    verdict=kind_,
                    exit_code=EXIT_CODES[kind_],
                    explanation=explanation[:RESULT_EXPLANATION_CHARS] if explanation else None,
                )
            )
        return page

    def iter_batch_results(self, batch_id: str, page_size: int = 200) -> Iterator[BatchResult]:
        """Every target's result, read page by page so a big batch is never held at once."""
        offset = 0
        while True:
            page = self.batch_results(batch_id, offset, page_size)
            yield from page
            if len(page) < page_size:
                return
            offset += page_size

    # --- runs without a verdict (for the lost-run sweeper) ---------------------------------
    def unfinished_before(self, instant: datetime, limit: int = 500) -> list[str]:
        """Runs without a verdict whose last sign of life (or wake-up) is before ``instant``."""
        return texts(
            self.client.zrangebyscore(
                self.key("unfinished"), "-inf", instant.timestamp(), start=0, num=limit
            )
        )

    def look_again_at(self, run_id: str, instant: datetime) -> None:
        """Postpone the sweeper's next look at a run (it was just re-sent or is still busy)."""
        self.client.zadd(self.key("unfinished"), {run_id: instant.timestamp()}, xx=True)

    def forget_unfinished(self, run_id: str) -> None:
        self.client.zrem(self.key("unfinished"), run_id)

    def try_lock(self, name: str, owner: str, ttl_seconds: float) -> bool:
        """Take (or renew, when ``owner`` holds it) a short lease; False if someone else has it."""
        key = self.key("lock", name)
        if self.client.set(key, owner, nx=True, px=int(ttl_seconds * 1000)):
            return True
        if self.client.get(key) == owner:
            self.client.pexpire(key, int(ttl_seconds * 1000))
            return True
        return False

    # --- health -------------------------------------------------------------------------------
    def check_persistence(self) -> PersistenceReport:
        """Warn (structlog) when this Redis could evict verdicts or lose them on restart."""
        import redis as redis_lib

        warnings: list[str] = []
        policy: str | None = None
        appendonly: bool | None = None
        try:
            policy = str(self.client.config_get("maxmemory-policy").get("maxmemory-policy"))
            appendonly = self.client.config_get("appendonly").get("appendonly") == "yes"
        except redis_lib.ResponseError as exc:
            warnings.append(
                f"could not read the Redis configuration ({exc}); make sure it runs with "
                "maxmemory-policy noeviction and appendonly yes"
            )
        if policy is not None and policy != "noeviction":
            warnings.append(
                f"Redis maxmemory-policy is {policy}, so it may evict verdicts and queued "
                "runs under memory pressure: set maxmemory-policy noeviction"
            )
        if appendonly is False:
            warnings.append(
                "Redis AOF persistence is off, so a Redis restart loses recent verdicts and "
                "queued runs: set appendonly yes for production"
            )
        for message in warnings:
            _log.warning("redis_persistence", message=message)
        return PersistenceReport(maxmemory_policy=policy, appendonly=appendonly, warnings=warnings)

    def ping(self) -> bool:
        return bool(self.client.ping())
