"""Spend ceilings: how many tokens and dollars a schedule, a batch or the fleet may spend.

A run's own budget (schemas/budget.py) bounds one run. These bound many: a
schedule per UTC day, a batch in total, the whole fleet per UTC hour (tokens)
and per UTC day (cost). The fleet enforces them before every model call
(workers/fleet/spend.py); these models are what a person sets and reads.

Periods are UTC, by design: one clock for the whole fleet, no 23- or 25-hour
days at a DST change, and `assay spend` rows that line up across schedules in
different zones. A schedule's day is the UTC day of the instant it fired for
(``EvaluationRequest.scheduled_at``), so a fire at 23:59:59 and its model calls a
few seconds later count toward the same day.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    field_validator,
    model_validator,
)

from schemas.numbers import integral

# Beyond these a ceiling is a typo, not a limit: a trillion tokens is thousands of times what
# a large fleet spends in a day, and ten million dollars no budget line holds for one check.
MAX_CEILING_TOKENS = 1_000_000_000_000
MAX_CEILING_COST_USD = 10_000_000.0
# Below this no planner call fits (a prompt and a useful completion): a ceiling that could
# never admit one call is refused as a mistake rather than stopping every run.
MIN_CEILING_TOKENS = 1_000
# The fleet counts cost in millionths of a dollar (workers/fleet/spend.py). A smaller ceiling
# has no count to be kept as: 1e-15 was stored as 0, which the fleet reads as "no ceiling",
# the opposite of what was asked. So it is refused, at every door.
MIN_CEILING_COST_USD = 0.000001

Resource = Literal["tokens", "cost_usd"]
ScopeKind = Literal["fleet", "schedule", "batch"]
Threshold = Literal[80, 100]

SPEND_EVENT_TYPE = "assay.spend.threshold"


def _one_ceiling_set(schema: dict[str, Any]) -> None:
    """Publish "tokens, cost_usd or both" (``_something_set``): ``{}`` or only nulls is no
    ceiling, and the server refuses it (a null is accepted beside a value: it sets nothing)."""
    schema["minProperties"] = 1
    schema["anyOf"] = [
        {"required": ["tokens"], "properties": {"tokens": {"type": "integer"}}},
        {"required": ["cost_usd"], "properties": {"cost_usd": {"type": "number"}}},
    ]


class SpendCeiling(BaseModel):
    """Ceilings on tokens and on cost for one scope; a field left out sets no ceiling on it.

    For a schedule both are per UTC day; for a batch, in total over all its runs. At least
    one of the two is set.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_ceiling_set)

    # Strict: a number, never the text "5000" (a number parsed out of text is the CLI's
    # job, schemas/numbers.py; JSON bodies and apply documents carry numbers).
    tokens: StrictInt | None = Field(
        default=None,
        ge=MIN_CEILING_TOKENS,
        le=MAX_CEILING_TOKENS,
        description=f"Most tokens (prompt + completion) in the period, {MIN_CEILING_TOKENS:,} "
        f"to {MAX_CEILING_TOKENS:,}.",
    )
    cost_usd: StrictFloat | None = Field(
        default=None,
        ge=MIN_CEILING_COST_USD,
        le=MAX_CEILING_COST_USD,
        description="Most US dollars in the period, 0.000001 (the millionth of a dollar the "
        "fleet counts in) to 10,000,000; counted only for models whose price litellm knows.",
    )

    @field_validator("tokens", mode="before")
    @classmethod
    def _whole_number(cls, value: object) -> object:
        """A token ceiling is a count: ``true`` or ``2.5`` are mistakes, not 1 and 2
        (``5000.0`` is 5000, as JSON Schema's ``integer`` says)."""
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("a token ceiling must be a whole number of tokens")
        return integral(value)

    @field_validator("cost_usd", mode="before")
    @classmethod
    def _finite(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("a cost ceiling must be a number of US dollars")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("a cost ceiling must be a finite number of US dollars")
        return value

    @model_validator(mode="after")
    def _something_set(self) -> SpendCeiling:
        if self.tokens is None and self.cost_usd is None:
            raise ValueError("a spend ceiling needs tokens, cost_usd or both")
        return self

    def describe(self, per: str) -> str:
        """``50,000 tokens / $2.00 per UTC day``: how the CLI shows it."""
        parts = []
        if self.tokens is not None:
            parts.append(f"{self.tokens:,} tokens")
        if self.cost_usd is not None:
            parts.append(dollars(self.cost_usd))
        return " / ".join(parts) + f" {per}"


def dollars(amount: float) -> str:
    """``$2.50``; an amount under a cent with the digits that make it (``$0.000001``), not
    ``$0.00``, which reads as no money at all."""
    if amount == 0 or abs(amount) >= 0.01:
        return f"${amount:,.2f}"
    return f"${amount:.6f}".rstrip("0")


class CeilingState(BaseModel):
    """One ceiling in one period: what it allows, what was spent, what is left."""

    model_config = ConfigDict(extra="forbid")

    resource: Resource
    limit: float
    spent: float = Field(
        description="Settled spend, plus the reservations of calls whose "
        "worker stopped (charged in full when their lease ran out)."
    )
    reserved: float = Field(description="Held by model calls in flight right now.")
    remaining: float = Field(description="limit - spent - reserved, never below 0.")
    reached: bool = Field(
        description="The ceiling stopped a call in this period, or spent reached it."
    )


class ScopeSpend(BaseModel):
    """What one scope spent in one period (``assay spend``, `GET /v1/spend`)."""

    model_config = ConfigDict(extra="forbid")

    scope: ScopeKind
    scope_id: str | None = Field(default=None, description="Schedule or batch id.")
    name: str | None = Field(default=None, description="A schedule's name, when known.")
    period: str = Field(
        description="UTC day YYYY-MM-DD, UTC hour YYYY-MM-DDTHH (the fleet's token ceiling), "
        "or 'total' (a batch)."
    )
    tokens: int = 0
    cost_usd: float = Field(default=0.0, description="Of the calls whose price is known.")
    unpriced_calls: int = Field(default=0, description="Calls to models without a known price.")
    calls: int = Field(default=0, description="Model calls admitted.")
    refused: int = Field(default=0, description="Model calls a ceiling stopped.")
    expired: int = Field(
        default=0,
        description="Reservations whose worker stopped mid-call, charged in full when their "
        "lease ran out.",
    )
    expired_tokens: int = Field(default=0, description="The tokens those were charged.")
    skipped_fires: int = Field(default=0, description="Schedule fires skipped (schedules).")
    reserved_tokens: int = 0
    ceilings: list[CeilingState] = Field(default_factory=list)
    reached_at: datetime | None = Field(
        default=None, description="When a ceiling of this period first stopped a call."
    )


class SpendReport(BaseModel):
    """Spend by scope and period, newest first, and the fleet's ceilings now."""

    model_config = ConfigDict(extra="forbid")

    rows: list[ScopeSpend]
    fleet_now: list[ScopeSpend] = Field(
        default_factory=list,
        description="The fleet's current hour and day, with their ceilings.",
    )


class SpendEventData(BaseModel):
    """The ``data`` of an ``assay.spend.threshold`` CloudEvent: a ceiling at 80% or 100%."""

    model_config = ConfigDict(extra="forbid")

    scope: ScopeKind
    scope_id: str | None = None
    period: str
    resource: Resource
    threshold: Threshold = Field(
        description="80: spend reached 80% of the ceiling. 100: the ceiling is reached (it "
        "stopped a model call, or spend reached it)."
    )
    spent: float
    limit: float
    at: datetime

    def ceiling_name(self) -> str:
        """``fleet tokens per hour``, ``schedule sch-1 cost per day``: for people."""
        per = {
            "fleet": "per hour" if self.resource == "tokens" else "per day",
            "schedule": "per day",
            "batch": "in total",
        }[self.scope]
        what = "tokens" if self.resource == "tokens" else "cost"
        owner = self.scope if self.scope_id is None else f"{self.scope} {self.scope_id}"
        return f"{owner} {what} {per}"
