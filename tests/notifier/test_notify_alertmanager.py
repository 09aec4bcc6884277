"""The Alertmanager sink: which state each verdict history means, and against a real
Alertmanager that alerts are re-sent so they never expire while a check stays false,
that a check false from its first verdict fires too, and `assay notify test`."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from notifier.alertmanager import alert_state, build_alert
from schemas.fleet import CheckSummary
from schemas.notify import AlertmanagerSink
from schemas.verdict import EXIT_CODES, VerdictKind
from tests.alerting_support import (
    Alertmanager,
    Receiver,
    notifications,
    notifier_running,
    record,
    settings_for,
    wait_for,
)
from tests.fleet_support import ROOT

T, F = VerdictKind.TRUE, VerdictKind.FALSE
CD, PP = VerdictKind.CANNOT_DETERMINE, VerdictKind.POORLY_POSED
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def summary(verdict: VerdictKind, previous: VerdictKind | None = None) -> CheckSummary:
    return CheckSummary(
        check_id="prod-replicas",
        kind="check",
        text="every Deployment is ready",
        target="prod-eu",
        verdict=verdict,
        exit_code=EXIT_CODES[verdict],
        run_id="r9",
        finished_at=NOW - timedelta(minutes=1),
        changed_at=NOW - timedelta(minutes=1) if previous else None,
        previous_verdict=previous,
    )


@pytest.mark.parametrize(
    ("verdict", "previous", "with_cd", "state"),
    [
        (F, T, False, "firing"),
        (F, None, False, "firing"),  # false from the first verdict
        (T, F, False, "resolved"),
        (CD, T, False, None),  # unclear, was fine: nothing to say
        (CD, F, False, "firing"),  # unclear right after false: no evidence it is fixed
        (PP, F, False, "firing"),
        (CD, T, True, "firing"),  # asked to fire on cannot_determine
        (PP, CD, True, "firing"),
        (PP, T, True, None),
        (T, CD, True, "resolved"),
    ],
)
def test_alert_state_fires_on_false_and_resolves_only_on_true(
    verdict: VerdictKind, previous: VerdictKind | None, with_cd: bool, state: str | None
) -> None:
    assert alert_state(summary(verdict, previous), with_cd) == state


def test_an_alert_is_labelled_by_the_check_and_ends_four_resends_ahead() -> None:
    config = AlertmanagerSink(
        type="alertmanager",
        url="http://am:9093",
        resend_seconds=30,
        labels={"severity": "page", "check_id": "cannot-override"},
    )
    firing = build_alert(config, summary(F, T), None, "firing", NOW, "https://a/v1/runs/r9")
    assert firing["labels"] == {
        "severity": "page",
        "alertname": "AssayCheckFailed",
        "check_id": "prod-replicas",
        "target": "prod-eu",
    }
    assert firing["endsAt"] == "2026-03-01T12:02:00Z"
    assert firing["startsAt"] == "2026-03-01T11:59:00Z"
    assert firing["generatorURL"] == "https://a/v1/runs/r9"
    resolved = build_alert(config, summary(T, F), None, "resolved", NOW, None)
    assert resolved["endsAt"] == "2026-03-01T12:00:00Z" and "generatorURL" not in resolved


@pytest.fixture
def am_hook() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture
def alertmanager(tmp_path: Path, am_hook: Receiver) -> Iterator[Alertmanager]:
    manager = Alertmanager(tmp_path / "alertmanager", f"{am_hook.url}/alertmanager").start()
    yield manager
    manager.stop()


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_firing_alerts_are_resent_so_they_outlive_their_end_and_resolve_on_true(
    redis_url: str, alertmanager: Alertmanager, am_hook: Receiver
) -> None:
    sink = {"type": "alertmanager", "url": alertmanager.url, "resend_seconds": 1}
    with notifier_running(settings_for(redis_url, {"pager": sink})) as store:
        request = record(store, "false")  # false from its very first verdict: no change event
        check_id = request.check_id
        wait_for(lambda: alertmanager.alerts(check_id) != [], 10, "the resend to fire it")
        first_end = alertmanager.alerts(check_id)[0]["endsAt"]
        wait_for(
            lambda: datetime.now(UTC) > datetime.fromisoformat(first_end) + timedelta(seconds=2),
            15,
            "the first endsAt to pass",
        )
        (alert,) = alertmanager.alerts(check_id)
        assert alert["status"]["state"] == "active", "the alert expired while still false"
        assert alert["endsAt"] > first_end
        record(store, "true")
        wait_for(lambda: alertmanager.alerts(check_id) == [], 10, "the resolve")
        wait_for(lambda: notifications(am_hook, check_id) == ["firing", "resolved"], 10, "both")


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_cannot_determine_fires_only_when_asked(redis_url: str, alertmanager: Alertmanager) -> None:
    sinks = {
        "strict": {
            "type": "alertmanager",
            "url": alertmanager.url,
            "cannot_determine": True,
            "alertname": "Strict",
        },
        "lenient": {"type": "alertmanager", "url": alertmanager.url, "alertname": "Lenient"},
    }
    with notifier_running(settings_for(redis_url, sinks)) as store:
        check_id = record(store, "true").check_id
        record(store, "cannot_determine")

        def names() -> set[str]:
            return {a["labels"]["alertname"] for a in alertmanager.alerts(check_id)}

        wait_for(lambda: names() == {"Strict"}, 10, "the strict sink's alert")
        record(store, "true")
        wait_for(lambda: names() == set(), 10, "the resolve")


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_notify_test_posts_a_sample_alert(redis_url: str, alertmanager: Alertmanager) -> None:
    import json
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env["ASSAY_NOTIFY_SINKS"] = json.dumps(
        {"pager": {"type": "alertmanager", "url": alertmanager.url}}
    )
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "assay.cli", "notify", "test", "pager"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "resolves by itself in 4 minutes" in result.stdout
    (alert,) = alertmanager.alerts("assay-notify-test")
    assert alert["labels"]["target"] == "sample"


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_check_that_cannot_be_read_does_not_hold_up_other_alerts(
    redis_url: str, alertmanager: Alertmanager
) -> None:
    sink = {"type": "alertmanager", "url": alertmanager.url, "resend_seconds": 1}
    settings = settings_for(redis_url, {"pager": sink})
    with notifier_running(settings) as store:
        broken = record(store, "false", path="examples/snapshots/broken")
        store.client.hset(store.key("check", broken.check_id), "verdict", "{not json")
        time.sleep(1.5)  # a resend has tripped over it
        healthy = record(store, "true", path="examples/snapshots/healthy").check_id
        record(store, "false", path="examples/snapshots/healthy")
        wait_for(lambda: alertmanager.alerts(healthy) != [], 15, "the healthy check's alert")
