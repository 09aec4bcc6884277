"""Latest verdicts as PolicyReports, the resources Kyverno writes and Policy Reporter reads.

`assay report --format policyreport` prints them and the ``policyreport`` sink keeps
them up to date in each target cluster (notifier/policy_report_sink.py). Per target,
one namespaced report per namespace holding results, and one cluster report for the
rest, in one of two APIs:

* ``wgpolicyk8s.io/v1alpha2`` ``PolicyReport`` / ``ClusterPolicyReport`` (the default:
  what Kyverno writes and Policy Reporter reads today);
* ``openreports.io/v1alpha1`` ``Report`` / ``ClusterReport`` (their successor).

Results: one per check, or, where the check's accepted probe named the objects it
judged (a probe over each object of a listing), one per object, in the report of
that object's namespace (cluster-scoped objects and checks without objects go to the
cluster report). The result is ``pass``, ``fail``, ``error`` or ``skip`` for
``true``, ``false``, ``cannot_determine`` or ``poorly_posed``; an object's result is
the verdict its own value stands for. ``policy`` is the declared check's or
schedule's name (else the check id), ``rule`` the check id, ``message`` the
explanation (or the object's violation message when the probe gave one), the
timestamp the verdict's, and the predicate, verdict, run, source and evidence are
``properties``. Queries are not reports: they have no pass or fail.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from schemas.request import target_names
from schemas.verdict import Verdict, VerdictKind

if TYPE_CHECKING:
    from schemas.probe import ObjectRef, ProbeOutcome
    from schemas.report import RunReport
    from workers.fleet.store import VerdictStore

ReportApi = Literal["wgpolicyk8s", "openreports"]
ResultStatus = Literal["pass", "fail", "warn", "error", "skip"]

API_VERSIONS: dict[ReportApi, tuple[str, str, str]] = {
    # api: (apiVersion, namespaced kind, cluster kind)
    "wgpolicyk8s": ("wgpolicyk8s.io/v1alpha2", "PolicyReport", "ClusterPolicyReport"),
    "openreports": ("openreports.io/v1alpha1", "Report", "ClusterReport"),
}
RESOURCES: dict[ReportApi, tuple[str, str, str]] = {
    # api: (group, namespaced plural, cluster plural)
    "wgpolicyk8s": ("wgpolicyk8s.io", "policyreports", "clusterpolicyreports"),
    "openreports": ("openreports.io", "reports", "clusterreports"),
}
RESULT_OF: dict[VerdictKind, ResultStatus] = {
    VerdictKind.TRUE: "pass",
    VerdictKind.FALSE: "fail",
    VerdictKind.CANNOT_DETERMINE: "error",
    VerdictKind.POORLY_POSED: "skip",
}
REPORT_NAME = "assay-checks"
SOURCE = "assay"
MANAGED_BY = {"app.kubernetes.io/managed-by": "assay"}
TARGET_ANNOTATION = "assay.dev/target"
PROPERTY_CHARS = 1024
MESSAGE_CHARS = 2048
EVIDENCE_SHOWN = 10
MAX_CHECKS = 5000


@dataclass(frozen=True)
class ObjectResult:
    """One object a probe judged: whether it passed, and the policy's message for it."""

    kind: str
    name: str
    namespace: str | None
    passed: bool
    message: str | None = None


@dataclass
class CheckResult:
    """What a report says of one check: its latest verdict and, where known, per object."""

    check_id: str
    target: str
    predicate: str
    verdict: Verdict
    policy: str
    objects: list[ObjectResult] | None = None
    objects_read: int = 0
    notify: list[str] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)


def policy_name(declared_by: str | None, check_id: str) -> str:
    """``check/NAME`` and ``schedule/NAME`` report as NAME; anything else as its check id."""
    if declared_by and "/" in declared_by:
        return declared_by.split("/", 1)[1]
    return check_id


