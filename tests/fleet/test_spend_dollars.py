"""Dollars are said one way wherever spend is shown (schemas.spend.dollars): the CLI's spend
lines, the notifier's headline and the guard's refusal. A sub-cent amount keeps the digits
that make it (``$0.004``, never ``$0.00``, which reads as no money), cents are cents."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from assay.fleet_render import spend_summary
from notifier.events import spend_headline
from schemas.settings import load_settings
from schemas.spend import CeilingState, ScopeSpend, SpendEventData, dollars
from tests.fleet_support import snapshot_request
from workers.engine.spend_guard import SpendRefused
from workers.fleet.redis_client import connect
from workers.fleet.spend_reservations import FleetSpendGuard


def test_the_spend_line_says_dollars_as_the_contract_does() -> None:
    ceiling = CeilingState(resource="cost_usd", limit=0.5, spent=0.41, reserved=0.0,
                           remaining=0.09, reached=False)  # fmt: skip
    line = spend_summary(ScopeSpend(scope="fleet", period="2030-01-01", cost_usd=0.41,
                                    ceilings=[ceiling]))  # fmt: skip
    assert line.startswith("0 tokens, $0.41 · ceiling $0.50 ($0.09 left)"), line
    small = spend_summary(ScopeSpend(scope="fleet", period="2030-01-01", cost_usd=0.004))
    assert small == f"0 tokens, {dollars(0.004)}" == "0 tokens, $0.004"


def test_the_notifiers_headline_keeps_a_sub_cent_ceiling_readable() -> None:
    event = SpendEventData(scope="fleet", period="2030-01-01", resource="cost_usd",
                           threshold=80, spent=0.004, limit=0.005,
                           at=datetime(2030, 1, 1, tzinfo=UTC))  # fmt: skip
    assert "ceiling at 80%: $0.004 of $0.005 (2030-01-01)" in spend_headline(event)


@pytest.mark.integration
def test_the_guards_refusal_says_dollars_as_the_contract_does(redis_url: str) -> None:
    settings = load_settings(
        redis_url=redis_url, key_prefix="dollars", spend_fleet_cost_usd_per_day=0.005
    )
    guard = FleetSpendGuard.from_settings(settings, connect(redis_url))
    request = snapshot_request()
    guard.settle(guard.reserve(request, 100, 0.0045, time.monotonic() + 30), 100, 0.0045)
    assert guard.flush()
    with pytest.raises(SpendRefused) as refused:
        guard.reserve(request, 100, 0.001, time.monotonic() + 30)
    assert "is reached: $0.0045 of $0.005 spent" in refused.value.message
    assert "needs up to $0.001" in refused.value.message
