"""Per-check Prometheus gauges: a real `assay api` process serves them on its token-free
metrics port, read from a real redis-server at scrape time, parsed with the Prometheus
client's parser. A verdict that says it came from a probe is shown as one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from assay.redis_process import free_port
from schemas.settings import AssaySettings
from schemas.verdict import VerdictKind
from tests.api_support import ApiServer
from tests.fleet_support import finished_report, snapshot_request
from workers.engine import metrics
from workers.fleet.redis_client import connect
from workers.fleet.store import VerdictStore, verdict_source

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape_text(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def check_samples(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in samples.items() if sample == name}


def labels(check_id: str, target: str, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"check_id": check_id, "target": target, **more}.items()))


@pytest.fixture
def store(redis_url: str) -> VerdictStore:
    return VerdictStore.from_settings(AssaySettings(), client=connect(redis_url))


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[tuple[ApiServer, int]]:
    port = free_port()
    server = ApiServer(
        redis_url, tmp_path / "api.log", settings={"ASSAY_METRICS_PORT": str(port)}
    ).start()
    yield server, port
    server.stop()


def test_every_check_shows_its_verdict_time_and_source_on_the_token_free_port(
    store: VerdictStore, api: tuple[ApiServer, int]
) -> None:
    finished = datetime(2026, 5, 1, 8, 30, tzinfo=UTC)
    fine = snapshot_request(path="examples/snapshots/prod-eu")
    store.record_verdict(finished_report(fine, "true", finished_at=finished))
    broken = snapshot_request(path="examples/snapshots/staging-us")
    store.record_verdict(finished_report(broken, "false", finished_at=finished))
    unclear = snapshot_request(text="is the cluster healthy?", path="examples/snapshots/dev-ap")
    store.record_verdict(finished_report(unclear, "cannot_determine", finished_at=finished))
    probed = snapshot_request(text="the api Deployment has 3 replicas")
    report = finished_report(probed, "false", finished_at=finished + timedelta(seconds=5))
    assert report.verdict is not None
    report.verdict = report.verdict.model_copy(update={"source": "probe", "probe_version": 1})
    store.record_verdict(report)
    query = snapshot_request(text="which pods restart?", kind="query")
    store.record_verdict(finished_report(query, "true", finished_at=finished))

    _server, port = api
    samples = scrape_text(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
    assert check_samples(samples, "assay_check_verdict") == {
        labels(fine.check_id, "snapshot:prod-eu"): 0,
        labels(broken.check_id, "snapshot:staging-us"): 1,
        labels(unclear.check_id, "snapshot:dev-ap"): 3,
        labels(probed.check_id, "snapshot:prod-eu"): 1,
    }, "one sample per check (queries left out), valued by exit code"
    assert check_samples(samples, "assay_check_last_verdict_timestamp_seconds")[
        labels(fine.check_id, "snapshot:prod-eu")
    ] == pytest.approx(finished.timestamp())
    sources = check_samples(samples, "assay_check_verdict_source")
    assert sources[labels(fine.check_id, "snapshot:prod-eu", source="model")] == 1
    assert sources[labels(probed.check_id, "snapshot:prod-eu", source="probe")] == 1
    assert len(sources) == 4
    assert samples[("assay_check_gauges_up", ())] == 1

    # the gauge follows the latest verdict
    again = snapshot_request(path="examples/snapshots/staging-us")
    store.record_verdict(finished_report(again, "true", finished_at=finished + timedelta(hours=1)))
    samples = scrape_text(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
    assert samples[("assay_check_verdict", labels(broken.check_id, "snapshot:staging-us"))] == 0


def test_source_is_read_from_the_verdict_when_it_has_one_and_is_model_otherwise() -> None:
    report = finished_report(snapshot_request(), VerdictKind.TRUE)
    assert report.verdict is not None
    assert verdict_source(report.verdict) == "model"
    assert verdict_source(report.verdict.model_copy(update={"source": "probe"})) == "probe"


def test_only_the_most_recently_run_checks_are_exported(store: VerdictStore) -> None:
    base = datetime.now(UTC)
    requests = [snapshot_request(path=f"examples/snapshots/c{i}") for i in range(5)]
    for minute, request in enumerate(requests):
        report = finished_report(request, "true", finished_at=base + timedelta(minutes=minute))
        store.record_verdict(report)
    newest = [r.check_id for r in reversed(requests)][:2]
    assert [row.check_id for row in store.check_gauges(limit=2)] == newest
    assert store.check_gauges(limit=0) == []


def test_with_redis_down_the_gauges_say_so_instead_of_going_stale() -> None:
    dead = VerdictStore.from_settings(
        AssaySettings(), client=redis.Redis(port=free_port(), socket_connect_timeout=0.5)
    )
    registry = CollectorRegistry()
    registry.register(metrics.CheckVerdictCollector(lambda: dead.check_gauges(10)))
    samples = scrape_text(generate_latest(registry).decode())
    assert samples == {("assay_check_gauges_up", ()): 0.0}
