"""The engine's spend guard on the fleet: every model call reserved, waited for, settled.

:class:`FleetSpendGuard` implements ``workers.engine.spend_guard.SpendGuard`` over the
spend store's Lua steps (workers/fleet/spend.py). Each call is charged to the fleet's
UTC hour and day, and to its run's schedule day and batch when it has them; the
ceilings come from the settings (the fleet's own, and the defaults of schedules and
batches that set none) and from the store (those that set their own).

* **reserve** is on the call's path: one round trip. When only other calls'
  reservations stand in the way it waits (polling, 50 ms doubling to 0.5 s) within
  the run's deadline; when the ceiling is reached it raises ``SpendRefused`` naming it.
* **settle** is not: a background thread per worker process takes settlements off a
  queue and sends whatever has gathered in one pipelined round trip, so a busy worker
  settles many calls at once and a run never waits for it. A settlement that never
  reaches Redis (the process is killed, Redis is away) leaves its reservation to run
  out and be charged in full: the guard errs high, never low. :meth:`flush` waits for
  the queue (the worker calls it when it shuts down; tests that read figures too).
"""

from __future__ import annotations

import functools
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from schemas.spend import dollars
from workers.engine.metrics import observe_spend, observe_spend_refusal
from workers.engine.spend_guard import SpendRefused
from workers.fleet.spend import (
    HOUR_RECORD_TTL_SECONDS,
    MICRO,
    Scope,
    SpendStore,
    ceiling_cost,
    day_start,
    micro_usd,
    utc_day,
)

if TYPE_CHECKING:
    import redis

    from schemas.request import EvaluationRequest
    from schemas.settings import AssaySettings

_log = structlog.get_logger(__name__)

LONGEST_LEASE_SECONDS = 6 * 3600.0  # a run without a deadline still gets a finite lease
WAIT_POLL_SECONDS = 0.05
WAIT_POLL_MAX_SECONDS = 0.5
SETTLE_BATCH = 256  # settlements sent in one round trip at most


@dataclass(frozen=True)
class Ticket:
    """One reservation, for :meth:`FleetSpendGuard.settle`."""

    reservation_id: str
    schedule_id: str | None
    tokens: int


_WHAT = {"tokens": "token", "cost": "cost"}


def ceiling_words(ceiling: str, resource: str) -> str:
    """``the fleet's token ceiling per UTC hour (2030-01-01T10)``: a ceiling as a reason
    names it (``ceiling`` is the store's ``kind:id:period``)."""
    kind, scope_id, period = [*ceiling.split(":", 2), "", ""][:3]
    what = _WHAT.get(resource, resource)
    if kind == "fleet-hour":
        return f"the fleet's {what} ceiling per UTC hour ({period})"
    if kind == "fleet-day":
        return f"the fleet's {what} ceiling per UTC day ({period})"
    if kind == "schedule":
        return f"schedule {scope_id}'s {what} ceiling per UTC day ({period})"
    return f"batch {scope_id}'s {what} ceiling"


def _amount(resource: str, value: int) -> str:
    return dollars(value / MICRO) if resource == "cost" else f"{value:,} tokens"


