"""Accept or reject a probe the model proposed, against the verdict it proposed it with.

The model's word is not evidence, and neither is its probe: the engine runs the
lookups itself, on the same cluster state, and evaluates the expression. The
probe is accepted only when that gives exactly the model's ``true``/``false``.
A probe that cannot run, or that disagrees, is rejected with the reason on record;
the model's verdict then stands or falls on its own evidence as before. The probe runs
within the run's deadline; one that runs out of it is not judged (``failed``).

Agreeing is not enough: an expression that reads its input but whose value does not
depend on it (``size(results) >= 0``) agrees with any ``true`` and would repeat it until the
next re-validation whatever the cluster does. So an agreeing probe is accepted only when
the engine finds a counterfactual, built from the objects it just read, under which the
probe gives the other verdict (sensitivity.py); otherwise it is ``rejected``.
"""

from __future__ import annotations

from time import monotonic

from schemas.probe import ProbeOutcome, ProposedProbe
from schemas.verdict import VerdictKind
from workers.engine.toolsets.backend import ClusterBackend
from workers.policy_engine.probes.runner import run_probe_with_results
from workers.policy_engine.probes.sensitivity import BUDGET_SECONDS, check_sensitivity


def judge(
    probe: ProposedProbe,
    model_verdict: VerdictKind,
    backend: ClusterBackend | None,
    *,
    deadline: float | None = None,
) -> ProbeOutcome:
    """Run ``probe`` now and compare it with ``model_verdict``.

    ``deadline``: the run's (a ``time.monotonic()`` instant), which the caller has bound to
    ``backend`` too. Judging is part of the run, so it ends with the run's time budget: an
    ``each_object`` probe over a big snapshot or a slow cluster must not run past it. A probe
    that runs out is not judged (``failed``, saying so): the time ran out, not the probe.
    The sensitivity search after it has its own small bound, cut to what is left of the run's.
    The reason is scrubbed with the backend's scrubber: a counterfactual it names is built
    from the objects as stored.
    """
    outcome = _judged(probe, model_verdict, backend, deadline)
    if backend is None:
        return outcome
    return outcome.model_copy(update={"reason": backend.scrubber.text(outcome.reason)})


def _judged(
    probe: ProposedProbe,
    model_verdict: VerdictKind,
    backend: ClusterBackend | None,
    deadline: float | None,
) -> ProbeOutcome:
    run, results = run_probe_with_results(probe, backend, deadline=deadline)
    if run.budget_exhausted == "deadline":
        return ProbeOutcome(
            status="failed",
            reason=f"the run's time budget ran out while the probe was judged, so it was not "
            f"judged: {run.error}",
            probe=probe,
            run=run,
        )
    if run.verdict is None or run.value is None or results is None:
        return ProbeOutcome(
            status="failed", reason=f"the probe could not run: {run.error}", probe=probe, run=run
        )
    if run.verdict != model_verdict:
        return ProbeOutcome(
            status="rejected",
            reason=f"the probe gave {run.verdict.value} (expression {run.value}) where the "
            f"model concluded {model_verdict.value}",
            probe=probe,
            run=run,
        )
    budget = BUDGET_SECONDS if deadline is None else min(BUDGET_SECONDS, deadline - monotonic())
    if budget <= 0:
        return ProbeOutcome(
            status="failed",
            reason="the run's time budget ran out before the probe's dependence on the objects "
            "was checked, so it was not judged",
            probe=probe,
            run=run,
        )
    sensitivity = check_sensitivity(probe, results, run.value, budget_seconds=budget)
    if not sensitivity.sensitive:
        return ProbeOutcome(status="rejected", reason=sensitivity.reason(), probe=probe, run=run)
    other = probe.verdict_for(not run.value).value
    return ProbeOutcome(
        status="accepted",
        reason=f"the probe reproduced {model_verdict.value} on the same state "
        f"({run.objects_read} objects read), and gives {other} when {sensitivity.flip} "
        f"({sensitivity.evaluations} counterfactual(s) tried)",
        probe=probe,
        run=run,
    )
