"""Secrets: canaries (tests/secret_canaries.py) planted in Secrets and copied into env literals,
ConfigMaps, events, logs and custom resources, plus credential-shaped values in no Secret.

A scripted model reads everything there is to read, then repeats every canary in its answer.
No form of any canary may appear in what the model was sent (prompts), what the CLI printed or
logged (stdout, stderr with debug logs), what the fleet stored (Redis) or served (the HTTP API,
`assay run`), or what a worker and the API logged. The live backend runs against the test API
server, which also counts every request that was not a GET (the write path).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from assay.redis_process import RedisProcess
from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from assay.testing.scripted_model import ScriptedModel
from tests.api_support import READ_TOKEN, WRITE_TOKEN, ApiServer, auth
from tests.assay.test_cli_check import assay
from tests.engine.test_secret_scrubbing import reading_everything_then, redis_dump
from tests.fleet_support import (
    TEST_SNAPSHOT_ROOTS,
    scripted_worker_env,
    start_worker,
    stop_process,
    wait_until,
    worker_log_tail,
)
from tests.reliability.cli_support import outcome
from tests.reliability.conftest import API_PREFIX
from tests.reliability.ledger import Ledger
from tests.secret_canaries import (
    NAMESPACE,
    POD,
    CanaryCluster,
    spoken,
    sweep_calls,
    write_canary_cluster,
)

FAMILY = "secrets"
PREDICATE = "no ConfigMap in namespace shop holds a password"
BIG_BUDGET = ("--max-iterations", "60", "--max-tokens", "2000000")
POD_LOOKUP = sweep_calls().index(("get", {"kind": "Pod", "name": POD, "namespace": NAMESPACE}))


@pytest.fixture(scope="module")
def canaries(tmp_path_factory: pytest.TempPathFactory) -> CanaryCluster:
    return write_canary_cluster(tmp_path_factory.mktemp("rel-canaries"))


@pytest.fixture(scope="module")
def canary_api(
    canaries: CanaryCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[FakeApiServer, Path]]:
    folder = tmp_path_factory.mktemp("rel-canary-kube")
    with FakeApiServer([FakeCluster.from_snapshot(canaries.path)]) as server:
        yield server, server.write_kubeconfig(folder / "kubeconfig")


def blabbing_model(canaries: CanaryCluster) -> dict[str, Any]:
    """Every lookup of the sweep, then a DONE false repeating every canary in every field."""
    said = " ; ".join(map(spoken, canaries.canaries))
    done = {
        "action": "DONE",
        "verdict": "false",
        "explanation": f"found {said}",
        "findings": [said],
        "evidence": [{"step": POD_LOOKUP, "excerpt": f"name: {POD}"}],
    }
    return reading_everything_then({"action": done})


def sent_by_assay(model: ScriptedModel) -> str:
    """Every message assay sent the model, except the model's own earlier turns (it said them)."""
    return json.dumps(
        [[m for m in body["messages"] if m.get("role") != "assistant"] for body in model.requests]
    )


def leaks(canaries: CanaryCluster, places: dict[str, str]) -> dict[str, list[str]]:
    return {place: found for place, text in places.items() if (found := canaries.leaks(text))}


