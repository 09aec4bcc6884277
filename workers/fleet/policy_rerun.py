"""Runs of imported policies (``policy:NAME``, ``policy-set:NAME``): probes only, never a model.

The worker task calls :func:`evaluate_policy_request` for a check whose predicate names a
policy or a set (schemas/policy.py). The policy (or every policy of the set) is read from
the policy store and run on the request's target (workers/policy_engine/policies/run.py) within the
run's time budget; the verdict is the policy's, from its probes, for 0 model tokens.

A set is run as a set: one task per target and tick, every probe of every policy sharing
one set of listings (one list per (kind, namespace)). It records one verdict per policy,
each as its own run of its own check (the check ``policy:NAME`` on that target, the same
check a run of that policy alone records), so every policy has its history, its latest
verdict and its change events (alerts); and the set's run records the set's verdict:
``false`` when a policy is violated, ``true`` when every policy holds, ``cannot_determine``
otherwise. Each policy's run id is derived from the set run's id and the policy's name,
so a redelivered set run records nothing twice (the store's first-verdict-wins rule).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import structlog

from schemas.policy import (
    ImportedPolicy,
    PolicyReference,
    PolicyResult,
    PolicySetEntry,
    PolicySetResult,
    policy_reference,
    policy_run_id,
)
from schemas.report import RunReport
from schemas.request import EvaluationRequest, default_check_id
from schemas.verdict import Evidence, Verdict, VerdictKind
from workers.engine.engine import EngineDeps, effective_budget
from workers.fleet.policy_store import PolicyStore, UnreadablePolicy
from workers.fleet.zero_token_verdicts import zero_token_report, zero_token_verdict
from workers.policy_engine.policies.run import run_policies
from workers.policy_engine.probes.runner import backend_of

POLICY_MODEL = "(policy)"
VIOLATIONS_NAMED = 20  # offending objects named in a verdict's explanation
_log = structlog.get_logger("assay.policies")


@dataclass
class PolicyRunOutcome:
    """The run's report, and for a set run each policy's own run (to record first)."""

    report: RunReport
    children: list[RunReport] = field(default_factory=list)


def is_policy_request(request: EvaluationRequest) -> bool:
    return request.kind == "check" and policy_reference(request.text) is not None


def evaluate_policy_request(
    request: EvaluationRequest, deps: EngineDeps, policies: PolicyStore
) -> PolicyRunOutcome:
    """One run of a ``policy:``/``policy-set:`` check. Never raises; never asks a model.

    The caller records ``children`` (a set's per-policy runs) before ``report``."""
    ref = policy_reference(request.text)
    assert ref is not None
    began = time.monotonic()
    run = _PolicyRun(request, deps, policies)
    try:
        return PolicyRunOutcome(run.execute(ref, began), run.children)
    except Exception as exc:  # a bug must not become a verdict, nor lose the run
        _log.error("policy_run_failed", run_id=request.run_id, error=repr(exc))
        report = _cannot_determine(request, deps, f"internal error in the policy run: {exc!r}")
        return PolicyRunOutcome(report)


class _PolicyRun:
    def __init__(
        self,
        request: EvaluationRequest,
        deps: EngineDeps,
        policies: PolicyStore,
    ) -> None:
        self.request = request
        self.deps = deps
        self.policies = policies
        self.children: list[RunReport] = []
        self.timeout = effective_budget(request, deps.settings).timeout_seconds

    def execute(self, ref: PolicyReference, began: float) -> RunReport:
        try:
            if ref.kind == "policy":
                policy = self.policies.get(ref.name)
                if policy is None:
                    return self._missing(f"no imported policy is named {ref.name!r}")
                members: list[ImportedPolicy] = [policy]
                missing: list[str] = []
            else:
                names = self.policies.set_members(ref.name)
                if names is None:
                    return self._missing(f"no policy set is named {ref.name!r}")
                loaded = self.policies.many(names)
                members = [p for p in loaded.values() if p is not None]
                missing = [name for name, p in loaded.items() if p is None]
        except UnreadablePolicy as exc:
            return _cannot_determine(self.request, self.deps, str(exc))
        try:
            registry = self.deps.tools(self.request, self.deps.settings)
        except Exception as exc:
            return _cannot_determine(
                self.request, self.deps, f"the target could not be opened: {exc}"
            )
        try:
            deadline = time.monotonic() + self.timeout if self.timeout else None
            if deadline is not None:
                registry.bind_deadline(deadline)
            backend = backend_of(registry)
            if backend is None:
                return _cannot_determine(
                    self.request, self.deps, "the target has no cluster backend"
                )
            results, shared = run_policies(members, backend, deadline=deadline)
        finally:
            with contextlib.suppress(Exception):
                registry.close()
        duration = time.monotonic() - began
        if ref.kind == "policy":
            return policy_report(self.request, self.deps, members[0], results[0])
        return self._set_report(ref, members, results, missing, shared.requests, duration)

    def _missing(self, what: str) -> RunReport:
        return _cannot_determine(
            self.request,
            self.deps,
            f"{what} (import it with `assay probe import FILE... --set NAME`)",
            explanation="The check names an imported policy that is not stored, so nothing "
            "was judged.",
        )

    def _set_report(
        self,
        ref: PolicyReference,
        members: list[ImportedPolicy],
        results: list[PolicyResult],
        missing: list[str],
        listings: int,
        duration: float,
    ) -> RunReport:
        entries: list[PolicySetEntry] = []
        for policy, result in zip(members, results, strict=True):
            child = child_request(self.request, policy)
            result = result.model_copy(update={"policy_set": ref.name})
            self.children.append(policy_report(child, self.deps, policy, result))
            entries.append(
                PolicySetEntry(
                    policy=policy.name,
                    verdict=result.verdict,
                    violations_total=result.violations_total,
                    run_id=child.run_id,
                    check_id=child.check_id,
                    reason=result.reason,
                )
            )
        verdicts = [entry.verdict for entry in entries]
        if VerdictKind.FALSE in verdicts:
            kind = VerdictKind.FALSE
        elif verdicts and not missing and all(v == VerdictKind.TRUE for v in verdicts):
            kind = VerdictKind.TRUE
        else:
            kind = VerdictKind.CANNOT_DETERMINE
        held = sum(v == VerdictKind.TRUE for v in verdicts)
        violated = [e for e in entries if e.verdict == VerdictKind.FALSE]
        undecided = [e for e in entries if e.verdict == VerdictKind.CANNOT_DETERMINE]
        text = (
            f"Policy set {ref.name}: {len(entries)} policies on {self.request.target.name}, "
            f"{held} hold, {len(violated)} violated, {len(undecided)} could not be judged"
        )
        if violated:
            text += "; violated: " + ", ".join(
                f"{e.policy} ({e.violations_total} object(s))" for e in violated[:20]
            )
        if missing:
            text += f"; {len(missing)} member(s) no longer stored: {', '.join(missing[:10])}"
        if not entries and not missing:
            text += " (the set is empty)"
        reason = None
        if kind == VerdictKind.CANNOT_DETERMINE:
            reason = (
                undecided[0].reason
                if undecided
                else "the set has no stored policies"
                if not entries
                else f"{len(missing)} member(s) are no longer stored"
            )
        verdict = _verdict(self.request, kind, text + ".", reason=reason, duration=duration)
        report = zero_token_report(self.request, self.deps, verdict)
        report.policy_set = PolicySetResult(
            policy_set=ref.name,
            policies=entries,
            missing=missing,
            listings=listings,
            duration_seconds=round(duration, 6),
        )
        return report


def child_request(request: EvaluationRequest, policy: ImportedPolicy) -> EvaluationRequest:
    """The run of one policy inside a set run: the check ``policy:NAME`` on the same target,
    its run id derived from the set run's (the same on a redelivery)."""
    return request.model_copy(
        update={
            "text": policy.predicate,
            "run_id": policy_run_id(request.run_id, policy.name),
            "check_id": default_check_id("check", policy.predicate, request.target.name),
            "batch_id": None,
        }
    )


def policy_report(
    request: EvaluationRequest, deps: EngineDeps, policy: ImportedPolicy, result: PolicyResult
) -> RunReport:
    verdict = _verdict(
        request,
        result.verdict,
        explanation(policy, result),
        reason=result.reason,
        evidence=_evidence(result),
        duration=result.duration_seconds,
    )
    report = zero_token_report(request, deps, verdict)
    report.policy = result
    return report


def explanation(policy: ImportedPolicy, result: PolicyResult) -> str:
    """What the policy found, naming each offending object with the policy's message."""
    what = f"Policy {policy.name} ({_format_name(policy)})"
    unserved = (
        f" Kinds it names that the target does not serve: {', '.join(result.kinds_not_served)}."
        if result.kinds_not_served
        else ""
    )
    if result.verdict == VerdictKind.CANNOT_DETERMINE:
        return f"{what} could not be judged here: {result.reason}.{unserved}"
    text = (
        f"{what} judged {result.judged_total} object(s) of {result.objects_read} read: "
        f"{result.violations_total} violate it."
    )
    for violation in result.violations[:VIOLATIONS_NAMED]:
        where = f"{violation.namespace}/" if violation.namespace else ""
        text += f"\n- {violation.kind} {where}{violation.name}: {violation.message}"
    if result.violations_total > VIOLATIONS_NAMED:
        text += f"\n- and {result.violations_total - VIOLATIONS_NAMED} more"
    return text + unserved


def _format_name(policy: ImportedPolicy) -> str:
    return {
        "vap": "ValidatingAdmissionPolicy",
        "kyverno-validatingpolicy": "Kyverno ValidatingPolicy",
        "kyverno-clusterpolicy": "Kyverno ClusterPolicy",
        "gatekeeper": "Gatekeeper constraint",
    }[policy.format]


def _evidence(result: PolicyResult) -> list[Evidence]:
    out = []
    for index, probe in enumerate(result.probes):
        run = probe.run
        args: dict[str, str] = {"kind": probe.kind}
        if probe.namespace:
            args["namespace"] = probe.namespace
        excerpt = (
            f"rule {probe.rule}: {run.objects_read} object(s) read, {run.judged_total} judged, "
            f"{run.violations_total} violate it"
            if run.verdict is not None or run.violations_total
            else f"rule {probe.rule}: could not run: {run.error}"
        )
        out.append(
            Evidence(
                step=index,
                tool="get",
                arguments=args,
                ok=run.verdict is not None,
                excerpt=excerpt[:1000],
                verified=run.verdict is not None,
                structured=run.verdict is not None,
            )
        )
    return out


def _verdict(
    request: EvaluationRequest,
    kind: VerdictKind,
    text: str,
    *,
    reason: str | None = None,
    evidence: list[Evidence] | None = None,
    duration: float = 0.0,
) -> Verdict:
    """A policy's evidence is the engine's own reading: verified exactly when it decided."""
    decided = kind in (VerdictKind.TRUE, VerdictKind.FALSE)
    return zero_token_verdict(
        request,
        kind,
        text,
        model=POLICY_MODEL,
        duration=duration,
        evidence=evidence or [],
        evidence_verified=decided,
        reason=reason,
        source="probe",
    )


def _cannot_determine(
    request: EvaluationRequest,
    deps: EngineDeps,
    reason: str,
    *,
    explanation: str = "The imported policy could not be judged, so nothing was concluded.",
) -> RunReport:
    verdict = _verdict(request, VerdictKind.CANNOT_DETERMINE, explanation, reason=reason)
    return zero_token_report(request, deps, verdict)
