"""Budgets and the profiles that set their defaults.

A budget field left ``None`` in a request takes the profile's number; the
resolved budget is what the engine enforces and what the run report records.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ProfileName = Literal["smoke", "fast", "strict"]
UNATTENDED_PROFILE: ProfileName = "strict"
"""The profile of a schedule or a batch that names none. They run unattended and feed alerts
and gates, so a `true` there rests on a structured field and a fresh-context confirmation:
against planted cluster text an obeying model ends 14 of 18 runs `true` under `fast` and 0
under `strict`, and with probes only the run that compiles (or re-validates) one pays the
confirmation call (bench/bench_strict_default.py)."""


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_iterations: int | None = Field(default=None, ge=1, le=200)
    max_tokens: int | None = Field(default=None, ge=100, le=10_000_000)
    timeout_seconds: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    max_cost_usd: float | None = Field(default=None, gt=0)


class Profile(BaseModel):
    """Default budget plus the gates a profile applies to verdicts.

    Every profile has the engine verify evidence (a true or false cites a successful
    lookup of this run, and every excerpt occurs in what that lookup returned);
    ``strict`` adds the structured-field rule and the fresh-context confirmation.
    """

    model_config = ConfigDict(extra="forbid")

    name: ProfileName
    budget: Budget
    confirm_true: bool = Field(
        description="A check's true must rest on a structured field of a get/describe output "
        "and be confirmed by a separate model call in a fresh context."
    )


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        name="smoke",
        budget=Budget(max_iterations=4, max_tokens=20_000, timeout_seconds=60),
        confirm_true=False,
    ),
    "fast": Profile(
        name="fast",
        budget=Budget(max_iterations=12, max_tokens=120_000, timeout_seconds=300),
        confirm_true=False,
    ),
    "strict": Profile(
        name="strict",
        budget=Budget(max_iterations=25, max_tokens=400_000, timeout_seconds=900),
        confirm_true=True,
    ),
}


def resolve_budget(profile: str, budget: Budget) -> Budget:
    """The budget to enforce: the request's numbers over the profile's defaults."""
    base = PROFILES[profile].budget
    return Budget(
        max_iterations=budget.max_iterations or base.max_iterations,
        max_tokens=budget.max_tokens or base.max_tokens,
        timeout_seconds=budget.timeout_seconds or base.timeout_seconds,
        max_cost_usd=budget.max_cost_usd or base.max_cost_usd,
    )
