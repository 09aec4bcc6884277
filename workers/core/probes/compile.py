"""Accept or reject a probe the model proposed, against the verdict it proposed it with.

The model's word is not evidence, and neither is its probe: the engine runs the
lookups itself, on the same cluster state, and evaluates the expression. The
probe is accepted only when that gives exactly the model's ``true``/``false``.
A probe that cannot run, or that disagrees, is rejected with the reason on record;
the model's verdict then stands or falls on its own evidence as before.
"""

from __future__ import annotations

from schemas.probe import ProbeOutcome, ProposedProbe
from schemas.verdict import VerdictKind
from workers.core.probes.runner import run_probe
from workers.core.toolsets.backend import ClusterBackend


def judge(
    probe: ProposedProbe, model_verdict: VerdictKind, backend: ClusterBackend | None
) -> ProbeOutcome:
    """Run ``probe`` now and compare it with ``model_verdict``."""
    run = run_probe(probe, backend)
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
