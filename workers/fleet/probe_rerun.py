"""Re-evaluate a check by its accepted probe (0 model tokens), falling back to the model.

:func:`evaluate_check` is what the worker task calls instead of ``engine.evaluate``.
With ``request.probe``:

* ``off``: the model, as before (a probe it proposes is still compiled and stored);
* ``auto`` (default): the check's active probe (or, in a batch, the batch's probe) when
  there is one, else the model;
* ``only``: the probe or ``cannot_determine``; the model is never called.

Fail-safe rules, each tested:

* a probe that cannot run (kind missing, lookup error, expression error, non-boolean,
  no objects) never gives a verdict: ``auto`` falls back to the model with what is left of
  the run's time budget (``cannot_determine`` with ``budget_exhausted="deadline"`` when
  less than ``MIN_FALLBACK_SECONDS`` is left), ``only`` ends ``cannot_determine``;
* a probe re-run has the run's time budget (``effective_budget(...).timeout_seconds``, the
  one the model path would have had), over all its lookups together and bound to the
  backend it reads; one that runs out of it ends ``cannot_determine`` with
  ``budget_exhausted="deadline"`` in every mode: no time is left to ask the model;
* a probe verdict that differs from the probe's last verdict (a flip) is not recorded
  until the model has confirmed it; if the model disagrees the probe is retired and the
  model's verdict stands;
* every ``probe_revalidate_runs`` probe runs, or once ``probe_revalidate_seconds`` have
  passed since the model last agreed, the model re-validates the probe the same way.

After a model run, an accepted probe is stored as the check's next version (and, in a
batch, as the batch's probe if it has none yet), so the next run can use it.

Compilation is single-flight (``auto`` only): with no probe yet, one run claims the compile
lock (workers/fleet/probe_store.py) and asks the model, renewing the claim's short lease from a
heartbeat thread meanwhile; runs of the same check, or of the same batch, arriving meanwhile
wait up to ``probe_compile_wait_seconds`` for its probe and run that (0 tokens) instead of
asking the model too. Waiting, not falling back at once, is the point: a batch's threads all
start before the first model run ends, and each would otherwise pay for a model run and
propose its own probe. A waiter whose holder ends without a probe asks the model itself; one
whose holder vanishes (killed: the lease is not renewed and expires within
``COMPILE_LEASE_SECONDS``) takes the claim over at its next poll and asks the model as the new
holder: waiting never decides anything.
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime
from typing import Any, Literal

import structlog

from schemas.probe import AgreementEntry, ObjectRef, ProbeOutcome, ProbeRecord, ProbeRun
from schemas.report import RunReport, RunState
from schemas.request import EvaluationRequest
from schemas.verdict import Evidence, VerdictKind
from workers.engine.engine import EngineDeps, effective_budget, evaluate
from workers.engine.spend_guard import BUDGET_KIND as SPEND_CEILING
from workers.fleet.probe_store import CompileClaim, ProbeLookup, ProbeStore
from workers.fleet.zero_token_verdicts import zero_token_report, zero_token_verdict
from workers.policy_engine.probes.runner import backend_of, run_probe_with_results
from workers.policy_engine.probes.sensitivity import check_sensitivity

PROBE_MODEL = "(probe)"
COMPILE_POLL_SECONDS = 0.2
FIRST_COMPILE_POLL_SECONDS = 0.01
# Less than this left of the run's time budget when its probe could not run: no model run is
# started (it could not make a lookup and answer in time); the run ends cannot_determine.
MIN_FALLBACK_SECONDS = 1.0
_log = structlog.get_logger("assay.probes")
Why = Literal["revalidate", "flip"]


def evaluate_check(
    request: EvaluationRequest,
    deps: EngineDeps,
    probes: ProbeStore | None,
    state: RunState | None = None,
) -> RunReport:
    """One run of ``request``: by probe when it can, by the model otherwise. Never raises.

    A bug in the probe path falls back to the model (``auto``) with what is left of the
    run's time budget, as any other fallback does: the time the probe path took is spent.
    """
    began = time.monotonic()
    try:
        return _Rerun(request, deps, probes).execute(state)
    except Exception as exc:  # the probe path must not turn a bug into a verdict
        _log.error("probe_path_failed", run_id=request.run_id, error=repr(exc))
        if request.probe == "only":
            return _cannot_determine(request, deps, f"internal error in the probe path: {exc!r}")
        return evaluate(request, deps, state=state, spent_seconds=time.monotonic() - began)


class _Rerun:
    def __init__(
        self, request: EvaluationRequest, deps: EngineDeps, probes: ProbeStore | None
    ) -> None:
        self.request = request
        self.deps = deps
        self.probes = probes
        self.settings = deps.settings
        self.compile_claim: CompileClaim | None = None  # while this run holds the claim
        self.objects: list[Any] | None = None  # what the probe read, for the sensitivity check
        # The time budget the model path would have (request > settings > profile).
        self.timeout_seconds = effective_budget(request, deps.settings).timeout_seconds
        # The monotonic instant the run's time budget ends, set when the probe starts: a
        # fallback to the model gets only what is left of it (``_fallback``).
        self.deadline: float | None = None

    def execute(self, state: RunState | None) -> RunReport:
        request = self.request
        if not (
            state is None
            and request.kind == "check"
            and request.probe != "off"
            and self.probes is not None
        ):
            return self._model(state)
        # One round trip: the probe, the compile claim's state, and (auto) the claim itself.
        lookup = self.probes.lookup(
            request.check_id, request.batch_id, claim=request.probe == "auto"
        )
        record = self._usable(lookup)
        if record is None:
            if request.probe == "only":
                return _cannot_determine(
                    request, self.deps, "--probe only: this check has no accepted probe"
                )
            record = self._single_flight(lookup)
            if record is None:
                return self._model(state)
        run = self._run(record)
        if run.verdict is None:
            outcome = _outcome(record, run, "failed", f"the probe could not run: {run.error}")
            if run.budget_exhausted == "deadline":
                return self._out_of_time(run, outcome)
            if request.probe == "only":
                return _cannot_determine(request, self.deps, outcome.reason, outcome)
            return self._fallback(run, outcome)
        why = self._needs_model(record, run)
        if why is None:
            return self._probe_verdict(record, run)
        if request.probe == "only":
            return _cannot_determine(
                request,
                self.deps,
                f"the probe's verdict needs the model ({why}), which --probe only rules out",
                _outcome(record, run, "failed", f"the model was needed ({why})"),
            )
        return self._validate(record, run, why)

    # -- which probe -----------------------------------------------------------------------
    def _usable(self, lookup: ProbeLookup) -> ProbeRecord | None:
        """The probe that may answer this run: the check's own (active), else its batch's."""
        own = lookup.own if lookup.own is not None and lookup.own.active else None
        return self._answering(own) or self._answering(lookup.batch)

    def _answering(self, record: ProbeRecord | None) -> ProbeRecord | None:
        """``record`` when it may answer this request: compiled for the same predicate (a check
        id is the caller's and may be reused for a reworded check) under a profile at least
        as strict (a fast compile was never confirmed in a fresh context)."""
        if record is None or record.answers(self.request.text, self.request.profile):
            return record
        _log.info("probe_not_for_this_request", run_id=self.request.run_id, version=record.version)
        return None

    def _single_flight(self, lookup: ProbeLookup) -> ProbeRecord | None:
        """No probe yet: the first run claims the compile and asks the model; runs arriving
        meanwhile wait for its probe. None: ask the model now.

        The waiters poll at first every 10 ms, doubling to ``COMPILE_POLL_SECONDS``: a holder
        at a fast model ends within milliseconds, and a fixed 0.2 s poll left every thread of
        a worker idle for that long at the start of each batch (issue 15).

        Each poll claims when there is no claim: a holder that died stops renewing its lease,
        the claim expires within a lease, and the first waiter to poll after that becomes the
        holder (the others see its claim and go on waiting, within their own deadline)."""
        assert self.probes is not None
        check_id, batch_id = self.request.check_id, self.request.batch_id
        deadline = time.monotonic() + self.probes.compile_lock_seconds  # the longest wait
        pause = FIRST_COMPILE_POLL_SECONDS
        while True:
            record = self._usable(lookup)
            if record is not None:
                _log.info("probe_compile_waited", run_id=self.request.run_id)
                return record
            if lookup.token is not None:
                self._hold(lookup.token)
                return None  # this run is the holder: _model releases the claim when it ends
            if lookup.state == "done":
                return None  # the holder ended without a probe: ask the model at once
            if lookup.state == "free":  # a retired probe, or the holder vanished: claim it
                token = self.probes.claim_compile(check_id, batch_id)
                if token is not None:
                    self._hold(token)
                    return None
            if time.monotonic() + pause > deadline:
                return None  # waited the longest wait: ask the model without the claim
            time.sleep(pause)
            pause = min(pause * 2, COMPILE_POLL_SECONDS)
            lookup = self.probes.lookup(check_id, batch_id, claim=True)

    def _hold(self, token: str) -> None:
        """This run took the claim: keep its lease alive until :meth:`_finish_compile`."""
        assert self.probes is not None
        self.compile_claim = self.probes.hold(self.request.check_id, self.request.batch_id, token)

    def _own(self, record: ProbeRecord) -> bool:
        """Whether ``record`` is this check's own probe (not borrowed from the batch)."""
        return record.check_id == self.request.check_id

    def _run(self, record: ProbeRecord) -> ProbeRun:
        """Run the probe within the run's time budget, as the engine runs its tools.

        The clock starts once the tools are built, as the engine's does, and the deadline is
        bound to the registry's backend, so a live cluster's lookup in flight ends by it
        (without it the kube client's own timeouts held the worker's thread for up to the
        retry deadline per lookup, however short the run's budget)."""
        try:
            registry = self.deps.tools(self.request, self.settings)
        except Exception as exc:
            return ProbeRun(error=f"the cluster could not be opened: {exc}")
        try:
            self.deadline = deadline = self._deadline()
            if deadline is not None:
                registry.bind_deadline(deadline)
            run, self.objects = run_probe_with_results(
                record.probe, backend_of(registry), deadline=deadline
            )
            return run
        finally:
            with contextlib.suppress(Exception):
                registry.close()

    def _deadline(self) -> float | None:
        """The ``time.monotonic()`` instant this run's time budget ends, from now."""
        timeout = self.timeout_seconds
        return time.monotonic() + timeout if timeout else None

    def _fallback(self, run: ProbeRun, outcome: ProbeOutcome) -> RunReport:
        """``auto``, the probe could not run (not for time): the model answers, with what is
        left of the run's time budget (its clock started with the probe), not a fresh one.

        Why: with a fresh budget a probe that failed late (a slow cluster, then an error) let
        the run take the probe's time plus the whole timeout. With less than
        ``MIN_FALLBACK_SECONDS`` left, a model run could not do a lookup and answer (a model
        call takes seconds), so the run ends as :meth:`_out_of_time` does, without building
        the tools or calling the model.
        """
        left = self._seconds_left()
        if left is not None and left < MIN_FALLBACK_SECONDS:
            return self._out_of_time(
                run,
                outcome,
                reason=f"the run's time budget of {self.timeout_seconds or 0:g}s was nearly "
                f"spent when its probe re-run failed ({run.error}): {max(left, 0.0):.1f}s was "
                f"left, less than the {MIN_FALLBACK_SECONDS:g}s a model run needs, so the "
                "model was not asked",
                explanation="The check's probe could not run, and too little of the run's time "
                "budget was left to ask the model, so nothing was concluded.",
            )
        _log.info("probe_fallback", run_id=self.request.run_id, error=run.error, seconds_left=left)
        report = self._model(None, spent_seconds=self._spent(left))
        return report if report.probe is not None else _with_probe(report, outcome)

    def _spent(self, left: float | None) -> float:
        """Seconds of the run's time budget the probe used (0 with no deadline)."""
        return 0.0 if left is None or self.timeout_seconds is None else self.timeout_seconds - left

    def _seconds_left(self) -> float | None:
        """What is left of the run's time budget since the probe started; None: no deadline
        (the probe never started: the tools could not be built) or no time budget."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def _out_of_time(
        self,
        run: ProbeRun,
        outcome: ProbeOutcome,
        *,
        reason: str | None = None,
        explanation: str = "The check's probe did not finish within the run's time budget, "
        "so nothing was concluded.",
    ) -> RunReport:
        """The probe used the run's whole time budget: ``cannot_determine``, whatever the mode.

        Falling back to the model (``auto``) would start a model run after the run's
        deadline: no time is left for it, and a fresh budget would let a slow cluster hold
        the worker for twice the run's timeout. The probe's record is left as it is: running
        out of time says nothing about the probe (a failure to run never does)."""
        _log.info("probe_out_of_time", run_id=self.request.run_id, error=run.error)
        return _cannot_determine(
            self.request,
            self.deps,
            reason
            or f"the run's time budget of {self.timeout_seconds or 0:g}s ran out in its probe "
            f"re-run ({run.error}), leaving no time to ask the model",
            outcome,
            explanation=explanation,
            budget_exhausted="deadline",
            duration=run.duration_seconds,
        )

    def _needs_model(self, record: ProbeRecord, run: ProbeRun) -> Why | None:
        if not self._own(record):
            # A borrowed probe has never been checked on this target: its flip is unknown,
            # but it agreed on another target; its first verdict here stands as a probe's.
            return None
        if record.last_verdict is not None and run.verdict != record.last_verdict:
            return "flip"
        due_runs = record.runs_since_validation + 1 >= self.settings.probe_revalidate_runs
        age = (datetime.now(UTC) - record.last_validated_at).total_seconds()
        if due_runs or age >= self.settings.probe_revalidate_seconds:
            return "revalidate"
        return None

    # -- outcomes --------------------------------------------------------------------------
    def _probe_verdict(
        self, record: ProbeRecord, run: ProbeRun, note: str = "re-run by probe (0 model tokens)"
    ) -> RunReport:
        assert run.verdict is not None
        if self.probes is not None and self._own(record):
            self.probes.put(
                record.model_copy(
                    update={
                        "last_verdict": run.verdict,
                        "last_run_at": datetime.now(UTC),
                        "runs_since_validation": record.runs_since_validation + 1,
                    }
                )
            )
            if self.request.batch_id:  # the batch's other targets may use it too
                self.probes.save_batch_probe(self.request.batch_id, record)
        outcome = _outcome(record, run, "accepted", note)
        verdict = zero_token_verdict(
            self.request,
            run.verdict,
            _explanation(record, run),
            model=PROBE_MODEL,
            duration=run.duration_seconds,
            evidence=_evidence(record, run),
            evidence_verified=True,
            source="probe",
            probe_version=record.version,
        )
        return zero_token_report(self.request, self.deps, verdict, probe=outcome)

    def _validate(self, record: ProbeRecord, run: ProbeRun, why: Why) -> RunReport:
        """Ask the model; record whether it agrees with the probe; its verdict is the run's.

        The model has what is left of the run's time budget after the probe, as after a
        failed probe (:meth:`_fallback`): a slow cluster must not stretch the run to the
        probe's time plus a whole timeout. Too little left to ask the model ends the run
        ``cannot_determine`` and leaves the probe as it was, unvalidated.
        """
        assert self.probes is not None and run.verdict is not None
        left = self._seconds_left()
        if left is not None and left < MIN_FALLBACK_SECONDS:
            return self._out_of_time(
                run,
                _outcome(record, run, "failed", f"the model was needed ({why}) but had no time"),
                reason=f"the run's time budget of {self.timeout_seconds or 0:g}s was nearly "
                f"spent when its probe answered ({max(left, 0.0):.1f}s left, less than the "
                f"{MIN_FALLBACK_SECONDS:g}s a model run needs), and the probe's verdict needs "
                f"the model ({why}), so nothing was concluded",
                explanation="The check's probe answered, but its answer needed the model's "
                "confirmation and too little of the run's time budget was left to ask it.",
            )
        report = self._model(None, count_agreement=False, spent_seconds=self._spent(left))
        if why == "revalidate" and _stopped_by_spend_ceiling(report):
            # A re-validation is routine, not doubt: a spend ceiling that stops it leaves the
            # probe's verdict standing (0 tokens), and the probe due again at its next run.
            # A flip is different: it is never recorded without the model (below).
            assert report.verdict is not None
            return self._probe_verdict(
                record,
                run,
                f"re-run by probe (0 model tokens); its re-validation waits: "
                f"{report.verdict.reason}",
            )
        model_verdict = report.verdict.verdict if report.verdict else None
        if model_verdict not in (VerdictKind.TRUE, VerdictKind.FALSE):
            # Undecided: nothing to compare; the probe stays as it was, unvalidated.
            return (
                report
                if report.probe is not None
                else _with_probe(
                    report, _outcome(record, run, "failed", f"the model did not decide ({why})")
                )
            )
        assert model_verdict is not None and report.verdict is not None
        agreed = model_verdict == run.verdict
        entry = AgreementEntry(
            run_id=self.request.run_id,
            at=datetime.now(UTC),
            version=record.version,
            probe_verdict=run.verdict,
            model_verdict=model_verdict,
            agreed=agreed,
            why=why,
        )
        current = self.probes.current(record.check_id)
        insensitive: str | None = None  # why re-validation retired the probe
        if current is not None and current.version == record.version:
            current = self.probes.record_agreement(current, entry)
            insensitive = self._retired_as_insensitive(current, run) if agreed else None
            agreed = agreed and insensitive is None  # retired: the verdict is the model's alone
        else:  # the model compiled a newer version meanwhile: keep the comparison on record
            self.probes.push_entry(record.check_id, entry)
        if agreed:
            report = report.model_copy(
                update={
                    "verdict": report.verdict.model_copy(update={"probe_version": record.version})
                }
            )
        if report.probe is not None:
            return report
        status: Literal["accepted", "rejected"] = "accepted" if agreed else "rejected"
        reason = insensitive or (
            f"the model {'confirmed' if agreed else 'contradicted'} the probe's "
            f"{run.verdict.value} ({why})"
        )
        return _with_probe(report, _outcome(record, run, status, reason))

    def _retired_as_insensitive(self, record: ProbeRecord, run: ProbeRun) -> str | None:
        """Re-validation re-accepts the probe: like a compile
        (workers/policy_engine/probes/acceptance.py), only if some counterfactual of the
        objects it just read flips it. One that no longer
        depends on them (or never did: stored before this check existed) is retired: the
        reason it was, else None."""
        assert self.probes is not None
        if self.objects is None or run.value is None:
            return None  # nothing to search (cannot happen: the probe gave a verdict)
        sensitivity = check_sensitivity(record.probe, self.objects, run.value)
        if sensitivity.sensitive:
            return None
        _log.info("probe_insensitive", run_id=self.request.run_id, version=record.version)
        reason = sensitivity.reason()
        self.probes.put(
            record.model_copy(
                update={"active": False, "retired_reason": f"run {self.request.run_id}: {reason}"}
            )
        )
        return reason

    def _model(
        self, state: RunState | None, *, count_agreement: bool = True, spent_seconds: float = 0.0
    ) -> RunReport:
        try:
            report = evaluate(self.request, self.deps, state=state, spent_seconds=spent_seconds)
            if report.status == "done":
                self._store_compiled(report, count_agreement)
            return report
        finally:
            self._finish_compile()

    def _finish_compile(self) -> None:
        """Stop the claim's heartbeat and mark it done, whether the model run ended or failed."""
        claim, self.compile_claim = self.compile_claim, None
        if claim is None:
            return
        try:
            claim.release()
        except Exception as exc:  # renewal has stopped: the claim expires within a lease
            _log.warning("probe_compile_not_released", run_id=self.request.run_id, error=repr(exc))

    def _store_compiled(self, report: RunReport, count_agreement: bool) -> None:
        """Store an accepted probe as the next version; the same probe again is no new version
        (it counts as an agreement, unless a re-validation records the comparison itself)."""
        outcome = report.probe
        if self.probes is None or outcome is None or outcome.status != "accepted":
            return
        if report.verdict is None or report.verdict.source != "model":
            return
        if report.verdict.verdict != outcome.run.verdict:
            # The probe reproduced the planner's DONE, but that verdict did not stand (strict's
            # confirmation refused it, or a budget ran out first): it is no verdict to re-run.
            return
        check_id, run_id, verdict = self.request.check_id, self.request.run_id, report.verdict
        try:
            current = self._answering(self.probes.active(check_id))
            if current is not None and current.probe == outcome.probe:
                record = current
                if count_agreement:
                    entry = AgreementEntry(
                        run_id=run_id,
                        at=datetime.now(UTC),
                        version=current.version,
                        probe_verdict=outcome.run.verdict,
                        model_verdict=verdict.verdict,
                        agreed=True,
                        why="compile",
                    )
                    record = self.probes.record_agreement(current, entry)
            else:
                record = self.probes.save_compiled(
                    check_id,
                    run_id,
                    outcome,
                    verdict.verdict,
                    predicate=self.request.text,
                    profile=self.request.profile,
                )
            if self.request.batch_id:
                self.probes.save_batch_probe(self.request.batch_id, record)
        except Exception as exc:  # storing a probe is an optimisation; the verdict stands
            _log.warning("probe_not_stored", run_id=self.request.run_id, error=repr(exc))
            return
        report.probe = outcome.model_copy(update={"version": record.version})
        if report.verdict is not None:
            report.verdict = report.verdict.model_copy(update={"probe_version": record.version})


def _outcome(
    record: ProbeRecord, run: ProbeRun, status: Literal["accepted", "rejected", "failed"], why: str
) -> ProbeOutcome:
    return ProbeOutcome(
        status=status, reason=why, probe=record.probe, run=run, version=record.version
    )


def _with_probe(report: RunReport, outcome: ProbeOutcome) -> RunReport:
    return report.model_copy(update={"probe": outcome})


def _names(refs: list[ObjectRef], limit: int = 10) -> str:
    shown = [f"{r.kind} {r.namespace + '/' if r.namespace else ''}{r.name}" for r in refs[:limit]]
    more = f" and {len(refs) - limit} more" if len(refs) > limit else ""
    return ", ".join(shown) + more


def _explanation(record: ProbeRecord, run: ProbeRun) -> str:
    base = (
        f"Probe v{record.version} (compiled by run {record.compiled_by_run}) evaluated "
        f"{record.probe.summary()!r} over {run.objects_read} object(s): {run.value}."
    )
    if run.deciding:
        base += f" It is false for {_names(run.deciding)}."
    return base


def _evidence(record: ProbeRecord, run: ProbeRun) -> list[Evidence]:
    fields = ", ".join(run.fields) or "(none named)"
    return [
        Evidence(
            step=index,
            tool=lookup.tool,
            arguments=lookup.args,
            ok=True,
            excerpt=f"objects read: {_names(run.objects) or 'none'}; fields read: {fields}",
            verified=True,
            structured=True,
        )
        for index, lookup in enumerate(record.probe.lookups)
    ]


def _cannot_determine(
    request: EvaluationRequest,
    deps: EngineDeps,
    reason: str,
    outcome: ProbeOutcome | None = None,
    *,
    explanation: str = "The check was to be answered by its probe alone, which could not "
    "answer it.",
    budget_exhausted: Literal["deadline"] | None = None,
    duration: float = 0.0,
) -> RunReport:
    verdict = zero_token_verdict(
        request,
        VerdictKind.CANNOT_DETERMINE,
        explanation,
        model=PROBE_MODEL,
        duration=duration,
        reason=reason,
        source="probe",
        probe_version=outcome.version if outcome else None,
        budget_exhausted=budget_exhausted,
    )
    return zero_token_report(request, deps, verdict, probe=outcome)


def _stopped_by_spend_ceiling(report: RunReport) -> bool:
    """The model run ended because a spend ceiling over many runs stopped one of its calls."""
    return report.verdict is not None and report.verdict.budget_exhausted == SPEND_CEILING
