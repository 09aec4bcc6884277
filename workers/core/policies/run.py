"""Run imported policies on one target: their probes over shared listings, one verdict each.

:func:`run_policies` is one tick of a policy set (or of one policy) on one target: it
resolves every policy's kinds against the target, plans the listings (each (kind,
namespace) once, lookups.py), runs each probe through the ordinary probe runner, and folds
each policy's probes into a :class:`PolicyResult`:

* ``false`` as soon as one judged object violates the policy: that object is evidence;
* ``true`` only when every probe ran cleanly and none found a violation;
* ``cannot_determine`` otherwise (a probe failed: a listing, a CEL error, the deadline).

A Kyverno ValidatingPolicy's probes run with its reads of the target (``resource.Get`` /
``List``, ``globalContext.Get``) bound to the same shared listings (cluster_reads.py), so
what it reads of other objects is listed once per tick too.

Never raises for a policy's fault: a bug in one policy's run is that policy's
``cannot_determine``.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from schemas.policy import (
    MAX_POLICY_VIOLATIONS,
    ImportedPolicy,
    PolicyProbeResult,
    PolicyResult,
    PolicyViolation,
)
from schemas.probe import ProbeRun, ProbeViolation
from schemas.verdict import VerdictKind
from workers.core.policies.cluster_reads import GLOBAL_CONTEXT_KIND, ListingReads
from workers.core.policies.lookups import SharedLookups
from workers.core.policies.matching import (
    ObjectFilter,
    Undecidable,
    namespaces_to_list,
    resources_of,
)
from workers.core.policies.probes import probe_for
from workers.core.probes.cel_lib.kyverno_resource import reading
from workers.core.probes.runner import SECRET_VALUES_NAMED, exempted, run_probe
from workers.core.probes.syntax.parser import CelSyntaxError, parse
from workers.core.probes.syntax.reads import names
from workers.core.toolsets.backend import BackendError, ClusterBackend, ResourceInfo
from workers.core.toolsets.redaction import scrubbed


@dataclass(frozen=True)
class _Planned:
    rule_index: int
    resource: ResourceInfo
    namespace: str | None


def run_policies(
    policies: list[ImportedPolicy],
    backend: ClusterBackend,
    *,
    deadline: float | None = None,
    rules: dict[str, set[str]] | None = None,
) -> tuple[list[PolicyResult], SharedLookups]:
    """Each policy's result on ``backend``, sharing one set of listings (returned, with the
    number of list requests made). ``rules``: per policy name, only these rules (the corpus
    harness judges a fixture by the rule its label names)."""
    shared = SharedLookups(backend)
    plans: dict[str, tuple[list[_Planned], list[str]] | str] = {}
    for policy in policies:
        try:
            plans[policy.name] = _plan(policy, shared, (rules or {}).get(policy.name))
        except BackendError as exc:
            plans[policy.name] = f"the target's kinds could not be read: {exc.message}"
        except Undecidable as exc:
            plans[policy.name] = f"the target's kinds could not be read: {exc}"
    shared.plan(
        (planned.resource, planned.namespace)
        for plan in plans.values()
        if not isinstance(plan, str)
        for planned in plan[0]
    )
    results = []
    for policy in policies:
        plan = plans[policy.name]
        began = time.perf_counter()
        if isinstance(plan, str):
            result = _failed(policy, plan)
        elif not plan[0] and plan[1]:
            result = _failed(
                policy,
                f"none of the kinds it judges is served by the target ({', '.join(plan[1])}), "
                "so there is nothing it could have been checked against",
            )
            result.kinds_not_served = plan[1]
        else:
            try:
                result = _run(policy, plan[0], plan[1], shared, deadline)
            except Exception as exc:  # a bug must not become a verdict
                result = _failed(policy, f"internal error: {type(exc).__name__}: {exc}")
        results.append(
            result.model_copy(update={"duration_seconds": round(time.perf_counter() - began, 6)})
        )
    return results, shared


def _plan(
    policy: ImportedPolicy, shared: SharedLookups, only: set[str] | None
) -> tuple[list[_Planned], list[str]]:
    served, unavailable = shared.served(), shared.unavailable()
    planned: list[_Planned] = []
    missing: list[str] = []
    for index, rule in enumerate(policy.rules):
        if only is not None and rule.name not in only:
            continue
        resources, absent = resources_of(rule, served, unavailable)
        missing += [m for m in absent if m not in missing]
        for resource in resources:
            pinned = namespaces_to_list(rule, resource)
            namespaces: list[str | None] = list(pinned) if pinned else [None]
            for namespace in namespaces:
                planned.append(_Planned(index, resource, namespace))
    return planned, missing


def _run(
    policy: ImportedPolicy,
    planned: list[_Planned],
    missing: list[str],
    shared: SharedLookups,
    deadline: float | None,
) -> PolicyResult:
    probes: list[PolicyProbeResult] = []
    reads = _cluster_reads(policy, shared)
    for item in planned:
        rule = policy.rules[item.rule_index]
        probe = probe_for(policy, rule, item.resource, item.namespace)
        view = shared.view(ObjectFilter(rule, item.resource, shared.namespace_labels))
        with reading(reads) if reads is not None else nullcontext():
            run = run_probe(probe, view, deadline=deadline)
        if view.exempted and run.judged is not None:  # reported skip, as Kyverno does
            skipped = [exempted(obj, name) for obj, name in view.exempted]
            run = run.model_copy(update={"judged": [*run.judged, *skipped]})
            run = scrubbed(run, scrubber=view.scrubber, revalidate=False).model
        probes.append(
            PolicyProbeResult(
                rule=rule.name, kind=item.resource.kind, namespace=item.namespace, run=run
            )
        )
    return fold(policy, probes, missing)


def _cluster_reads(policy: ImportedPolicy, shared: SharedLookups) -> ListingReads | None:
    """What a Kyverno ValidatingPolicy reads of its target through Kyverno's libraries: its
    namespace (a NamespacedValidatingPolicy's), the GlobalContextEntries imported with it;
    None for any other policy (the library is not theirs)."""
    if policy.format != "kyverno-validatingpolicy" or not policy.documents:
        return None
    document = policy.documents[0]
    namespace = None
    if document.get("kind") == "NamespacedValidatingPolicy":
        meta = document.get("metadata")
        namespace = str(meta.get("namespace") or "") if isinstance(meta, dict) else ""
    entries: dict[str, dict[str, Any]] = {}
    for extra in policy.documents[1:]:
        meta = extra.get("metadata")
        spec = extra.get("spec")
        if extra.get("kind") == GLOBAL_CONTEXT_KIND and isinstance(meta, dict):
            entries[str(meta.get("name"))] = spec if isinstance(spec, dict) else {}
    return ListingReads(
        shared,
        namespace=namespace,
        entries=entries,
        secret_values_named=_names_secret_values(policy),
    )


def _names_secret_values(policy: ImportedPolicy) -> bool:
    """Whether the policy's expressions name a Secret's withheld fields (runner.py)."""
    for rule in policy.rules:
        texts = [v.expression for v in rule.variables]
        texts += [c.expression for c in rule.match_conditions]
        texts += [v.expression for v in rule.validations]
        texts += [v.message_expression for v in rule.validations if v.message_expression]
        for text in texts:
            try:
                if names(parse(text).root) & SECRET_VALUES_NAMED:
                    return True
            except CelSyntaxError:
                continue
    return False


def fold(
    policy: ImportedPolicy, probes: list[PolicyProbeResult], missing: list[str]
) -> PolicyResult:
    """A policy's verdict from its probes' runs (the rules above)."""
    violations: list[PolicyViolation] = []
    violations_total = judged = read = 0
    error: str | None = None
    for probe in probes:
        run = probe.run
        read += run.objects_read
        judged += run.judged_total
        violations_total += _violations_total(run)
        for violation in _violations(run):
            if len(violations) < MAX_POLICY_VIOLATIONS:
                violations.append(PolicyViolation(**violation.model_dump(), rule=probe.rule))
        if run.verdict is None and error is None:
            # "over Secret: ..." would read as a credential's key and value to the scrubber
            where = f"{probe.kind} objects" + (f" in {probe.namespace}" if probe.namespace else "")
            error = f"rule {probe.rule} over {where}: {run.error or 'no value'}"
    if violations_total:
        verdict = VerdictKind.FALSE
    elif error is not None:
        verdict = VerdictKind.CANNOT_DETERMINE
    else:
        verdict = VerdictKind.TRUE
    return PolicyResult(
        policy=policy.name,
        format=policy.format,
        verdict=verdict,
        reason=error if verdict == VerdictKind.CANNOT_DETERMINE else None,
        judged_total=judged,
        violations_total=violations_total,
        violations=violations,
        objects_read=read,
        kinds_not_served=missing,
        probes=probes,
    )


def _violations_total(run: ProbeRun) -> int:
    if run.violations_total:
        return run.violations_total
    if run.verdict is not None and run.value is False:
        return max(1, len(run.deciding))
    return 0


def _violations(run: ProbeRun) -> list[ProbeViolation]:
    return list(run.violations)


def _failed(policy: ImportedPolicy, reason: str) -> PolicyResult:
    return PolicyResult(
        policy=policy.name,
        format=policy.format,
        verdict=VerdictKind.CANNOT_DETERMINE,
        reason=reason,
    )
