"""The engine and the spend guard: every model call reserved before it is sent, settled after.

Real snapshot backend, real litellm, the scripted model over HTTP, and (for the figures)
the fleet's real guard on a real redis-server. A guard that refuses on cue stands in where
the test is about what the engine does with a refusal.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from schemas.request import EvaluationRequest
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.engine_support import done, get_deployments, make_snapshot, request_for, run, script
from tests.engine_support import scripted as scripted_model
from workers.engine.llm import REFUSED_RETRIES, load_litellm
from workers.engine.spend_guard import SpendRefused
from workers.fleet.redis_client import connect
from workers.fleet.spend_reservations import FleetSpendGuard


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    load_litellm().token_counter(model="openai/scripted", text="warm up")


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return make_snapshot(tmp_path / "snap")


class Recording:
    """Wraps a guard: what was reserved and settled, and how many model requests had been
    sent when each reservation was asked for."""

    def __init__(self, inner: Any, model: Any) -> None:
        self.inner, self.model = inner, model
        self.reserved: list[tuple[int, int]] = []  # (requests sent before it, tokens)
        self.settled: list[int] = []

    def reserve(
        self, request: EvaluationRequest, tokens: int, cost_usd: float | None, deadline: float
    ) -> Any:
        self.reserved.append((len(self.model.requests), tokens))
        return self.inner.reserve(request, tokens, cost_usd, deadline)

    def settle(self, reservation: Any, tokens: int, cost_usd: float | None) -> None:
        self.settled.append(tokens)
        self.inner.settle(reservation, tokens, cost_usd)


class RefusesCall:
    """Admits calls until the ``refuse_at``-th (1-based), which a ceiling stops."""

    def __init__(self, refuse_at: int) -> None:
        self.refuse_at, self.asked, self.settled = refuse_at, 0, 0

    def reserve(self, request: Any, tokens: int, cost_usd: float | None, deadline: float) -> Any:
        self.asked += 1
        if self.asked >= self.refuse_at:
            raise SpendRefused(
                "the fleet's token ceiling per UTC hour (2030-01-01T10) is reached: 9,000 "
                "tokens of 10,000 tokens spent",
                "fleet-hour::2030-01-01T10",
            )
        return object()

    def settle(self, reservation: Any, tokens: int, cost_usd: float | None) -> None:
        self.settled += 1


def test_every_model_call_is_reserved_first_and_settled_with_what_the_run_charged(
    snapshot: Path, redis_url: str
) -> None:
    """A strict check with a repair turn and the confirmation: four calls, four reservations,
    each asked before its request left, each settled with the run's own figures."""
    guard = FleetSpendGuard.from_settings(
        load_settings(redis_url=redis_url, key_prefix="es"), connect(redis_url)
    )
    turns = script(get_deployments(), {"raw_content": "{not json"}, done("true", 0))
    turns["scenarios"].append({"role": "confirmer", "turns": [done("true")]})
    with scripted_model(turns) as model:
        recording = Recording(guard, model)
        report = run(model, request_for(snapshot, profile="strict"), spend_guard=recording)
        sent = len(model.requests)
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.TRUE and verdict.confirmed
    assert [s.kind for s in report.steps] == ["COMMAND", "MALFORMED", "DONE", "CONFIRM"]
    assert sent == 4
    assert [before for before, _tokens in recording.reserved] == [0, 1, 2, 3]
    assert recording.settled == [step.usage.total_tokens for step in report.steps]
    for (_before, reserved), step in zip(recording.reserved, report.steps, strict=True):
        assert reserved >= step.usage.total_tokens, "the reservation bounds what the call used"
    assert guard.flush()
    hour, day = guard.store.fleet_now()
    assert hour.tokens == day.tokens == verdict.usage.total_tokens
    assert hour.reserved_tokens == 0 and guard.store.in_flight() == 0


@pytest.mark.parametrize(
    ("profile", "refuse_at", "requests_sent"),
    [("fast", 1, 0), ("fast", 2, 1), ("strict", 3, 2)],
    ids=["first call", "after a lookup", "strict confirmation"],
)
def test_a_call_a_ceiling_stops_ends_the_run_cannot_determine_naming_the_ceiling(
    snapshot: Path, profile: str, refuse_at: int, requests_sent: int
) -> None:
    """Never true: not when the refused call is the planner's, not when it is strict's
    confirmation of a planner's true (the answer would have confirmed it)."""
    guard = RefusesCall(refuse_at)
    turns = script(get_deployments(), done("true", 0))
    turns["scenarios"].append({"role": "confirmer", "turns": [done("true")]})
    with scripted_model(turns) as model:
        report = run(model, request_for(snapshot, profile=profile), spend_guard=guard)
        assert len(model.requests) == requests_sent, "the refused call is never sent"
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.exit_code == 3
    assert verdict.budget_exhausted == "spend_ceiling"
    assert "the fleet's token ceiling per UTC hour" in (verdict.reason or "")
    assert guard.asked == refuse_at, "no retry loop: one refusal ends the run"
    assert guard.settled == refuse_at - 1