@pytest.mark.parametrize("backend", ["snapshot", "live"])
def test_the_cli_sends_prints_and_logs_no_canary(
    ledger: Ledger, canaries: CanaryCluster, canary_api: tuple[FakeApiServer, Path], backend: str
) -> None:
    server, kubeconfig = canary_api
    target = (
        ["--snapshot", str(canaries.path)] if backend == "snapshot" else ["--context", "canary"]
    )
    server.clear_requests()
    with ScriptedModel(blabbing_model(canaries)) as model:
        result = assay(
            "check", *target, "--model", "openai/scripted", "--api-base", model.url,
            "--trace", "--json", *BIG_BUDGET, PREDICATE,
            env={"ASSAY_LOG_LEVEL": "debug", "ASSAY_API_KEY": "scripted-no-key",
                 "ASSAY_KUBECONFIG": str(kubeconfig)},
        )  # fmt: skip
        prompts = sent_by_assay(model)
    found = leaks(canaries, {"prompts": prompts, "stdout": result.stdout, "stderr": result.stderr})
    hits = sum(map(len, found.values()))
    ledger.case(FAMILY, outcome(result.returncode), canary_hits=hits)
    if backend == "live":
        writes = sum(1 for r in server.requests if r.method != "GET")
        ledger.case("write path", outcome(result.returncode), non_get_requests=writes)
        assert server.requests and writes == 0
    assert result.returncode in (1, 3), result.stderr[-2000:]
    assert "fallback seed" in prompts, "the ConfigMap never reached the model"
    assert not found, found


@pytest.mark.integration
def test_the_fleet_stores_serves_and_logs_no_canary(
    ledger: Ledger,
    canaries: CanaryCluster,
    canary_api: tuple[FakeApiServer, Path],
    redis_server: RedisProcess,
    api: ApiServer,
    tmp_path: Path,
) -> None:
    """A real worker on the suite's API and Redis runs the blabbing model over the live backend."""
    server, kubeconfig = canary_api
    server.clear_requests()
    worker_log = tmp_path / "worker.log"
    with ScriptedModel(blabbing_model(canaries)) as model:
        env = scripted_worker_env(
            redis_server.url, model.url, key_prefix=API_PREFIX, kubeconfig=str(kubeconfig)
        )
        env["ASSAY_SNAPSHOT_ROOTS"] = TEST_SNAPSHOT_ROOTS
        worker = start_worker(env, worker_log, concurrency=2)
        try:
            body = {
                "text": PREDICATE,
                "target": {"type": "context", "context": "canary"},
                "budget": {"max_iterations": 60, "max_tokens": 2_000_000, "timeout_seconds": 120},
            }
            receipt = httpx.post(
                f"{api.url}/v1/evaluations", json=body, headers=auth(WRITE_TOKEN), timeout=15
            )
            assert receipt.status_code == 202, receipt.text
            run_id, check_id = receipt.json()["run_id"], receipt.json()["check_id"]
            run_url = f"{api.url}/v1/runs/{run_id}"

            def finished() -> bool:
                view = httpx.get(run_url, headers=auth(READ_TOKEN), timeout=10)
                return view.status_code == 200 and bool(view.json().get("verdict"))

            assert wait_until(finished, timeout=150, interval=0.5), worker_log_tail(worker_log)
            run_view = httpx.get(run_url, headers=auth(READ_TOKEN))
            shown = assay(
                "verdict", check_id, "--json",
                env={"ASSAY_REDIS_URL": redis_server.url, "ASSAY_KEY_PREFIX": API_PREFIX},
            )  # fmt: skip
            check_view = httpx.get(f"{api.url}/v1/checks/{check_id}", headers=auth(READ_TOKEN))
        finally:
            stop_process(worker)
        prompts = sent_by_assay(model)
    found = leaks(
        canaries,
        {
            "prompts": prompts,
            "redis": redis_dump(redis_server.url),
            "api run": run_view.text,
            "api check": check_view.text,
            "assay verdict": shown.stdout + shown.stderr,
            "worker log": worker_log.read_text(errors="replace"),
            "api log": api.log_path.read_text(errors="replace"),
        },
    )
    writes = sum(1 for r in server.requests if r.method != "GET")
    ledger.case(FAMILY, outcome(shown.returncode), canary_hits=sum(map(len, found.values())))
    ledger.case("write path", outcome(shown.returncode), non_get_requests=writes)
    assert shown.returncode == 1, (shown.stdout[-500:], shown.stderr[-2000:])
    assert run_view.status_code == 200 and "fallback seed" in run_view.text
    assert server.requests and writes == 0
    assert not found, found
    assert NAMESPACE in run_view.text
