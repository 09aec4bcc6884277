"""The API's front door, through real HTTP against a real `assay api` process:
tokens and scopes, the JSON error shape, body limits, validation, health probes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from assay.redis_process import RedisProcess, free_port
from tests.api_support import READ_TOKEN, ROOT, WRITE_TOKEN, ApiServer, auth
from tests.sentinel_support import MASTER_NAME, SentinelBroker

pytestmark = pytest.mark.integration

FILE_TOKEN = "file-token-from-a-mounted-secret"

# Every route that needs a token: (method, path, JSON body or None).
READ_ROUTES: list[tuple[str, str, object]] = [
    ("GET", "/v1/checks", None),
    ("GET", "/v1/checks/chk-0123456789abcdef", None),
    ("GET", "/v1/checks/chk-0123456789abcdef/history", None),
    ("GET", "/v1/changes?since=2026-01-01T00:00:00Z", None),
    ("GET", "/v1/runs/run-1", None),
    ("GET", "/v1/batches/batch-1", None),
    ("GET", "/v1/batches/batch-1/results", None),
    ("GET", "/v1/schedules", None),
    ("GET", "/v1/schedules/sch-1", None),
    ("GET", "/metrics", None),
]
VALID_EVALUATION = {
    "text": "every Deployment in namespace prod has at least 2 ready replicas",
    "target": {"type": "snapshot", "path": "examples/snapshots/prod-eu"},
}
WRITE_ROUTES: list[tuple[str, str, object]] = [
    ("POST", "/v1/evaluations", VALID_EVALUATION),
    ("POST", "/v1/batches", {"text": "x", "targets": [VALID_EVALUATION["target"]]}),
    (
        "POST",
        "/v1/schedules",
        {"name": "n", "predicate": "p", "targets": {"contexts": ["c"]}, "interval_seconds": 3600},
    ),
    ("PATCH", "/v1/schedules/sch-1", {"predicate": "q"}),
    ("POST", "/v1/schedules/sch-1/pause", None),
    ("POST", "/v1/schedules/sch-1/resume", None),
    ("DELETE", "/v1/schedules/sch-1", None),
]


@pytest.fixture(scope="module")
def tokens_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secret") / "tokens.yaml"
    path.write_text(f"{FILE_TOKEN}: write\n")
    return path


@pytest.fixture(scope="module")
def api(
    redis_server: RedisProcess, tmp_path_factory: pytest.TempPathFactory, tokens_file: Path
) -> Iterator[ApiServer]:
    logs = tmp_path_factory.mktemp("api") / "api.log"
    server = ApiServer(
        redis_server.url,
        logs,
        settings={
            "ASSAY_API_TOKENS_FILE": str(tokens_file),
            "ASSAY_API_MAX_BATCH_TARGETS": "3",
            "ASSAY_KEY_PREFIX": "authtest",
        },
    ).start()
    yield server
    server.stop()


def _call(
    server: ApiServer, method: str, path: str, body: object, headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.request(method, server.url + path, json=body, headers=headers or {}, timeout=10)


def _error(response: httpx.Response) -> dict[str, str]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] and body["error"]["message"], body
    return dict(body["error"])


def test_health_probes_need_no_token(api: ApiServer) -> None:
    assert httpx.get(api.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(api.url + "/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "checks": {"redis": "ok", "broker": "ok"}}


@pytest.mark.parametrize(("method", "path", "body"), READ_ROUTES + WRITE_ROUTES)
def test_no_token_is_refused_everywhere(
    api: ApiServer, method: str, path: str, body: object
) -> None:
    response = _call(api, method, path, body)
    assert response.status_code == 401
    assert _error(response)["code"] == "missing_token"
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "path", "body"), READ_ROUTES + WRITE_ROUTES)
def test_wrong_token_is_refused_everywhere(
    api: ApiServer, method: str, path: str, body: object
) -> None:
    response = _call(api, method, path, body, auth(READ_TOKEN + "x"))
    assert response.status_code == 401
    assert _error(response)["code"] == "invalid_token"


def test_a_prefix_of_a_real_token_is_not_a_token(api: ApiServer) -> None:
    response = _call(api, "GET", "/v1/checks", None, auth(READ_TOKEN[:-1]))
    assert _error(response)["code"] == "invalid_token"


def test_a_non_bearer_authorization_header_is_refused(api: ApiServer) -> None:
    response = _call(api, "GET", "/v1/checks", None, {"Authorization": f"Basic {READ_TOKEN}"})
    assert response.status_code == 401
    assert _error(response)["code"] == "invalid_authorization"


@pytest.mark.parametrize(("method", "path", "body"), WRITE_ROUTES)
def test_read_scope_cannot_write(api: ApiServer, method: str, path: str, body: object) -> None:
    response = _call(api, method, path, body, auth(READ_TOKEN))
    assert response.status_code == 403
    assert _error(response)["code"] == "insufficient_scope"


@pytest.mark.parametrize(("method", "path", "body"), READ_ROUTES)
def test_both_scopes_can_read(api: ApiServer, method: str, path: str, body: object) -> None:
    for token in (READ_TOKEN, WRITE_TOKEN):
        response = _call(api, method, path, body, auth(token))
        # Nothing exists yet: a read answers 200 or a JSON 404, never an auth error.
        assert response.status_code in (200, 404), response.text
        if response.status_code == 404:
            assert _error(response)["code"].endswith("_not_found")


def test_token_from_the_mounted_secret_file_works_and_rotates(
    api: ApiServer, tokens_file: Path
) -> None:
    assert _call(api, "GET", "/v1/schedules", None, auth(FILE_TOKEN)).status_code == 200
    rotated = "rotated-token-after-secret-update"
    tokens_file.write_text(json.dumps({rotated: "read"}))
    later = time.time() + 5  # make the change visible even on a coarse-mtime filesystem
    os.utime(tokens_file, (later, later))
    old = _call(api, "GET", "/v1/schedules", None, auth(FILE_TOKEN))
    assert _error(old)["code"] == "invalid_token"
    assert _call(api, "GET", "/v1/schedules", None, auth(rotated)).status_code == 200
    write = _call(api, "DELETE", "/v1/schedules/sch-1", None, auth(rotated))
    assert _error(write)["code"] == "insufficient_scope"
    # the tokens from the settings are unaffected by the file
    assert _call(api, "GET", "/v1/schedules", None, auth(READ_TOKEN)).status_code == 200


def test_body_over_the_limit_is_refused_before_parsing(api: ApiServer) -> None:
    big = {**VALID_EVALUATION, "text": "x" * (70 * 1024)}
    response = _call(api, "POST", "/v1/evaluations", big, auth(WRITE_TOKEN))
    assert response.status_code == 413
    assert _error(response)["code"] == "body_too_large"


def test_chunked_body_over_the_limit_is_refused(api: ApiServer) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"text": "'
        for _ in range(80):
            yield b"y" * 1024
        yield b'"}'

    response = httpx.post(
        api.url + "/v1/evaluations",
        content=chunks(),
        headers={**auth(WRITE_TOKEN), "content-type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 413
    assert _error(response)["code"] == "body_too_large"


def test_invalid_json_is_a_400_with_its_own_code(api: ApiServer) -> None:
    response = httpx.post(
        api.url + "/v1/evaluations",
        content=b'{"text": "unterminated',
        headers={**auth(WRITE_TOKEN), "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert _error(response)["code"] == "invalid_json"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**VALID_EVALUATION, "text": "x" * 4001}, "text"),
        ({**VALID_EVALUATION, "text": ""}, "text"),
        ({**VALID_EVALUATION, "profile": "reckless"}, "profile"),
        ({**VALID_EVALUATION, "target": {"type": "cluster-of-my-dreams"}}, "target"),
        ({**VALID_EVALUATION, "budget": {"max_iterations": 0}}, "budget"),
        ({**VALID_EVALUATION, "api_base": "http://evil.example/v1"}, "api_base"),
        ({**VALID_EVALUATION, "run_id": "../../etc"}, "run_id"),
        ({"target": VALID_EVALUATION["target"]}, "text"),
        ([1, 2, 3], "body"),
    ],
)
def test_invalid_evaluations_are_422_naming_the_field(
    api: ApiServer, body: object, field: str
) -> None:
    response = _call(api, "POST", "/v1/evaluations", body, auth(WRITE_TOKEN))
    assert response.status_code == 422, response.text
    error = _error(response)
    assert error["code"] == "validation_error"
    locations = [".".join(d["loc"]) for d in response.json()["error"]["details"]]
    assert any(field in loc for loc in locations), locations


def test_whitespace_predicate_is_refused_by_the_contract(api: ApiServer) -> None:
    response = _call(
        api, "POST", "/v1/evaluations", {**VALID_EVALUATION, "text": "   "}, auth(WRITE_TOKEN)
    )
    assert response.status_code == 422
    assert "empty" in _error(response)["message"]


def test_a_kubeconfig_path_cannot_be_chosen_over_http(api: ApiServer) -> None:
    body = {
        **VALID_EVALUATION,
        "target": {"type": "context", "context": "prod", "kubeconfig": "/tmp/evil-kubeconfig"},
    }
    response = _call(api, "POST", "/v1/evaluations", body, auth(WRITE_TOKEN))
    assert response.status_code == 422
    assert _error(response)["code"] == "kubeconfig_not_allowed"


def test_batch_size_is_capped_by_the_setting(api: ApiServer) -> None:
    targets = [{"type": "snapshot", "path": f"examples/snapshots/s{i}"} for i in range(4)]
    response = _call(
        api, "POST", "/v1/batches", {"text": "anything", "targets": targets}, auth(WRITE_TOKEN)
    )
    assert response.status_code == 422
    error = _error(response)
    assert error["code"] == "batch_too_large"
    assert "at most 3" in error["message"]


def test_batch_needs_exactly_one_way_to_name_targets(api: ApiServer) -> None:
    body = {"text": "t", "targets": [VALID_EVALUATION["target"]], "context_glob": "prod-*"}
    response = _call(api, "POST", "/v1/batches", body, auth(WRITE_TOKEN))
    assert response.status_code == 422
    assert _error(response)["code"] == "validation_error"


def test_bad_query_parameters_are_422(api: ApiServer) -> None:
    for path in ("/v1/checks?verdict=maybe", "/v1/checks?limit=0", "/v1/changes?since=yesterday"):
        response = _call(api, "GET", path, None, auth(READ_TOKEN))
        assert response.status_code == 422, path
        assert _error(response)["code"] == "validation_error"


def test_naive_instants_are_refused(api: ApiServer) -> None:
    response = _call(api, "GET", "/v1/changes?since=2026-01-01T00:00:00", None, auth(READ_TOKEN))
    assert response.status_code == 422
    assert "time zone" in _error(response)["message"]


def test_unknown_routes_and_methods_answer_in_the_error_shape(api: ApiServer) -> None:
    missing = _call(api, "GET", "/v2/nothing", None, auth(READ_TOKEN))
    assert missing.status_code == 404 and _error(missing)["code"] == "not_found"
    wrong = _call(api, "PUT", "/v1/checks", None, auth(WRITE_TOKEN))
    assert wrong.status_code == 405 and _error(wrong)["code"] == "method_not_allowed"


def test_every_response_carries_a_request_id(api: ApiServer) -> None:
    response = httpx.get(api.url + "/healthz", headers={"X-Request-ID": "trace-me-123"})
    assert response.headers["x-request-id"] == "trace-me-123"


# --- servers with other settings -----------------------------------------------------------


def test_anonymous_read_when_allowed_but_never_anonymous_write(
    redis_server: RedisProcess, tmp_path: Path
) -> None:
    server = ApiServer(
        redis_server.url, tmp_path / "api.log", settings={"ASSAY_API_ALLOW_ANONYMOUS_READ": "true"}
    ).start()
    try:
        assert httpx.get(server.url + "/v1/checks").status_code == 200
        write = httpx.post(server.url + "/v1/evaluations", json=VALID_EVALUATION)
        assert write.status_code == 401
        assert _error(write)["code"] == "missing_token"
        # a wrong token is still wrong, even where anonymous reads are allowed
        wrong = httpx.get(server.url + "/v1/checks", headers=auth("nope"))
        assert _error(wrong)["code"] == "invalid_token"
    finally:
        server.stop()


def test_readyz_is_503_and_reads_are_503_when_redis_is_down(tmp_path: Path) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    server = ApiServer(dead, tmp_path / "api.log").start()
    try:
        assert httpx.get(server.url + "/healthz").status_code == 200
        ready = httpx.get(server.url + "/readyz", timeout=15)
        assert ready.status_code == 503
        error = _error(ready)
        assert error["code"] == "not_ready"
        assert "redis" in error["message"]
        # A person is waiting: a quick 503 (15 s is only a bound against a hang), not the
        # workers' half minute of retries.
        read = httpx.get(server.url + "/v1/checks", headers=auth(READ_TOKEN), timeout=15)
        assert read.status_code == 503
        assert _error(read)["code"] == "redis_unavailable"
        assert read.headers["retry-after"]
        write = httpx.post(
            server.url + "/v1/evaluations",
            json=VALID_EVALUATION,
            headers=auth(WRITE_TOKEN),
            timeout=15,
        )
        assert write.status_code == 503
        error = _error(write)
        assert error["code"] == "redis_unavailable" and "Redis" in error["message"]
        assert dead.rsplit(":", 1)[0] not in error["message"], "callers are not told where it is"
        # the operator's log says which Redis and why
        assert f"cannot reach the fleet's Redis at {dead}" in server.log_path.read_text()
    finally:
        server.stop()


def test_metrics_port_serves_the_api_metrics_without_a_token(
    redis_server: RedisProcess, tmp_path: Path
) -> None:
    port = free_port()
    server = ApiServer(
        redis_server.url, tmp_path / "api.log", settings={"ASSAY_METRICS_PORT": str(port)}
    ).start()
    try:
        assert httpx.get(server.url + "/v1/checks", headers=auth(READ_TOKEN)).status_code == 200
        body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'assay_api_requests_total{method="GET",route="/v1/checks",status="200"} 1.0' in body
        assert "assay_queue_depth_up 1.0" in body
        # the API port itself still wants a token for /metrics
        assert httpx.get(server.url + "/metrics").status_code == 401
    finally:
        server.stop()


def test_assay_api_without_a_fleet_exits_69_and_says_what_to_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env["ASSAY_DATA_DIR"] = str(tmp_path)  # no `assay up` state here to discover
    result = subprocess.run(
        [sys.executable, "-m", "assay.cli", "api", "--port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 69
    assert result.stderr.startswith("assay: error: ") and "ASSAY_REDIS_URL" in result.stderr


def test_readyz_reaches_the_master_of_a_sentinel_broker(
    redis_url: str, sentinel_broker: SentinelBroker, tmp_path: Path
) -> None:
    """Ready while the master the sentinel names answers; not ready once it is gone."""
    server = ApiServer(
        redis_url,
        tmp_path / "api.log",
        settings={
            "ASSAY_BROKER_URL": sentinel_broker.url,
            "ASSAY_BROKER_SENTINEL_MASTER": MASTER_NAME,
        },
    ).start()
    try:
        ready = httpx.get(server.url + "/readyz", timeout=15)
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"] == {"redis": "ok", "broker": "ok"}
        sentinel_broker.master.stop()
        gone = httpx.get(server.url + "/readyz", timeout=30)
        assert gone.status_code == 503
        broker = next(d for d in gone.json()["error"]["details"] if d["dependency"] == "broker")
        assert broker["status"].startswith("unreachable")
    finally:
        server.stop()
