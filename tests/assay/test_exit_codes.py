"""Every front door exits with the verdict's own code, for each of the four verdicts.

The exit code is the contract CI jobs and alerts gate on (0 true, 1 false, 2 poorly posed,
3 cannot determine), so it is checked at each door a user has: `assay check`, `assay submit
--wait`, `assay verdict` (by run and by check), `assay run`, `assay batch --wait` and `assay
batch status`, and the ``exit_code`` field of the HTTP API's verdicts and batch rows.

One scripted model (assay/testing/scripted_model.py, reached through litellm) gives every
verdict to the same predicate: it lists the Deployments and answers by the one it finds, so
the verdict is chosen by the target. Each snapshot here holds one Deployment whose name
says which verdict it gets. A real worker process and Redis serve the fleet doors; the CLI
runs in this process (the doors under test are its exit-code mappings, not the process).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from fastapi.testclient import TestClient

from assay.client import Client
from assay.redis_process import RedisProcess
from assay.testing.scripted_model import ScriptedModel
from schemas.settings import load_settings
from tests.api_support import READ_TOKEN, TOKENS, auth
from tests.cli_support import run_cli
from tests.fleet_support import scripted_worker_env, start_worker, stop_process, worker_log_tail

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# README's table, written out here rather than read from schemas.verdict.EXIT_CODES: a wrong
# mapping there would otherwise move the expectation along with the code.
EXPECTED = {"true": 0, "false": 1, "poorly_posed": 2, "cannot_determine": 3}
KINDS = list(EXPECTED)
PREFIX = "exits"
PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
WAIT = ("--wait-timeout", "90")

# verdict -> (snapshot folder, the Deployment in it that makes the model give that verdict)
TARGETS = {
    "true": ("a-true", "answer-yes"),
    "poorly_posed": ("b-poorly-posed", "answer-vague"),
    "cannot_determine": ("c-cannot-determine", "answer-unknown"),
    "false": ("d-false", "answer-no"),
}
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: prod}}
spec: {{replicas: 3}}
status: {{replicas: 3, readyReplicas: 3}}
"""


def _done(kind: str, marker: str) -> dict[str, Any]:
    action: dict[str, Any] = {"action": "DONE", "verdict": kind, "explanation": f"saw {marker}"}
    if kind in ("true", "false"):  # a decisive verdict must cite what it read
        action["evidence"] = [{"step": 0, "excerpt": marker}]
    return {"if_contains": marker, "action": action}


def verdict_by_target_script() -> dict[str, Any]:
    """List the Deployments, then answer with the verdict the one found names.

    A batch that names no profile runs `strict`, whose `true` a confirmer must confirm in a
    fresh context: the confirmer here answers by the same marker, from the evidence it is shown.
    """
    lookup = {
        "action": {
            "action": "COMMAND",
            "tool": "get",
            "arguments": {"kind": "Deployment", "namespace": "prod"},
        }
    }
    answers = [_done(kind, marker) for kind, (_folder, marker) in TARGETS.items()]
    return {
        "scenarios": [
            {"turns": [lookup, {"when": answers}]},
            {"role": "confirmer", "turns": [{"when": answers}]},
        ]
    }


@dataclass(frozen=True)
class Fleet:
    root: Path
    script: Path
    redis_url: str

    def snapshot(self, kind: str) -> str:
        return str(self.root / TARGETS[kind][0])


