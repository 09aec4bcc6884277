"""A probe re-run has the run's time budget, over all its lookups together.

The model path binds the run's deadline to its tools, so a slow cluster ends the run at its
``timeout_seconds`` as ``cannot_determine`` (``budget_exhausted="deadline"``). A probe
re-run must too: before, its lookups had only the kube client's own timeouts (15 s a
request, 30 s of retries per lookup), so a cluster answering slowly held the worker's
thread far past the run's budget, and ``auto`` then asked the model with a fresh budget.

The same holds wherever else a probe runs: ``assay probe test`` and ``POST
/v1/checks/{id}/probe/test`` (the check's time budget, or a shorter one asked for), the
engine judging a probe the model proposed (the run's own deadline), and the model an
``auto`` re-run falls back to when its probe could not run (what is left of the run's
budget, not a fresh one).

Real redis-server, the test API server through the real kubernetes client (a live target),
the scripted model over HTTP; ``evaluate_check`` is what the worker task calls.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from assay.redis_process import RedisProcess
from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.budget import Budget
from schemas.probe import ProposedProbe
from schemas.report import RunReport
from schemas.request import ContextTarget, EvaluationRequest, new_run_id
from schemas.settings import AssaySettings, load_settings
from schemas.verdict import VerdictKind
from tests.api_support import WRITE_TOKEN, ApiServer, auth
from tests.cli_support import run_cli
from tests.engine_support import (
    PREDICATE,
    done,
    get_deployments,
    make_snapshot,
    request_for,
    script,
)
from tests.engine_support import run as run_engine
from tests.engine_support import scripted as scripted_model
from tests.probe_support import done_with_probe, probe
from workers.engine.engine import EngineDeps
from workers.engine.llm import load_litellm
from workers.engine.toolsets.base import ToolRegistry
from workers.engine.toolsets.factory import build_registry
from workers.engine.toolsets.live_backend import LiveBackend
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.fleet.probe_rerun import evaluate_check
from workers.fleet.probe_store import ProbeStore
from workers.fleet.redis_client import connect
from workers.policy_engine.probes.runner import run_probe

pytestmark = pytest.mark.integration

NO_MODEL = script(done("true", 0, excerpt="never used"))  # any call would find no lookup
# A probe of four named lookups, each well within any one lookup's limits.
FOUR_LOOKUPS = probe(
    "results.all(d, has(d.status.readyReplicas) && d.status.readyReplicas >= 2)",
    scope="results",
    lookups=[
        {"tool": tool, "args": {"kind": "Deployment", "namespace": "prod", "name": name}}
        for tool in ("get", "describe")
        for name in ("api", "web")
    ],
)


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    load_litellm().token_counter(model="openai/scripted", text="warm up")


@dataclass
class Live:
    server: FakeApiServer
    kubeconfig: Path
    probes: ProbeStore

    def check(
        self, turns: dict[str, Any], *, timeout: float = 300, probe_mode: str = "auto"
    ) -> tuple[RunReport, int, float]:
        """One run of the check on the live target: the report, model calls, seconds taken."""
        request = EvaluationRequest(
            text=PREDICATE,
            target=ContextTarget(context="east", kubeconfig=str(self.kubeconfig)),
            budget=Budget(timeout_seconds=timeout),
            check_id="chk-live",
            run_id=new_run_id(),
            probe=probe_mode,  # type: ignore[arg-type]
        )
        with scripted_model(turns) as model:
            settings = load_settings(model="openai/scripted", api_base=model.url)
            started = time.monotonic()
            report = evaluate_check(request, EngineDeps(settings=settings), self.probes)
            return report, len(model.requests), time.monotonic() - started

    def compile(self, spec: dict[str, Any]) -> None:
        """The model answers true and proposes ``spec``, which becomes the check's probe."""
        turns = script(get_deployments(), done_with_probe("true", 0, probe_spec=spec))
        report, _, _ = self.check(turns, probe_mode="off")
        assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
        assert report.probe is not None and report.probe.status == "accepted", report.probe


@pytest.fixture
def live(tmp_path: Path, redis_url: str) -> Iterator[Live]:
    east = make_snapshot(tmp_path / "east")  # both Deployments in prod have 2+ ready
    with FakeApiServer([FakeCluster.from_snapshot(east)]) as server:
        probes = ProbeStore(connect(redis_url), prefix="tpd", history_limit=50)
        yield Live(server, server.write_kubeconfig(tmp_path / "kubeconfig"), probes)