def object_results(outcome: ProbeOutcome | None, verdict: Verdict) -> list[ObjectResult] | None:
    """Per-object results of an accepted probe over each object, when it gave this verdict.

    An imported policy's probe judges every object it reads: each violation is a failing
    object with the policy's message, and when every object read was judged (no match
    condition left one out) the others passed. A model's probe stops at the first failing
    object: the objects read before it passed, it failed, the rest were not judged and are
    left out.
    """
    if outcome is None or outcome.status != "accepted" or outcome.probe is None:
        return None
    probe, run = outcome.probe, outcome.run
    if probe.scope != "each_object" or run.verdict is None or run.verdict != verdict.verdict:
        return None
    passes = probe.verdict_for(True) == VerdictKind.TRUE
    fails = probe.verdict_for(False) == VerdictKind.TRUE
    failing: dict[tuple[str, str], ObjectRef] = {
        (v.namespace or "", v.name): v for v in run.violations
    }
    failing.update(
        {
            (r.namespace or "", r.name): r
            for r in run.deciding
            if (r.namespace or "", r.name) not in failing
        }
    )
    kind = run.objects[0].kind if run.objects else "Object"
    results: list[ObjectResult] = []
    if probe.origin is not None:
        for ref in failing.values():
            message = getattr(ref, "message", "") or None
            results.append(
                ObjectResult(_kind(ref.kind, kind), ref.name, ref.namespace, fails, message)
            )
        if run.judged_total == run.objects_read:  # nothing left out: the others passed
            for ref in run.objects:
                if (ref.namespace or "", ref.name) not in failing:
                    results.append(ObjectResult(ref.kind, ref.name, ref.namespace, passes))
        return results
    for ref in run.objects:
        key = (ref.namespace or "", ref.name)
        if key in failing:
            message = getattr(failing[key], "message", "") or None
            results.append(ObjectResult(ref.kind, ref.name, ref.namespace, fails, message))
            return results  # objects after the first failure were not judged
        results.append(ObjectResult(ref.kind, ref.name, ref.namespace, passes))
    for ref in failing.values():  # beyond the references kept: still the deciding object
        message = getattr(ref, "message", "") or None
        results.append(ObjectResult(kind, ref.name, ref.namespace, fails, message))
    return results


def _kind(recorded: str, fallback: str) -> str:
    return recorded if recorded and recorded != "?" else fallback


def gather(
    store: VerdictStore, target: str | None = None, limit: int = MAX_CHECKS
) -> list[CheckResult]:
    """The latest verdict of every check (queries left out), with its probe's objects."""
    from workers.fleet.report_codec import UnreadableReport

    rows = []
    for name in target_names(target) if target is not None else [None]:
        rows = store.checks(target=name, limit=limit)
        if rows:
            break
    rows = [row for row in rows if row.kind != "query"]
    verdicts = store.latest_verdicts([row.check_id for row in rows])
    found = []
    for row in rows:
        verdict = verdicts.get(row.check_id)
        if verdict is None:
            continue
        report: RunReport | None
        try:
            report = store.run_report(row.run_id)
        except (UnreadableReport, ValueError):
            report = None
        declared = report.request.declared_by if report is not None else None
        outcome = report.probe if report is not None else None
        found.append(
            CheckResult(
                check_id=row.check_id,
                target=row.target,
                predicate=row.text,
                verdict=verdict,
                policy=policy_name(declared, row.check_id),
                objects=object_results(outcome, verdict),
                objects_read=outcome.run.objects_read if outcome is not None else 0,
                notify=row.notify,
            )
        )
    return found


