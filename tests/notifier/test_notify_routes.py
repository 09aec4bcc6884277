"""Notify routes: a check or schedule names the sinks that hear its changes.

The route travels with the run (its request) into the change the store records, and
a sink named by it hears the change whatever its own check and target filters say;
its verdict filters still apply. Real redis-server, the store's own record path.
"""

from __future__ import annotations

import pytest

from notifier.policy import matches
from schemas.notify import SinkFilter
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.report_support import later, record
from workers.fleet.store import VerdictStore

TEXT = "every Deployment in namespace prod has at least 2 ready replicas"


@pytest.fixture
def store(redis_url: str) -> VerdictStore:
    return VerdictStore.from_settings(load_settings(redis_url=redis_url))


def test_a_change_carries_the_routes_of_the_run_that_made_it(store: VerdictStore) -> None:
    record(store, TEXT, "true", check_id="replicas", notify=["pager"])
    record(store, TEXT, "false", check_id="replicas", notify=["pager", "ops"], at=later(1))
    record(store, TEXT, "true", check_id="replicas", at=later(2))  # a run without routes
    first, second = store.changes(later(-60))
    assert (first.to_verdict, first.notify) == (VerdictKind.FALSE, ["pager", "ops"])
    assert (second.to_verdict, second.notify) == (VerdictKind.TRUE, [])
    (summary,) = store.check_summaries(["replicas"])
    assert summary.notify == []  # the latest run's routes


def test_a_routed_change_passes_the_sinks_check_and_target_filters(store: VerdictStore) -> None:
    record(store, TEXT, "true", check_id="replicas", notify=["pager"])
    record(store, TEXT, "false", check_id="replicas", notify=["pager"], at=later(1))
    (change,) = store.changes(later(-60))
    elsewhere = SinkFilter(checks=["billing-*"], targets=["staging-*"])
    assert not matches(elsewhere, change)  # no route given: the filters decide
    assert not matches(elsewhere, change, "ops")  # routed to another sink
    assert matches(elsewhere, change, "pager")
    only_recoveries = SinkFilter(checks=["billing-*"], to_verdicts=[VerdictKind.TRUE])
    assert not matches(only_recoveries, change, "pager")  # verdict filters still apply