def _out_of_time(report: RunReport) -> None:
    """A run ended by its time budget: cannot_determine (exit 3), saying so, never true."""
    verdict = report.verdict
    assert verdict is not None
    assert verdict.verdict == VerdictKind.CANNOT_DETERMINE and verdict.exit_code == 3
    assert verdict.budget_exhausted == "deadline"
    assert verdict.reason is not None and "time budget" in verdict.reason, verdict.reason
    assert report.probe is not None and report.probe.status == "failed"
    assert report.probe.run.verdict is None and report.probe.run.budget_exhausted == "deadline"


@pytest.mark.parametrize("probe_mode", ["auto", "only"])
def test_a_probe_rerun_on_a_hanging_cluster_ends_at_the_runs_deadline(
    live: Live, probe_mode: str
) -> None:
    """Before: the listing waited for the kube client's 15 s request timeout, retried until
    its 30 s retry deadline, and ``auto`` then asked the model with a fresh budget."""
    live.compile(probe())
    live.server.add_fault(r"/namespaces/prod/deployments$", hang=30)
    report, calls, elapsed = live.check(NO_MODEL, timeout=2, probe_mode=probe_mode)
    assert elapsed < 8.0, f"the probe re-run took {elapsed:.1f}s with a 2s time budget"
    _out_of_time(report)
    assert calls == 0  # no time was left to ask the model, in either mode
    record = live.probes.current("chk-live")  # running out of time says nothing of the probe
    assert record is not None and record.active and record.runs_since_validation == 0


def test_the_deadline_covers_all_of_a_probes_lookups_together(live: Live) -> None:
    """Four lookups of 1 s each: every one is far within one lookup's limits, but together
    they pass the run's 2.5 s. Before, the probe took ~4 s and answered true regardless."""
    live.compile(FOUR_LOOKUPS)
    live.server.clear_requests()
    live.server.add_fault(r"/namespaces/prod/deployments/", hang=1.0)
    report, calls, elapsed = live.check(NO_MODEL, timeout=2.5)
    assert elapsed < 6.0, f"the probe re-run took {elapsed:.1f}s with a 2.5s time budget"
    _out_of_time(report)
    assert calls == 0
    sent = [r for r in live.server.requests if "/deployments/" in r.path]
    assert len(sent) < 4  # the last lookup was never sent


