"""The Prometheus metrics: what the observe_* functions move, and the scrape-time collectors
reading a real Redis (queue depth from the broker's lists, timers from the scheduler's keys)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from assay.redis_process import free_port
from schemas.verdict import EXIT_CODES, Verdict, VerdictKind
from workers.engine import metrics
from workers.fleet.queue_depth import QueueDepthCollector
from workers.fleet.timers import TimerEntry, TimerStore, epoch


def _sample(name: str, labels: dict[str, str], registry: CollectorRegistry = REGISTRY) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def _verdict(kind: VerdictKind, profile: str, exhausted: str | None = None) -> Verdict:
    now = datetime.now(UTC)
    return Verdict(
        verdict=kind,
        exit_code=EXIT_CODES[kind],
        explanation="e",
        budget_exhausted=exhausted,
        model="openai/scripted",
        profile=profile,
        kind="check",
        run_id="r",
        check_id="c",
        target="t",
        started_at=now - timedelta(seconds=3),
        finished_at=now,
        duration_seconds=3.0,
    )


def test_observe_verdict_counts_by_verdict_and_profile_and_times_it() -> None:
    labels = {"verdict": "false", "profile": "strict", "kind": "check"}
    before = _sample("assay_evaluations_total", labels)
    durations = _sample("assay_evaluation_duration_seconds_count", {"profile": "strict"})
    slow = _sample("assay_evaluation_duration_seconds_bucket", {"profile": "strict", "le": "2.5"})
    metrics.observe_verdict(_verdict(VerdictKind.FALSE, "strict"))
    assert _sample("assay_evaluations_total", labels) == before + 1
    assert (
        _sample("assay_evaluation_duration_seconds_count", {"profile": "strict"}) == durations + 1
    )
    # 3 s is not under the 2.5 s bucket
    assert (
        _sample("assay_evaluation_duration_seconds_bucket", {"profile": "strict", "le": "2.5"})
        == slow
    )


def test_budget_exhaustion_is_counted_by_kind() -> None:
    before = _sample("assay_budget_exhaustions_total", {"kind": "tokens"})
    metrics.observe_verdict(_verdict(VerdictKind.CANNOT_DETERMINE, "fast", exhausted="tokens"))
    metrics.observe_verdict(_verdict(VerdictKind.TRUE, "fast"))
    assert _sample("assay_budget_exhaustions_total", {"kind": "tokens"}) == before + 1


def test_model_calls_tokens_retries_and_tools() -> None:
    model = "openai/metrics-test"
    metrics.observe_model_reply(model, prompt_tokens=120, completion_tokens=30, attempts=2)
    metrics.observe_model_call(model, ok=False)
    metrics.observe_tool_call("get", ok=True)
    metrics.observe_tool_call("get", ok=False)
    assert _sample("assay_model_calls_total", {"model": model, "outcome": "ok"}) == 1
    assert _sample("assay_model_calls_total", {"model": model, "outcome": "error"}) == 1
    assert _sample("assay_model_tokens_total", {"model": model, "type": "prompt"}) == 120
    assert _sample("assay_model_tokens_total", {"model": model, "type": "completion"}) == 30
    assert _sample("assay_model_call_retries_total", {"model": model}) == 1
    assert _sample("assay_tool_calls_total", {"tool": "get", "outcome": "error"}) >= 1


def test_lateness_never_goes_negative() -> None:
    before = _sample("assay_scheduler_lateness_seconds_bucket", {"kind": "deferred", "le": "0.01"})
    metrics.observe_lateness(-0.5, kind="deferred")
    after = _sample("assay_scheduler_lateness_seconds_bucket", {"kind": "deferred", "le": "0.01"})
    assert after == before + 1


def _families(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = generate_latest(registry).decode()
    return {
        family.name: [(sample.labels, sample.value) for sample in family.samples]
        for family in text_string_to_metric_families(text)
    }


@pytest.mark.integration
def test_queue_depth_reads_every_priority_list_of_the_queue(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.rpush("assay.evaluations", "m1", "m2")
    client.rpush("assay.evaluations\x06\x163", "m3")  # kombu's list for priority 3
    client.rpush("someone.elses.queue", "x")
    registry = CollectorRegistry()
    registry.register(QueueDepthCollector(lambda: client, ["assay.evaluations"]))
    families = _families(registry)
    assert families["assay_queue_depth"] == [({"queue": "assay.evaluations"}, 3.0)]
    assert families["assay_queue_depth_up"] == [({}, 1.0)]
    client.lpop("assay.evaluations")
    assert _families(registry)["assay_queue_depth"] == [({"queue": "assay.evaluations"}, 2.0)]


def test_queue_depth_with_the_broker_down_reports_up_0_and_no_number() -> None:
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.5)
    registry = CollectorRegistry()
    registry.register(QueueDepthCollector(lambda: dead, ["assay.evaluations"]))
    families = _families(registry)
    assert families["assay_queue_depth_up"] == [({}, 0.0)]
    assert "assay_queue_depth" not in families


@pytest.mark.integration
def test_timer_gauges_follow_the_scheduler_keys(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    timers = TimerStore(client, "mtest")
    now = datetime.now(UTC)
    for index in range(3):
        timers.put(TimerEntry(id=f"defer:r{index}", kind="deferred", due=epoch(now), run_id="r"))
    registry = CollectorRegistry()
    registry.register(metrics.TimerCollector(timers.counts))
    assert _families(registry)["assay_timers_due"] == [({}, 3.0)]
    claimed = timers.claim(epoch(now) + 1, lease_seconds=30, limit=2)
    assert len(claimed) == 2
    families = _families(registry)
    assert families["assay_timers_due"] == [({}, 1.0)]
    assert families["assay_timers_in_flight"] == [({}, 2.0)]


def test_metrics_server_serves_the_registry_on_its_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_server_port", None)
    port = free_port()
    metrics.start_metrics_server(port, addr="127.0.0.1")
    metrics.start_metrics_server(port + 1, addr="127.0.0.1")  # a second call changes nothing
    metrics.observe_tool_call("describe", ok=True)
    body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    assert 'assay_tool_calls_total{outcome="ok",tool="describe"}' in body
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port + 1}/metrics", timeout=1)


def test_a_collector_registered_again_under_its_name_replaces_the_first() -> None:
    """An API app built later in the same process scrapes its own store, not the first app's
    (before: the first app's collector was kept, and a second app's gauges never showed)."""
    registry = CollectorRegistry()
    first = metrics.TimerCollector(lambda: (1, 1))
    second = metrics.TimerCollector(lambda: (7, 7))
    try:
        metrics.register_collector("test-timers", first, registry)
        metrics.register_collector("test-timers", second, registry)
        text = generate_latest(registry).decode()
    finally:
        registry.unregister(metrics._registered.pop("test-timers"))
    assert "assay_timers_due 7.0" in text and "assay_timers_due 1.0" not in text