@pytest.fixture(scope="module")
def fleet(redis_server: RedisProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """The snapshots, the script, and a real worker on it, under this module's key prefix."""
    folder = tmp_path_factory.mktemp("exit-codes")
    root = folder / "snaps"
    for name, marker in TARGETS.values():
        (root / name).mkdir(parents=True)
        (root / name / "deployments.yaml").write_text(DEPLOYMENT.format(name=marker))
    script = folder / "script.yaml"
    script.write_text(yaml.safe_dump(verdict_by_target_script()))
    log = folder / "worker.log"
    with ScriptedModel(verdict_by_target_script()) as model:
        env = scripted_worker_env(redis_server.url, model.url, key_prefix=PREFIX)
        worker = start_worker(env, log, concurrency=8)
        try:
            yield Fleet(root, script, redis_server.url)
        finally:
            stop_process(worker)
            if worker.returncode not in (0, -15):
                print(worker_log_tail(log))


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """The in-process CLI points structlog at this test's captured stderr, which closes with
    the test: later code in the session (the API below, other modules) must not log there."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def cli_env(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process CLI talks to the module's fleet."""
    monkeypatch.setenv("ASSAY_REDIS_URL", fleet.redis_url)
    monkeypatch.setenv("ASSAY_KEY_PREFIX", PREFIX)


@dataclass(frozen=True)
class Finished:
    run_id: str
    check_id: str
    verdict: str


@pytest.fixture(scope="module")
def finished(fleet: Fleet) -> dict[str, Finished]:
    """One finished run per verdict, submitted through the Python client."""
    settings = load_settings(redis_url=fleet.redis_url, key_prefix=PREFIX)
    runs: dict[str, Finished] = {}
    with Client(settings) as client:
        receipts = {
            kind: client.submit(PREDICATE, snapshot=fleet.snapshot(kind), check_id=f"door-{kind}")
            for kind in KINDS
        }
        for kind, receipt in receipts.items():
            verdict = client.wait(receipt.run_id, timeout=90)
            runs[kind] = Finished(receipt.run_id, receipt.check_id, verdict.verdict.value)
    assert {kind: run.verdict for kind, run in runs.items()} == {k: k for k in KINDS}, runs
    return runs


# --- assay check (in process, no fleet) -------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_check_exits_with_the_verdicts_code(
    fleet: Fleet, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    check = ("check", "--snapshot", fleet.snapshot(kind), "--scripted", str(fleet.script))
    code, out, err = run_cli(capsys, *check, "--json", PREDICATE)
    assert json.loads(out)["verdict"] == kind, err[-1500:]
    assert code == EXPECTED[kind] and json.loads(out)["exit_code"] == EXPECTED[kind]
    code, out, err = run_cli(capsys, *check, PREDICATE)
    assert code == EXPECTED[kind], (out, err[-1500:])


# --- the fleet doors (in-process CLI, real worker and Redis) -----------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_submit_wait_exits_with_the_verdicts_code(
    fleet: Fleet, cli_env: None, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    submit = ("submit", "--snapshot", fleet.snapshot(kind), "--wait", *WAIT)
    code, out, err = run_cli(capsys, *submit, "--json", PREDICATE)
    assert json.loads(out)["verdict"] == kind, err[-1500:]
    assert code == EXPECTED[kind] and json.loads(out)["exit_code"] == EXPECTED[kind]
    code, out, err = run_cli(capsys, *submit, PREDICATE)
    assert code == EXPECTED[kind], (out, err[-1500:])


@pytest.mark.parametrize("kind", KINDS)
def test_verdict_exits_with_the_verdicts_code(
    finished: dict[str, Finished], cli_env: None, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    run = finished[kind]
    for args in (
        (run.run_id,),
        (run.check_id,),
        (run.check_id, "--json"),
        (run.check_id, "--history", "5"),
    ):
        code, out, err = run_cli(capsys, "verdict", *args)
        assert code == EXPECTED[kind], (args, out, err[-1500:])


@pytest.mark.parametrize("kind", KINDS)
def test_run_exits_with_the_verdicts_code(
    finished: dict[str, Finished], cli_env: None, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    for args in ((finished[kind].run_id,), (finished[kind].run_id, "--json")):
        code, out, err = run_cli(capsys, "run", *args)
        assert code == EXPECTED[kind], (args, out, err[-1500:])


def _batch(capsys: pytest.CaptureFixture[str], fleet: Fleet, pattern: str) -> tuple[int, str]:
    """`batch --wait --json` over the snapshots matching ``pattern``: its code and batch id."""
    glob = str(fleet.root / pattern)
    code, out, err = run_cli(capsys, "batch", PREDICATE, "--snapshots", glob, "--wait", *WAIT,
                             "--json")  # fmt: skip
    assert out, err[-1500:]
    return code, json.loads(out)["batch_id"]


@pytest.mark.parametrize("kind", KINDS)
def test_batch_wait_and_status_exit_with_the_verdicts_code(
    fleet: Fleet, cli_env: None, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A batch of one target exits with that target's code, waited for or looked up later."""
    code, batch_id = _batch(capsys, fleet, TARGETS[kind][0])
    assert code == EXPECTED[kind]
    for args in (("status", batch_id), ("status",), ("status", batch_id, "--json")):
        code, out, err = run_cli(capsys, "batch", *args)
        assert code == EXPECTED[kind], (args, out, err[-1500:])


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [("[abcd]-*", 1), ("[abc]-*", 2), ("[ac]-*", 3)],
    ids=["false wins", "poorly posed next", "then cannot determine"],
)
def test_a_batch_exits_with_its_worst_verdict(
    fleet: Fleet,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
    pattern: str,
    expected: int,
) -> None:
    """A batch answers "PREDICATE holds on every target": 0 only when all are true."""
    code, batch_id = _batch(capsys, fleet, pattern)
    assert code == expected
    code, out, err = run_cli(capsys, "batch", "status", batch_id)
    assert code == expected, (out, err[-1500:])


# --- the HTTP API's exit_code ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_api_serves_the_verdicts_exit_code(
    fleet: Fleet, finished: dict[str, Finished], kind: str
) -> None:
    from assay.api import create_app

    run = finished[kind]
    settings = load_settings(redis_url=fleet.redis_url, key_prefix=PREFIX, api_tokens=TOKENS)
    read = auth(READ_TOKEN)
    with TestClient(create_app(settings)) as api, Client(settings) as client:
        run_view = api.get(f"/v1/runs/{run.run_id}", headers=read).json()
        check_view = api.get(f"/v1/checks/{run.check_id}", headers=read).json()
        history = api.get(f"/v1/checks/{run.check_id}/history", headers=read).json()
        listed = api.get("/v1/checks", params={"verdict": kind}, headers=read).json()
        batch_id = client.start_batch(PREDICATE, snapshots=fleet.snapshot(kind))
        client.wait_batch(batch_id, timeout=90)
        rows = api.get(f"/v1/batches/{batch_id}/results", headers=read).json()["results"]
    assert run_view["verdict"]["verdict"] == kind
    assert run_view["verdict"]["exit_code"] == EXPECTED[kind]
    assert run_view["report"]["verdict"]["exit_code"] == EXPECTED[kind]
    assert check_view["exit_code"] == EXPECTED[kind]
    assert [v["exit_code"] for v in history["verdicts"]] == [EXPECTED[kind]]
    row = next(r for r in listed["checks"] if r["check_id"] == run.check_id)
    assert row["exit_code"] == EXPECTED[kind]
    assert [(r["verdict"], r["exit_code"]) for r in rows] == [(kind, EXPECTED[kind])]