def test_a_probe_rerun_within_its_budget_answers_as_before_under_the_runs_deadline(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster a little slow (0.3 s a listing) within a 5 s budget: the probe answers for
    0 model calls as before, and its lookups ran bound to the run's deadline."""
    live.compile(probe())
    bound: list[float] = []
    original = LiveBackend.bind_deadline

    def recording(self: LiveBackend, deadline: float) -> None:
        bound.append(deadline)
        original(self, deadline)

    monkeypatch.setattr(LiveBackend, "bind_deadline", recording)
    live.server.add_fault(r"/namespaces/prod/deployments$", hang=0.3)
    started = time.monotonic()
    report, calls, _ = live.check(NO_MODEL, timeout=5)
    assert calls == 0
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE
    assert report.verdict.source == "probe" and report.verdict.budget_exhausted is None
    assert len(bound) == 1 and started + 5 <= bound[0] <= time.monotonic() + 5
    assert report.probe is not None and report.probe.run.budget_exhausted is None


# --- the runner, on a snapshot (which takes no deadline: the runner looks at the clock) ----


class _EndlessListing:
    """A snapshot whose listings never end (or end after ``count`` objects): copies of its
    first object, ``pause`` apart."""

    def __init__(self, snapshot: SnapshotBackend, pause: float, count: int | None = None) -> None:
        self._snapshot = snapshot
        self._pause = pause
        self._count = count
        self.name = snapshot.name
        self.scrubber = snapshot.scrubber
        self.resolve = snapshot.resolve

    def list_objects(
        self, resource: Any, namespace: Any, *selectors: Any, **view: Any
    ) -> Iterator[Any]:
        first = next(iter(self._snapshot.list_objects(resource, namespace, *selectors, **view)))
        numbers = itertools.count() if self._count is None else range(self._count)
        for _ in numbers:
            time.sleep(self._pause)
            yield first


@pytest.mark.parametrize("pause", [0.0, 0.01], ids=["huge listing", "slow listing"])
def test_a_listing_that_never_ends_is_cut_at_the_deadline(tmp_path: Path, pause: float) -> None:
    """A huge cluster (or one streaming slowly) is bounded by the time budget, not only by
    the object cap: here the cap is out of reach, and the deadline ends the run."""
    backend = _EndlessListing(SnapshotBackend(make_snapshot(tmp_path / "snap")), pause)
    spec = ProposedProbe.model_validate(probe())
    began = time.monotonic()
    run = run_probe(spec, backend, max_objects=10**12, deadline=began + 0.5)  # type: ignore[arg-type]
    assert time.monotonic() - began < 3.0
    assert run.verdict is None and run.budget_exhausted == "deadline"
    assert run.error is not None and run.error.startswith("out of time"), run.error
    assert run.objects_read > 0


def test_a_probe_given_no_time_reads_nothing_and_decides_nothing(tmp_path: Path) -> None:
    backend = SnapshotBackend(make_snapshot(tmp_path / "snap"))
    spec = ProposedProbe.model_validate(probe())
    assert run_probe(spec, backend).verdict == VerdictKind.TRUE  # in time: as before
    run = run_probe(spec, backend, deadline=time.monotonic() - 1)
    assert run.verdict is None and run.value is None and run.budget_exhausted == "deadline"
    assert run.objects_read == 0


# --- `assay probe test` and POST /v1/checks/{id}/probe/test: an on-demand run's budget -----


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str, float]:
    """``assay ARGV`` in this process: exit code, stdout, stderr, seconds taken."""
    started = time.monotonic()
    code, out, err = run_cli(capsys, *argv)
    return code, out, err, time.monotonic() - started


