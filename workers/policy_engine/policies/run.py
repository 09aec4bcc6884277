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
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from schemas.policy import (
    MAX_POLICY_VIOLATIONS,
    ImportedPolicy,
    PolicyProbeResult,
    PolicyResult,
    PolicyRule,
    PolicyViolation,
)
from schemas.probe import (
    MAX_VIOLATIONS,
    JudgedObject,
    ObjectRef,
    ProbeRun,
    ProbeValidation,
    ProbeViolation,
    ProposedProbe,
)
from schemas.verdict import VerdictKind
from workers.engine.toolsets.backend import BackendError, ClusterBackend, ResourceInfo
from workers.engine.toolsets.redaction import scrubbed
from workers.policy_engine.cel.lib.kyverno_resource import reading
from workers.policy_engine.cel.syntax.parser import CelSyntaxError, parse
from workers.policy_engine.cel.syntax.reads import names
from workers.policy_engine.policies.cluster_reads import GLOBAL_CONTEXT_KIND, ListingReads
from workers.policy_engine.policies.lookups import PolicyView, SharedLookups
from workers.policy_engine.policies.matching import (
    ObjectFilter,
    Undecidable,
    namespaces_to_list,
    resources_of,
)
from workers.policy_engine.policies.params import NOT_FOUND_MESSAGE, ParamsRun, params_plan
from workers.policy_engine.policies.probes import probe_for
from workers.policy_engine.probes.runner import (
    DECIDING_SHOWN,
    SECRET_VALUES_NAMED,
    exempted,
    run_probe,
)


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
        keep = ObjectFilter(rule, item.resource, shared.namespace_labels)
        exempt = keep.exception if rule.exceptions else None
        runs: list[tuple[ProposedProbe, Callable[[dict[str, Any]], bool]]]
        source = rule.param_source or policy.param_source
        if source is None:
            runs = [(probe_for(policy, rule, item.resource, item.namespace), keep)]
        else:
            plan = params_plan(source, item.resource, shared)
            if plan.error is not None:
                return _failed(policy, _of_rule(policy, rule, plan.error))
            errored = _errored(plan.runs, keep, item, shared)
            if errored is not None:
                return _failed(policy, _of_rule(policy, rule, errored))
            runs = [
                (_with_params(policy, rule, item, params_run), _narrowed(keep, params_run))
                for params_run in plan.runs
                if params_run.error is None
            ]
        done = [(probe, _run_one(probe, shared.view(selects, exempt), reads, deadline))
                for probe, selects in runs]  # fmt: skip
        if not done:  # no params found, and Allow (or Ignore): nothing is judged
            continue
        if len(done) == 1:
            run = done[0][1]
        elif source is not None and source.reader == "kyverno":
            chosen = [_chosen(shared, item, selects) for _, selects in runs]
            run = first_deciding(done[0][0], [r for _, r in done], chosen)
        else:
            run = merged(done[0][0], [r for _, r in done])
        probes.append(
            PolicyProbeResult(
                rule=rule.name, kind=item.resource.kind, namespace=item.namespace, run=run
            )
        )
    return fold(policy, probes, missing)


_Key = tuple[str, str | None, str]


def merged(probe: ProposedProbe, runs: list[ProbeRun]) -> ProbeRun:
    """The runs of one rule over one listing with several params objects, as one run: an
    object judged under several fails when it fails under any (the API server evaluates the
    policy with each and admits only when every one does), counted once; no value when
    any run has none."""
    for run in runs:
        if run.verdict is None:
            return run
    by_object: dict[_Key, JudgedObject] = {}
    for run in runs:
        for judged in run.judged or []:
            key = (judged.kind, judged.namespace, judged.name)
            known = by_object.get(key)
            if known is None or (known.passed and not judged.passed):
                by_object[key] = judged
    return _combined(probe, runs, by_object)


def first_deciding(probe: ProposedProbe, runs: list[ProbeRun], chosen: list[set[_Key]]) -> ProbeRun:
    """Kyverno's runs of one ClusterPolicy rule with several params objects, as one run:
    Kyverno takes the params in the order the API server lists them, and for each object
    the first under which its preconditions do not hold (the rule is skipped: the object is
    not judged) or it fails decides; it passes when it passes under every one. ``chosen``:
    the objects each run selects (judged or not). No value when any run has none."""
    for run in runs:
        if run.verdict is None:
            return run
    outcome: dict[_Key, JudgedObject | None] = {}
    decided: set[_Key] = set()
    for run, selected in zip(runs, chosen, strict=True):
        judged = {(j.kind, j.namespace, j.name): j for j in run.judged or []}
        for key in selected - decided:
            found = judged.get(key)
            outcome[key] = found
            if found is None or not found.passed:
                decided.add(key)
        for key, found in judged.items():  # exempted by a PolicyException: reported skip
            outcome.setdefault(key, found)
    by_object = {key: j for key, j in outcome.items() if j is not None}
    return _combined(probe, runs, by_object)