def _timestamp(instant: datetime) -> dict[str, int]:
    return {"seconds": int(instant.timestamp()), "nanos": instant.microsecond * 1000}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _properties(check: CheckResult) -> dict[str, str]:
    verdict = check.verdict
    props = {
        "predicate": check.predicate,
        "verdict": verdict.verdict.value,
        "check_id": check.check_id,
        "run_id": verdict.run_id,
        "target": check.target,
        "source": str(verdict.source),
        "profile": verdict.profile,
        "evidence_verified": str(verdict.evidence_verified).lower(),
    }
    if verdict.model:
        props["model"] = verdict.model
    if verdict.reason:
        props["reason"] = verdict.reason
    if check.objects is not None:
        props["objects_read"] = str(check.objects_read)
    for index, item in enumerate(verdict.evidence[:EVIDENCE_SHOWN]):
        args = " ".join(f"{k}={v}" for k, v in sorted(item.arguments.items()))
        props[f"evidence.{index}"] = f"step {item.step} {item.tool} {args}: {item.excerpt}"
    props.update(check.extra)
    return {key: _cut(str(value), PROPERTY_CHARS) for key, value in props.items()}


def _result(check: CheckResult, status: ResultStatus, message: str) -> dict[str, Any]:
    return {
        "source": SOURCE,
        "policy": check.policy,
        "rule": check.check_id,
        "category": "assay",
        "result": status,
        "scored": True,
        "timestamp": _timestamp(check.verdict.finished_at),
        "message": _cut(message, MESSAGE_CHARS),
        "properties": _properties(check),
    }


def results_by_namespace(checks: Iterable[CheckResult]) -> dict[str | None, list[dict[str, Any]]]:
    """Results keyed by the namespace whose report holds them (None: the cluster report)."""
    grouped: dict[str | None, list[dict[str, Any]]] = {}
    for check in checks:
        explanation = check.verdict.explanation or check.verdict.verdict.value
        if not check.objects:
            status = RESULT_OF[check.verdict.verdict]
            grouped.setdefault(None, []).append(_result(check, status, explanation))
            continue
        for obj in check.objects:
            result = _result(check, "pass" if obj.passed else "fail", obj.message or explanation)
            reference: dict[str, Any] = {"kind": obj.kind, "name": obj.name}
            if obj.namespace:
                reference["namespace"] = obj.namespace
            result["resources"] = [reference]
            grouped.setdefault(obj.namespace or None, []).append(result)
    for results in grouped.values():
        results.sort(key=lambda r: (r["policy"], r["rule"], str(r.get("resources", ""))))
    return grouped


def _summary(results: Sequence[dict[str, Any]]) -> dict[str, int]:
    counts = {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    for result in results:
        counts[result["result"]] += 1
    return counts


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value (63 characters of A-Z a-z 0-9 . _ -)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")[:63]
    return slug.strip("-._")


def documents(
    checks: Iterable[CheckResult], target: str, api: ReportApi = "wgpolicyk8s"
) -> list[dict[str, Any]]:
    """The reports of one target: the cluster report first, then one per namespace."""
    api_version, kind, cluster_kind = API_VERSIONS[api]
    grouped = results_by_namespace(checks)
    labels = {**MANAGED_BY, "assay.dev/target": label_value(target) or "target"}
    out = []
    for namespace in sorted(grouped, key=lambda n: (n is not None, n or "")):
        results = grouped[namespace]
        metadata: dict[str, Any] = {
            "name": REPORT_NAME,
            "labels": labels,
            "annotations": {TARGET_ANNOTATION: target},
        }
        if namespace is not None:
            metadata["namespace"] = namespace
        document: dict[str, Any] = {
            "apiVersion": api_version,
            "kind": kind if namespace is not None else cluster_kind,
            "metadata": metadata,
        }
        if api == "openreports":
            document["source"] = SOURCE
        document["summary"] = _summary(results)
        document["results"] = results
        out.append(document)
    return out


def documents_by_target(
    checks: Iterable[CheckResult], api: ReportApi = "wgpolicyk8s"
) -> dict[str, list[dict[str, Any]]]:
    by_target: dict[str, list[CheckResult]] = {}
    for check in checks:
        by_target.setdefault(check.target, []).append(check)
    return {target: documents(found, target, api) for target, found in sorted(by_target.items())}
