"""Accept or reject a probe the model proposed, against the verdict it proposed it with.

The model's word is not evidence, and neither is its probe: the engine runs the
lookups itself, on the same cluster state, and evaluates the expression. The
probe is accepted only when that gives exactly the model's ``true``/``false``.
A probe that cannot run, or that disagrees, is rejected with the reason on record;
the model's verdict then stands or falls on its own evidence as before. The probe runs
within the run's deadline; one that runs out of it is not judged (``failed``).
"""

from __future__ import annotations

from schemas.probe import ProbeOutcome, ProposedProbe
from schemas.verdict import VerdictKind
from workers.core.probes.runner import run_probe
from workers.core.toolsets.backend import ClusterBackend


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
    """
    run = run_probe(probe, backend, deadline=deadline)
    if run.budget_exhausted == "deadline":
        return ProbeOutcome(
            status="failed",
            reason=f"the run's time budget ran out while the probe was judged, so it was not "
            f"judged: {run.error}",
            probe=probe,
            run=run,
        )
    if run.verdict is None:
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
    return ProbeOutcome(
        status="accepted",
        reason=f"the probe reproduced {model_verdict.value} on the same state "
        f"({run.objects_read} objects read)",
        probe=probe,
        run=run,
    )
