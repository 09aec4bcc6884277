"""Spend as people read it: the CLI, the Python client and the API show the same figures.

The spend store (workers/fleet/spend.py) records each period with the ceilings the
workers enforced at its last reservation. A period nobody spent in yet has no
record, and a schedule's ceiling may have changed since: these functions put the
ceiling in force next to what was spent, with the schedule's name, so
``assay spend``, ``assay schedule show``, ``assay batch status``, the API and the
``assay_spend_*`` gauges never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from schemas.spend import CeilingState, ScopeSpend, SpendCeiling, SpendReport
from workers.fleet.spend import batch_ceiling, schedule_ceiling, utc_day

if TYPE_CHECKING:
    from schemas.fleet import BatchStatus
    from schemas.schedule import Schedule
    from schemas.settings import AssaySettings
    from workers.fleet.spend import SpendStore


def with_ceiling(spend: ScopeSpend, ceiling: SpendCeiling | None, *, prefer: bool) -> ScopeSpend:
    """``spend`` showing ``ceiling``: always when ``prefer`` (it is the one in force, e.g. a
    schedule's own), else only when the record holds none (nothing was spent under it yet)."""
    if ceiling is None or (spend.ceilings and not prefer):
        return spend
    reached = spend.reached_at is not None
    states = []
    if ceiling.tokens is not None:
        states.append(
            CeilingState(
                resource="tokens",
                limit=ceiling.tokens,
                spent=spend.tokens,
                reserved=spend.reserved_tokens,
                remaining=max(0, ceiling.tokens - spend.tokens - spend.reserved_tokens),
                reached=reached or spend.tokens >= ceiling.tokens,
            )
        )
    if ceiling.cost_usd is not None:
        held = next((c.reserved for c in spend.ceilings if c.resource == "cost_usd"), 0.0)
        states.append(
            CeilingState(
                resource="cost_usd",
                limit=ceiling.cost_usd,
                spent=spend.cost_usd,
                reserved=held,
                remaining=max(0.0, ceiling.cost_usd - spend.cost_usd - held),
                reached=reached or spend.cost_usd >= ceiling.cost_usd,
            )
        )
    return spend.model_copy(update={"ceilings": states})


def schedule_today(
    schedule: Schedule, store: SpendStore, settings: AssaySettings, now: datetime | None = None
) -> ScopeSpend:
    """What ``schedule`` spent on the current UTC day, its ceilings and skipped fires."""
    day = utc_day(now or datetime.now(UTC))
    spend = store.schedule_day(schedule.id, day).model_copy(update={"name": schedule.name})
    if schedule.spend is not None:
        return with_ceiling(spend, schedule.spend, prefer=True)
    return with_ceiling(spend, schedule_ceiling(None, settings), prefer=False)


def batch_with_spend(
    status: BatchStatus, store: SpendStore, settings: AssaySettings
) -> BatchStatus:
    """The batch's tally with what its runs spent and its ceilings."""
    spend = store.batch_spend(status.batch_id)
    default = batch_ceiling(None, settings)
    if spend is None:
        if default is None:
            return status
        spend = ScopeSpend(scope="batch", scope_id=status.batch_id, period="total")
    return status.model_copy(update={"spend": with_ceiling(spend, default, prefer=False)})


def fleet_now(
    store: SpendStore, settings: AssaySettings, now: datetime | None = None
) -> list[ScopeSpend]:
    """The fleet's current UTC hour (token ceiling) and day (cost ceiling)."""
    hour, day = store.fleet_now(now)
    tokens = settings.spend_fleet_tokens_per_hour
    cost = settings.spend_fleet_cost_usd_per_day
    if tokens is not None:
        hour = with_ceiling(hour, SpendCeiling(tokens=tokens), prefer=False)
    if cost is not None:
        day = with_ceiling(day, SpendCeiling(cost_usd=cost), prefer=False)
    return [hour, day]


def spend_report(
    store: SpendStore,
    settings: AssaySettings,
    schedules: Iterable[Schedule],
    days: int,
    *,
    schedule_ref: str | None = None,
    now: datetime | None = None,
) -> SpendReport:
    """Spend by scope and UTC day over the last ``days`` days, newest first, with names.

    ``schedule_ref`` (an id or a name) keeps only that schedule's rows.
    """
    by_id = {s.id: s for s in schedules}
    rows = []
    for row in store.report(days, now):
        schedule = by_id.get(row.scope_id or "") if row.scope == "schedule" else None
        if schedule is not None:
            row = row.model_copy(update={"name": schedule.name})
        if schedule_ref is not None and (
            schedule is None or schedule_ref not in (schedule.id, schedule.name)
        ):
            continue
        rows.append(row)
    return SpendReport(rows=rows, fleet_now=fleet_now(store, settings, now))


def current_rows(
    store: SpendStore,
    settings: AssaySettings,
    schedules: Iterable[Schedule],
    batch_ids: Iterable[str],
    now: datetime | None = None,
) -> list[ScopeSpend]:
    """Every ceiling's current period, for the ``assay_spend_*`` gauges: the fleet's hour and
    day, each schedule's day, and the given batches' totals (those with a ceiling)."""
    rows = fleet_now(store, settings, now)
    for schedule in schedules:
        today = schedule_today(schedule, store, settings, now)
        if today.ceilings or today.skipped_fires:
            rows.append(today)
    for batch_id in batch_ids:
        spend = store.batch_spend(batch_id)
        if spend is not None:
            spend = with_ceiling(spend, batch_ceiling(None, settings), prefer=False)
            if spend.ceilings:
                rows.append(spend)
    return rows
