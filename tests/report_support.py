"""Verdicts with probes in the store, and the schemas reports are checked against.

The report schemas (tests/fixtures/report-schemas/) and the JUnit XSD
(tests/fixtures/junit.xsd) were written for these tests from the formats' field
references; nothing in them is copied from the published files.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from scheduler.schedules import ScheduleStore
from schemas.declarative import CheckDefinition, CheckSpec
from schemas.probe import ProbeLookup, ProbeOutcome, ProposedProbe
from schemas.request import ContextTarget, EvaluationRequest
from schemas.schedule import Schedule, ScheduleTargets
from schemas.verdict import Evidence, VerdictKind
from tests.fleet_support import finished_report
from workers.fleet.check_definitions import CheckDefinitionStore
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
    """What the engine's runner records for a model's each-object probe over ``objects``
    (kind, name, namespace; one kind) in a snapshot where those of ``failing`` break it: it
    judges them in listing order and stops at the first that fails."""
    from workers.core.probes.runner import run_probe
    from workers.core.toolsets.snapshot_backend import SnapshotBackend

    kind = objects[0][0] if objects else "Deployment"
    probe = ProposedProbe(
        lookups=[ProbeLookup(tool="get", args={"kind": kind})],
        expression="object.metadata.labels.healthy == 'yes'",
        scope="each_object",
    )
    with tempfile.TemporaryDirectory() as folder:
        documents = [
            {
                "apiVersion": "apps/v1" if k == "Deployment" else "v1",
                "kind": k,
                "metadata": {
                    "name": n,
                    **({"namespace": ns} if ns else {}),
                    "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{k}/{ns}/{n}")),
                    "labels": {"healthy": "no" if (k, n, ns) in failing else "yes"},
                },
            }
            for k, n, ns in objects
        ]
        (Path(folder) / "objects.yaml").write_text(yaml.safe_dump_all(documents))
        run = run_probe(probe, SnapshotBackend(folder))
    assert run.verdict is not None, run.error
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
    labels: dict[str, str] | None = None,
) -> EvaluationRequest:
    """Register, start and finish one run, as a worker does, with a probe outcome.

    ``declared_by`` (``check/NAME`` or ``schedule/NAME``): the Check or Schedule is stored
    too (unless it already is), as `assay apply` or `assay schedule add` store them, with
    ``labels``; a report shows a declared check only while its declaration is stored."""
    fields: dict[str, Any] = {"text": text, "target": ContextTarget(context=context), "kind": kind}
    if check_id:
        fields["check_id"] = check_id
    if declared_by:
        fields["declared_by"] = declared_by
        if declared_by.startswith("schedule/"):
            fields["schedule_id"] = declare_schedule(store, declared_by[9:], text, labels).id
    if notify:
        fields["notify"] = notify
    request = EvaluationRequest.model_validate(fields)
    if declared_by and declared_by.startswith("check/"):
        declare_check(store, declared_by[6:], text, {context: request.check_id}, labels)
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


def declare_schedule(
    store: VerdictStore, name: str, predicate: str, labels: dict[str, str] | None = None
) -> Schedule:
    """The schedule ``name`` as `assay schedule add` stores it (the stored one if it exists)."""
    schedules = ScheduleStore(store.client, store.prefix, 1.0)
    found = next((s for s in schedules.all() if s.name == name), None)
    if found is not None:
        return found
    schedule = Schedule(
        name=name,
        predicate=predicate,
        targets=ScheduleTargets(contexts=["prod-eu"]),
        interval_seconds=3600,
        labels=labels or {},
    )
    return schedules.create(schedule)


def declare_check(
    store: VerdictStore,
    name: str,
    predicate: str,
    check_ids: dict[str, str],
    labels: dict[str, str] | None = None,
) -> CheckDefinition:
    """The Check ``name`` as `assay apply` stores it, evaluated on the targets of
    ``check_ids`` (target -> check id); merged into the stored one if there is one."""
    checks = CheckDefinitionStore(store.client, store.prefix)
    current = checks.get(name)
    spec = CheckSpec.model_validate(
        {"predicate": predicate, "targets": {"contexts": sorted(check_ids)}}
    )
    definition = CheckDefinition(
        name=name,
        labels=labels or (current.labels if current else {}),
        spec=spec,
        revision=current.revision + 1 if current else 1,
        created_at=AT,
        updated_at=AT,
        check_ids={**(current.check_ids if current else {}), **check_ids},
    )
    checks.put(definition, current.revision if current else 0)
    return definition
