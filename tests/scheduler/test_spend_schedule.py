"""A schedule that fires every second under a daily spend ceiling, over a simulated day.

The scheduler replica runs in this process on its clock seam (``Replica(clock=...)``), so a
whole UTC day passes in seconds; its fires go to a real Celery worker process (real broker,
real redis-server, the scripted model over HTTP through litellm), whose model calls the spend
guard reserves and settles. The schedule spends until its ceiling stops a call, then every
fire of that day is skipped and counted; the next UTC day it fires again. The skips show in
the CLI, the API and the metrics.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from assay.testing.scripted_model import ScriptedModel
from scheduler.deferred import Enqueue
from scheduler.schedules import ScheduleStore
from scheduler.service import FleetSender, Replica
from schemas.budget import Budget
from schemas.schedule import Schedule, ScheduleTargets
from schemas.settings import load_settings
from schemas.spend import SpendCeiling
from schemas.verdict import VerdictKind
from tests.api_support import READ_TOKEN, TOKENS, auth
from tests.cli_support import run_cli
from tests.fleet_support import (
    NO_CONFIRMER_PROFILE,
    PREDICATE,
    make_snapshots,
    scripted_worker_env,
    start_worker,
    stop_process,
    three_step_script,
    wait_until,
    worker_log_tail,
)
from workers.fleet.redis_client import connect
from workers.fleet.spend import SpendStore, utc_day
from workers.fleet.store import VerdictStore

pytestmark = pytest.mark.integration

CEILING = 60_000  # tokens per UTC day: about five runs of the three-step script
DAY = 86_400


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now.timestamp()


class Recording:
    """The fleet's sender, remembering which fire each run was sent for."""

    def __init__(self, inner: FleetSender) -> None:
        self.inner = inner
        self.sent: list[tuple[str, datetime]] = []

    def send(self, message: Enqueue) -> None:
        self.inner.send(message)
        assert message.request.scheduled_at is not None
        self.sent.append((message.request.run_id, message.request.scheduled_at))


@pytest.mark.timeout(300)
def test_a_schedule_firing_every_second_keeps_to_its_daily_ceiling_over_a_simulated_day(
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = load_settings(redis_url=redis_url, min_interval_seconds=1, api_tokens=TOKENS)
    client = connect(redis_url)
    (folder,) = make_snapshots(tmp_path / "snaps", 1)
    # Day one is today (UTC), so `assay schedule show` and the API show it as "today".
    first_day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    schedules = ScheduleStore(client, settings.key_prefix, settings.min_interval_seconds)
    schedule = schedules.create(
        Schedule(
            name="every-second",
            predicate=PREDICATE,
            targets=ScheduleTargets(snapshots=[str(folder)]),
            interval_seconds=1,
            probe="off",
            profile=NO_CONFIRMER_PROFILE,
            budget=Budget(timeout_seconds=60),
            spend=SpendCeiling(tokens=CEILING),
        ),
        now=first_day - timedelta(seconds=1),  # fires on every whole second from midnight
    )
    clock = Clock(first_day - timedelta(seconds=1))
    log = tmp_path / "worker.log"
    with ScriptedModel(three_step_script()) as model:
        worker = start_worker(scripted_worker_env(redis_url, model.url), log, concurrency=8)
        sender = Recording(FleetSender(settings))
        replica = Replica(settings, client, sender, clock=clock)
        try:
            assert wait_until(lambda: " ready." in log.read_text(), timeout=60), worker_log_tail(
                log
            )

            def tick(to: datetime) -> None:
                clock.now = to
                replica.tick()

            # Day one, second by second (a fire every 50 ms of real time) until a fire is
            # skipped: the ceiling stopped a call.
            for second in range(2_000):
                tick(first_day + timedelta(seconds=second))
                if replica.stats.skipped_for_spend:
                    break
                wait_until(lambda: False, timeout=0.05)
            assert replica.stats.skipped_for_spend, "the ceiling was never reached"
            reached_at = second
            # The rest of day one in 15-minute strides: each tick covers 900 instants.
            for second in [*range(reached_at + 900, DAY - 1, 900), DAY - 1]:
                tick(first_day + timedelta(seconds=second))
            # Day two: the schedule fires again.
            for second in range(DAY, DAY + 3):
                tick(first_day + timedelta(seconds=second))
            store = VerdictStore.from_settings(settings, client)

            def all_recorded() -> bool:
                states = store.run_states([run_id for run_id, _ in sender.sent])
                return all(s is not None and s.status == "done" for s in states)

            assert wait_until(all_recorded, timeout=120), worker_log_tail(log)
        finally:
            stop_process(worker)
            sender.inner.close()

    spend = SpendStore.from_settings(settings, client)
    day_one = spend.schedule_day(schedule.id, utc_day(first_day))
    fired = [run_id for run_id, at in sender.sent if at < first_day + timedelta(days=1)]
    fired_day_two = [run_id for run_id, at in sender.sent if at >= first_day + timedelta(days=1)]
    with capsys.disabled():
        print(
            f"day one: {len(fired)} fires, {day_one.skipped_fires} skipped, {day_one.tokens} of "
            f"{CEILING} tokens, {day_one.refused} calls stopped"
        )
    assert day_one.tokens <= CEILING, "no overshoot: the scripted model keeps to its reservations"
    assert day_one.reserved_tokens == 0
    assert len(fired) + day_one.skipped_fires == DAY, "every instant fired or was skipped"
    assert replica.stats.skipped_for_spend == day_one.skipped_fires
    assert replica.stats.missed_instants == 0
    for run_id in fired:
        verdict = store.run_verdict(run_id)
        assert verdict is not None
        if verdict.budget_exhausted == "spend_ceiling":
            assert verdict.verdict == VerdictKind.CANNOT_DETERMINE
            assert f"schedule {schedule.id}'s token ceiling per UTC day" in (verdict.reason or "")
        else:
            assert verdict.verdict == VerdictKind.TRUE
    assert day_one.refused >= 1
    assert len(fired_day_two) == 3, "a new UTC day: the schedule fires again"
    day_two = [store.run_verdict(run_id) for run_id in fired_day_two]
    assert all(v is not None and v.verdict == VerdictKind.TRUE for v in day_two)

    skipped = day_one.skipped_fires
    # The CLI: `assay spend` and `assay schedule show`.
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    code, out, err = run_cli(capsys, "spend", "--schedule", "every-second", "--json")
    assert code == 0, err
    assert f'"skipped_fires": {skipped}' in out
    code, out, err = run_cli(capsys, "schedule", "show", "every-second")
    assert code == 0, err
    assert f"{skipped:,} fires skipped" in out and "60,000 tokens (reached)" in out
    # The API: the schedule, the spend report, and the gauge on /metrics.
    from assay.api import create_app

    with TestClient(create_app(settings)) as api:
        shown = api.get(f"/v1/schedules/{schedule.id}", headers=auth(READ_TOKEN)).json()
        assert shown["spend_today"]["skipped_fires"] == skipped
        report = api.get("/v1/spend?schedule=every-second", headers=auth(READ_TOKEN)).json()
        assert [r["skipped_fires"] for r in report["rows"]][-1] == skipped
        scraped = api.get("/metrics", headers=auth(READ_TOKEN)).text
    gauge = f'assay_spend_schedule_skipped_fires{{schedule_id="{schedule.id}"}} {float(skipped)}'
    assert gauge in scraped
    # The scheduler's own counter (this process ran the replica).
    counted = REGISTRY.get_sample_value(
        "assay_schedule_fires_skipped_total", {"schedule_id": schedule.id}
    )
    assert counted == skipped
