"""Spend-ceiling events reach the notifier's sinks: 80% and 100% of a ceiling, once each per
period, through the same delivery as verdict changes (signed CloudEvents for a webhook).

A real notifier replica (threads in this process), a recording HTTP receiver, a real
redis-server; the spend is charged through the spend guard's own Lua step, two UTC days of a
schedule's ceiling, with more spend after each threshold than it takes to cross it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from notifier.events import period_end, spend_alert, spend_headline
from schemas.notify import AlertmanagerSink
from schemas.spend import SPEND_EVENT_TYPE, SpendEventData
from tests.alerting_support import (
    Receiver,
    notifier_running,
    settings_for,
    verify_signature,
    wait_for,
    webhook,
)
from workers.fleet.notify_feed import spend_feed
from workers.fleet.redis_client import connect
from workers.fleet.spend import Scope, SpendStore

pytestmark = pytest.mark.integration

LEASE = 60_000


def _spend_a_day(spend: SpendStore, day: str) -> None:
    """Nine tenths of the ceiling settled over three calls (80% crossed at the third), then
    three calls the ceiling refuses (100% at the first): six chances to repeat an event."""
    scopes = [Scope("schedule", "sch-hook", day, default_tokens=10_000)]
    for call in range(3):
        assert spend.reserve(f"{day}-{call}", 3_000, -1, LEASE, scopes).status == "ok"
        spend.settle(f"{day}-{call}", 3_000, -1)
    for call in range(3):
        assert spend.reserve(f"{day}-x{call}", 3_000, -1, LEASE, scopes).status == "refused"


def test_the_80_and_100_percent_events_reach_a_webhook_once_each_per_period(
    redis_url: str, tmp_path: Path
) -> None:
    hook = Receiver().start()
    quiet = Receiver().start()
    settings = settings_for(
        redis_url,
        {"ops": webhook(f"{hook.url}/ops"), "muted": webhook(f"{quiet.url}/muted", spend=False)},
    )
    try:
        with notifier_running(settings) as store:
            wait_for(
                lambda: all(
                    spend_feed(store, sink, "probe").status("webhook").started
                    for sink in ("ops", "muted")
                ),
                10,
                "the sinks' spend groups",
            )
            spend = SpendStore(connect(redis_url), settings.key_prefix)
            for day in ("20300101", "20300102"):
                _spend_a_day(spend, day)
            wait_for(lambda: len(hook.on("/ops")) >= 4, 20, "four spend events")
            muted = spend_feed(store, "muted", "probe")
            wait_for(lambda: muted.status("webhook").filtered == 4, 20, "the muted sink's ack")
            time.sleep(1.0)  # a late duplicate would arrive now
    finally:
        hook.stop()
        quiet.stop()

    received = hook.on("/ops")
    assert len(received) == 4, [r.json()["data"] for r in received]
    events = [r.json() for r in received]
    assert all(e["type"] == SPEND_EVENT_TYPE for e in events)
    assert all(verify_signature(r) for r in received)
    assert len({r.headers["idempotency-key"] for r in received}) == 4
    seen = [(e["data"]["period"], e["data"]["threshold"]) for e in events]
    assert seen == [
        ("2030-01-01", 80),
        ("2030-01-01", 100),
        ("2030-01-02", 80),
        ("2030-01-02", 100),
    ]
    first = events[0]["data"]
    assert (first["scope"], first["scope_id"], first["resource"]) == (
        "schedule",
        "sch-hook",
        "tokens",
    )
    assert (first["spent"], first["limit"]) == (9_000, 10_000)
    assert events[0]["subject"] == "schedule sch-hook tokens per day"
    assert quiet.on("/muted") == [], "a sink with spend: false hears none of them"


def test_an_alertmanager_spend_alert_fires_until_its_period_rolls_over() -> None:
    event = SpendEventData(
        scope="fleet",
        period="2030-01-01T10",
        resource="tokens",
        threshold=100,
        spent=50_000,
        limit=50_000,
        at=datetime(2030, 1, 1, 10, 42, tzinfo=UTC),
    )
    sink = AlertmanagerSink(type="alertmanager", url="http://am:9093", labels={"team": "sre"})
    alert = spend_alert(sink, event)
    assert alert["labels"] == {
        "team": "sre",
        "alertname": "AssaySpendCeiling",
        "scope": "fleet",
        "scope_id": "",
        "resource": "tokens",
        "threshold": "100",
    }
    assert alert["endsAt"] == "2030-01-01T11:00:00Z"
    assert period_end(event.model_copy(update={"period": "2030-01-01"})) == datetime(
        2030, 1, 2, tzinfo=UTC
    )
    assert spend_headline(event) == (
        "fleet tokens per hour ceiling reached: 50,000 tokens of 50,000 tokens (2030-01-01T10)"
    )
