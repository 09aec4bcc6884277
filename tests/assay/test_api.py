"""Every /v1 endpoint through real HTTP against a real `assay api` process and a real Redis.

Verdicts are recorded into the store the way a worker records them (the
store's own ``record_verdict``), so these tests need no worker; the end-to-end
run through a worker and the scripted model is in tests/assay/test_api_metrics.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import redis

from assay.redis_process import RedisProcess
from schemas.request import EvaluationRequest
from schemas.settings import AssaySettings
from tests.api_support import READ_TOKEN, WRITE_TOKEN, ApiServer, auth
from tests.fleet_support import finished_report, snapshot_request
from workers.fleet.store import VerdictStore
from workers.fleet.timers import TimerStore, deferred_timer_id

pytestmark = pytest.mark.integration

PREFIX = "apitest"
QUEUE = f"{PREFIX}.evaluations"
READ = auth(READ_TOKEN)
WRITE = auth(WRITE_TOKEN)
PROD_EU = {"type": "snapshot", "path": "examples/snapshots/prod-eu"}


@pytest.fixture(scope="module")
def api(
    redis_server: RedisProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    server = ApiServer(
        redis_server.url,
        tmp_path_factory.mktemp("api") / "api.log",
        settings={"ASSAY_KEY_PREFIX": PREFIX, "ASSAY_MIN_INTERVAL_SECONDS": "60"},
    ).start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def client(redis_url: str) -> Iterator[redis.Redis]:
    """The test's view of the same Redis (database flushed before each test)."""
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    connection.close()


@pytest.fixture
def store(client: redis.Redis) -> VerdictStore:
    return VerdictStore.from_settings(AssaySettings(key_prefix=PREFIX), client=client)


def _get(api: ApiServer, path: str, **params: str | int) -> httpx.Response:
    return httpx.get(api.url + path, headers=READ, params=params, timeout=10)


def _send(api: ApiServer, method: str, path: str, body: object = None) -> httpx.Response:
    return httpx.request(method, api.url + path, headers=WRITE, json=body, timeout=10)


def _record(store: VerdictStore, request: EvaluationRequest, verdict: str, at: datetime) -> None:
    store.register_run(request)
    assert store.record_verdict(finished_report(request, verdict, finished_at=at))


# --- evaluations and runs -------------------------------------------------------------------


def test_submit_queues_a_task_and_the_run_reads_back_as_queued(
    api: ApiServer, client: redis.Redis
) -> None:
    text = "every Deployment in namespace prod has at least 2 ready replicas"
    response = _send(api, "POST", "/v1/evaluations", {"text": text, "target": PROD_EU})
    assert response.status_code == 202, response.text
    receipt = response.json()
    expected_check = EvaluationRequest(text=text, target=PROD_EU).check_id
    assert receipt["check_id"] == expected_check
    assert receipt["target"] == "snapshot:prod-eu"
    assert client.llen(QUEUE) == 1  # one Celery message on the broker, for a worker to take
    scraped = httpx.get(api.url + "/metrics", headers=READ).text
    assert f'assay_queue_depth{{queue="{QUEUE}"}} 1.0' in scraped

    run = _get(api, f"/v1/runs/{receipt['run_id']}")
    assert run.status_code == 200
    body = run.json()
    assert body["status"] == "queued"
    assert body["check_id"] == expected_check
    assert body["verdict"] is None and body["report"] is None


def test_resubmitting_a_run_id_queues_nothing_new(api: ApiServer, client: redis.Redis) -> None:
    body = {
        "text": "is anything crashlooping?",
        "kind": "query",
        "target": PROD_EU,
        "run_id": "r-1",
    }
    first = _send(api, "POST", "/v1/evaluations", body)
    second = _send(api, "POST", "/v1/evaluations", body)
    assert first.status_code == second.status_code == 202
    assert first.json() == second.json()
    assert first.json()["run_id"] == "r-1"
    assert client.llen(QUEUE) == 1