@pytest.fixture
def cli(live: Live, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Live:
    """The CLI reads the live fixture's probes (prefix ``tpd``) and its kubeconfig."""
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_KEY_PREFIX", "tpd")
    monkeypatch.setenv("ASSAY_KUBECONFIG", str(live.kubeconfig))
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    live.compile(probe())
    return live


def test_probe_test_on_a_hanging_cluster_ends_at_its_timeout(
    cli: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: no deadline at all. The listing hung 6 s, then the probe answered true (exit 0)
    from a cluster that took six times what the caller allowed."""
    cli.server.add_fault(r"/namespaces/prod/deployments$", hang=6)
    code, out, err, elapsed = _cli(
        capsys, "probe", "test", "chk-live", "--context", "east", "--timeout", "1"
    )
    assert code == 3, (out, err)
    assert elapsed < 5.5, f"assay probe test took {elapsed:.1f}s with --timeout 1"
    assert "verdict:  cannot_determine" in out and "time ran out" in out
    assert "time ran out: the probe did not finish within 1s" in err


def test_probe_test_defaults_to_the_checks_time_budget(
    cli: Live, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSAY_TIMEOUT_SECONDS", "1.5")
    cli.server.add_fault(r"/namespaces/prod/deployments$", hang=6)
    code, out, _, elapsed = _cli(capsys, "probe", "test", "chk-live", "--context", "east", "--json")
    assert code == 3 and elapsed < 5.5, (code, elapsed)
    run = json.loads(out)
    assert run["verdict"] is None and run["budget_exhausted"] == "deadline"
    assert run["error"].startswith("time ran out: the probe did not finish within 1.5s")
    cli.server.clear_faults()  # in time: as before
    code, out, _, _ = _cli(capsys, "probe", "test", "chk-live", "--context", "east")
    assert code == 0 and "verdict:  true" in out


@pytest.mark.parametrize("timeout", ["0", "-1", "soon"])
def test_probe_test_refuses_a_timeout_that_leaves_no_time(
    cli: Live, capsys: pytest.CaptureFixture[str], timeout: str
) -> None:
    code, _, err, _ = _cli(
        capsys, "probe", "test", "chk-live", "--context", "east", "--timeout", timeout
    )
    assert code == 64, err
    assert "--timeout" in err


@pytest.fixture
def api(live: Live, redis_server: RedisProcess, tmp_path: Path) -> Iterator[ApiServer]:
    """An `assay api` process reading the live fixture's probes and cluster, where a check's
    time budget is 1.5 s (ASSAY_TIMEOUT_SECONDS)."""
    settings: dict[str, str | None] = {
        "ASSAY_KEY_PREFIX": "tpd",
        "ASSAY_KUBECONFIG": str(live.kubeconfig),
        "ASSAY_TIMEOUT_SECONDS": "1.5",
    }
    server = ApiServer(redis_server.url, tmp_path / "api.log", settings=settings).start()
    live.compile(probe())
    yield server
    server.stop()


def _post_test(api: ApiServer, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    url = f"{api.url}/v1/checks/chk-live/probe/test"
    response = httpx.post(url, headers=auth(WRITE_TOKEN), json=body, timeout=30)
    return response, time.monotonic() - started


def test_the_probe_test_endpoint_ends_at_the_checks_time_budget(live: Live, api: ApiServer) -> None:
    """Before: the worker thread waited out the 6 s hang and the probe answered true."""
    live.server.add_fault(r"/namespaces/prod/deployments$", hang=6)
    target = {"type": "context", "context": "east"}
    for body, seconds in (
        ({"target": target}, 1.5),
        ({"target": target, "timeout_seconds": 0.5}, 0.5),
    ):
        response, elapsed = _post_test(api, body)
        assert response.status_code == 200, response.text
        assert elapsed < 5.5, f"the endpoint took {elapsed:.1f}s with a {seconds}s budget"
        run = response.json()
        assert run["verdict"] is None and run["budget_exhausted"] == "deadline"
        assert run["error"].startswith(
            f"time ran out: the probe did not finish within {seconds:g}s"
        )
    longer, elapsed = _post_test(api, {"target": target, "timeout_seconds": 60})
    assert longer.status_code == 200, longer.text  # capped to the check's budget, not refused
    assert elapsed < 5.5, f"a 60 s request ran {elapsed:.1f}s past the check's 1.5 s budget"
    assert longer.json()["error"].startswith("time ran out: the probe did not finish within 1.5s")


# --- the engine judges a proposed probe within the run's time budget ----------------------


def _slow_probe_listing(pause: float, count: int) -> Callable[..., ToolRegistry]:
    """The registry of a run whose probe (not the model's own lookups) reads a slow listing:
    ``count`` Deployments ``pause`` apart, as a big snapshot or a slow cluster would give."""

    def tools(request: EvaluationRequest, settings: AssaySettings) -> ToolRegistry:
        registry = build_registry(request, settings)
        registry.backend = _EndlessListing(registry.backend, pause, count)
        return registry

    return tools


def test_judging_a_proposed_probe_ends_at_the_runs_deadline(tmp_path: Path) -> None:
    """Before: judging read all 300 objects (~6 s) of a 2 s run and accepted the probe."""
    turns = script(get_deployments(), done_with_probe("true", 0, probe_spec=probe()))
    request = request_for(make_snapshot(tmp_path / "snap"), timeout_seconds=2)
    with scripted_model(turns) as model:
        started = time.monotonic()
        report = run_engine(model, request, tools=_slow_probe_listing(0.02, 300))
        elapsed = time.monotonic() - started
    assert elapsed < 5.0, f"the run took {elapsed:.1f}s with a 2s time budget"
    outcome = report.probe
    assert outcome is not None and outcome.status == "failed"  # not judged, never accepted
    assert outcome.run.verdict is None and outcome.run.budget_exhausted == "deadline"
    assert "time budget ran out while the probe was judged" in outcome.reason
    # fast: the model's true stands on its own checked evidence, as with any unjudged probe
    assert report.verdict is not None and report.verdict.verdict == VerdictKind.TRUE


def test_under_strict_a_judge_that_ran_out_leaves_no_unconfirmed_true(tmp_path: Path) -> None:
    """Strict: the true still needs the confirmation, which the spent budget refuses."""
    turns = script(get_deployments(), done_with_probe("true", 0, probe_spec=probe()))
    turns["scenarios"].append({"role": "confirmer", "turns": [done("true")]})
    request = request_for(make_snapshot(tmp_path / "snap"), profile="strict", timeout_seconds=2)
    with scripted_model(turns) as model:
        started = time.monotonic()
        report = run_engine(model, request, tools=_slow_probe_listing(0.02, 300))
        elapsed = time.monotonic() - started
    assert elapsed < 5.0, f"the run took {elapsed:.1f}s with a 2s time budget"
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "deadline" and verdict.confirmed is not True
    assert report.probe is not None and report.probe.status == "failed"


# --- auto: the model a failed probe falls back to has what is left of the run's budget ------


def test_the_fallback_after_a_failed_probe_has_only_the_rest_of_the_runs_budget(
    live: Live,
) -> None:
    """The probe's listing takes 2 s, then is forbidden: 1.5 s of the 3.5 s are left, and the
    model (1.5 s a reply) cannot answer in them. Before: the model got a fresh 3.5 s, answered
    true, and the run took ~5 s of its 3.5 s budget."""
    live.compile(probe())
    live.server.add_fault(r"/namespaces/prod/deployments$", status=403, hang=2.0, times=1)
    slow_model = script(get_deployments(), done("true", 0), delay=1.5)
    report, calls, elapsed = live.check(slow_model, timeout=3.5)
    assert elapsed < 6.0, f"the run took {elapsed:.1f}s with a 3.5s time budget"
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "deadline" and verdict.source == "model"
    assert calls == 1  # the model was asked, within what was left
    assert report.probe is not None and report.probe.status == "failed"
    assert "forbidden" in report.probe.reason.lower(), report.probe.reason
    # the request and its budget are the caller's, not rewritten to what was left
    assert report.request.budget.timeout_seconds == 3.5 and report.budget.timeout_seconds == 3.5


def test_a_failed_probe_that_left_almost_no_time_does_not_start_the_model(live: Live) -> None:
    """2 s of a 2.5 s budget spent by a probe that then failed: the model is not asked.
    Before: it was, with a fresh 2.5 s, and answered true."""
    live.compile(probe())
    live.server.add_fault(r"/namespaces/prod/deployments$", status=403, hang=2.0, times=1)
    model_true = script(get_deployments(), done("true", 0))
    report, calls, elapsed = live.check(model_true, timeout=2.5)
    assert calls == 0 and elapsed < 5.0
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.exit_code == 3 and verdict.budget_exhausted == "deadline"
    assert verdict.reason is not None and "the model was not asked" in verdict.reason
    assert "forbidden" in verdict.reason.lower(), verdict.reason


def test_the_model_that_rechecks_a_slow_probe_has_only_the_rest_of_the_runs_budget(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-validation is due; the probe's listing takes 2 s and answers: 1.5 s of the 3.5 s
    are left, and the model (1.5 s a reply) cannot re-check in them. Before: the model got a
    fresh 3.5 s, and the run took about 5 s of its 3.5 s budget."""
    monkeypatch.setenv("ASSAY_PROBE_REVALIDATE_RUNS", "1")
    live.compile(probe())
    live.server.add_fault(r"/namespaces/prod/deployments$", hang=2.0, times=1)
    slow_model = script(get_deployments(), done("true", 0), delay=1.5)
    report, calls, elapsed = live.check(slow_model, timeout=3.5)
    assert elapsed < 6.0, f"the run took {elapsed:.1f}s with a 3.5s time budget"
    verdict = report.verdict
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "deadline"
    assert calls == 1  # the model was asked, within what was left
    assert report.request.budget.timeout_seconds == 3.5


def test_a_slow_probe_that_left_almost_no_time_is_not_rechecked(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-validation is due, but the probe took 2 s of 2.5: the model is not asked, and the
    probe's answer is not given unconfirmed either."""
    monkeypatch.setenv("ASSAY_PROBE_REVALIDATE_RUNS", "1")
    live.compile(probe())
    live.server.add_fault(r"/namespaces/prod/deployments$", hang=2.0, times=1)
    report, calls, _ = live.check(script(get_deployments(), done("true", 0)), timeout=2.5)
    verdict = report.verdict
    assert calls == 0
    assert verdict is not None and verdict.verdict == VerdictKind.CANNOT_DETERMINE
    assert verdict.budget_exhausted == "deadline" and verdict.exit_code == 3
    assert verdict.reason is not None and "needs the model (revalidate)" in verdict.reason
