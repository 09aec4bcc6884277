"""A probe that reads its input but whose value does not depend on it is not accepted.

A hostile or careless planner proposes, with a ``true``, a probe such as
``size(results) >= 0``: it agrees with the ``true`` on the compiling run, and, accepted,
would answer ``true`` for 0 tokens on every later run until re-validation (up to
``probe_revalidate_runs`` runs or a day) whatever the cluster does. The engine searches
counterfactuals of the objects it read for one that flips the verdict
(workers/policy_engine/probes/sensitivity.py); when none does the probe is rejected, the model's
verdict stands on its own evidence, and later runs ask the model.

Real redis-server (tests/conftest.py), real snapshot backend, the scripted model over HTTP.
These tests name no new module: run against the code before the sensitivity check they fail
(the tautologies are accepted and the later run answers ``true`` by probe).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from schemas.probe import ProbeOutcome, ProbeRecord, ProbeRun, ProposedProbe
from schemas.verdict import VerdictKind
from tests.engine_support import get_deployments, make_snapshot, request_for, run, script
from tests.engine_support import scripted as scripted_model
from tests.fleet.test_probe_rerun import (
    MODEL_FALSE,
    MODEL_TRUE,
    NO_MODEL,
    _changed_to_false,
    _check,
)
from tests.probe_support import FLEET_PROBE, LIST_PROD, READY_TWO, done_with_probe, probe
from workers.engine.llm import load_litellm
from workers.fleet.probe_store import ProbeStore
from workers.fleet.redis_client import connect

pytestmark = pytest.mark.integration

INSENSITIVE = (
    "the expression gave the same value whatever the objects held (it does not depend on them)"
)
LIST_PODS = {"tool": "get", "args": {"kind": "Pod", "namespace": "prod"}}

# The tautologies of the brief: each reads its input, none depends on it.
TAUTOLOGIES = {
    "size(results) >= 0": probe("size(results) >= 0", scope="results"),
    "name == name": probe("object.metadata.name == object.metadata.name"),
    "all(d, true)": probe("results[0].all(d, true)", scope="results"),
    "has(metadata) || true": probe("has(object.metadata) || true"),
    "size(results[0]) >= 0": probe("size(results[0]) >= 0", scope="results"),
    # and a few more of the same kind
    "kind ==": probe("object.kind == 'Deployment'"),
    "namespace of the listing": probe("object.metadata.namespace == 'prod'"),
    "has(spec)": probe("has(object.spec)"),
    "legit || true": probe(f"({READY_TWO}) || true"),
    "replicas == replicas": probe("object.spec.replicas == object.spec.replicas"),
}

# Every probe the existing tests (tests/, bench/) have the planner propose and expect accepted,
# with the snapshot state (web's ready replicas) and the verdict it is proposed with.
LEGIT = {
    "READY_TWO true": (probe(), 2, "true"),
    "READY_TWO false": (probe(), 1, "false"),
    "FLEET_PROBE true": (FLEET_PROBE, 2, "true"),
    "FLEET_PROBE false": (FLEET_PROBE, 1, "false"),
    "replicas >= 1": (probe("object.spec.replicas >= 1"), 1, "true"),
    "replicas >= 2": (probe("object.spec.replicas >= 2"), 2, "true"),
    "exists short, inverted": (
        probe(
            "results[0].exists(d, d.status.readyReplicas < 2)",
            scope="results",
            when_true="false",
            when_false="true",
        ),
        1,
        "false",
    ),
    "all ready, results": (
        probe(
            "results[0].all(d, has(d.status.readyReplicas) && d.status.readyReplicas >= 2)",
            scope="results",
        ),
        2,
        "true",
    ),
    "all replicas >= 2": (
        probe("results[0].all(d, d.spec.replicas >= 2)", scope="results"),
        2,
        "true",
    ),
    "no root pod": (
        probe(
            "!results[0].exists(p, has(p.spec.securityContext) && "
            "has(p.spec.securityContext.runAsUser) && p.spec.securityContext.runAsUser == 0)",
            scope="results",
            lookups=[LIST_PODS],
        ),
        2,
        "true",
    ),
}

_PODS = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: api-1, namespace: prod}
  spec:
    securityContext: {runAsUser: 1000}
    containers: [{name: api, image: registry.example.com/api:1.2}]
- apiVersion: v1
  kind: Pod
  metadata: {name: web-1, namespace: prod}
  spec:
    securityContext: {runAsUser: 1001}
    containers: [{name: web, image: registry.example.com/web:3.4}]
"""


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    load_litellm().token_counter(model="openai/scripted", text="warm up")


@pytest.fixture
def probes(redis_url: str) -> ProbeStore:
    return ProbeStore(connect(redis_url), prefix="tt", history_limit=50)


def _snapshot(root: Path, web_ready: int = 2) -> Path:
    snap = make_snapshot(root, web_ready=web_ready)
    (snap / "prod" / "pods.yaml").write_text(_PODS)
    return snap


def _compile(snap: Path, verdict: str, spec: dict[str, Any]):  # type: ignore[no-untyped-def]
    turns = script(get_deployments(), done_with_probe(verdict, 0, probe_spec=spec))
    with scripted_model(turns) as model:
        return run(model, request_for(snap))


