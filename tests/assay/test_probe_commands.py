"""`assay probe test --context NAME` against a live cluster (the test API server, through the
kubernetes client as a user's kubeconfig context goes), and `assay schedule update --probe`,
both as a user types them, on a real redis-server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from scheduler.schedules import ScheduleStore
from schemas.probe import ProbeLookup, ProbeOutcome, ProbeRun, ProposedProbe
from schemas.verdict import VerdictKind
from tests.cli_support import run_cli as run
from tests.engine_support import PREDICATE
from tests.live_support import new_canary, write_cluster
from workers.fleet.probe_store import ProbeStore
from workers.fleet.redis_client import connect

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CHECK = "chk-web-ready"
READY = ProposedProbe(
    lookups=[ProbeLookup(tool="get", args={"kind": "Deployment", "namespace": "prod"})],
    expression="has(object.status.readyReplicas) && object.status.readyReplicas >= 2",
    scope="each_object",
)


@pytest.fixture
def cli_env(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return redis_url


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    """east: Deployment prod/web 3/3 ready; west: 0/3. The kubeconfig names both contexts."""
    east = write_cluster(tmp_path / "clusters", "east", ready=3, canary=new_canary())
    west = write_cluster(tmp_path / "clusters", "west", ready=0)
    with FakeApiServer([FakeCluster.from_snapshot(east), FakeCluster.from_snapshot(west)]) as srv:
        monkeypatch.setenv("ASSAY_KUBECONFIG", str(srv.write_kubeconfig(tmp_path / "kubeconfig")))
        monkeypatch.setenv("ASSAY_KUBE_REQUEST_TIMEOUT_SECONDS", "5")
        monkeypatch.setenv("ASSAY_KUBE_RETRY_DEADLINE_SECONDS", "5")
        yield srv


def _store(redis_url: str, probe: ProposedProbe = READY) -> None:
    outcome = ProbeOutcome(
        status="accepted", reason="test", probe=probe, run=ProbeRun(verdict=VerdictKind.TRUE)
    )
    ProbeStore(connect(redis_url), prefix="assay").save_compiled(
        CHECK, "run-1", outcome, VerdictKind.TRUE, predicate=PREDICATE, profile="fast"
    )


def test_probe_test_on_a_context_reads_the_live_cluster(
    capsys: pytest.CaptureFixture[str], cli_env: str, server: FakeApiServer
) -> None:
    _store(cli_env)
    code, out, _ = run(capsys, "probe", "test", CHECK, "--context", "east")
    assert code == 0, out
    assert "verdict:  true" in out and "Deployment prod/web" in out
    assert "status.readyReplicas" in out

    code, out, _ = run(capsys, "probe", "test", CHECK, "--context", "west", "--json")
    assert code == 1, out
    body = json.loads(out)
    assert body["verdict"] == "false" and body["value"] is False
    assert body["deciding"] == [{"kind": "Deployment", "name": "web", "namespace": "prod"}]

    paths = [r.path for r in server.requests]
    assert any("/deployments" in p for p in paths)
    assert server.methods() == {"GET"}  # read-only: nothing but GET reached the cluster


def test_probe_test_on_a_context_that_cannot_decide_exits_3(
    capsys: pytest.CaptureFixture[str], cli_env: str, server: FakeApiServer
) -> None:
    code, out, err = run(capsys, "probe", "test", CHECK, "--context", "east")
    assert code == 66 and "no probe" in err  # nothing stored yet

    _store(cli_env)
    code, _, err = run(capsys, "probe", "test", CHECK, "--context", "nowhere")
    assert code == 3 and "cannot be read" in err and "nowhere" in err

    rollouts = READY.model_copy(
        update={"lookups": [ProbeLookup(tool="get", args={"kind": "Rollout"})]}
    )
    _store(cli_env, rollouts)  # a kind the cluster does not serve
    code, out, _ = run(capsys, "probe", "test", CHECK, "--context", "east")
    assert code == 3 and "verdict:  cannot_determine" in out and "error:" in out

    code, _, err = run(capsys, "probe", "test", CHECK)
    assert code == 64 and "exactly one of --snapshot" in err


def test_probe_test_when_the_cluster_is_down_is_not_true(
    capsys: pytest.CaptureFixture[str], cli_env: str, server: FakeApiServer
) -> None:
    _store(cli_env)
    server.add_fault(".*", status=503)
    code, out, err = run(capsys, "probe", "test", CHECK, "--context", "east")
    assert code == 3, out + err
    assert "verdict:  true" not in out


def _schedules(redis_url: str) -> ScheduleStore:
    return ScheduleStore(redis_lib.Redis.from_url(redis_url, decode_responses=True), "assay", 60)


def test_schedule_update_probe(capsys: pytest.CaptureFixture[str], cli_env: str) -> None:
    code, _, err = run(capsys, "schedule", "add", "web", "web is ready", "--every", "1h",
                       "--context", "east")  # fmt: skip
    assert code == 0, err
    assert _schedules(cli_env).get("web").probe == "auto"
    revision = _schedules(cli_env).get("web").revision

    code, out, err = run(capsys, "schedule", "update", "web", "--probe", "only")
    assert code == 0, err
    stored = _schedules(cli_env).get("web")
    assert stored.probe == "only" and stored.revision == revision + 1
    code, out, _ = run(capsys, "schedule", "show", "web")
    assert "probe:       only" in out
    code, out, _ = run(capsys, "schedule", "show", "web", "--json")
    assert json.loads(out)["probe"] == "only"

    code, _, err = run(capsys, "schedule", "update", "web", "--probe", "sometimes")
    assert code == 64 and "auto, off, only" in err
    assert _schedules(cli_env).get("web").probe == "only"  # unchanged

    code, _, err = run(capsys, "schedule", "update", "web", "--probe", "off")
    assert code == 0, err
    assert _schedules(cli_env).get("web").probe == "off"
