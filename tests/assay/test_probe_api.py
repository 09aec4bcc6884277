"""The /v1/checks/{id}/probe routes through real HTTP against a real `assay api` process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from assay.redis_process import RedisProcess
from schemas.probe import ProbeLookup, ProbeOutcome, ProbeRun, ProposedProbe
from schemas.verdict import VerdictKind
from tests.api_support import READ_TOKEN, WRITE_TOKEN, ApiServer, auth
from tests.engine_support import PREDICATE, make_snapshot
from workers.fleet.probe_store import ProbeStore
from workers.fleet.redis_client import connect

pytestmark = pytest.mark.integration

PREFIX = "probeapi"
CHECK = "chk-api-ready"
PROBE = ProposedProbe(
    lookups=[ProbeLookup(tool="get", args={"kind": "Deployment", "namespace": "prod"})],
    expression="object.status.readyReplicas >= 2",
    scope="each_object",
)


@pytest.fixture(scope="module")
def api(
    redis_server: RedisProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    server = ApiServer(
        redis_server.url,
        tmp_path_factory.mktemp("api") / "api.log",
        settings={"ASSAY_KEY_PREFIX": PREFIX},
    ).start()
    yield server
    server.stop()


@pytest.fixture
def probes(redis_url: str) -> ProbeStore:
    store = ProbeStore(connect(redis_url), prefix=PREFIX)
    outcome = ProbeOutcome(
        status="accepted", reason="test", probe=PROBE, run=ProbeRun(verdict=VerdictKind.TRUE)
    )
    store.save_compiled(
        CHECK, "run-api", outcome, VerdictKind.TRUE, predicate=PREDICATE, profile="fast"
    )
    return store


def _url(api: ApiServer, suffix: str = "") -> str:
    return f"{api.url}/v1/checks/{CHECK}/probe{suffix}"


def test_get_export_test_and_drop(api: ApiServer, probes: ProbeStore, tmp_path: Path) -> None:
    got = httpx.get(_url(api), headers=auth(READ_TOKEN), timeout=10)
    assert got.status_code == 200
    assert got.json()["probe"]["version"] == 1 and got.json()["versions"] == [1]
    assert got.json()["agreement"][0]["why"] == "compile"

    exported = httpx.get(_url(api, "/export"), headers=auth(READ_TOKEN),
                         params={"format": "kyverno"}, timeout=10)  # fmt: skip
    assert exported.status_code == 200
    (policy,) = list(yaml.safe_load_all(exported.text))
    assert policy["kind"] == "ValidatingPolicy"

    snapshot = make_snapshot(tmp_path / "snap", web_ready=1)
    body = {"target": {"type": "snapshot", "path": str(snapshot)}}
    read_only = httpx.post(_url(api, "/test"), headers=auth(READ_TOKEN), json=body, timeout=10)
    assert read_only.status_code == 403
    tested = httpx.post(_url(api, "/test"), headers=auth(WRITE_TOKEN), json=body, timeout=10)
    assert tested.status_code == 200, tested.text
    assert tested.json()["verdict"] == "false"
    assert tested.json()["deciding"][0]["name"] == "web"

    dropped = httpx.delete(_url(api), headers=auth(WRITE_TOKEN), timeout=10)
    assert dropped.status_code == 204 and probes.current(CHECK) is None
    missing = httpx.get(_url(api), headers=auth(READ_TOKEN), timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "probe_not_found"


def test_outside_the_snapshot_roots_is_refused(api: ApiServer, probes: ProbeStore) -> None:
    body = {"target": {"type": "snapshot", "path": "/etc"}}
    tested = httpx.post(_url(api, "/test"), headers=auth(WRITE_TOKEN), json=body, timeout=10)
    assert tested.status_code == 404, tested.text  # the server's roots: its state
    assert tested.json()["error"]["code"] == "snapshot_outside_roots"


def test_a_schedules_probe_mode_can_be_changed(api: ApiServer) -> None:
    """PATCH /v1/schedules/{id} with ``probe`` (the field the schema offers) takes effect."""
    body = {"name": "probe-mode", "predicate": "web is ready", "interval_seconds": 3600,
            "targets": {"contexts": ["east"]}}  # fmt: skip
    created = httpx.post(f"{api.url}/v1/schedules", headers=auth(WRITE_TOKEN), json=body,
                         timeout=10)  # fmt: skip
    assert created.status_code == 201, created.text
    assert created.json()["probe"] == "auto"
    url = f"{api.url}/v1/schedules/{created.json()['id']}"
    changed = httpx.patch(url, headers=auth(WRITE_TOKEN), json={"probe": "off"}, timeout=10)
    assert changed.status_code == 200, changed.text
    assert changed.json()["probe"] == "off"
    assert httpx.get(url, headers=auth(READ_TOKEN), timeout=10).json()["probe"] == "off"
    refused = httpx.patch(url, headers=auth(WRITE_TOKEN), json={"probe": "never"}, timeout=10)
    assert refused.status_code == 422
