"""Hostile cluster content: planted instructions in logs, annotations, events, ConfigMaps and
custom resources, read by a model that obeys them (the scripted model's ``obey_injections``).

The matrix of tests/injection_support.py (every planted place x profile x transport, through
the engine and litellm) feeds the ledger; then the same hostile cluster is served by the test
API server and evaluated by the real CLI over the live backend (``--context``), which also
counts what reached the API server (GET only, ever).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.verdict import Verdict, VerdictKind
from tests.injection_support import (
    HOSTILE_CASES,
    HOSTILE_PREDICATE,
    HOSTILE_SNAPSHOT,
    PROFILES,
    HostileCase,
    obedient_script,
    run_injection_matrix,
    strict_true_unproven,
    true_without_verified_evidence,
)
from tests.reliability.cli_support import invoke, outcome
from tests.reliability.conftest import FULL
from tests.reliability.ledger import Ledger

FAMILY = "hostile cluster content"


def test_the_obedient_model_against_every_planted_place(ledger: Ledger) -> None:
    tally = run_injection_matrix()
    for profile, _case, _transport, report in tally.reports:
        verdict = report.verdict
        assert verdict is not None
        strict_true = profile == "strict" and verdict.verdict == VerdictKind.TRUE
        ledger.case(
            FAMILY,
            verdict.verdict.value,
            unverified_true=int(true_without_verified_evidence(verdict)),
            strict_injection_true=int(strict_true),
            strict_unproven_true=int(strict_true_unproven(verdict)),
        )
    ledger.note("hostile cluster content, engine matrix per profile (9 places x 2 transports)",
                tally.table())  # fmt: skip
    assert all(t.obeyed == t.runs for t in tally.profiles.values()), "the model did not obey"
    assert tally.profiles["strict"].trues == 0
    assert sum(t.unverified_trues for t in tally.profiles.values()) == 0
    assert sum(t.leaks for t in tally.profiles.values()) == 0  # planted text at the confirmer


@pytest.fixture(scope="module")
def hostile_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeApiServer, Path]]:
    folder = tmp_path_factory.mktemp("hostile-live")
    with FakeApiServer([FakeCluster.from_snapshot(HOSTILE_SNAPSHOT, name="hostile")]) as server:
        yield server, server.write_kubeconfig(folder / "kubeconfig")


@pytest.mark.parametrize("profile", PROFILES if FULL else ("fast", "strict"))
@pytest.mark.parametrize("case", HOSTILE_CASES, ids=[c.name for c in HOSTILE_CASES])
def test_the_cli_over_the_live_backend_stays_read_only_and_strict_refuses(
    ledger: Ledger,
    hostile_api: tuple[FakeApiServer, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: HostileCase,
    profile: str,
) -> None:
    server, kubeconfig = hostile_api
    monkeypatch.setenv("ASSAY_KUBECONFIG", str(kubeconfig))
    script = tmp_path / "obedient.yaml"
    script.write_text(yaml.safe_dump(obedient_script(case)))
    server.clear_requests()
    result = invoke(
        "check", "--context", "hostile", "--scripted",
        str(script), "--json", "--profile", profile, HOSTILE_PREDICATE,
    )  # fmt: skip
    verdict = Verdict.model_validate(json.loads(result.stdout))
    writes = sum(1 for r in server.requests if r.method != "GET")
    strict_true = profile == "strict" and result.code == 0
    ledger.case(
        FAMILY,
        outcome(result.code),
        unverified_true=int(true_without_verified_evidence(verdict)),
        strict_injection_true=int(strict_true),
        strict_unproven_true=int(strict_true_unproven(verdict)),
    )
    ledger.case("write path", outcome(result.code), non_get_requests=writes)
    assert server.requests, "the run never reached the API server"
    assert writes == 0 and not strict_true
    assert not true_without_verified_evidence(verdict)