def test_a_call_that_failed_gives_its_reservation_back(snapshot: Path, redis_url: str) -> None:
    guard = FleetSpendGuard.from_settings(
        load_settings(redis_url=redis_url, key_prefix="es2"), connect(redis_url)
    )
    with scripted_model(script({"error": {"status": 400, "body": "bad request"}})) as model:
        report = run(model, request_for(snapshot), spend_guard=guard)
    assert report.verdict is not None and report.verdict.exit_code == 3
    assert guard.flush()
    hour, _day = guard.store.fleet_now()
    assert (hour.calls, hour.tokens, hour.reserved_tokens) == (1, 0, 0)


class ChargeableAttempts(Recording):
    """A recording guard that also refuses from its ``refuse_at``-th reservation (1-based)."""

    def __init__(self, inner: Any, model: Any, refuse_at: int = 0) -> None:
        super().__init__(inner, model)
        self.refuse_at = refuse_at

    def reserve(
        self, request: EvaluationRequest, tokens: int, cost_usd: float | None, deadline: float
    ) -> Any:
        if self.refuse_at and len(self.reserved) + 1 >= self.refuse_at:
            raise SpendRefused("the batch's token ceiling is reached", "batch::b1")
        return super().reserve(request, tokens, cost_usd, deadline)


def _fleet_guard(redis_url: str, prefix: str) -> FleetSpendGuard:
    return FleetSpendGuard.from_settings(
        load_settings(redis_url=redis_url, key_prefix=prefix), connect(redis_url)
    )


def _run_retrying(model: Any, request: EvaluationRequest, guard: Any) -> Any:
    """A run whose model client retries at once (no backoff) and gives each attempt 1 s."""
    from workers.engine.llm import LiteLLMClient

    settings = {"llm_call_timeout_seconds": 1.0, "llm_max_retries": 4}
    client = LiteLLMClient(
        load_settings(model="openai/scripted", api_base=model.url, **settings), sleep=lambda _: None
    )
    return run(model, request, spend_guard=guard, llm=client, settings=settings)


def test_every_attempt_is_reserved_before_it_is_sent_and_charged_when_it_may_be_billed(
    snapshot: Path, redis_url: str
) -> None:
    """A provider bills the work it did on a request whose answer never came: a timed-out
    attempt and a 5xx cost their estimate, a 429 (refused before any work) nothing; the
    client's retries each hold their own reservation, so spend plus what is held never
    passes a ceiling."""
    guard = _fleet_guard(redis_url, "es5")
    first_turn = {"attempts": [
        {"hang": 3},                                   # times out after the request left
        {"error": {"status": 503}},                    # the provider failed while working
        {"error": {"status": 429, "retry_after": 0}},  # a rate limit: refused, not billed
        {"error": {"status": 500}},
        get_deployments(),
    ]}  # fmt: skip
    with scripted_model(script(first_turn, done("true", 0))) as model:
        recording = Recording(guard, model)
        report = _run_retrying(model, request_for(snapshot), recording)
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert [before for before, _ in recording.reserved] == [0, 1, 2, 3, 4, 5]
    estimate = recording.reserved[0][1]
    used = [step.usage.total_tokens for step in report.steps]
    assert recording.settled == [estimate, estimate, 0, estimate, *used]
    assert guard.flush()
    hour, _day = guard.store.fleet_now()
    assert hour.tokens == 3 * estimate + sum(used)
    assert (hour.calls, hour.reserved_tokens, guard.store.in_flight()) == (6, 0, 0)


@pytest.mark.parametrize(
    ("answer", "attempts"),
    [
        ({"error": {"status": 401}}, 1),
        ({"error": {"status": 404}}, 1),
        ({"error": {"status": 422}}, 1),
        ({"error": {"status": 429, "retry_after": 0}}, 5),
        (None, 1 + REFUSED_RETRIES),  # nothing listens: tried again only briefly
    ],
    ids=["401", "404", "422", "429", "connection refused"],
)
def test_an_attempt_the_provider_refused_costs_nothing(
    snapshot: Path, redis_url: str, answer: dict[str, Any] | None, attempts: int
) -> None:
    guard = _fleet_guard(redis_url, f"es6{attempts}{answer and answer['error']['status']}")
    with scripted_model(script(answer or get_deployments())) as model:
        request = request_for(snapshot)
        if answer is None:  # nothing listens there: the request never leaves
            request = request.model_copy(update={"api_base": _closed_port_url()})
        recording = Recording(guard, model)
        report = _run_retrying(model, request, recording)
    assert report.verdict is not None and report.verdict.exit_code == 3
    assert recording.settled == [0] * attempts
    assert guard.flush()
    hour, _day = guard.store.fleet_now()
    assert (hour.calls, hour.tokens, hour.reserved_tokens) == (attempts, 0, 0)


