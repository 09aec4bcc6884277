"""The probe mode travels: schedule fires and requests carry it; bad values are refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from scheduler.fires import build_requests
from schemas.request import EvaluationRequest, SnapshotTarget
from schemas.schedule import Schedule, ScheduleTargets


def test_every_fire_of_a_schedule_carries_its_probe_mode() -> None:
    schedule = Schedule(
        name="ready",
        predicate="every Deployment in prod is ready",
        targets=ScheduleTargets(snapshots=["examples/snapshots/prod-eu"]),
        interval_seconds=900,
        probe="only",
    )
    targets = [SnapshotTarget(path="examples/snapshots/prod-eu")]
    (request,) = build_requests(schedule, datetime(2026, 6, 1, tzinfo=UTC), targets)
    assert request.probe == "only"
    default = schedule.model_copy(update={"probe": "auto"})
    assert build_requests(default, datetime(2026, 6, 1, tzinfo=UTC), targets)[0].probe == "auto"


def test_requests_default_to_auto_and_refuse_unknown_modes() -> None:
    target = SnapshotTarget(path="examples/snapshots/prod-eu")
    assert EvaluationRequest(text="x is y", target=target).probe == "auto"
    with pytest.raises(ValidationError):
        EvaluationRequest.model_validate({"text": "x", "target": target, "probe": "sometimes"})
