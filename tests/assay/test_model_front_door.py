"""A model name litellm cannot route is refused at every door that queues or stores one.

`assay check` / `query` already exit 64 for it (tests/assay/test_cli_check.py). Before this
file, `submit`, `batch`, `schedule add` / `update`, `eval --model`, the API's
evaluations, batches and schedules and ``assay.Client``'s submit and batch took such a
name, queued or stored it, and every run later ended cannot_determine (a schedule: every
fire, forever). Now: 64 (CLI), 404 (API) or ``UnroutableModel`` (Python) with one
sentence, and nothing is written to Redis. A routable model (the tests'
scripted ``openai/scripted``) is still taken.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from assay.model_check import fleet_model_problem
from assay.worker_presence import presence_key, read_fleet_models
from schemas.settings import load_settings
from tests.api_support import TOKENS, WRITE_TOKEN, auth
from tests.assay.test_front_door import (
    ALL_SNAPSHOTS,
    PLAIN,
    PROD_EU,
    assay,
    env_for,
    one_error_line,
)
from tests.conftest import ROOT
from tests.fleet_support import stop_process, wait_until
from workers.engine.provider_keys import KEY_VARIABLES

BAD = "nonsense-model"
GOOD = "openai/scripted"
ENDPOINT = "http://127.0.0.1:9/v1"
GROQ = "https://api.groq.com/openai/v1"  # litellm routes any bare name at this endpoint


@pytest.fixture
def db(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    connection.close()


def keys(db: redis.Redis) -> list[str]:
    return sorted(db.keys("*"))


FLEET_COMMANDS = {
    "submit": ["submit", "--snapshot", PROD_EU, PLAIN],
    "batch": ["batch", PLAIN, "--snapshots", ALL_SNAPSHOTS],
    "schedule add": ["schedule", "add", "nightly", PLAIN, "--every", "1h",
                     "--snapshots", ALL_SNAPSHOTS],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(FLEET_COMMANDS))
def test_fleet_commands_refuse_an_unroutable_model_and_write_nothing(
    redis_url: str, db: redis.Redis, command: str
) -> None:
    """Before: exit 0, the run queued (or the schedule stored), every run ending 3."""
    before = keys(db)
    refused = assay(redis_url, *FLEET_COMMANDS[command], "--model", BAD)
    assert refused.returncode == 64, (command, refused.stdout, refused.stderr)
    line = one_error_line(refused)
    assert f"the model {BAD!r}" in line and "name it as provider/model" in line, line
    assert refused.stdout == ""
    assert keys(db) == before  # no run, batch, schedule or task


@pytest.mark.parametrize("command", ["submit", "batch"])
def test_the_message_names_the_endpoint_the_run_would_use(
    redis_url: str, db: redis.Redis, command: str
) -> None:
    refused = assay(redis_url, *FLEET_COMMANDS[command], "--model", BAD, "--api-base", ENDPOINT)
    assert refused.returncode == 64, refused.stderr
    assert f"--model openai/{BAD}" in one_error_line(refused)
    assert keys(db) == []


@pytest.mark.parametrize("command", sorted(FLEET_COMMANDS))
def test_a_routable_model_is_still_taken(redis_url: str, db: redis.Redis, command: str) -> None:
    taken = assay(redis_url, *FLEET_COMMANDS[command], "--model", GOOD, "--json")
    assert taken.returncode == 0, (command, taken.stderr)
    assert keys(db) != []


def test_schedule_update_refuses_an_unroutable_model_and_keeps_the_schedule(
    redis_url: str, db: redis.Redis
) -> None:
    added = assay(redis_url, *FLEET_COMMANDS["schedule add"], "--model", GOOD)
    assert added.returncode == 0, added.stderr
    stored = {key: db.dump(key) for key in keys(db)}
    refused = assay(redis_url, "schedule", "update", "nightly", "--model", BAD)
    assert refused.returncode == 64, refused.stderr
    assert f"the model {BAD!r}" in one_error_line(refused)
    assert {key: db.dump(key) for key in keys(db)} == stored
    changed = assay(redis_url, "schedule", "update", "nightly", "--model", "ollama/llama3")
    assert changed.returncode == 0, changed.stderr


@pytest.mark.parametrize("given_by", ["flag", "environment"])
def test_eval_refuses_an_unroutable_model_before_any_run(given_by: str, tmp_path: Path) -> None:
    """Before: the whole suite ran, every attempt ending cannot_determine."""
    flags = ["--model", BAD] if given_by == "flag" else []
    env = {"ASSAY_MODEL": BAD} if given_by == "environment" else {}
    out = tmp_path / "report.json"
    arguments = ["eval", "--only", "injection", "--no-baseline", "--out", str(out), *flags]
    refused = assay(None, *arguments, **env)
    assert refused.returncode == 64, (refused.stdout, refused.stderr)
    line = one_error_line(refused)
    assert f"the model {BAD!r}" in line, line
    assert ("ASSAY_MODEL" in line) == (given_by == "environment"), line
    assert not out.exists()


# --- the endpoint a fleet run uses is the worker's --------------------------------------------


def announce(db: redis.Redis, worker: str, **body: object) -> None:
    db.set(presence_key("assay", worker), json.dumps({"model": GOOD, **body}), ex=30)


def test_the_name_is_checked_at_the_live_workers_endpoints(redis_url: str, db: redis.Redis) -> None:
    """A run without its own api_base goes to its worker's: at Groq's URL litellm routes
    a bare name, so a fleet whose workers use it must not have it refused."""
    settings = load_settings(redis_url=redis_url)

    def problem() -> str | None:
        return fleet_model_problem(BAD, None, redis=db, settings=settings)

    assert problem() is not None  # no live worker: this process's (empty) ASSAY_API_BASE
    announce(db, "a:1", api_base=ENDPOINT)
    assert f"at {ENDPOINT}" in (problem() or "")
    announce(db, "b:2", api_base=GROQ)
    assert problem() is None  # one worker can route it
    db.delete(presence_key("assay", "b:2"))
    announce(db, "c:3")  # an older worker that does not say its endpoint: cannot tell
    assert problem() is None
    assert fleet_model_problem(BAD, ENDPOINT, redis=db, settings=settings) is not None
    assert fleet_model_problem(GOOD, None, redis=db, settings=settings) is None


# --- the HTTP API ------------------------------------------------------------------------------


@pytest.fixture
def api(redis_url: str) -> Iterator[TestClient]:
    from assay.api import create_app

    with TestClient(create_app(load_settings(redis_url=redis_url, api_tokens=TOKENS))) as client:
        yield client


TARGET = {"type": "snapshot", "path": PROD_EU}
SCHEDULE = {"name": "nightly", "predicate": PLAIN, "interval_seconds": 3600,
            "targets": {"snapshots": [PROD_EU]}}  # fmt: skip
API_WRITES = {
    "evaluations": ("/v1/evaluations", {"text": PLAIN, "target": TARGET}, 202),
    "batches": ("/v1/batches", {"text": PLAIN, "targets": [TARGET]}, 202),
    "schedules": ("/v1/schedules", SCHEDULE, 201),
}


def assert_unroutable_404(response: object) -> None:
    """A name litellm routes is the server's state (its litellm), not a rule of the schema:
    404, the model named is not one this server has."""
    assert getattr(response, "status_code", None) == 404, getattr(response, "text", "")
    error = response.json()["error"]  # type: ignore[attr-defined]
    assert error["code"] == "unroutable_model"
    assert error["message"].startswith("model: ") and f"the model {BAD!r}" in error["message"]
    assert "provider/model" in error["message"] and ENDPOINT not in error["message"]
    assert error["details"][0]["loc"] == ["body", "model"]
    assert error["details"][0]["type"] == "unroutable_model"


@pytest.mark.parametrize("route", sorted(API_WRITES))
def test_the_api_refuses_an_unroutable_model_with_404_and_writes_nothing(
    api: TestClient, db: redis.Redis, route: str
) -> None:
    path, body, _ = API_WRITES[route]
    before = keys(db)
    refused = api.post(path, json={**body, "model": BAD}, headers=auth(WRITE_TOKEN))
    assert_unroutable_404(refused)
    assert keys(db) == before


@pytest.mark.parametrize("route", sorted(API_WRITES))
def test_the_api_still_takes_a_routable_model(api: TestClient, db: redis.Redis, route: str) -> None:
    path, body, status = API_WRITES[route]
    taken = api.post(path, json={**body, "model": GOOD}, headers=auth(WRITE_TOKEN))
    assert taken.status_code == status, taken.text
    assert keys(db) != []


def test_the_api_refuses_a_schedule_change_to_an_unroutable_model(
    api: TestClient, db: redis.Redis
) -> None:
    created = api.post("/v1/schedules", json=SCHEDULE, headers=auth(WRITE_TOKEN))
    assert created.status_code == 201, created.text
    path = f"/v1/schedules/{created.json()['id']}"
    stored = {key: db.dump(key) for key in keys(db)}
    assert_unroutable_404(api.patch(path, json={"model": BAD}, headers=auth(WRITE_TOKEN)))
    assert {key: db.dump(key) for key in keys(db)} == stored
    changed = api.patch(path, json={"model": "hosted_vllm/x"}, headers=auth(WRITE_TOKEN))
    assert changed.status_code == 200 and changed.json()["model"] == "hosted_vllm/x"


# --- the cost ----------------------------------------------------------------------------------


def test_submit_help_and_a_usual_model_do_not_import_litellm() -> None:
    """litellm takes seconds to import: `assay submit --help` must not, and the usual
    names (a known provider/ prefix, a bare name from its price list) are told without it."""
    code = (
        "import sys\n"
        "from assay.cli import main\n"
        "try:\n    main(['submit', '--help'])\nexcept SystemExit as exit:\n    code = exit.code\n"
        "from workers.engine.llm import unroutable_model\n"
        "names = ['openai/scripted', 'ollama/llama3', 'hosted_vllm/x', 'gpt-4o-mini']\n"
        "assert all(unroutable_model(n, None) is None for n in names)\n"
        "print(code, 'litellm' in sys.modules, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.stderr.split() == ["0", "False"], result.stderr


def test_the_python_client_refuses_an_unroutable_model_and_writes_nothing(
    redis_url: str, db: redis.Redis
) -> None:
    """Before: ``Client.submit(..., model=...)`` and ``start_batch`` queued the runs."""
    from assay.client import Client, UnroutableModel

    with Client(load_settings(redis_url=redis_url)) as fleet:
        with pytest.raises(UnroutableModel, match=f"the model {BAD!r}") as refused:
            fleet.submit(PLAIN, snapshot=PROD_EU, model=BAD)
        assert isinstance(refused.value, ValueError)
        with pytest.raises(UnroutableModel, match=f"--model openai/{BAD}"):
            fleet.start_batch(PLAIN, snapshots=ALL_SNAPSHOTS, model=BAD, api_base=ENDPOINT)
        assert keys(db) == []
        receipt = fleet.submit(PLAIN, snapshot=PROD_EU, model=GOOD)
        batch_id = fleet.start_batch(PLAIN, snapshots=ALL_SNAPSHOTS, model=GOOD)
    assert db.exists(f"assay:run:{receipt.run_id}")
    assert db.exists(f"assay:batch:{batch_id}")


# --- keys: the workers hold them ----------------------------------------------------------------

KEY_VARIABLES_ALL = {name for names in KEY_VARIABLES.values() for name in names}
KEYED = "openai/gpt-4o-mini"  # a provider that wants a key


@pytest.fixture
def keyless_worker(redis_url: str, tmp_path: Path) -> Iterator[Path]:
    """A real `assay worker` with no model, no endpoint and no provider key in its
    environment, as `assay up` without ASSAY_MODEL starts one."""
    env = {k: v for k, v in env_for(redis_url).items() if k not in KEY_VARIABLES_ALL}
    log = tmp_path / "worker.log"
    with log.open("ab") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "assay.cli", "worker", "--concurrency", "2"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        yield log
    finally:
        stop_process(worker)


def written(db: redis.Redis) -> list[str]:
    """What a door may write (runs, checks, batches, schedules, the queue), not what the
    live worker keeps (its presence, kombu's bindings)."""
    return [k for k in keys(db) if not k.startswith(("_kombu.", "assay:worker:"))]


def test_a_model_no_live_worker_holds_a_key_for_is_refused_at_every_door(
    redis_url: str, db: redis.Redis, keyless_worker: Path
) -> None:
    """Before: `submit --model openai/gpt-4o-mini` queued the run, the worker's call failed
    with the provider's "missing credentials" (InternalServerError 500) and the run ended 3
    nine seconds later. Now: 64 (CLI) or 409 (API) with one sentence naming the variables
    to set on the workers, before anything is written."""
    settings = load_settings(redis_url=redis_url)
    assert wait_until(lambda: read_fleet_models(db, "assay").workers == 1, 60), (
        keyless_worker.read_text()[-2000:]
    )
    for command in sorted(FLEET_COMMANDS):
        refused = assay(redis_url, *FLEET_COMMANDS[command], "--model", KEYED)
        assert refused.returncode == 64, (command, refused.stdout, refused.stderr)
        line = one_error_line(refused)
        assert f"the model {KEYED!r} (openai) needs an API key" in line, line
        assert "ASSAY_API_KEY or OPENAI_API_KEY" in line, line
    assert written(db) == []
    from assay.api import create_app

    with TestClient(create_app(load_settings(redis_url=redis_url, api_tokens=TOKENS))) as api:
        path, body, _ = API_WRITES["evaluations"]
        answer = api.post(path, json={**body, "model": KEYED}, headers=auth(WRITE_TOKEN))
    assert answer.status_code == 409, answer.text  # the live workers' keys: the fleet's state
    assert answer.json()["error"]["code"] == "model_key_missing"
    assert answer.json()["error"]["details"][0]["type"] == "model_key_missing"
    assert "OPENAI_API_KEY" in answer.json()["error"]["message"]
    assert written(db) == []
    # The run's own endpoint may want no key (a self-hosted server): taken.
    own = assay(redis_url, *FLEET_COMMANDS["submit"], "--model", KEYED, "--api-base", ENDPOINT)
    assert own.returncode == 0, own.stderr
    assert fleet_model_problem(KEYED, None, redis=db, settings=settings) is not None


def test_a_worker_that_holds_the_key_or_does_not_say_lets_the_model_through(
    redis_url: str, db: redis.Redis
) -> None:
    settings = load_settings(redis_url=redis_url)

    def problem() -> str | None:
        return fleet_model_problem(KEYED, None, redis=db, settings=settings)

    assert problem() is None  # no live worker: its keys are unknown, the run waits
    announce(db, "a:1", api_base="", keys=[])
    assert problem() is not None
    announce(db, "b:2", api_base="", keys=["openai"])
    assert problem() is None
    db.delete(presence_key("assay", "b:2"))
    announce(db, "c:3", api_base="", keys=["*"])  # ASSAY_API_KEY
    assert problem() is None
    db.delete(presence_key("assay", "c:3"))
    announce(db, "d:4", api_base=ENDPOINT, keys=[])  # its own server
    assert problem() is None
    db.delete(presence_key("assay", "d:4"))
    announce(db, "e:5", api_base="")  # an older worker that does not say
    assert problem() is None


def test_a_typo_at_the_local_fleet_is_refused_without_loading_litellm_or_celery(
    redis_url: str, db: redis.Redis
) -> None:
    """`assay up --scripted` announces a private endpoint (127.0.0.1): a bare typo there is
    refused by the rule litellm itself follows, so `submit --model nonsense-model` answers
    as fast as `check` does. Before: 7-14 s, the import of litellm (3 s and more on a busy
    host) and of Celery and kombu (the fleet client) before the refusal."""
    announce(db, "a:1", api_base="http://127.0.0.1:40123/v1")
    code = (
        "import sys\n"
        "from assay.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as exit:\n    code = exit.code\n"
        "print(code, 'litellm' in sys.modules, 'celery' in sys.modules, file=sys.stderr)\n"
    )
    for command in ("submit", "batch"):
        args = [*FLEET_COMMANDS[command], "--model", BAD]
        result = subprocess.run(
            [sys.executable, "-c", code, *args], cwd=ROOT, env=env_for(redis_url),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        *message, summary = result.stderr.strip().splitlines()
        assert summary.split() == ["64", "False", "False"], result.stderr
        assert f"the model {BAD!r} at http://127.0.0.1:40123/v1" in message[0], message
    assert keys(db) == [presence_key("assay", "a:1")]