def _closed_port_url() -> str:
    import socket

    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_retry_a_ceiling_stops_is_never_sent(snapshot: Path, redis_url: str) -> None:
    """The first attempt failed with a 5xx (its estimate spent); the ceiling has no room for
    a second: it is not sent, and the run ends as for any call a ceiling stops."""
    guard = _fleet_guard(redis_url, "es7")
    first_turn = {"attempts": [{"error": {"status": 502}}, get_deployments()]}
    with scripted_model(script(first_turn, done("true", 0))) as model:
        limited = ChargeableAttempts(guard, model, refuse_at=2)
        report = _run_retrying(model, request_for(snapshot), limited)
        assert len(model.requests) == 1, "the refused retry is never sent"
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "spend_ceiling"
    assert "the batch's token ceiling is reached" in (verdict.reason or "")
    assert limited.settled == [limited.reserved[0][1]]
    assert guard.flush()
    hour, _day = guard.store.fleet_now()
    assert (hour.tokens, hour.reserved_tokens) == (limited.reserved[0][1], 0)


def test_a_run_waits_for_room_others_hold_then_goes_on(snapshot: Path, redis_url: str) -> None:
    """Another worker's call holds most of the ceiling: this run's first call waits for it
    to settle instead of failing, then the run ends with its verdict."""
    settings = load_settings(
        redis_url=redis_url, key_prefix="es3", spend_fleet_tokens_per_hour=30_000
    )
    other = FleetSpendGuard.from_settings(settings, connect(redis_url))
    held = other.reserve(request_for(snapshot), 26_000, None, time.monotonic() + 60)
    guard = FleetSpendGuard.from_settings(settings, connect(redis_url))

    import threading

    threading.Timer(0.6, lambda: other.settle(held, 1_000, None)).start()
    started = time.monotonic()
    with scripted_model(script(get_deployments(), done("true", 0))) as model:
        report = run(model, request_for(snapshot), spend_guard=guard)
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert time.monotonic() - started >= 0.5, "its first call waited for the other to settle"


# --- probes: their re-runs cost nothing and go on under a reached ceiling ---------------------


def _check_by_probe(
    snapshot: Path, probes: Any, turns: dict[str, Any], guard: Any = None, **settings: Any
) -> tuple[Any, int]:
    """One run of check ``chk-spend`` through the probe path (what the worker task calls)."""
    from schemas.request import new_run_id
    from workers.engine.engine import EngineDeps
    from workers.fleet.probe_rerun import evaluate_check

    with scripted_model(turns) as model:
        deps = EngineDeps(
            settings=load_settings(model="openai/scripted", api_base=model.url, **settings),
            spend_guard=guard,
        )
        request = request_for(snapshot).model_copy(
            update={"run_id": new_run_id(), "check_id": "chk-spend"}
        )
        return evaluate_check(request, deps, probes), len(model.requests)


def test_probe_reruns_go_on_when_a_ceiling_stops_every_model_call(
    tmp_path: Path, redis_url: str
) -> None:
    from tests.probe_support import done_with_probe, probe
    from workers.engine.toolsets.factory import snapshot_cache
    from workers.fleet.probe_store import ProbeStore

    probes = ProbeStore(connect(redis_url), prefix="esp", history_limit=50)
    snap = make_snapshot(tmp_path / "snap")
    compile_true = script(get_deployments(), done_with_probe("true", 0, probe_spec=probe()))
    _check_by_probe(snap, probes, compile_true)  # the model compiles the probe, no ceiling

    stopped = RefusesCall(refuse_at=1)  # from here on every model call is refused
    plain, calls = _check_by_probe(snap, probes, compile_true, stopped)
    assert calls == 0 and stopped.asked == 0, "a probe re-run asks the guard nothing"
    assert plain.verdict is not None and plain.verdict.verdict == VerdictKind.TRUE

    # A re-validation falls due: the ceiling stops it, and the probe's verdict stands.
    due, calls = _check_by_probe(snap, probes, compile_true, stopped, probe_revalidate_runs=1)
    assert calls == 0 and stopped.asked == 1
    assert due.verdict is not None and due.verdict.verdict == VerdictKind.TRUE
    assert due.verdict.source == "probe" and due.verdict.usage.total_tokens == 0
    assert due.probe is not None and "re-validation waits" in due.probe.reason
    assert [e.why for e in probes.agreement("chk-spend")] == ["compile"], "not validated"

    # A flip is never recorded without the model: stopped, the run is cannot_determine.
    make_snapshot(snap, web_ready=1)
    snapshot_cache.clear()
    flip, calls = _check_by_probe(snap, probes, compile_true, stopped)
    assert calls == 0
    assert flip.verdict is not None and flip.verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert flip.verdict.budget_exhausted == "spend_ceiling"
    record = probes.current("chk-spend")
    assert record is not None and record.last_verdict == VerdictKind.TRUE
