"""Latest verdicts as PolicyReports, the resources Kyverno writes and Policy Reporter reads.

`assay report --format policyreport` prints them and the ``policyreport`` sink keeps them
up to date in each target cluster (notifier/policy_report_sink.py); both read the store
with :func:`gather` and build the documents with :func:`documents`, so for the same store
they give the same documents. Per target, a cluster report (cluster-scoped objects, and
checks with one result) and one report per namespace holding results (what each result
says: notifier/report_results.py), in one of two APIs:

* ``wgpolicyk8s.io/v1alpha2`` ``PolicyReport`` / ``ClusterPolicyReport`` (the default:
  what Kyverno writes and Policy Reporter reads today);
* ``openreports.io/v1alpha1`` ``Report`` / ``ClusterReport`` (their successor).

**Names.** Every report of a target is named :func:`report_name` (``assay-`` + the target
as a DNS label + a hash of its exact name), so each (target, namespace) has one name, and
two targets written into one cluster never share a report. A report over
:data:`MAX_RESULTS` results (Kyverno's default ``reportsChunkSize``) or
:data:`MAX_REPORT_BYTES` of JSON is split, as Kyverno splits its reports, into parts named
``NAME``, ``NAME-1``, ``NAME-2``, ...: the API server refuses an object over its size limit
(etcd's 1.5 MiB request limit by default).

**Labels.** ``app.kubernetes.io/managed-by: assay``: Kyverno owns, rewrites and deletes only
reports labelled ``managed-by: kyverno``, and Policy Reporter reads every report and tells
engines apart by each result's ``source`` (``assay``), so the two coexist. The target is
the label ``assay.dev/target`` (as a label value) and the annotation of the same name (as
it is).

**Excluded namespaces.** An imported policy's results about objects in these namespaces
(patterns, ``*`` wildcards) are left out, as Kyverno's background scan leaves them out; by
default what Kyverno's default resource filters skip: ``kube-system``, ``kube-public``,
``kube-node-lease`` and Kyverno's own ``kyverno``
(:data:`schemas.report_scope.DEFAULT_EXCLUDED_NAMESPACES`). A check someone wrote keeps every
result. Queries are not reports: they have no pass or fail.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Literal

from notifier.report_results import SOURCE, CheckResult, Result, results_of
from notifier.reported_checks import StoredDeclarations
from schemas.policy import policy_reference
from schemas.report_scope import DEFAULT_EXCLUDED_NAMESPACES
from schemas.request import target_names

if TYPE_CHECKING:
    from schemas.report import RunReport
    from workers.fleet.store import VerdictStore

__all__ = ["CheckResult", "documents", "documents_by_target", "gather", "report_name"]

ReportApi = Literal["wgpolicyk8s", "openreports"]

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
MANAGED_BY = {"app.kubernetes.io/managed-by": "assay"}
TARGET_LABEL = "assay.dev/target"
TARGET_ANNOTATION = "assay.dev/target"
MAX_RESULTS = 1000
MAX_REPORT_BYTES = 1_000_000
MAX_CHECKS = 5000
_NAME_CHARS = 40


def gather(
    store: VerdictStore, target: str | None = None, limit: int = MAX_CHECKS
) -> list[CheckResult]:
    """The latest verdict of every check still declared (notifier/reported_checks.py),
    queries left out, with the run that gave it."""
    from workers.fleet.report_codec import UnreadableReport

    rows = []
    for name in target_names(target) if target is not None else [None]:
        rows = store.checks(target=name, limit=limit)
        if rows:
            break
    rows = [row for row in rows if row.kind != "query"]
    verdicts = store.latest_verdicts([row.check_id for row in rows])
    declarations = StoredDeclarations(store)
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
        if report is not None and not declarations.in_effect(report):
            continue  # pruned, deleted or dropped since: reports follow what is stored
        ref = policy_reference(row.text)
        imported = declarations.policy(ref.name) if ref and ref.kind == "policy" else None
        declared = report.request.declared_by if report is not None else None
        found.append(
            CheckResult(
                check_id=row.check_id,
                target=row.target,
                predicate=row.text,
                verdict=verdict,
                policy=policy_name(declared, row.check_id),
                report=report,
                imported=imported,
                labels=declarations.labels(report) if report is not None else {},
                notify=row.notify,
            )
        )
    return found


def policy_name(declared_by: str | None, check_id: str) -> str:
    """``check/NAME`` and ``schedule/NAME`` report as NAME; anything else as its check id."""
    if declared_by and "/" in declared_by:
        return declared_by.split("/", 1)[1]
    return check_id


def report_name(target: str) -> str:
    """The name of ``target``'s reports: ``assay-`` + the target as a DNS label + a hash of
    its exact name (two targets whose names read alike never share one)."""
    slug = re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-")[:_NAME_CHARS].strip("-")
    digest = hashlib.sha256(target.encode()).hexdigest()[:8]
    return f"assay-{slug}-{digest}" if slug else f"assay-{digest}"


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value (63 characters of A-Z a-z 0-9 . _ -)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")[:63]
    return slug.strip("-._")


def left_out(result: Result, patterns: Sequence[str]) -> bool:
    """Whether ``result`` is an imported policy's about an excluded namespace: an object in
    it, or (as Kyverno's resource filters read a Namespace) the Namespace object of that
    name. A check someone wrote keeps every result: it asked about those objects."""
    if not result.filtered:
        return False
    names = [result.namespace] if result.namespace is not None else []
    resource = result.resource
    if resource is not None and resource.kind == "Namespace" and resource.namespace is None:
        names.append(resource.name)
    return any(fnmatchcase(name, pattern) for name in names for pattern in patterns)


def documents(
    checks: Iterable[CheckResult],
    target: str,
    api: ReportApi = "wgpolicyk8s",
    excluded_namespaces: Sequence[str] = DEFAULT_EXCLUDED_NAMESPACES,
) -> list[dict[str, Any]]:
    """The reports of one target: the cluster report's parts first, then each namespace's."""
    grouped: dict[str | None, list[dict[str, Any]]] = {}
    for check in checks:
        for result in results_of(check):
            if left_out(result, excluded_namespaces):
                continue
            grouped.setdefault(result.namespace, []).append(result.document())
    name = report_name(target)
    out = []
    for namespace in sorted(grouped, key=lambda n: (n is not None, n or "")):
        results = sorted(grouped[namespace], key=_order)
        for index, part in enumerate(_parts(results)):
            part_name = name if index == 0 else f"{name}-{index}"
            out.append(_document(api, part_name, namespace, target, part))
    return out


def documents_by_target(
    checks: Iterable[CheckResult],
    api: ReportApi = "wgpolicyk8s",
    excluded_namespaces: Sequence[str] = DEFAULT_EXCLUDED_NAMESPACES,
) -> dict[str, list[dict[str, Any]]]:
    by_target: dict[str, list[CheckResult]] = {}
    for check in checks:
        by_target.setdefault(check.target, []).append(check)
    return {
        target: documents(found, target, api, excluded_namespaces)
        for target, found in sorted(by_target.items())
    }


def _order(result: dict[str, Any]) -> tuple[str, ...]:
    resource = (result.get("resources") or [{}])[0]
    return (
        result["policy"],
        result.get("rule", ""),
        resource.get("namespace", ""),
        resource.get("kind", ""),
        resource.get("name", ""),
        result.get("properties", {}).get("check_id", ""),
    )


def _parts(results: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``results`` in runs of at most MAX_RESULTS and about MAX_REPORT_BYTES of JSON."""
    parts: list[list[dict[str, Any]]] = [[]]
    size = 0
    for result in results:
        length = len(json.dumps(result, separators=(",", ":")))
        if parts[-1] and (len(parts[-1]) >= MAX_RESULTS or size + length > MAX_REPORT_BYTES):
            parts.append([])
            size = 0
        parts[-1].append(result)
        size += length
    return parts


def _document(
    api: ReportApi,
    name: str,
    namespace: str | None,
    target: str,
    results: list[dict[str, Any]],
) -> dict[str, Any]:
    api_version, kind, cluster_kind = API_VERSIONS[api]
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {**MANAGED_BY, TARGET_LABEL: label_value(target) or "target"},
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
    return document


def _summary(results: Sequence[dict[str, Any]]) -> dict[str, int]:
    counts = {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    for result in results:
        counts[result["result"]] += 1
    return counts
