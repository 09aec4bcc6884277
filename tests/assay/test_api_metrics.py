"""End to end through the API: submit over HTTP, a real Celery worker runs the evaluation
against the scripted model, and the scraped metrics move (the worker's and the API's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from assay.redis_process import free_port
from assay.testing.scripted_model import ScriptedModel
from tests.api_support import READ_TOKEN, WRITE_TOKEN, ApiServer, auth
from tests.fleet_support import (
    PREDICATE,
    make_snapshots,
    scripted_worker_env,
    start_worker,
    stop_process,
    three_step_script,
    worker_log_tail,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MODEL = "openai/scripted"


def scrape(url: str, headers: dict[str, str] | None = None) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` from one scrape of ``url``."""
    text = httpx.get(url, headers=headers or {}, timeout=10).text
    samples: dict[tuple[str, tuple], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[tuple[str, tuple], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def scripted_model() -> Iterator[ScriptedModel]:
    with ScriptedModel(three_step_script()) as model:
        yield model


class _OtlpCollector(BaseHTTPRequestHandler):
    """Stands in for an OpenTelemetry collector: keeps every OTLP/HTTP body it is sent."""

    bodies: list[bytes] = []

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers.get("content-length", "0"))))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    _OtlpCollector.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OtlpCollector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    yield f"http://{host!s}:{port}/v1/traces", _OtlpCollector.bodies
    server.shutdown()
    server.server_close()


@pytest.fixture
def stack(
    redis_url: str,
    scripted_model: ScriptedModel,
    collector: tuple[str, list[bytes]],
    tmp_path: Path,
) -> Iterator[tuple[ApiServer, str, Path]]:
    """An API and a worker (metrics port, OTLP tracing) on one Redis and the scripted model."""
    metrics_port = free_port()
    worker_log = tmp_path / "worker.log"
    env = scripted_worker_env(
        redis_url,
        scripted_model.url,
        metrics_port=str(metrics_port),
        otel_exporter="otlp",
        otel_endpoint=collector[0],
    )
    worker = start_worker(env, worker_log, concurrency=4)
    api = ApiServer(redis_url, tmp_path / "api.log").start()
    worker_metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        deadline = time.monotonic() + 60
        while True:  # the worker serves its metrics once it is ready
            try:
                httpx.get(worker_metrics, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise RuntimeError(worker_log_tail(worker_log)) from None
                time.sleep(0.2)
        yield api, worker_metrics, worker_log
    finally:
        api.stop()
        stop_process(worker)


def _wait_done(api: ApiServer, run_id: str, worker_log: Path, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = httpx.get(f"{api.url}/v1/runs/{run_id}", headers=auth(READ_TOKEN), timeout=10)
        if run.status_code == 200 and run.json()["status"] == "done":
            return dict(run.json())
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish:\n{worker_log_tail(worker_log)}")


def test_an_evaluation_submitted_over_http_moves_the_metrics_and_is_traced(
    stack: tuple[ApiServer, str, Path], collector: tuple[str, list[bytes]], tmp_path: Path
) -> None:
    api, worker_metrics, worker_log = stack
    (bad,) = make_snapshots(tmp_path / "snaps", 1, bad_every=1)
    before = scrape(worker_metrics)

    submitted = httpx.post(
        f"{api.url}/v1/evaluations",
        headers=auth(WRITE_TOKEN),
        json={"text": PREDICATE, "target": {"type": "snapshot", "path": str(bad)}},
        timeout=10,
    )
    assert submitted.status_code == 202, submitted.text
    receipt = submitted.json()
    run = _wait_done(api, receipt["run_id"], worker_log)
    assert run["verdict"]["verdict"] == "false" and run["verdict"]["exit_code"] == 1
    latest = httpx.get(f"{api.url}/v1/checks/{receipt['check_id']}", headers=auth(READ_TOKEN))
    assert latest.json()["run_id"] == receipt["run_id"]

    after = scrape(worker_metrics)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("assay_evaluations_total", verdict="false", profile="fast", kind="check") == 1
    assert moved("assay_evaluation_duration_seconds_count", profile="fast") == 1
    assert moved("assay_model_calls_total", model=MODEL, outcome="ok") == 3  # 3-step script
    assert moved("assay_model_tokens_total", model=MODEL, type="prompt") > 0
    assert moved("assay_model_tokens_total", model=MODEL, type="completion") > 0
    assert moved("assay_tool_calls_total", tool="get", outcome="ok") == 1

    api_samples = scrape(f"{api.url}/metrics", auth(READ_TOKEN))
    submits = value(
        api_samples,
        "assay_api_requests_total",
        route="/v1/evaluations",
        method="POST",
        status="202",
    )
    assert submits == 1
    assert value(api_samples, "assay_queue_depth", queue="assay.evaluations") == 0
    assert value(api_samples, "assay_queue_depth_up") == 1

    # the worker exported the run's spans (batched: within a few seconds)
    spans = b""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        spans = b"".join(collector[1])
        if receipt["run_id"].encode() in spans and b"assay.tool_call" in spans:
            break
        time.sleep(0.5)
    for expected in (b"assay.evaluation", b"assay.model_call", b"assay.tool_call"):
        assert expected in spans, f"{expected!r} not exported"
    assert receipt["run_id"].encode() in spans
    assert PREDICATE.encode() not in spans  # ids and names only, never the predicate text