def test_submit_with_a_future_not_before_waits_in_the_scheduler(
    api: ApiServer, client: redis.Redis
) -> None:
    at = datetime.now(UTC) + timedelta(days=30)
    body = {"text": "the cert is Ready", "target": PROD_EU, "not_before": at.isoformat()}
    response = _send(api, "POST", "/v1/evaluations", body)
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    assert client.llen(QUEUE) == 0  # nothing on the broker yet
    timer = TimerStore(client, PREFIX).get(deferred_timer_id(run_id))
    assert timer is not None and abs(timer.due - at.timestamp()) < 1
    assert _get(api, f"/v1/runs/{run_id}").json()["status"] == "queued"


def test_a_predicate_that_names_a_future_instant_is_deferred_to_it(
    api: ApiServer, client: redis.Redis
) -> None:
    text = "on 2099-01-01, the cert-manager Certificate api-tls is Ready"
    response = _send(api, "POST", "/v1/evaluations", {"text": text, "target": PROD_EU})
    assert response.status_code == 202, response.text
    timer = TimerStore(client, PREFIX).get(deferred_timer_id(response.json()["run_id"]))
    assert timer is not None
    assert timer.due_at == datetime(2099, 1, 1, tzinfo=UTC)
    assert client.llen(QUEUE) == 0


def test_a_finished_run_shows_its_verdict_and_report(api: ApiServer, store: VerdictStore) -> None:
    request = snapshot_request(run_id="run-done-1")
    _record(store, request, "false", datetime.now(UTC))
    body = _get(api, "/v1/runs/run-done-1").json()
    assert body["status"] == "done"
    assert body["verdict"]["verdict"] == "false"
    assert body["verdict"]["exit_code"] == 1
    assert body["report"]["run_id"] == "run-done-1"
    assert body["report"]["request"]["text"] == request.text


def test_unknown_run_is_a_404_with_its_code(api: ApiServer) -> None:
    response = _get(api, "/v1/runs/no-such-run")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "run_not_found"


# --- checks ------------------------------------------------------------------------------------


def test_check_latest_verdict_and_history_newest_first(api: ApiServer, store: VerdictStore) -> None:
    start = datetime.now(UTC) - timedelta(minutes=10)
    request = snapshot_request(run_id="h-1")
    _record(store, request, "true", start)
    _record(store, snapshot_request(run_id="h-2"), "false", start + timedelta(minutes=1))
    _record(store, snapshot_request(run_id="h-3"), "true", start + timedelta(minutes=2))

    latest = _get(api, f"/v1/checks/{request.check_id}").json()
    assert latest["run_id"] == "h-3" and latest["verdict"] == "true"

    history = _get(api, f"/v1/checks/{request.check_id}/history", limit=2).json()
    assert history["check_id"] == request.check_id
    assert [v["run_id"] for v in history["verdicts"]] == ["h-3", "h-2"]

    assert _get(api, "/v1/checks/chk-unknown").json()["error"]["code"] == "check_not_found"
    assert _get(api, "/v1/checks/chk-unknown/history").status_code == 404


def test_list_checks_filters_by_verdict_target_and_change(
    api: ApiServer, store: VerdictStore
) -> None:
    now = datetime.now(UTC)
    eu_ok = snapshot_request("all pods run as non-root", run_id="c-1")
    eu_bad = snapshot_request("every Deployment is ready", run_id="c-2")
    us_bad = snapshot_request(
        "every Deployment is ready", "examples/snapshots/prod-us", run_id="c-3"
    )
    _record(store, eu_ok, "true", now - timedelta(hours=3))
    _record(store, eu_bad, "true", now - timedelta(hours=3))
    _record(store, us_bad, "false", now - timedelta(hours=2))
    # eu_bad flips true -> false a minute ago: a verdict change
    _record(
        store,
        snapshot_request("every Deployment is ready", run_id="c-4"),
        "false",
        now - timedelta(minutes=1),
    )

    everything = _get(api, "/v1/checks").json()["checks"]
    assert {c["check_id"] for c in everything} == {eu_ok.check_id, eu_bad.check_id, us_bad.check_id}

    false_ids = {c["check_id"] for c in _get(api, "/v1/checks", verdict="false").json()["checks"]}
    assert false_ids == {eu_bad.check_id, us_bad.check_id}

    in_eu_false = _get(api, "/v1/checks", verdict="false", target="snapshot:prod-eu").json()
    assert [c["check_id"] for c in in_eu_false["checks"]] == [eu_bad.check_id]

    since = (now - timedelta(minutes=30)).isoformat()
    changed = _get(api, "/v1/checks", changed_since=since).json()["checks"]
    assert [c["check_id"] for c in changed] == [eu_bad.check_id]
    assert changed[0]["previous_verdict"] == "true"

    changes = _get(api, "/v1/changes", since=since).json()["changes"]
    assert [(c["from_verdict"], c["to_verdict"]) for c in changes] == [("true", "false")]

    assert len(_get(api, "/v1/checks", limit=1).json()["checks"]) == 1


