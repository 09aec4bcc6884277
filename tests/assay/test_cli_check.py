"""`assay check` / `assay query` as a user runs them: the real console script in a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.testing.scripted_model import ScriptedModel
from tests.engine_support import PREDICATE, done, get_deployments, make_snapshot, script
from tests.fleet_support import TEST_SNAPSHOT_ROOTS

ASSAY = str(Path(sys.executable).parent / "assay")


def assay(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    environment["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    environment["ASSAY_SNAPSHOT_ROOTS"] = TEST_SNAPSHOT_ROOTS  # snapshots live in tmp_path
    environment.update(env or {})
    return subprocess.run(
        [ASSAY, *args], capture_output=True, text=True, env=environment, timeout=120
    )


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return make_snapshot(tmp_path / "prod-eu")


def write_script(tmp_path: Path, *turns: dict[str, Any]) -> str:
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump(script(*turns)))
    return str(path)


def test_check_true_prints_the_verdict_json_and_exits_0(tmp_path: Path, snapshot: Path) -> None:
    demo = write_script(tmp_path, get_deployments(), done("true", 0))
    result = assay("check", "--snapshot", str(snapshot), "--scripted", demo, "--json", PREDICATE)
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["verdict"] == "true" and verdict["exit_code"] == 0
    assert verdict["evidence"][0]["tool"] == "get"
    assert verdict["target"] == "snapshot:prod-eu"
    assert f"SCRIPTED MODEL - replaying {demo}, not a real LLM" in result.stderr


def test_check_false_with_trace_shows_each_step_on_stderr(tmp_path: Path, snapshot: Path) -> None:
    demo = write_script(tmp_path, get_deployments(), done("false", 0, explanation="web is short"))
    result = assay("check", "--snapshot", str(snapshot), "--scripted", demo, "--trace", PREDICATE)
    assert result.returncode == 1, result.stderr
    assert '[step 0] COMMAND get {"kind":"Deployment","namespace":"prod"} -> ok' in result.stderr
    assert "[step 1] DONE" in result.stderr
    assert "FALSE (exit 1)" in result.stdout and "web is short" in result.stdout
    assert "[step" not in result.stdout  # the trace stays off stdout


@pytest.mark.parametrize(
    ("last_turn", "code"),
    [
        (done("poorly_posed", explanation="which namespace?"), 2),
        ({"action": {"action": "ERROR", "message": "cannot read"}}, 3),
    ],
)
def test_poorly_posed_exits_2_and_cannot_determine_exits_3(
    tmp_path: Path, snapshot: Path, last_turn: dict[str, Any], code: int
) -> None:
    demo = write_script(tmp_path, last_turn)
    result = assay("check", "--snapshot", str(snapshot), "--scripted", demo, "--json", PREDICATE)
    assert result.returncode == code, result.stderr
    assert json.loads(result.stdout)["exit_code"] == code


def test_query_prints_the_answer_json(tmp_path: Path, snapshot: Path) -> None:
    answer = done("true", 0, explanation="two Deployments")
    answer["action"]["findings"] = ["prod/api 3/3", "prod/web 2/2"]
    demo = write_script(tmp_path, get_deployments(), answer)
    result = assay(
        "query", "--snapshot", str(snapshot), "--scripted", demo, "--json", "which Deployments?"
    )
    assert result.returncode == 0, result.stderr
    answer_json = json.loads(result.stdout)
    assert set(answer_json) == {
        "success",
        "summary",
        "findings",
        "tools_used",
        "iterations",
        "usage",
    }
    assert answer_json["success"] is True
    assert answer_json["findings"] == ["prod/api 3/3", "prod/web 2/2"]
    assert answer_json["tools_used"] == ["get"] and answer_json["iterations"] == 2


def test_query_without_json_reads_as_text(tmp_path: Path, snapshot: Path) -> None:
    answer = done("true", 0, explanation="two Deployments")
    answer["action"]["findings"] = ["prod/api 3/3", "prod/web 2/2"]
    demo = write_script(tmp_path, get_deployments(), answer)
    result = assay("query", "--snapshot", str(snapshot), "--scripted", demo, "which Deployments?")
    assert result.returncode == 0, result.stderr
    assert not result.stdout.lstrip().startswith("{")
    assert "ANSWERED" in result.stdout and "two Deployments" in result.stdout
    assert "prod/api 3/3" in result.stdout and "lookups: get" in result.stdout


def test_budget_flags_default_from_assay_environment(tmp_path: Path, snapshot: Path) -> None:
    demo = write_script(tmp_path, get_deployments(), done("true", 0))
    result = assay(
        "check", "--snapshot", str(snapshot), "--scripted", demo, "--json", PREDICATE,
        env={"ASSAY_MAX_ITERATIONS": "1"},
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert json.loads(result.stdout)["budget_exhausted"] == "iterations"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["check", PREDICATE], {}, "exactly one target"),
        (["check", "--snapshot", ".", "--context", "prod", PREDICATE], {}, "exactly one target"),
        (["check", "--snapshot", "/nonexistent/snap", PREDICATE], {}, "does not exist"),
        (["check", "--snapshot", ".", "--profile", "paranoid", PREDICATE], {}, "unknown profile"),
        (["check", "--snapshot", ".", "--max-iterations", "0", PREDICATE], {}, "max-iterations"),
        (["check", "--snapshot", ".", "--bogus", PREDICATE], {}, "No such option"),
        (["check", "--snapshot", ".", PREDICATE], {}, "no model is configured"),
        (["check", "--snapshot", ".", PREDICATE], {"ASSAY_MAX_TOKENS": "lots"}, "invalid"),
        (["check"], {}, "Missing argument"),
    ],
)
def test_usage_errors_exit_64(args: list[str], env: dict[str, str], message: str) -> None:
    result = assay(*args, env=env)
    assert result.returncode == 64, (result.stdout, result.stderr)
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("command", "model", "endpoint", "said"),
    [
        ("check", "nonsense-model", False, "name it as provider/model"),
        ("query", "nonsense-model", False, "openai/gpt-4o-mini"),
        ("check", "nonsense-model", True, "--model openai/nonsense-model"),
        ("check", "nonsense/foo", True, "--model openai/nonsense/foo"),
    ],
)
@pytest.mark.parametrize("given_by", ["flag", "environment"])
def test_a_model_litellm_cannot_route_is_a_usage_error_before_any_run(
    snapshot: Path, command: str, model: str, endpoint: bool, said: str, given_by: str
) -> None:
    """Before: the run started, the model call failed ('LLM Provider NOT provided') and the
    check ended cannot_determine, exit 3, which a CI job may tolerate or retry; the
    configuration was simply wrong. Now: 64 and one sentence naming the model and the
    form to use, and no request reaches the endpoint."""
    with ScriptedModel(script(done("true"))) as server:
        flags = ["--model", model] if given_by == "flag" else []
        env = {"ASSAY_MODEL": model} if given_by == "environment" else {}
        flags += ["--api-base", server.url] if endpoint else []
        result = assay(command, "--snapshot", str(snapshot), *flags, PREDICATE, env=env)
        requests = server.requests
    assert result.returncode == 64, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("assay: error: "), result.stderr
    assert f"the model {model!r}" in lines[0] and said in lines[0], lines[0]
    assert result.stdout == "" and requests == []


@pytest.mark.parametrize("model", ["openai/scripted", "gpt-4o-mini", "openai/some/served-model"])
def test_models_that_work_with_an_endpoint_are_not_refused(
    tmp_path: Path, snapshot: Path, model: str
) -> None:
    """The up-front check refuses only what litellm cannot route: the scripted test model,
    a model litellm knows by its bare name, any openai/NAME at an OpenAI-compatible server."""
    with ScriptedModel(script(get_deployments(), done("true", 0))) as server:
        result = assay("check", "--snapshot", str(snapshot), "--model", model,
                       "--api-base", server.url, "--json", PREDICATE)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["verdict"] == "true"


def test_help_does_not_import_litellm_the_engine_or_any_contract_model() -> None:
    """`assay --help` is start-up alone: no model library, no engine, no pydantic model built
    (building the contract's validators is most of a command's start-up)."""
    code = (
        "import sys\n"
        "from assay.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as exit:\n    code = exit.code\n"
        "print(code, 'litellm' in sys.modules, 'workers.engine.engine' in sys.modules,\n"
        "      'schemas.verdict' in sys.modules, 'schemas.budget' in sys.modules,\n"
        "      file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stderr.split() == ["0", "False", "False", "False", "False"], result.stderr
    assert "check" in result.stdout and "query" in result.stdout


def test_the_timeout_covers_the_whole_command_start_up_included(
    tmp_path: Path, snapshot: Path
) -> None:
    """`--timeout N` ends the command within N s of its start, as timeout(1) would: the
    start-up (imports, settings, the snapshot) is charged to the run, and --trace says how
    long it took. Before, the clock started after it: a loaded host ran 5 s past N."""
    hang = tmp_path / "hang.yaml"
    hang.write_text(yaml.safe_dump({"scenarios": [{"turns": [{"hang": 60}]}]}))
    began = time.monotonic()
    result = assay("check", "--snapshot", str(snapshot), "--scripted", str(hang),
                   "--timeout", "4", "--trace", "--json", PREDICATE)  # fmt: skip
    took = time.monotonic() - began
    assert result.returncode == 3, result.stderr
    startup = re.search(r"^start-up\s+([\d.]+)s .*charged to the run's 4s", result.stderr, re.M)
    assert startup is not None, result.stderr
    assert took < 4 + 0.75, (took, result.stderr)  # process creation and exit, on a busy host
    if result.stdout:  # the report, unless the budget ran out while it was being written
        verdict = json.loads(result.stdout)
        assert verdict["budget_exhausted"] == "deadline"
        assert verdict["duration_seconds"] >= float(startup.group(1))


def test_a_budget_spent_in_start_up_ends_the_command_with_3_at_once(snapshot: Path) -> None:
    demo = str(Path(__file__).resolve().parents[2] / "examples" / "scripts" / "demo.yaml")
    result = assay("check", "--snapshot", str(snapshot), "--scripted", demo,
                   "--timeout", "0.1", PREDICATE)  # fmt: skip
    assert result.returncode == 3
    assert "assay: error: the run's time budget ran out" in result.stderr
    assert "TRUE" not in result.stdout


SCREEN_REWRITE = "\x1b[1A\x1b[2K\x1b]0;all green\x07TRUE (exit 0)"
"""Up a line, erase it, set the window title, then a forged headline."""


@pytest.mark.parametrize("trace", [False, True])
def test_terminal_control_sequences_from_the_cluster_are_shown_not_obeyed(
    tmp_path: Path, trace: bool
) -> None:
    """A log line can hold escape sequences; a model that quotes it (an excerpt must be in
    the output) put them on the user's terminal, where they can rewrite the verdict shown."""
    snapshot = make_snapshot(tmp_path / "prod-eu")
    log = snapshot / "logs" / "prod" / "web-1" / "app.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"ready {SCREEN_REWRITE}\n")
    logs = {
        "action": {
            "action": "COMMAND",
            "tool": "logs",
            "arguments": {"namespace": "prod", "pod": "web-1", "container": "app"},
        }
    }
    verdict = done(
        "false", 0, explanation=f"the log says {SCREEN_REWRITE}", excerpt=f"ready {SCREEN_REWRITE}"
    )
    arguments = ["check", "--snapshot", str(snapshot), "--scripted"]
    arguments += [write_script(tmp_path, logs, verdict), *(["--trace"] if trace else []), "x"]
    result = assay(*arguments)
    assert result.returncode == 1, result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    assert "\\x1b[1A" in result.stdout  # shown, so the user sees something was there


@pytest.mark.parametrize("fast_path", ["true", "false"])  # the direct POST, and litellm's
def test_a_refused_connection_to_the_endpoint_ends_3_in_three_attempts_with_one_sentence(
    snapshot: Path, fast_path: str
) -> None:
    """Before: a refused connection (nothing listens at --api-base) was retried as a
    transient fault six times, 44 s of backoff, and the reason was urllib3's repr. Now: two
    retries (a server restarting is back within them), then 3 and a sentence that says what
    to do."""
    from assay.redis_process import free_port

    endpoint = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    result = assay(
        "check", "--snapshot", str(snapshot), "--model", "openai/served", "--api-base", endpoint,
        "--json", PREDICATE, env={"ASSAY_LLM_FAST_PATH": fast_path, "ASSAY_LOG_FORMAT": "json"},
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["verdict"] == "cannot_determine"
    assert verdict["reason"] == (
        f"nothing answered at the model endpoint {endpoint} (connection refused, 3 attempts): "
        "start the model server or fix --api-base / ASSAY_API_BASE"
    )
    retries = [line for line in result.stderr.splitlines() if '"llm_retry"' in line]
    assert len(retries) == 2, result.stderr
