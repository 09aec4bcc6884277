"""The CLI, the Python client and the HTTP API queue evaluations through one submit path.

Each front door is driven as a user drives it (the CLI as a subprocess, the
client in-process, the API over HTTP through FastAPI's test client) against a
real redis-server, and must behave the same way:

* a predicate that opens with a future instant is held until then (its receipt
  says when), not queued now;
* a run id that is already known queues nothing new and answers that run's receipt;
* batches get an id the newest-batch lookup (`assay batch status` with no id) finds.

No worker runs here: what is asserted is what reached the broker and the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from assay.client import Client
from schemas.settings import load_settings
from tests.api_support import TOKENS, WRITE_TOKEN, auth
from tests.conftest import EXAMPLES, ROOT, TEST_SNAPSHOT_ROOTS

DATED = "on 2030-01-01T00:00:00Z, the cert-manager Certificate api-example-com is Ready"
PLAIN = "every Deployment in namespace prod has at least 2 ready replicas"
PROD_EU = str(EXAMPLES / "snapshots" / "prod-eu")
DUE = datetime(2030, 1, 1, tzinfo=UTC)

Submit = Callable[..., dict[str, Any]]


def cli_env(redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env.update(
        ASSAY_REDIS_URL=redis_url,
        ASSAY_SNAPSHOT_ROOTS=TEST_SNAPSHOT_ROOTS,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    return env


def assay(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assay.cli", *args],
        cwd=ROOT,
        env=cli_env(redis_url),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    with Client(load_settings(redis_url=redis_url)) as fleet:
        yield fleet


@pytest.fixture
def api(redis_url: str) -> Iterator[TestClient]:
    from assay.api import create_app

    settings = load_settings(redis_url=redis_url, api_tokens=TOKENS)
    with TestClient(create_app(settings)) as http:
        yield http


def via_cli(redis_url: str) -> Submit:
    def submit(text: str, run_id: str | None = None) -> dict[str, Any]:
        extra = ["--run-id", run_id] if run_id else []
        result = assay(redis_url, "submit", "--snapshot", PROD_EU, "--json", *extra, text)
        assert result.returncode == 0, result.stderr
        body: dict[str, Any] = json.loads(result.stdout)
        return body

    return submit


def via_client(client: Client) -> Submit:
    def submit(text: str, run_id: str | None = None) -> dict[str, Any]:
        return client.submit(text, snapshot=PROD_EU, run_id=run_id).model_dump(mode="json")

    return submit


def via_api(api: TestClient) -> Submit:
    def submit(text: str, run_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"text": text, "target": {"type": "snapshot", "path": PROD_EU}}
        if run_id:
            body["run_id"] = run_id
        answer = api.post("/v1/evaluations", json=body, headers=auth(WRITE_TOKEN))
        assert answer.status_code == 202, answer.text
        receipt: dict[str, Any] = answer.json()
        return receipt

    return submit


@pytest.fixture(params=["cli", "client", "api"])
def door(request: pytest.FixtureRequest, redis_url: str) -> Submit:
    if request.param == "cli":
        return via_cli(redis_url)
    if request.param == "client":
        return via_client(request.getfixturevalue("client"))
    return via_api(request.getfixturevalue("api"))


def queued_messages(redis_url: str) -> int:
    connection = redis.Redis.from_url(redis_url)
    try:
        return int(connection.llen("assay.evaluations"))
    finally:
        connection.close()


def test_a_dated_predicate_waits_for_its_instant_from_every_door(
    door: Submit, redis_url: str, client: Client
) -> None:
    receipt = door(DATED)
    assert receipt["not_before"] == "2030-01-01T00:00:00Z"
    assert queued_messages(redis_url) == 0  # held by the scheduler, not sent to a worker
    assert client.due_at(receipt["run_id"]) == DUE
    state = client.run_state(receipt["run_id"])
    assert state is not None and state.status == "queued"


def test_a_known_run_id_queues_nothing_new_from_every_door(door: Submit, redis_url: str) -> None:
    first = door(PLAIN, run_id="same-run-1")
    assert queued_messages(redis_url) == 1
    again = door("a different text under the same run id", run_id="same-run-1")
    assert again == first
    assert queued_messages(redis_url) == 1


def test_batches_from_every_door_share_one_shape_and_the_newest_is_found(
    redis_url: str, client: Client, api: TestClient
) -> None:
    pattern = str(EXAMPLES / "snapshots" / "*")
    cli = assay(redis_url, "batch", PLAIN, "--snapshots", pattern, "--json")
    assert cli.returncode == 0, cli.stderr
    from_cli = json.loads(cli.stdout)
    from_client = client.batch_status(client.start_batch(PLAIN, snapshots=pattern))
    assert from_client is not None
    answer = api.post(
        "/v1/batches",
        json={"text": PLAIN, "targets": [{"type": "snapshot", "path": PROD_EU}]},
        headers=auth(WRITE_TOKEN),
    )
    assert answer.status_code == 202, answer.text
    from_api = answer.json()
    assert set(from_cli) == set(from_client.model_dump(mode="json")) == set(from_api)
    assert from_cli["total"] == from_client.total == 3 and from_api["total"] == 1
    assert len({from_cli["batch_id"], from_client.batch_id, from_api["batch_id"]}) == 3

    newest = assay(redis_url, "batch", "status", "--json")
    assert newest.returncode == 75, newest.stderr  # no worker: still pending
    assert json.loads(newest.stdout)["batch_id"] == from_api["batch_id"]
    assert client.latest_batch_id() == from_api["batch_id"]
