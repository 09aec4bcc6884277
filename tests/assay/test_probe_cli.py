"""`assay probe show|test|export|drop` on a real redis-server, and the exported policies
validated offline: the ValidatingAdmissionPolicy and its binding against the Kubernetes
JSON schemas kubernetes-validate ships, the Kyverno ValidatingPolicy against a minimal
schema written here (no Kyverno schema is available offline)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from schemas.probe import ProbeLookup, ProbeOutcome, ProbeRun, ProposedProbe
from schemas.verdict import VerdictKind
from tests.cli_support import run_cli as run
from tests.engine_support import PREDICATE, make_snapshot
from workers.fleet.probe_store import ProbeStore
from workers.fleet.redis_client import connect
from workers.policy_engine.probes.export import NotExportable, export_documents

pytestmark = pytest.mark.integration

CHECK = "chk-prod-ready"
READY = ProposedProbe(
    lookups=[ProbeLookup(tool="get", args={"kind": "deployments", "namespace": "prod",
                                           "label_selector": "tier=web"})],
    expression="has(object.status.readyReplicas) && object.status.readyReplicas >= 2",
    scope="each_object",
)  # fmt: skip

# What a Kyverno ValidatingPolicy (policies.kyverno.io/v1) must have for the export to mean
# what it says: the kind, a match on resources, CEL validations, known actions.
KYVERNO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "policies.kyverno.io/v1"},
        "kind": {"const": "ValidatingPolicy"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {
                    "type": "string",
                    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                    "maxLength": 253,
                }
            },
        },
        "spec": {
            "type": "object",
            "required": ["matchConstraints", "validations"],
            "additionalProperties": False,
            "properties": {
                "validationActions": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"enum": ["Deny", "Audit", "Warn"]},
                },
                "failurePolicy": {"enum": ["Ignore", "Fail"]},
                "matchConstraints": {
                    "type": "object",
                    "required": ["resourceRules"],
                    "additionalProperties": False,
                    "properties": {
                        "resourceRules": {
                            "type": "array",
                            "minItems": 1,
                            "items": {
                                "type": "object",
                                "required": ["apiGroups", "apiVersions", "operations", "resources"],
                                "additionalProperties": False,
                                "properties": {
                                    k: {"type": "array", "items": {"type": "string"}}
                                    for k in ("apiGroups", "apiVersions", "operations", "resources")
                                },
                            },
                        },
                        "namespaceSelector": {"type": "object"},
                        "objectSelector": {"type": "object"},
                    },
                },
                "validations": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["expression"],
                        "additionalProperties": False,
                        "properties": {
                            "expression": {"type": "string", "minLength": 1},
                            "message": {"type": "string"},
                        },
                    },
                },
            },
        },
    },
}


@pytest.fixture
def probes(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ProbeStore:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)  # snapshots must lie under the snapshot roots (the cwd)
    return ProbeStore(connect(redis_url), prefix="assay")


def _store_probe(store: ProbeStore, probe: ProposedProbe = READY) -> None:
    outcome = ProbeOutcome(
        status="accepted", reason="test", probe=probe, run=ProbeRun(verdict=VerdictKind.TRUE)
    )
    store.save_compiled(
        CHECK, "run-1", outcome, VerdictKind.TRUE, predicate=PREDICATE, profile="fast"
    )


def test_show_prints_version_probe_and_agreement(
    capsys: pytest.CaptureFixture[str], probes: ProbeStore
) -> None:
    _store_probe(probes)
    code, out, _ = run(capsys, "probe", "show", CHECK)
    assert code == 0
    assert "version:      1 (active)" in out and "run-1" in out
    assert READY.expression in out and "compile" in out
    code, out, _ = run(capsys, "probe", "show", CHECK, "--json")
    assert json.loads(out)["probe"]["version"] == 1


def test_unknown_check_exits_66(capsys: pytest.CaptureFixture[str], probes: ProbeStore) -> None:
    for sub in ("show", "export", "drop"):
        code, _, err = run(capsys, "probe", sub, "chk-nothing")
        assert code == 66 and "no probe" in err


def test_test_runs_on_a_snapshot_and_prints_what_it_read(
    capsys: pytest.CaptureFixture[str], probes: ProbeStore, tmp_path: Path
) -> None:
    probe = READY.model_copy(
        update={"lookups": [ProbeLookup(tool="get", args={"kind": "Deployment",
                                                          "namespace": "prod"})]}
    )  # fmt: skip
    _store_probe(probes, probe)
    make_snapshot(tmp_path / "good")
    code, out, _ = run(capsys, "probe", "test", CHECK, "--snapshot", "good")
    assert code == 0, out
    assert "verdict:  true" in out and "Deployment prod/web" in out
    assert "status.readyReplicas" in out
    make_snapshot(tmp_path / "short", web_ready=1)
    code, out, _ = run(capsys, "probe", "test", CHECK, "--snapshot", "short")
    assert code == 1 and "false for: Deployment prod/web" in out
    (tmp_path / "empty").mkdir()  # no object at all: refused, not served as an empty cluster
    code, _, err = run(capsys, "probe", "test", CHECK, "--snapshot", "empty")
    assert code == 3 and "holds no Kubernetes objects" in err


def test_drop_forgets_the_probe(capsys: pytest.CaptureFixture[str], probes: ProbeStore) -> None:
    _store_probe(probes)
    code, _, _ = run(capsys, "probe", "drop", CHECK)
    assert code == 0 and probes.current(CHECK) is None and probes.agreement(CHECK) == []


def test_vap_export_is_a_valid_policy_and_binding(
    capsys: pytest.CaptureFixture[str], probes: ProbeStore
) -> None:
    _store_probe(probes)
    code, out, err = run(capsys, "probe", "export", CHECK, "--format", "vap")
    assert code == 0
    # it reads the status, which the API server fills in after admission: Audit only, said
    # on stderr and in the YAML, and the status updates are audited too
    assert "object.status, which the API server fills in after admission" in err
    assert out.startswith("# warning: it reads object.status")
    policy, binding = list(yaml.safe_load_all(out))
    version = kubernetes_validate.latest_version()
    kubernetes_validate.validate(policy, version, strict=True)
    kubernetes_validate.validate(binding, version, strict=True)
    assert policy["spec"]["validations"][0]["expression"] == READY.expression
    rule = policy["spec"]["matchConstraints"]["resourceRules"][0]
    assert rule["resources"] == ["deployments", "deployments/status"]
    assert (rule["apiGroups"], rule["operations"]) == (["apps"], ["CREATE", "UPDATE"])
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Audit"]
    match = binding["spec"]["matchResources"]
    assert match["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "prod"}
    assert match["objectSelector"]["matchLabels"] == {"tier": "web"}


def test_kyverno_export_matches_the_validating_policy_shape(
    capsys: pytest.CaptureFixture[str], probes: ProbeStore
) -> None:
    _store_probe(probes)
    # a probe over the status never blocks: every new Deployment would fail it
    code, out, err = run(capsys, "probe", "export", CHECK, "--format", "kyverno",
                         "--action", "Deny")  # fmt: skip
    assert code == 64 and out == ""
    assert "reads object.status, which the API server fills in after admission" in err
    code, out, _ = run(capsys, "probe", "export", CHECK, "--format", "kyverno")
    assert code == 0
    (policy,) = list(yaml.safe_load_all(out))
    jsonschema.validate(policy, KYVERNO_SCHEMA)
    assert policy["spec"]["validationActions"] == ["Audit"]
    broken = json.loads(json.dumps(policy))
    broken["spec"]["validations"][0].pop("expression")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, KYVERNO_SCHEMA)  # the schema check can fail


@pytest.mark.parametrize(
    ("update", "why"),
    [
        ({"scope": "results", "expression": "results[0].size() > 0"}, "each_object"),
        ({"when_true": "false", "when_false": "true"}, "predicate is false"),
        ({"lookups": [ProbeLookup(tool="get", args={"kind": "Certificate"})]}, "built-in"),
        (
            {
                "lookups": [
                    ProbeLookup(
                        tool="get", args={"kind": "Pod", "field_selector": "spec.nodeName=a"}
                    )
                ]
            },
            "field selector",
        ),
        (  # a field the kind's schema does not have: the API server's type check refuses it
            {"expression": "has(object.status.readyReplica) && object.status.readyReplica >= 2"},
            "Deployment has no field status.readyReplica",
        ),
    ],
)
def test_probes_without_a_per_object_form_are_refused(update: dict[str, Any], why: str) -> None:
    from schemas.probe import ProbeRecord

    now = datetime.now(UTC)
    probe = READY.model_copy(update=update)
    probe = ProposedProbe.model_validate(probe.model_dump())  # the contract's own checks too
    record = ProbeRecord(check_id=CHECK, version=1, probe=probe, compiled_by_run="r",
                         compiled_at=now, compiled_verdict=VerdictKind.TRUE,
                         last_validated_at=now)  # fmt: skip
    with pytest.raises(NotExportable, match=why):
        export_documents(record, "vap")
