"""Verdicts with probes in the store, and the schemas reports are checked against.

The report schemas (tests/fixtures/report-schemas/) and the JUnit XSD
(tests/fixtures/junit.xsd) were written for these tests from the formats' field
references; nothing in them is copied from the published files.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.schedules import ScheduleStore
from schemas.declarative import CheckDefinition, CheckSpec
from schemas.probe import ProbeLookup, ProbeOutcome, ProposedProbe
from schemas.request import ContextTarget, EvaluationRequest, Target
from schemas.schedule import Schedule, ScheduleTargets
from schemas.settings import AssaySettings, load_settings
from schemas.verdict import Evidence, VerdictKind
from tests.cli_support import run_cli
from tests.fleet_support import finished_report
from workers.engine.engine import EngineDeps
from workers.fleet.check_definitions import CheckDefinitionStore
from workers.fleet.policy_rerun import PolicyRunOutcome, evaluate_policy_request
from workers.fleet.policy_store import PolicyStore
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
    from workers.engine.toolsets.snapshot_backend import SnapshotBackend
    from workers.policy_engine.probes.runner import run_probe

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
        listing = {"apiVersion": "v1", "kind": "List", "items": documents}
        (Path(folder) / "objects.json").write_text(json.dumps(listing))
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


# --- imported policies over a fleet of snapshots ------------------------------------------------

POLICY_FIXTURE = FIXTURES / "policy-reports"
POLICY_SET = "reports"


@dataclass
class Fleet:
    settings: AssaySettings
    store: VerdictStore
    root: Path


def policy_fleet(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Fleet:
    """A store on ``redis_url`` and two snapshot clusters in the working directory (the
    snapshot roots): ``snaps/shop-eu`` (tests/fixtures/policy-reports/cluster) and
    ``snaps/shop-us``, the same with the cart Deployment fixed (labelled, pulled from a
    trusted registry)."""
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    shutil.copytree(POLICY_FIXTURE / "cluster", tmp_path / "snaps" / "shop-eu")
    fixed = (POLICY_FIXTURE / "cluster" / "objects.yaml").read_text()
    fixed = fixed.replace(
        "labels: {app.kubernetes.io/name: cart}\nspec:\n  replicas",
        "labels: {app.kubernetes.io/name: cart, tier: back}\nspec:\n  replicas",
    )
    fixed = fixed.replace(
        "image: docker.io/library/cart:2\n---", "image: registry.example.com/cart:2\n---", 1
    )
    (tmp_path / "snaps" / "shop-us").mkdir(parents=True)
    (tmp_path / "snaps" / "shop-us" / "objects.yaml").write_text(fixed)
    settings = load_settings(redis_url=redis_url)
    return Fleet(settings, VerdictStore.from_settings(settings), tmp_path)


def import_set(capsys: pytest.CaptureFixture[str], *files: Path, name: str = POLICY_SET) -> None:
    """`assay probe import FILES --set NAME`."""
    code, _, err = run_cli(capsys, "probe", "import", *map(str, files), "--set", name)
    assert code == 0, err


def run_set(fleet: Fleet, target: Target, name: str = POLICY_SET) -> PolicyRunOutcome:
    """One tick of ``policy-set:NAME`` on ``target``, recorded as the worker records it."""
    request = EvaluationRequest(text=f"policy-set:{name}", target=target)
    fleet.store.register_run(request)
    fleet.store.begin_delivery(request)
    policies = PolicyStore.from_settings(fleet.settings, fleet.store.client)
    outcome = evaluate_policy_request(request, EngineDeps(settings=fleet.settings), policies)
    for child in outcome.children:
        assert fleet.store.record_verdict(child)
    assert fleet.store.record_verdict(outcome.report)
    return outcome
