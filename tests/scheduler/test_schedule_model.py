"""One schedule model: the stored Schedule (schemas/schedule.py) is what the API's bodies,
the Schedule document `apply` reads and `get -o yaml` writes, and a change may set. A field
added to the schedule and forgotten by one door, or a bound that differs between them,
fails here."""

from __future__ import annotations

from datetime import UTC, datetime

from assay.api_models import ScheduleCreate, ScheduleUpdate
from assay.apply import schedule_document
from schemas.budget import Budget
from schemas.declarative import SCHEDULE_SPEC_FIELDS, ScheduleDocument, schedule_fields
from schemas.schedule import CHANGEABLE_FIELDS, MANAGED_FIELDS, Schedule, ScheduleTargets
from schemas.spend import SpendCeiling

# Set by the person, beside the fields a change sets: paused or not.
PERSON_SET = CHANGEABLE_FIELDS | {"enabled"}


def _everything_set() -> Schedule:
    """A schedule with every field a person sets away from its default."""
    return Schedule(
        name="nightly",
        predicate="no pod in namespace prod runs as root",
        kind="query",
        targets=ScheduleTargets(contexts=["prod-eu", "prod-us"]),
        cron="0 2 * * *",
        timezone="Europe/Berlin",
        profile="fast",
        budget=Budget(max_iterations=9, max_tokens=20_000, timeout_seconds=90),
        model="openai/gpt-4o-mini",
        probe="off",
        spend=SpendCeiling(tokens=50_000, cost_usd=2.5),
        enabled=False,
        misfire="run_once",
        jitter_seconds=45,
        notify=["pager"],
        labels={"team": "platform"},
        created_at=datetime(2030, 1, 1, tzinfo=UTC),
        updated_at=datetime(2030, 1, 1, tzinfo=UTC),
    )


def test_every_field_a_person_sets_is_in_each_door() -> None:
    assert set(Schedule.model_fields) == PERSON_SET | MANAGED_FIELDS
    assert set(ScheduleCreate.model_fields) == PERSON_SET - {"labels"}
    assert set(ScheduleUpdate.model_fields) == CHANGEABLE_FIELDS - {"labels"}
    declared = {f.schedule for f in SCHEDULE_SPEC_FIELDS} | {"name", "predicate", "labels"}
    assert declared == PERSON_SET


def test_a_schedule_survives_get_then_apply_field_for_field() -> None:
    """`get -o yaml` writes a document; apply reads it back into the same schedule."""
    schedule = _everything_set()
    document = ScheduleDocument.model_validate(schedule_document(schedule))
    assert document.spec.jitter == "45s" and document.spec.time_zone == "Europe/Berlin"
    back = {
        **schedule_fields(document.spec),
        "name": document.metadata.name,
        "predicate": document.spec.predicate,
        "labels": document.metadata.labels,
    }
    for name in PERSON_SET:
        assert back[name] == getattr(schedule, name), name


def test_the_bodies_bounds_are_the_schedules() -> None:
    """Name, predicate, cron, time zone, jitter and notify routes have one rule each."""
    stored = Schedule.model_json_schema()["properties"]
    create = ScheduleCreate.model_json_schema()["properties"]
    for name in ("name", "predicate", "timezone", "jitter_seconds", "notify", "cron"):
        assert create[name] == stored[name], name
