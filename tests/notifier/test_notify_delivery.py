"""A notifier replica in this process, a real redis-server and a local HTTP receiver:
what webhooks and Slack receive, retries, dead letters, damping and cannot_determine off.
Verdicts are recorded through the store's real record path."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from notifier.events import idempotency_key
from schemas.verdict import VerdictKind
from tests.alerting_support import (
    LINK_BASE,
    PREDICATE,
    Receiver,
    notifier_running,
    record,
    settings_for,
    verify_signature,
    wait_for,
    webhook,
)
from workers.fleet.notify_feed import SinkFeed
from workers.fleet.store import VerdictStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()


def test_webhook_gets_a_signed_cloudevent_with_a_key_per_change_and_sink(
    redis_url: str, receiver: Receiver
) -> None:
    sinks = {"ops": webhook(f"{receiver.url}/ops"), "audit": webhook(f"{receiver.url}/audit")}
    settings = settings_for(redis_url, sinks)
    with notifier_running(settings) as store:
        record(store, "true")
        request = record(store, "false", explanation="web-bad has 1 of 3 ready replicas")
        wait_for(lambda: receiver.on("/ops") and receiver.on("/audit"), 20, "both sinks")

    (ops,), (audit,) = receiver.on("/ops"), receiver.on("/audit")
    assert ops.headers["content-type"].startswith("application/cloudevents+json")
    assert verify_signature(ops) and verify_signature(audit)
    assert not verify_signature(ops, key="another-key")
    event = ops.json()
    (change,) = store.changes(datetime.fromisoformat(event["time"]))
    entry_id = event["id"]
    assert {k: event[k] for k in ("specversion", "type", "source", "subject")} == {
        "specversion": "1.0",
        "type": "assay.verdict.changed",
        "source": "/assay",
        "subject": request.check_id,
    }
    assert event["datacontenttype"] == "application/json"
    assert event["data"] == {
        "check_id": request.check_id,
        "target": "snapshot:prod-eu",
        "kind": "check",
        "text": PREDICATE,
        "from_verdict": "true",
        "to_verdict": "false",
        "exit_code": 1,
        "run_id": request.run_id,
        "run_url": f"{LINK_BASE}/v1/runs/{request.run_id}",
        "explanation": "web-bad has 1 of 3 ready replicas",
        "source": "model",
        "changed_at": event["time"],
    }
    assert change.run_id == request.run_id
    assert ops.headers["idempotency-key"] == idempotency_key("assay", "ops", entry_id)
    assert audit.headers["idempotency-key"] == idempotency_key("assay", "audit", entry_id)
    assert ops.headers["idempotency-key"] != audit.headers["idempotency-key"]
    assert audit.json()["id"] == entry_id, "one change, one CloudEvents id"


def test_receiver_errors_are_retried_until_accepted_with_the_same_key_and_body(
    redis_url: str, receiver: Receiver
) -> None:
    receiver.statuses = [500, 503, 429]
    settings = settings_for(redis_url, {"ops": webhook(f"{receiver.url}/ops")})
    with notifier_running(settings) as store:
        record(store, "true")
        record(store, "false")
        wait_for(lambda: [r.status for r in receiver.on("/ops")] == [500, 503, 429, 200], 20, "4")
        feed = SinkFeed(store, "ops", "test")
        wait_for(lambda: feed.status("webhook").delivered == 1, 5, "the ack")
        status = feed.status("webhook")
    requests = receiver.on("/ops")
    assert len({r.headers["idempotency-key"] for r in requests}) == 1
    assert len({r.body for r in requests}) == 1 and all(verify_signature(r) for r in requests)
    assert (status.retries, status.dead_letters, status.pending) == (3, 0, 0)


def test_a_refused_change_is_dead_lettered_at_once_and_the_next_one_still_flows(
    redis_url: str, receiver: Receiver
) -> None:
    receiver.statuses = [400]
    settings = settings_for(redis_url, {"ops": webhook(f"{receiver.url}/ops")})
    with notifier_running(settings) as store:
        record(store, "true")
        record(store, "false")
        record(store, "true")
        wait_for(lambda: len(receiver.on("/ops")) == 2, 20, "two requests")
        feed = SinkFeed(store, "ops", "test")
        wait_for(lambda: feed.status("webhook").delivered == 1, 5, "the ack")
        (dead,) = feed.dead_letters()
        status = feed.status("webhook")
    assert [r.status for r in receiver.on("/ops")] == [400, 200]
    assert [r.json()["data"]["to_verdict"] for r in receiver.on("/ops")] == ["false", "true"]
    assert (dead["from"], dead["to"]) == ("true", "false")
    assert "HTTP 400" in dead["error"] and dead["attempts"] == "1"
    assert (status.dead_letters, status.retries) == (1, 0)


def test_a_sink_that_keeps_failing_is_dead_lettered_after_the_bound_without_stalling_others(
    redis_url: str, receiver: Receiver
) -> None:
    receiver.statuses_by_path["/broken"] = [500] * 4
    sinks = {"broken": webhook(f"{receiver.url}/broken"), "fine": webhook(f"{receiver.url}/fine")}
    settings = settings_for(redis_url, sinks, notify_max_attempts=4)
    with notifier_running(settings) as store:
        record(store, "true")
        record(store, "false")
        wait_for(lambda: len(receiver.on("/fine")) == 1, 10, "the healthy sink")
        broken = SinkFeed(store, "broken", "test")
        wait_for(lambda: broken.status("webhook").dead_letters == 1, 20, "the dead letter")
        record(store, "true")
        wait_for(lambda: len(receiver.on("/broken")) == 5, 10, "the next change")
        wait_for(lambda: broken.status("webhook").delivered == 1, 5, "its ack")
    assert [r.status for r in receiver.on("/broken")] == [500, 500, 500, 500, 200]
    status = broken.status("webhook")
    assert (status.dead_letters, status.retries, status.delivered) == (1, 3, 1)


def test_a_flap_inside_the_minimum_duration_is_never_delivered_and_a_lasting_change_is(
    redis_url: str, receiver: Receiver
) -> None:
    sink = webhook(f"{receiver.url}/ops", min_duration_seconds=1.5)
    settings = settings_for(redis_url, {"ops": sink})
    with notifier_running(settings) as store:
        record(store, "true")
        record(store, "false")
        record(store, "true")  # back within a moment: a flap
        feed = SinkFeed(store, "ops", "test")
        wait_for(lambda: feed.status("webhook").filtered == 2, 10, "both judged")
        assert receiver.on("/ops") == []
        changed = time.time()
        record(store, "false")
        wait_for(lambda: len(receiver.on("/ops")) == 1, 10, "the lasting change")
        arrived = time.time()
    assert arrived - changed >= 1.4, "delivered before the minimum duration passed"
    data = receiver.on("/ops")[0].json()["data"]
    assert (data["from_verdict"], data["to_verdict"]) == ("true", "false")


def test_with_cannot_determine_off_only_the_real_change_is_heard(
    redis_url: str, receiver: Receiver
) -> None:
    sink = webhook(f"{receiver.url}/ops", cannot_determine=False)
    settings = settings_for(redis_url, {"ops": sink})
    with notifier_running(settings) as store:
        for verdict in ("true", "cannot_determine", "true", "cannot_determine", "false"):
            record(store, verdict)
        feed = SinkFeed(store, "ops", "test")
        wait_for(lambda: feed.status("webhook").pending == 0 and receiver.on("/ops"), 10, "all")
        wait_for(lambda: feed.status("webhook").filtered == 3, 5, "three unclear changes")
    (only,) = receiver.on("/ops")
    data = only.json()["data"]
    assert (data["from_verdict"], data["to_verdict"]) == ("true", "false")


def test_slack_gets_a_readable_message_with_a_link_to_the_run(
    redis_url: str, receiver: Receiver
) -> None:
    slack = {"type": "slack", "url": f"{receiver.url}/services/T000/B000/s3cr3tT0ken"}
    settings = settings_for(redis_url, {"chat": slack})
    with notifier_running(settings) as store:
        record(store, "true")
        request = record(store, "false", explanation="web-bad has 1 of 3 <ready> replicas")
        wait_for(lambda: receiver.on("/services/T000/B000/s3cr3tT0ken"), 10, "the message")
    (message,) = receiver.on("/services/T000/B000/s3cr3tT0ken")
    body = message.json()
    assert body["text"] == f"{request.check_id} on snapshot:prod-eu: true → false"
    rendered = "\n".join(
        block["text"]["text"] if "text" in block else block["elements"][0]["text"]
        for block in body["blocks"]
    )
    assert f"*{request.check_id}* on *snapshot:prod-eu*: true → false" in rendered
    assert PREDICATE in rendered
    assert "web-bad has 1 of 3 &lt;ready&gt; replicas" in rendered  # Slack's escaping
    assert f"<{LINK_BASE}/v1/runs/{request.run_id}|run {request.run_id}>" in rendered


def test_the_static_filter_acknowledges_other_checks_without_delivering(
    redis_url: str, receiver: Receiver
) -> None:
    sink = webhook(f"{receiver.url}/ops", targets=["snapshot:staging-*"], to_verdicts=["false"])
    settings = settings_for(redis_url, {"ops": sink})
    with notifier_running(settings) as store:
        for verdict in ("true", "false", "true"):
            record(store, verdict, path="examples/snapshots/prod-eu")
            record(store, verdict, path="examples/snapshots/staging-us")
        feed = SinkFeed(store, "ops", "test")
        wait_for(lambda: feed.status("webhook").filtered == 3, 10, "three filtered")
        wait_for(lambda: len(receiver.on("/ops")) == 1, 10, "one delivery")
    data = receiver.on("/ops")[0].json()["data"]
    assert (data["target"], data["to_verdict"]) == ("snapshot:staging-us", VerdictKind.FALSE.value)


def test_a_notifier_recovers_when_redis_lost_the_change_stream(
    redis_url: str, receiver: Receiver
) -> None:
    settings = settings_for(redis_url, {"ops": webhook(f"{receiver.url}/ops")})
    with notifier_running(settings) as store:
        store.client.delete(store.key("changes"))  # e.g. a Redis restarted without its AOF
        time.sleep(1.5)  # the next read finds no group
        record(store, "true")
        record(store, "false")
        wait_for(lambda: len(receiver.on("/ops")) == 1, 15, "the change after the loss")


def test_a_change_whose_run_cannot_be_read_is_dead_lettered_and_the_sink_goes_on(
    redis_url: str, receiver: Receiver
) -> None:
    settings = settings_for(redis_url, {"ops": webhook(f"{receiver.url}/ops")})
    store = VerdictStore.from_settings(settings)
    record(store, "true")
    with notifier_running(settings):
        pass  # the sink's group exists from now on
    poisoned = record(store, "false")
    store.client.hset(store.key("run", poisoned.run_id), "verdict", "{not json")
    record(store, "true")
    with notifier_running(settings):
        feed = SinkFeed(store, "ops", "test")
        wait_for(lambda: feed.status("webhook").dead_letters == 1, 15, "the dead letter")
        wait_for(lambda: len(receiver.on("/ops")) == 1, 15, "the next change")
    (dead,) = feed.dead_letters()
    assert dead["run_id"] == poisoned.run_id and "could not prepare" in dead["error"]
    assert receiver.on("/ops")[0].json()["data"]["to_verdict"] == "true"