# --- batches ------------------------------------------------------------------------------------


def test_batch_fans_out_and_its_tally_moves_as_verdicts_land(
    api: ApiServer, client: redis.Redis, store: VerdictStore
) -> None:
    targets = [PROD_EU, {"type": "snapshot", "path": "examples/snapshots/prod-us"}]
    response = _send(
        api, "POST", "/v1/batches", {"text": "no pod runs as root", "targets": targets}
    )
    assert response.status_code == 202, response.text
    started = response.json()
    batch_id = started["batch_id"]
    assert (started["total"], started["pending"], started["sealed"], started["done"]) == (
        2,
        2,
        True,
        False,
    )
    assert client.llen(QUEUE) == 2

    results = _get(api, f"/v1/batches/{batch_id}/results").json()["results"]
    assert [r["target"] for r in results] == ["snapshot:prod-eu", "snapshot:prod-us"]
    assert all(r["verdict"] is None for r in results)

    # a worker records the first target's verdict
    first = store.run_request(results[0]["run_id"])
    assert first is not None and first.batch_id == batch_id
    assert store.record_verdict(finished_report(first, "false"))
    tally = _get(api, f"/v1/batches/{batch_id}").json()
    assert (tally["pending"], tally["false"], tally["done"]) == (1, 1, False)
    results = _get(api, f"/v1/batches/{batch_id}/results", limit=1).json()["results"]
    assert results == [
        {
            "run_id": first.run_id,
            "check_id": first.check_id,
            "target": "snapshot:prod-eu",
            "verdict": "false",
            "exit_code": 1,
            "explanation": "scripted outcome",
        }
    ]

    assert _get(api, "/v1/batches/batch-nope").json()["error"]["code"] == "batch_not_found"
    assert _get(api, "/v1/batches/batch-nope/results").status_code == 404


def test_batch_over_a_context_glob_with_no_match_creates_nothing(
    api: ApiServer, client: redis.Redis
) -> None:
    response = _send(api, "POST", "/v1/batches", {"text": "t", "context_glob": "prod-*"})
    # the server's kubeconfig decides: no such context (404), or none readable (409)
    code = response.json()["error"]["code"]
    assert (response.status_code, code) in ((404, "batch_empty"), (409, "context_glob_failed"))
    assert client.llen(QUEUE) == 0


# --- schedules ------------------------------------------------------------------------------------

SCHEDULE = {
    "name": "prod replicas",
    "predicate": "every Deployment in namespace prod has at least 2 ready replicas",
    "targets": {"snapshots": ["examples/snapshots/prod-eu"]},
    "cron": "0 6 * * *",
    "timezone": "Europe/Paris",
}


