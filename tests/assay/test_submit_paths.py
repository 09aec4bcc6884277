"""The CLI, the Python client and the HTTP API queue evaluations through one submit path.

Each front door is driven as a user drives it (the CLI as a subprocess, the
client in-process, the API over HTTP through FastAPI's test client) against a
real redis-server, and must behave the same way:

* a predicate that opens with a future instant is held until then (its receipt
  says when), not queued now;
* a run id that is already known queues nothing new and answers that run's receipt;
* batches get an id the newest-batch lookup (`assay batch status` with no id) finds;
* a batch of a predicate that opens with a future instant is held like one check:
  its runs wait, pending, and the tally says when they are due;
* `assay batch results --json` prints exactly what the API's results endpoint answers.

No worker runs here: what is asserted is what reached the broker and the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from assay.client import Client
from schemas.settings import load_settings
from tests.api_support import READ_TOKEN, TOKENS, WRITE_TOKEN, auth
from tests.conftest import EXAMPLES, ROOT, TEST_SNAPSHOT_ROOTS
from tests.fleet_support import finished_report

DATED = "on 2030-01-01T00:00:00Z, the cert-manager Certificate api-example-com is Ready"
PLAIN = "every Deployment in namespace prod has at least 2 ready replicas"
PROD_EU = str(EXAMPLES / "snapshots" / "prod-eu")
DUE = datetime(2030, 1, 1, tzinfo=UTC)

Submit = Callable[..., dict[str, Any]]
StartBatch = Callable[[str], dict[str, Any]]


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


@dataclass(frozen=True)
class Door:
    """One front door as a user drives it: one evaluation, or one batch over prod-eu."""

    submit: Submit  # (text, run_id=None) -> the receipt as JSON
    start_batch: StartBatch  # text -> the batch's tally as JSON


def via_cli(redis_url: str) -> Door:
    def submit(text: str, run_id: str | None = None) -> dict[str, Any]:
        extra = ["--run-id", run_id] if run_id else []
        result = assay(redis_url, "submit", "--snapshot", PROD_EU, "--json", *extra, text)
        assert result.returncode == 0, result.stderr
        body: dict[str, Any] = json.loads(result.stdout)
        return body

    def start_batch(text: str) -> dict[str, Any]:
        result = assay(redis_url, "batch", text, "--snapshots", PROD_EU, "--json")
        assert result.returncode == 0, result.stderr
        tally: dict[str, Any] = json.loads(result.stdout)
        return tally

    return Door(submit, start_batch)


def via_client(client: Client) -> Door:
    def submit(text: str, run_id: str | None = None) -> dict[str, Any]:
        return client.submit(text, snapshot=PROD_EU, run_id=run_id).model_dump(mode="json")

    def start_batch(text: str) -> dict[str, Any]:
        status = client.batch_status(client.start_batch(text, snapshots=PROD_EU))
        assert status is not None
        return status.model_dump(mode="json")

    return Door(submit, start_batch)


def via_api(api: TestClient) -> Door:
    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = api.post(path, json=body, headers=auth(WRITE_TOKEN))
        assert answer.status_code == 202, answer.text
        answered: dict[str, Any] = answer.json()
        return answered

    def submit(text: str, run_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"text": text, "target": {"type": "snapshot", "path": PROD_EU}}
        if run_id:
            body["run_id"] = run_id
        return post("/v1/evaluations", body)

    def start_batch(text: str) -> dict[str, Any]:
        return post(
            "/v1/batches", {"text": text, "targets": [{"type": "snapshot", "path": PROD_EU}]}
        )

    return Door(submit, start_batch)


@pytest.fixture(params=["cli", "client", "api"])
def door(request: pytest.FixtureRequest, redis_url: str) -> Door:
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
    door: Door, redis_url: str, client: Client
) -> None:
    receipt = door.submit(DATED)
    assert receipt["not_before"] == "2030-01-01T00:00:00Z"
    assert queued_messages(redis_url) == 0  # held by the scheduler, not sent to a worker
    assert client.due_at(receipt["run_id"]) == DUE
    state = client.run_state(receipt["run_id"])
    assert state is not None and state.status == "queued"


def test_a_known_run_id_queues_nothing_new_from_every_door(door: Door, redis_url: str) -> None:
    first = door.submit(PLAIN, run_id="same-run-1")
    assert queued_messages(redis_url) == 1
    again = door.submit("a different text under the same run id", run_id="same-run-1")
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
    assert from_cli["not_before"] is None and from_api["not_before"] is None
    assert queued_messages(redis_url) == 3 + 3 + 1  # an undated predicate runs at once
    assert len({from_cli["batch_id"], from_client.batch_id, from_api["batch_id"]}) == 3

    newest = assay(redis_url, "batch", "status", "--json")
    assert newest.returncode == 75, newest.stderr  # no worker: still pending
    assert json.loads(newest.stdout)["batch_id"] == from_api["batch_id"]
    assert client.latest_batch_id() == from_api["batch_id"]


def test_a_dated_batch_waits_for_its_instant_from_every_door(
    door: Door, redis_url: str, client: Client
) -> None:
    tally = door.start_batch(DATED)
    assert tally["not_before"] == "2030-01-01T00:00:00Z"
    assert (tally["total"], tally["pending"], tally["done"]) == (1, 1, False)
    verdicts = ("true", "false", "poorly_posed", "cannot_determine")
    assert [tally[kind] for kind in verdicts] == [0, 0, 0, 0]  # none counted as failed
    assert queued_messages(redis_url) == 0  # held by the scheduler, not sent to a worker

    (row,) = client.batch_results(tally["batch_id"])
    assert row.verdict is None
    assert client.due_at(row.run_id) == DUE
    state = client.run_state(row.run_id)
    assert state is not None and state.status == "queued"
    assert state.batch_id == tally["batch_id"]

    shown = assay(redis_url, "batch", "status", tally["batch_id"])
    assert shown.returncode == 75, shown.stderr  # pending, not a failure
    assert "waiting until 2030-01-01 00:00:00 UTC" in shown.stdout


def test_batch_results_json_is_what_the_api_answers(
    redis_url: str, client: Client, api: TestClient
) -> None:
    batch_id = client.start_batch(PLAIN, snapshots=str(EXAMPLES / "snapshots" / "*"))
    first = next(iter(client.batch_results(batch_id)))
    request = client.store.run_request(first.run_id)
    assert request is not None
    assert client.store.record_verdict(finished_report(request, "false", explanation="1 short"))

    cli = assay(redis_url, "batch", "results", batch_id, "--json")
    assert cli.returncode == 75, cli.stderr  # two targets are still pending
    answer = api.get(f"/v1/batches/{batch_id}/results", headers=auth(READ_TOKEN))
    assert answer.status_code == 200, answer.text
    from_api = answer.json()
    assert json.loads(cli.stdout) == from_api
    assert [row["verdict"] for row in from_api["results"]] == ["false", None, None]
    assert from_api["results"][0]["explanation"] == "1 short"

    streamed = assay(redis_url, "batch", "results", batch_id, "--jsonl")
    assert streamed.returncode == 75, streamed.stderr
    assert [json.loads(line) for line in streamed.stdout.splitlines()] == from_api["results"]


def queued_profiles(redis_url: str) -> list[str]:
    from tests.scheduler_support import queued_messages as messages

    connection = redis.Redis.from_url(redis_url)
    try:
        return sorted(m["request"]["profile"] for m in messages(connection, "assay.evaluations"))
    finally:
        connection.close()


def test_a_one_off_check_runs_fast_and_a_batch_strict_from_every_door(
    door: Door, redis_url: str
) -> None:
    """Batches feed gates and alerts: with no --profile they run strict (the table of
    defaults in docs/running-checks.md); one check submitted keeps fast. Before: every door
    defaulted to fast."""
    door.submit(PLAIN)
    assert queued_profiles(redis_url) == ["fast"]
    door.start_batch(PLAIN)
    assert queued_profiles(redis_url) == ["fast", "strict"]


def test_assay_profile_still_chooses_the_profile_of_a_batch(redis_url: str) -> None:
    env = {**cli_env(redis_url), "ASSAY_PROFILE": "smoke"}
    result = subprocess.run(
        [sys.executable, "-m", "assay.cli", "batch", PLAIN, "--snapshots", PROD_EU, "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert queued_profiles(redis_url) == ["smoke"]
    flag = assay(redis_url, "batch", PLAIN, "--snapshots", PROD_EU, "--profile", "fast", "--json")
    assert flag.returncode == 0, flag.stderr
    assert queued_profiles(redis_url) == ["fast", "smoke"]