@pytest.mark.parametrize("spec", list(TAUTOLOGIES.values()), ids=list(TAUTOLOGIES))
def test_a_tautology_is_rejected_at_compile_and_the_model_verdict_stands(
    tmp_path: Path, spec: dict[str, Any]
) -> None:
    report = _compile(_snapshot(tmp_path / "snap"), "true", spec)
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert report.verdict.source == "model"
    assert report.probe is not None and report.probe.status == "rejected"
    assert INSENSITIVE in report.probe.reason
    assert report.probe.run.verdict == VerdictKind.TRUE  # it did agree: that is not enough


@pytest.mark.parametrize("spec", list(TAUTOLOGIES.values()), ids=list(TAUTOLOGIES))
def test_a_tautology_does_not_keep_a_check_true_after_the_cluster_changed(
    tmp_path: Path, probes: ProbeStore, spec: dict[str, Any]
) -> None:
    """The hostile planner's true and its tautology; then web drops to 1 ready replica. The
    next scheduled run (probe auto) must ask the model, not answer true from the probe."""
    snap = _snapshot(tmp_path / "snap")
    first, _ = _check(
        snap, probes, script(get_deployments(), done_with_probe("true", 0, probe_spec=spec))
    )
    assert first.probe is not None and first.probe.status == "rejected"
    assert INSENSITIVE in first.probe.reason
    assert probes.current("chk-ready") is None  # not stored
    _changed_to_false(snap)
    after, calls = _check(snap, probes, MODEL_FALSE, probe="auto")
    assert calls == 2  # the model was asked
    assert after.verdict is not None and after.verdict.verdict == VerdictKind.FALSE
    assert after.verdict.source == "model"


@pytest.mark.parametrize("case", list(LEGIT.values()), ids=list(LEGIT))
def test_every_probe_the_tests_use_is_still_accepted(
    tmp_path: Path, case: tuple[dict[str, Any], int, str]
) -> None:
    spec, web_ready, verdict = case
    report = _compile(_snapshot(tmp_path / "snap", web_ready), verdict, spec)
    assert report.probe is not None
    assert report.probe.status == "accepted", report.probe.reason
    assert report.verdict is not None and report.verdict.verdict.value == verdict


def test_a_legit_probe_is_still_rerun_for_zero_tokens(tmp_path: Path, probes: ProbeStore) -> None:
    snap = _snapshot(tmp_path / "snap")
    _check(snap, probes, script(get_deployments(), done_with_probe("true", 0, probe_spec=probe())))
    again, calls = _check(snap, probes, NO_MODEL, probe="auto")
    assert calls == 0 and again.verdict is not None and again.verdict.source == "probe"


def _stored_tautology(probes: ProbeStore, snap: Path) -> ProbeRecord:
    """``size(results[0]) >= 0`` stored as the check's probe, as if accepted before the
    sensitivity check (or put there by whatever else)."""
    tautology = ProposedProbe.model_validate(probe("size(results[0]) >= 0", scope="results"))
    outcome = ProbeOutcome(
        status="accepted",
        reason="accepted before the sensitivity check",
        probe=tautology,
        run=ProbeRun(value=True, verdict=VerdictKind.TRUE),
    )
    request = request_for(snap)
    return probes.save_compiled(
        "chk-ready", "run-legacy", outcome, VerdictKind.TRUE,
        predicate=request.text, profile=request.profile,
    )  # fmt: skip


def test_revalidation_retires_a_stored_tautology(tmp_path: Path, probes: ProbeStore) -> None:
    """A probe stored before the check existed (or whatever put it there): when re-validation
    comes and the model agrees, the probe is re-accepted only if it depends on the objects."""
    snap = _snapshot(tmp_path / "snap")
    record = _stored_tautology(probes, snap)
    probes.put(record.model_copy(update={"last_validated_at": datetime(2020, 1, 1, tzinfo=UTC)}))
    report, calls = _check(snap, probes, MODEL_TRUE)  # re-validation is due; the model agrees
    assert calls == 2 and report.verdict is not None
    assert report.verdict.verdict == VerdictKind.TRUE and report.verdict.source == "model"
    assert report.verdict.probe_version is None
    assert report.probe is not None and report.probe.status == "rejected"
    assert INSENSITIVE in report.probe.reason
    stored = probes.current("chk-ready")
    assert stored is not None and not stored.active
    assert stored.retired_reason is not None and INSENSITIVE in stored.retired_reason
    _changed_to_false(snap)
    after, calls = _check(snap, probes, MODEL_FALSE)
    assert calls == 2 and after.verdict is not None
    assert after.verdict.verdict == VerdictKind.FALSE and after.verdict.source == "model"


def test_the_listing_helpers_are_what_the_other_tests_use() -> None:
    assert probe()["lookups"] == [LIST_PROD]


def test_a_probe_stored_before_the_sensitivity_check_answers_nothing(
    tmp_path: Path, probes: ProbeStore
) -> None:
    """A tautology accepted by an older assay, validated a minute ago: it must not keep the
    check true until its next re-validation (up to 96 runs or 24 h). It answers no run;
    the model is asked (and compiles the check again)."""
    snap = _snapshot(tmp_path / "snap")
    record = _stored_tautology(probes, snap)
    legacy = record.model_dump(mode="json")
    legacy.pop("sensitivity_checked", None)  # as an older assay stored it
    probes.put(ProbeRecord.model_validate(legacy))
    _changed_to_false(snap)
    after, calls = _check(snap, probes, MODEL_FALSE, probe="auto")
    assert calls == 2  # the model was asked
    assert after.verdict is not None and after.verdict.verdict == VerdictKind.FALSE
    assert after.verdict.source == "model"