def test_schedule_lifecycle(api: ApiServer) -> None:
    created = _send(api, "POST", "/v1/schedules", SCHEDULE)
    assert created.status_code == 201, created.text
    schedule = created.json()
    schedule_id = schedule["id"]
    assert schedule["enabled"] is True and schedule["revision"] == 1
    next_fire = datetime.fromisoformat(schedule["next_fire_at"])
    assert next_fire > datetime.now(UTC)
    assert next_fire.astimezone(UTC).minute == 0

    listed = _get(api, "/v1/schedules").json()["schedules"]
    assert [s["id"] for s in listed] == [schedule_id]
    assert _get(api, f"/v1/schedules/{schedule_id}").json()["name"] == "prod replicas"

    changed = _send(api, "PATCH", f"/v1/schedules/{schedule_id}", {"interval_seconds": 900})
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert body["cron"] is None and body["interval_seconds"] == 900 and body["revision"] == 2
    assert body["predicate"] == SCHEDULE["predicate"]

    paused = _send(api, "POST", f"/v1/schedules/{schedule_id}/pause").json()
    assert paused["enabled"] is False and paused["next_fire_at"] is None
    resumed = _send(api, "POST", f"/v1/schedules/{schedule_id}/resume").json()
    assert resumed["enabled"] is True and resumed["next_fire_at"] is not None

    deleted = _send(api, "DELETE", f"/v1/schedules/{schedule_id}")
    assert deleted.status_code == 204 and deleted.content == b""
    assert _get(api, f"/v1/schedules/{schedule_id}").json()["error"]["code"] == "schedule_not_found"
    assert _send(api, "DELETE", f"/v1/schedules/{schedule_id}").status_code == 404
    assert _send(api, "POST", f"/v1/schedules/{schedule_id}/pause").status_code == 404


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"cron": "61 * * * *"}, "validation_error"),
        ({"timezone": "Mars/Olympus_Mons"}, "validation_error"),
        ({"interval_seconds": 5}, "interval_too_short"),
        ({"targets": {"contexts": ["a"], "snapshots": ["b"]}}, "validation_error"),
        ({"targets": {"contexts": ["a"], "kubeconfig": "/tmp/k"}}, "kubeconfig_not_allowed"),
    ],
)
def test_bad_schedules_are_refused_and_create_nothing(
    api: ApiServer, change: dict[str, object], code: str
) -> None:
    body = {**SCHEDULE, **change}
    if "interval_seconds" in change:
        body.pop("cron")
    response = _send(api, "POST", "/v1/schedules", body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == code
    assert _get(api, "/v1/schedules").json()["schedules"] == []


def test_schedule_names_are_unique(api: ApiServer) -> None:
    assert _send(api, "POST", "/v1/schedules", SCHEDULE).status_code == 201
    again = _send(api, "POST", "/v1/schedules", SCHEDULE)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "schedule_name_taken"
    other = _send(api, "POST", "/v1/schedules", {**SCHEDULE, "name": "other"}).json()
    clash = _send(api, "PATCH", f"/v1/schedules/{other['id']}", {"name": SCHEDULE["name"]})
    assert clash.status_code == 409


def test_a_bad_patch_changes_nothing(api: ApiServer) -> None:
    schedule = _send(api, "POST", "/v1/schedules", SCHEDULE).json()
    response = _send(api, "PATCH", f"/v1/schedules/{schedule['id']}", {"cron": "not a cron"})
    assert response.status_code == 422
    assert _get(api, f"/v1/schedules/{schedule['id']}").json()["revision"] == 1


# --- logs ---------------------------------------------------------------------------------


def test_api_log_lines_are_json_with_the_ids_of_the_request(
    api: ApiServer, store: VerdictStore
) -> None:
    request = snapshot_request(run_id="log-run-1")
    _record(store, request, "true", datetime.now(UTC))
    assert _get(api, "/v1/runs/log-run-1").status_code == 200
    submitted = _send(api, "POST", "/v1/evaluations", {"text": "pods are fine", "target": PROD_EU})
    receipt = submitted.json()

    lines = [line for line in api.log_lines() if line.get("event") == "api_request"]
    run_line = next(line for line in lines if line.get("path") == "/v1/runs/log-run-1")
    assert run_line["run_id"] == "log-run-1"
    assert run_line["check_id"] == request.check_id
    assert run_line["route"] == "/v1/runs/{run_id}" and run_line["status"] == 200
    submit_line = next(line for line in lines if line.get("run_id") == receipt["run_id"])
    assert submit_line["check_id"] == receipt["check_id"]
    assert submit_line["level"] == "info" and "timestamp" in submit_line


def test_log_lines_hold_no_token(api: ApiServer) -> None:
    assert _get(api, "/v1/checks").status_code == 200
    text = Path(api.log_path).read_text()
    assert READ_TOKEN not in text and WRITE_TOKEN not in text
