"""Budget enforcement for one run: iterations, total tokens, wall-clock deadline, cost.

Budgets are enforced before each model call, not reported after it: the meter
takes an upper bound on the prompt (workers/engine/prompt_tally.py), subtracts it from
what is left, and caps the completion's ``max_tokens`` (and, when the price is known,
the cost) so the provider's own usage figures can never add up past the budget. When
too little is left for a useful answer the call is refused with
:class:`BudgetExhausted`, naming which budget ran out, and the run ends as
cannot_determine.

The cheap bound needs no tokenizer but runs high; near the budget, where it would cap
the completion short or refuse the call, the meter asks for the model's tokenizer count
(workers/engine/tokenizer_count.py) and uses the smaller of the two.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from schemas.budget import Budget
from schemas.verdict import Usage

# Below this many completion tokens a model cannot even emit a `done` call.
MIN_USEFUL_COMPLETION_TOKENS = 64
# Upper bound on one completion; a planner step never needs more.
MAX_COMPLETION_TOKENS = 4096
# Room above the prompt estimate for a provider's tokenizer counting a little higher than the
# one counted with, and for what a chat template adds around a request (the preamble it writes
# before the tool definitions).
PROMPT_SAFETY_FACTOR = 1.10
PROMPT_SAFETY_TOKENS = 16
# A model call with less time than this left cannot finish; do not start it.
MIN_CALL_SECONDS = 0.2
# More than this for one call is not a real figure (no budget allows it, Budget.max_tokens
# stops at 10M): it is charged as this much, which still ends any run's token budget.
ABSURD_TOKENS_PER_CALL = 10_000_000


def padded_prompt(prompt_tokens: int) -> int:
    """A prompt count with room for a provider's tokenizer counting a little higher."""
    return math.ceil(prompt_tokens * PROMPT_SAFETY_FACTOR) + PROMPT_SAFETY_TOKENS


class BudgetExhausted(Exception):
    """A budget ran out; ``which`` is iterations, tokens, deadline or cost."""

    def __init__(self, which: str, message: str) -> None:
        super().__init__(message)
        self.which = which
        self.message = message


@dataclass(frozen=True)
class Price:
    """USD per token, from litellm's cost data."""

    input_per_token: float
    output_per_token: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens * self.input_per_token + completion_tokens * self.output_per_token


@dataclass(frozen=True)
class CallAllowance:
    """What the next model call may use."""

    max_completion_tokens: int
    prompt_tokens_estimate: int
    timeout_seconds: float


