"""The engine's seam to ceilings shared by many runs (a schedule's day, a batch, the fleet).

A run's own budget is the engine's business (workers/engine/budget_meter.py). A
ceiling over many runs is not: it lives where all the runs meet (Redis, on the
fleet: workers/fleet/spend.py), so the engine only sees this small protocol,
injected through ``EngineDeps.spend_guard``, and stays free of Redis:

1. before every model call (planner steps, repair turns, strict's confirmation)
   the engine asks :meth:`SpendGuard.reserve` for the call's estimate: the
   prompt it counted (padded) plus the completion's ``max_tokens``, and its cost
   when the model's price is known. The guard returns a reservation, waits while
   other calls' reservations hold the room, or raises :class:`SpendRefused`
   naming the ceiling that stops it; the run then ends ``cannot_determine`` with
   ``budget_exhausted="spend_ceiling"``;
2. each retry the model client makes of a call reserves the same estimate before it is
   sent (workers/engine/llm.py ``AttemptObserver``): a retry a ceiling stops is not sent;
3. after each attempt the engine calls :meth:`SpendGuard.settle` with what the call
   really used (the figures it charged its own budget, sanitized); for an attempt that
   failed, with its whole estimate when the provider may have billed it (a timeout, a
   connection dropped after the request left, a 5xx), zero when it refused it unbilled
   (a connection never opened, a 4xx, a 429).

A run that never settles (its worker was killed mid-call) is the guard's to
clean up: its reservation has a lease.
"""

from __future__ import annotations

from typing import Protocol

from schemas.request import EvaluationRequest

BUDGET_KIND = "spend_ceiling"  # Verdict.budget_exhausted of a run a ceiling stopped


class SpendRefused(Exception):
    """A spend ceiling stops this model call; ``message`` names the ceiling, in words."""

    def __init__(self, message: str, ceiling: str) -> None:
        super().__init__(message)
        self.message = message
        self.ceiling = ceiling


class Reservation(Protocol):
    """What :meth:`SpendGuard.reserve` hands back; the engine only passes it to ``settle``."""


class SpendGuard(Protocol):
    """Ceilings over many runs, checked before every model call and settled after it."""

    def reserve(
        self, request: EvaluationRequest, tokens: int, cost_usd: float | None, deadline: float
    ) -> Reservation:
        """Hold ``tokens`` (and ``cost_usd``, None when the price is unknown) for one call.

        ``deadline`` is the run's ``time.monotonic()`` deadline: the guard waits for room no
        longer than that. Raises :class:`SpendRefused` when a ceiling stops the call.
        """
        ...

    def settle(self, reservation: Reservation, tokens: int, cost_usd: float | None) -> None:
        """Replace the call's reservation by what it used; never raises."""
        ...
