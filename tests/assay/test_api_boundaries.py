"""The HTTP API's boundaries: ids outside the alphabet and snapshot paths outside the roots.

Real `assay api` processes on a real Redis. Every refusal must be a 4xx in the
project's error shape, one sentence, and store or queue nothing; the reads that
used to reach a key of another type (500) now refuse the id instead.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assay.redis_process import RedisProcess
from schemas.settings import AssaySettings
from tests.api_support import WRITE_TOKEN, ApiServer, auth
from tests.boundary_support import dump_keys, hostile_ids
from tests.fleet_support import finished_report, make_snapshots, snapshot_request
from workers.fleet.store import VerdictStore

pytestmark = pytest.mark.integration

PREFIX = "apibound"
QUEUE = f"{PREFIX}.evaluations"
HEADERS = auth(WRITE_TOKEN)
PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
SCHEDULE = {"name": "nightly", "predicate": PREDICATE, "interval_seconds": 3600}


@pytest.fixture(scope="module")
def snaps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("roots") / "snaps"
    make_snapshots(root, 2)
    (root / "to-etc").symlink_to("/etc")
    return root


@pytest.fixture(scope="module")
def api(
    redis_server: RedisProcess, snaps: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """An API whose snapshot roots are ``snaps`` only."""
    server = ApiServer(
        redis_server.url,
        tmp_path_factory.mktemp("api") / "api.log",
        settings={"ASSAY_KEY_PREFIX": PREFIX, "ASSAY_SNAPSHOT_ROOTS": json.dumps([str(snaps)])},
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def api_without_roots(
    redis_server: RedisProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """An API as it starts with no ASSAY_SNAPSHOT_ROOTS at all."""
    server = ApiServer(
        redis_server.url,
        tmp_path_factory.mktemp("api-none") / "api.log",
        settings={"ASSAY_KEY_PREFIX": PREFIX, "ASSAY_SNAPSHOT_ROOTS": None},
    ).start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    connection.close()


def _send(api: ApiServer, method: str, path: str, body: object = None) -> httpx.Response:
    return httpx.request(method, api.url + path, headers=HEADERS, json=body, timeout=10)


def _refused(response: httpx.Response, code: str) -> str:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["code"] == code, error
    message = str(error["message"])
    assert message.endswith(".") and not re.search(r"\.\s+[A-Z]", message), message  # one sentence
    assert "Value error" not in message
    return message


# --- ids ------------------------------------------------------------------------------------


def test_an_id_with_a_colon_is_refused_on_submit_and_on_every_read(
    api: ApiServer, client: redis.Redis
) -> None:
    store = VerdictStore.from_settings(AssaySettings(key_prefix=PREFIX), client=client)
    victim = snapshot_request(check_id="victim")
    store.register_run(victim)
    store.record_verdict(finished_report(victim, "true"))
    before = dump_keys(client, PREFIX)

    body = {
        "text": PREDICATE,
        "target": {"type": "snapshot", "path": "x"},
        "check_id": "victim:history",
    }
    message = _refused(_send(api, "POST", "/v1/evaluations", body), "validation_error")
    assert "check_id 'victim:history' is not a valid id" in message
    for path in (
        "/v1/checks/victim:history",
        "/v1/checks/victim:history/history",
        "/v1/runs/victim:history",
        "/v1/batches/b:1",
        "/v1/batches/b:1/results",
        "/v1/schedules/s:1",
    ):
        response = _send(api, "GET", path)
        assert response.status_code == 422, (path, response.status_code, response.text)
        assert "is not a valid id" in response.json()["error"]["message"], path
    assert dump_keys(client, PREFIX) == before
    assert _send(api, "GET", "/v1/checks/victim").status_code == 200


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=hostile_ids().filter(lambda s: s != ""), field=st.sampled_from(["check_id", "run_id"]))
def test_no_hostile_id_is_accepted_over_http(
    api: ApiServer, client: redis.Redis, value: str, field: str
) -> None:
    body = {"text": PREDICATE, "target": {"type": "snapshot", "path": "x"}, field: value}
    response = _send(api, "POST", "/v1/evaluations", body)
    assert response.status_code == 422, (value, response.text)
    assert client.llen(QUEUE) == 0


# --- snapshot roots ---------------------------------------------------------------------------


def test_without_roots_the_api_refuses_every_snapshot_target(
    api_without_roots: ApiServer, client: redis.Redis
) -> None:
    inside_checkout = {"type": "snapshot", "path": "examples/snapshots/prod-eu"}
    submit = _send(
        api_without_roots, "POST", "/v1/evaluations", {"text": PREDICATE, "target": inside_checkout}
    )
    message = _refused(submit, "snapshot_outside_roots")
    assert "ASSAY_SNAPSHOT_ROOTS" in message
    batch = _send(
        api_without_roots, "POST", "/v1/batches", {"text": PREDICATE, "targets": [inside_checkout]}
    )
    _refused(batch, "snapshot_outside_roots")
    schedule = {**SCHEDULE, "targets": {"snapshots": ["examples/snapshots/*"]}}
    _refused(_send(api_without_roots, "POST", "/v1/schedules", schedule), "snapshot_outside_roots")
    assert dump_keys(client, PREFIX) == {}
    assert client.llen(QUEUE) == 0


@pytest.mark.parametrize("path", ["/", "/etc", "../..", "SNAPS/../..", "SNAPS/to-etc", "~"])
def test_paths_outside_the_roots_are_refused_and_queue_nothing(
    api: ApiServer, client: redis.Redis, snaps: Path, path: str
) -> None:
    path = path.replace("SNAPS", str(snaps))
    body = {"text": PREDICATE, "target": {"type": "snapshot", "path": path}}
    refused = _send(api, "POST", "/v1/evaluations", body)
    message = _refused(refused, "snapshot_outside_roots")
    assert refused.status_code == 404, refused.text  # which folders it serves is its state
    assert repr(path) in message and "ASSAY_SNAPSHOT_ROOTS" in message
    assert "/etc" not in message.replace(repr(path), ""), "the resolved target is not revealed"
    batch = {"text": PREDICATE, "targets": [{"type": "snapshot", "path": path}]}
    _refused(_send(api, "POST", "/v1/batches", batch), "snapshot_outside_roots")
    assert dump_keys(client, PREFIX) == {}
    assert client.llen(QUEUE) == 0


def test_a_folder_inside_the_roots_is_queued_as_its_resolved_path(
    api: ApiServer, client: redis.Redis, snaps: Path
) -> None:
    body = {"text": PREDICATE, "target": {"type": "snapshot", "path": f"{snaps}/x/../cluster-000"}}
    response = _send(api, "POST", "/v1/evaluations", body)
    assert response.status_code == 202, response.text
    assert response.json()["target"] == "snapshot:cluster-000"
    [raw] = client.lrange(QUEUE, 0, -1)
    message = json.loads(raw)
    assert message["properties"]["body_encoding"] == "base64"
    args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
    assert args[0]["target"]["path"] == str(snaps / "cluster-000")


def test_schedule_snapshots_must_stay_inside_the_roots(
    api: ApiServer, client: redis.Redis, snaps: Path
) -> None:
    for patterns in (["/etc/*"], [f"{snaps}/to-etc/*"], ["/"]):
        body = {**SCHEDULE, "targets": {"snapshots": patterns}}
        refused = _send(api, "POST", "/v1/schedules", body)
        _refused(refused, "snapshot_outside_roots")
        assert refused.status_code == 404, refused.text  # the server's roots: its state
    # '..' is refused whatever the roots: a rule of the published schema, so a 422
    climbing = {**SCHEDULE, "targets": {"snapshots": [f"{snaps}/../*"]}}
    assert "contains '..'" in _refused(
        _send(api, "POST", "/v1/schedules", climbing), "validation_error"
    )
    assert dump_keys(client, PREFIX) == {}
    created = _send(
        api, "POST", "/v1/schedules", {**SCHEDULE, "targets": {"snapshots": [f"{snaps}/*"]}}
    )
    assert created.status_code == 201, created.text
    schedule_id = created.json()["id"]
    patch = _send(
        api, "PATCH", f"/v1/schedules/{schedule_id}", {"targets": {"snapshots": ["/etc"]}}
    )
    _refused(patch, "snapshot_outside_roots")
    shown = _send(api, "GET", f"/v1/schedules/{schedule_id}").json()
    assert shown["targets"]["snapshots"] == [f"{snaps}/*"]