class BudgetMeter:
    """Tracks one run's spending; ``active_seconds`` carries over when a run resumes."""

    def __init__(
        self,
        budget: Budget,
        *,
        price: Price | None = None,
        usage: Usage | None = None,
        iterations: int = 0,
        active_seconds: float = 0.0,
        not_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget
        self.price = price
        self.usage = usage or Usage()
        self.iterations = iterations
        self._clock = clock
        self._active_before = active_seconds
        self._not_after = math.inf if not_after is None else not_after
        self.start()

    def start(self) -> None:
        """(Re)start the clock: the deadline is the time budget left from now.

        The meter starts when it is made, as the run starts: setting the run up (its
        tools, a live cluster's client) is part of its time. A caller whose own time
        counts too passes it as ``active_seconds`` (the CLI: its start-up); ``not_after``
        (a ``clock`` instant) ends the run sooner still (the CLI keeps time to print it).
        """
        self._started = self._clock()
        timeout = self.budget.timeout_seconds or math.inf
        budgeted = self._started + max(0.0, timeout - self._active_before)
        self.deadline = min(budgeted, self._not_after)

    # -- time --------------------------------------------------------------------------

    def now(self) -> float:
        return self._clock()

    def remaining_seconds(self) -> float:
        return self.deadline - self._clock()

    def active_seconds(self) -> float:
        """Active time of the run so far, across resumes (waiting excluded)."""
        return self._active_before + (self._clock() - self._started)

    @property
    def cost_checkable(self) -> bool:
        """False when a cost cap is set but the model's price is unknown."""
        return self.budget.max_cost_usd is None or self.price is not None

    # -- before a call -----------------------------------------------------------------

    def allow_call(
        self, prompt_tokens: int, *, tighter: Callable[[], int | None] | None = None
    ) -> CallAllowance:
        """What the next call may spend, or BudgetExhausted naming the budget that is out.

        ``prompt_tokens`` bounds the prompt from above. ``tighter`` gives another count of it
        (the model's tokenizer's; None when it has none), asked for only when the bound would
        cost the call something: a completion capped below ``MAX_COMPLETION_TOKENS``, or the
        call refused for tokens or cost. The smaller of the two then decides. Far from the
        budget it is never asked, so nothing is imported or counted there.
        """
        max_iterations = self.budget.max_iterations
        if max_iterations is not None and self.iterations >= max_iterations:
            raise BudgetExhausted(
                "iterations", f"the run used all {max_iterations} model steps it was allowed"
            )
        remaining = self.remaining_seconds()
        if remaining < MIN_CALL_SECONDS:
            raise BudgetExhausted(
                "deadline",
                f"the run's time budget of {self.budget.timeout_seconds:g}s is spent",
            )
        try:
            allowance = self._allowance(prompt_tokens, remaining)
        except BudgetExhausted as refused:
            if tighter is None or refused.which not in ("tokens", "cost"):
                raise
            counted = tighter()
            if counted is None or counted >= prompt_tokens:
                raise
            return self._allowance(counted, remaining)
        if tighter is None or allowance.max_completion_tokens >= MAX_COMPLETION_TOKENS:
            return allowance
        counted = tighter()
        if counted is None or counted >= prompt_tokens:
            return allowance
        return self._allowance(counted, remaining)

    def _allowance(self, prompt_tokens: int, remaining: float) -> CallAllowance:
        """The call's caps for a prompt of at most ``prompt_tokens`` (before the margin)."""
        prompt = padded_prompt(prompt_tokens)
        completion = MAX_COMPLETION_TOKENS
        if self.budget.max_tokens is not None:
            left = self.budget.max_tokens - self.usage.total_tokens
            completion = min(completion, left - prompt)
            if completion < MIN_USEFUL_COMPLETION_TOKENS:
                raise BudgetExhausted(
                    "tokens",
                    f"the token budget of {self.budget.max_tokens} is spent "
                    f"({self.usage.total_tokens} used, the next prompt needs about {prompt})",
                )
        if self.budget.max_cost_usd is not None and self.price is not None:
            spent = self.usage.cost_usd or 0.0
            money_left = self.budget.max_cost_usd - spent - self.price.cost(prompt, 0)
            if self.price.output_per_token > 0:
                affordable = math.floor(max(0.0, money_left) / self.price.output_per_token)
                completion = min(completion, affordable)
            if money_left <= 0 or completion < MIN_USEFUL_COMPLETION_TOKENS:
                raise BudgetExhausted(
                    "cost",
                    f"the cost cap of ${self.budget.max_cost_usd:g} is spent (${spent:.6f} used)",
                )
        return CallAllowance(
            max_completion_tokens=completion,
            prompt_tokens_estimate=prompt,
            timeout_seconds=remaining,
        )

    # -- after a call ------------------------------------------------------------------

    def record(self, prompt_tokens: int, completion_tokens: int) -> Usage:
        """Charge one model call; returns that call's usage. Never lowers what was spent.

        Pass the figures through :func:`sanitize_usage` first; a negative that gets
        here anyway is charged as 0.
        """
        prompt_tokens = max(0, int(prompt_tokens))
        completion_tokens = max(0, int(completion_tokens))
        cost = self.price.cost(prompt_tokens, completion_tokens) if self.price else None
        step = Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            cost_usd=cost,
        )
        self.usage = self.usage + step
        self.iterations += 1
        return step

    def ensure_within(self) -> None:
        """BudgetExhausted when what was spent is past the token budget or the cost cap.

        ``allow_call`` caps each completion to what is left, but a provider may ignore
        ``max_tokens`` (or report that it did): the reply that took the run past its budget
        is then not acted on, so no verdict rests on a call the budget did not allow.
        """
        max_tokens = self.budget.max_tokens
        if max_tokens is not None and self.usage.total_tokens > max_tokens:
            raise BudgetExhausted(
                "tokens",
                f"the model's reply took the run past its token budget of {max_tokens} "
                f"({self.usage.total_tokens} used; the provider did not keep to max_tokens)",
            )
        cap, spent = self.budget.max_cost_usd, self.usage.cost_usd
        if cap is not None and spent is not None and spent > cap:
            raise BudgetExhausted(
                "cost",
                f"the model's reply took the run past its cost cap of ${cap:g} (${spent:.6f} used)",
            )


def sanitize_usage(
    prompt_tokens: float | None,
    completion_tokens: float | None,
    *,
    prompt_estimate: int | Callable[[], int],
    completion_estimate: int,
) -> tuple[int, int, str | None]:
    """The token figures to charge for one call, and what was wrong with the reported ones.

    A provider's usage is data, not truth: a missing, zero (litellm's stand-in for
    missing), negative or non-finite figure is replaced by the engine's own
    estimate, which errs high (``prompt_estimate`` may be a function: worked out only
    then); a fraction is rounded up; more than
    :data:`ABSURD_TOKENS_PER_CALL` is charged as that ceiling. So the spent count
    only ever grows, and never by less than the call plausibly cost.
    """
    notes: list[str] = []
    prompt = _sane_count("prompt_tokens", prompt_tokens, prompt_estimate, notes)
    completion = _sane_count("completion_tokens", completion_tokens, completion_estimate, notes)
    return prompt, completion, "; ".join(notes) or None


def _sane_count(
    name: str, value: float | None, estimated: int | Callable[[], int], notes: list[str]
) -> int:
    missing = _why_missing(value)
    if missing is not None:
        estimate = max(1, estimated() if callable(estimated) else estimated)
        notes.append(f"{name} {missing}; charged the estimate {estimate}")
        return estimate
    assert value is not None
    if value > ABSURD_TOKENS_PER_CALL:
        notes.append(
            f"{name} reported absurdly large ({value:g}); charged {ABSURD_TOKENS_PER_CALL}"
        )
        return ABSURD_TOKENS_PER_CALL
    if value != int(value):
        notes.append(f"{name} reported as a fraction ({value:g}); rounded up")
    return math.ceil(value)


def _why_missing(value: float | None) -> str | None:
    """Why a reported figure cannot be charged as it is (then the estimate is), or None."""
    if value is None or isinstance(value, bool) or not math.isfinite(value):
        return f"not reported ({value!r})"
    if value < 0:
        return f"reported negative ({value:g})"
    if value == 0:
        return "not reported (0)"
    return None