class FleetSpendGuard:
    """Ceilings over many runs, shared by every worker on one Redis (see the module doc)."""

    def __init__(
        self,
        settings: AssaySettings,
        store: SpendStore,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.store = store
        self._sleep = sleep
        self._clock = clock
        self._fleet_hour = Scope(
            "fleet-hour",
            default_tokens=settings.spend_fleet_tokens_per_hour or 0,
            ttl_seconds=HOUR_RECORD_TTL_SECONDS,
        )
        self._fleet_day = Scope(
            "fleet-day", default_cost_micro=ceiling_cost(settings.spend_fleet_cost_usd_per_day)
        )
        self._schedule_defaults = (
            settings.spend_schedule_tokens_per_day or 0,
            ceiling_cost(settings.spend_schedule_cost_usd_per_day),
        )
        self._batch_defaults = (
            settings.spend_batch_tokens or 0,
            ceiling_cost(settings.spend_batch_cost_usd),
        )
        self._settlements: queue.Queue[tuple[str, int, int]] = queue.Queue()
        self._settler: threading.Thread | None = None
        self._settler_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: AssaySettings, client: redis.Redis) -> FleetSpendGuard:
        return cls(settings, SpendStore.from_settings(settings, client))

    def scopes(self, request: EvaluationRequest) -> list[Scope]:
        """The ceilings a call of ``request`` is charged to."""
        return self._scopes(request.schedule_id, request.scheduled_at, request.batch_id)

    @functools.lru_cache(maxsize=1024)  # noqa: B019 - one guard per worker process
    def _scopes(
        self, schedule_id: str | None, scheduled_at: datetime | None, batch_id: str | None
    ) -> list[Scope]:
        """Every call of a run has the same scopes: worked out once (per run, roughly)."""
        scopes = [self._fleet_hour, self._fleet_day]
        if schedule_id:
            day, start = "", 0
            if scheduled_at is not None:
                day, start = utc_day(scheduled_at), day_start(scheduled_at)
            tokens, cost = self._schedule_defaults
            scopes.append(Scope("schedule", schedule_id, day, tokens, cost, start=start))
        if batch_id:
            tokens, cost = self._batch_defaults
            scopes.append(Scope("batch", batch_id, "", tokens, cost, self.settings.run_ttl_seconds))
        return scopes

    # --- before a call ---------------------------------------------------------------------
    def reserve(
        self, request: EvaluationRequest, tokens: int, cost_usd: float | None, deadline: float
    ) -> Ticket:
        reservation_id = uuid.uuid4().hex
        cost = micro_usd(cost_usd)
        scopes = self.scopes(request)
        pause = WAIT_POLL_SECONDS
        while True:
            lease = min(max(deadline - self._clock(), 0.0), LONGEST_LEASE_SECONDS)
            lease_ms = int((lease + self.settings.spend_lease_margin_seconds) * 1000)
            answer = self.store.reserve(
                reservation_id, tokens, cost, lease_ms, scopes, run_id=request.run_id
            )
            if answer.status == "ok":
                return Ticket(reservation_id, request.schedule_id, tokens)
            words = ceiling_words(answer.ceiling, answer.resource)
            resource = answer.resource
            if answer.status == "refused":
                observe_spend_refusal(answer.ceiling.split(":", 1)[0], resource)
                needs = cost if resource == "cost" else tokens
                raise SpendRefused(
                    f"{words} is reached: {_amount(resource, answer.spent)} of "
                    f"{_amount(resource, answer.limit)} spent, and the next model call needs "
                    f"up to {_amount(resource, needs)}",
                    answer.ceiling,
                )
            if self._clock() + pause >= deadline:
                raise SpendRefused(
                    f"{words} had no room before the run's deadline: "
                    f"{_amount(resource, answer.spent)} spent and "
                    f"{_amount(resource, answer.reserved)} held by calls in flight, of "
                    f"{_amount(resource, answer.limit)}",
                    answer.ceiling,
                )
            self._sleep(pause)
            pause = min(pause * 2, WAIT_POLL_MAX_SECONDS)

    # --- after it ----------------------------------------------------------------------------
    def settle(self, reservation: Any, tokens: int, cost_usd: float | None) -> None:
        """Queue the call's settlement; the settler thread sends it (never raises)."""
        ticket: Ticket = reservation
        observe_spend(ticket.schedule_id, tokens, cost_usd)
        self._settlements.put((ticket.reservation_id, tokens, micro_usd(cost_usd)))
        if self._settler is None:
            self._start_settler()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued settlement has been sent (False: still some after
        ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while self._settlements.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def _start_settler(self) -> None:
        with self._settler_lock:
            if self._settler is None:
                self._settler = threading.Thread(
                    target=self._settle_forever, name="assay-spend-settler", daemon=True
                )
                self._settler.start()

    def _settle_forever(self) -> None:
        while True:
            batch = [self._settlements.get()]
            while len(batch) < SETTLE_BATCH:
                try:
                    batch.append(self._settlements.get_nowait())
                except queue.Empty:
                    break
            try:
                self.store.settle_many(batch)
            except Exception as exc:  # their leases run out and charge the estimates: errs high
                _log.warning("spend_settle_failed", settlements=len(batch), error=repr(exc))
            finally:
                for _ in batch:
                    self._settlements.task_done()
