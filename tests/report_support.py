"""Verdicts with probes in the store, and the schemas reports are checked against.

The report schemas (tests/fixtures/report-schemas/) and the JUnit XSD
(tests/fixtures/junit.xsd) were written for these tests from the formats' field
references; nothing in them is copied from the published files.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from schemas.probe import ObjectRef, ProbeLookup, ProbeOutcome, ProbeRun, ProposedProbe
from schemas.request import ContextTarget, EvaluationRequest
from schemas.verdict import Evidence, VerdictKind
from tests.fleet_support import finished_report
from workers.fleet.store import VerdictStore

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPORT_SCHEMAS = {
    "wgpolicyk8s": json.loads(
        (FIXTURES / "report-schemas/wgpolicyk8s-v1alpha2.schema.json").read_text()
    ),
    "openreports": json.loads(
        (FIXTURES / "report-schemas/openreports-v1alpha1.schema.json").read_text()
    ),
}
JUNIT_XSD = FIXTURES / "junit.xsd"
AT = datetime(2026, 11, 2, 8, 30, 15, 250000, tzinfo=UTC)


def validate_report(document: dict[str, Any], api: str = "wgpolicyk8s") -> None:
    import jsonschema

    jsonschema.validate(document, REPORT_SCHEMAS[api])


def validate_junit(text: str) -> None:
    import xmlschema

    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(text)


def probe_outcome(
    objects: list[tuple[str, str, str | None]],
    failing: list[tuple[str, str, str | None]],
    *,
    status: str = "accepted",
) -> ProbeOutcome:
    """An each-object probe that read ``objects`` (kind, name, namespace) and stopped at
    the first of ``failing``, as the engine's runner records it."""
    refs = [ObjectRef(kind=k, name=n, namespace=ns) for k, n, ns in objects]
    deciding = [ObjectRef(kind="?", name=n, namespace=ns) for _k, n, ns in failing[:1]]
    value = not failing
    probe = ProposedProbe(
        lookups=[ProbeLookup(tool="get", args={"kind": objects[0][0] if objects else "Pod"})],
        expression="object.spec.replicas >= 2",
        scope="each_object",
    )
    run = ProbeRun(
        value=value,
        verdict=probe.verdict_for(value),
        objects_read=len(refs),
        objects=refs,
        deciding=deciding,
    )
    return ProbeOutcome(status=status, reason="test", probe=probe, run=run, version=1)  # type: ignore[arg-type]


def record(
    store: VerdictStore,
    text: str,
    verdict: str,
    *,
    context: str = "prod-eu",
    check_id: str = "",
    outcome: ProbeOutcome | None = None,
    declared_by: str | None = None,
    kind: str = "check",
    reason: str | None = None,
    explanation: str = "scripted outcome",
    at: datetime = AT,
    notify: list[str] | None = None,
) -> EvaluationRequest:
    """Register, start and finish one run, as a worker does, with a probe outcome."""
    fields: dict[str, Any] = {"text": text, "target": ContextTarget(context=context), "kind": kind}
    if check_id:
        fields["check_id"] = check_id
    if declared_by:
        fields["declared_by"] = declared_by
    if notify:
        fields["notify"] = notify
    request = EvaluationRequest.model_validate(fields)
    store.register_run(request)
    store.begin_delivery(request)
    report = finished_report(request, verdict, finished_at=at, explanation=explanation)
    assert report.verdict is not None
    updates: dict[str, Any] = {
        "evidence": [
            Evidence(
                step=0,
                tool="get",
                arguments={"kind": "Deployment", "namespace": "prod"},
                ok=True,
                excerpt="api   1/2",
                verified=True,
            )
        ],
        "evidence_verified": True,
    }
    if reason:
        updates["reason"] = reason
    if outcome is not None and VerdictKind(verdict) in (VerdictKind.TRUE, VerdictKind.FALSE):
        updates["source"] = "probe"
    report.verdict = report.verdict.model_copy(update=updates)
    report.probe = outcome
    assert store.record_verdict(report)
    return request


def later(minutes: int) -> datetime:
    return AT + timedelta(minutes=minutes)