def _chosen(
    shared: SharedLookups, item: _Planned, selects: Callable[[dict[str, Any]], bool]
) -> set[_Key]:
    """The objects of ``item``'s listing that ``selects`` keeps, by kind, namespace, name."""
    out: set[_Key] = set()
    for obj in shared.listing(item.resource, item.namespace):
        if selects(obj):
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            assert isinstance(meta, dict)
            out.add((item.resource.kind, meta.get("namespace") or None, str(meta.get("name"))))
    return out


def _combined(
    probe: ProposedProbe, runs: list[ProbeRun], by_object: dict[_Key, JudgedObject]
) -> ProbeRun:
    """Several runs' objects, each once with its outcome, as one run."""
    failed = [j for j in by_object.values() if not j.passed]
    value = not failed
    return ProbeRun(
        value=value,
        verdict=probe.verdict_for(value),
        objects_read=max(run.objects_read for run in runs),
        objects=runs[0].objects,
        fields=runs[0].fields,
        deciding=[
            ObjectRef(kind=j.kind, name=j.name, namespace=j.namespace)
            for j in failed[:DECIDING_SHOWN]
        ],
        violations=[
            ProbeViolation(kind=j.kind, name=j.name, namespace=j.namespace, message=j.message or "")
            for j in failed[:MAX_VIOLATIONS]
        ],
        violations_total=len(failed),
        judged_total=len(by_object),
        judged=list(by_object.values()),
        duration_seconds=round(sum(run.duration_seconds or 0 for run in runs), 6),
    )


def _with_params(
    policy: ImportedPolicy, rule: PolicyRule, item: _Planned, params_run: ParamsRun
) -> ProposedProbe:
    """The rule's probe with one params object of the target's, or, with none found and
    ``Deny``, one that refuses every object it selects as the API server does."""
    if not params_run.denied:
        return probe_for(policy, rule, item.resource, item.namespace, params=params_run.params)
    denial = rule.model_copy(
        update={
            "variables": [],
            "match_conditions": [],
            "validations": [ProbeValidation(expression="false", message=NOT_FOUND_MESSAGE)],
        }
    )
    return probe_for(policy, denial, item.resource, item.namespace, params=None)


def _of_rule(policy: ImportedPolicy, rule: PolicyRule, reason: str) -> str:
    """``reason``, naming the rule when the policy has several."""
    return f"rule {rule.name}: {reason}" if len(policy.rules) > 1 else reason


def _errored(
    runs: list[ParamsRun],
    keep: Callable[[dict[str, Any]], bool],
    item: _Planned,
    shared: SharedLookups,
) -> str | None:
    """Why the rule has no verdict: a run that errs (Kyverno found no params for it) over
    an object the rule selects, which is named; None when no such run selects any."""
    for params_run in runs:
        if params_run.error is None:
            continue
        try:
            listed = shared.listing(item.resource, item.namespace)
        except BackendError as exc:
            return f"its {item.resource.kind} objects could not be listed: {exc.message}"
        selects = _narrowed(keep, params_run)
        for obj in listed:
            if selects(obj):
                meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
                assert isinstance(meta, dict)
                where = f"{meta['namespace']}/" if meta.get("namespace") else ""
                name = f"{item.resource.kind} {where}{meta.get('name')}"
                return f"{params_run.error} (judging {name})"
    return None


def _narrowed(
    keep: Callable[[dict[str, Any]], bool], params_run: ParamsRun
) -> Callable[[dict[str, Any]], bool]:
    """``keep``, and only objects of the namespaces a per-namespace params run is for."""
    where = params_run.where
    if where is None:
        return keep

    def selects(obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata")
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
        return where(namespace) and keep(obj)

    return selects


def _run_one(
    probe: ProposedProbe, view: PolicyView, reads: ListingReads | None, deadline: float | None
) -> ProbeRun:
    """One probe over its view, with the policy's cluster reads served; the objects a
    PolicyException exempts reported skip, as Kyverno does."""
    with reading(reads) if reads is not None else nullcontext():
        run = run_probe(probe, view, deadline=deadline)
    if view.exempted and run.judged is not None:
        skipped = [exempted(obj, name) for obj, name in view.exempted]
        run = run.model_copy(update={"judged": [*run.judged, *skipped]})
        run = scrubbed(run, scrubber=view.scrubber, revalidate=False).model
    return run


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
    spec = document.get("spec")
    evaluation = spec.get("evaluation") if isinstance(spec, dict) else None
    background = evaluation.get("background") if isinstance(evaluation, dict) else None
    return ListingReads(
        shared,
        namespace=namespace,
        entries=entries,
        secret_values_named=_names_secret_values(policy),
        # Kyverno runs a policy whose background scan is off only at admission
        admission_only=isinstance(background, dict) and background.get("enabled") is False,
    )


def _names_secret_values(policy: ImportedPolicy) -> bool:
    """Whether the policy's expressions name a Secret's withheld fields (runner.py)."""
    for rule in policy.rules:
        for text in rule.expressions():
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
