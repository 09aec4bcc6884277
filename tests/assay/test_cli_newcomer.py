"""A hurried newcomer at the command line: wrong settings, wrong folders, closed pipes.

Each test drives the real console script in a subprocess, the way a CI job or an
alert rule runs it, and checks what such a job relies on: the exit code (64 for
what the user got wrong, never a verdict code 0-3), one ``assay: error:`` line
that says what to fix, and no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import EXAMPLES, ROOT, TEST_SNAPSHOT_ROOTS
from tests.fleet_support import wait_until

ASSAY = str(Path(sys.executable).parent / "assay")
PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
PROD_EU = str(EXAMPLES / "snapshots" / "prod-eu")
DEMO = str(EXAMPLES / "scripts" / "demo.yaml")


def assay(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    environment["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    environment["ASSAY_SNAPSHOT_ROOTS"] = TEST_SNAPSHOT_ROOTS
    environment.update(env)
    return subprocess.run(
        [ASSAY, *args], capture_output=True, text=True, env=environment, cwd=cwd, timeout=120
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("assay: error: "), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


# --- settings that do not load -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("broken.yaml", "model: [unclosed\n", "is not valid YAML"),
        ("broken.toml", "model = [\n", "is not valid TOML"),
        ("list.yaml", "- model\n- openai/gpt-4o-mini\n", "key: value"),
    ],
)
def test_a_malformed_config_file_is_a_usage_error_naming_the_file(
    tmp_path: Path, name: str, text: str, said: str
) -> None:
    """Before: a YAML parser traceback and exit 1, which a CI job reads as `false`."""
    config = tmp_path / name
    config.write_text(text)
    result = assay("check", "--snapshot", PROD_EU, "--scripted", DEMO, PREDICATE,
                   ASSAY_CONFIG=str(config))  # fmt: skip
    assert result.returncode == 64, result.stderr
    line = one_error_line(result)
    assert str(config) in line and said in line


def test_an_invalid_setting_names_its_variable_in_one_sentence() -> None:
    """Before: pydantic's dump (`1 validation error for AssaySettings ... [type=int_parsing,
    input_value=...]`), and a multi-line one from `assay schedule list`."""
    for command in (["check", "--snapshot", PROD_EU, PREDICATE], ["schedule", "list"]):
        result = assay(*command, ASSAY_MAX_TOKENS="abc")
        assert result.returncode == 64, result.stderr
        line = one_error_line(result)
        assert "ASSAY_MAX_TOKENS" in line and "'abc'" in line, line
        assert "[type=" not in line and "errors.pydantic.dev" not in line, line
        assert "--help" not in line, line  # before: "(see `assay checks --help`)"


@pytest.mark.parametrize("command", ["check", "query"])
def test_a_predicate_about_a_future_instant_is_refused_now_and_sent_to_submit(
    command: str,
) -> None:
    """Before: `assay check "on 2030-01-01, ..."` answered about today (exit 0), while the
    docs (docs/scheduler.md) say a predicate opening with a future instant waits for it."""
    dated = f"on 2030-01-01, {PREDICATE}"
    result = assay(command, "--snapshot", PROD_EU, "--scripted", DEMO, dated)
    assert result.returncode == 64, result.stderr
    line = one_error_line(result)
    assert "2030-01-01T00:00:00Z" in line and "assay submit" in line, line


def test_a_missing_provider_key_is_named_before_the_run() -> None:
    """Before: 23 s of retries, then exit 3 with litellm's "InternalServerError 500 ... set
    OPENAI_API_KEY", while assay's own setting is ASSAY_API_KEY."""
    result = assay("check", "--snapshot", PROD_EU, "--model", "gpt-4o-mini", PREDICATE,
                   OPENAI_API_KEY="")  # fmt: skip
    assert result.returncode == 64, result.stderr
    line = one_error_line(result)
    assert "ASSAY_API_KEY" in line and "OPENAI_API_KEY" in line and "--help" not in line, line


def test_an_over_long_predicate_is_one_sentence_before_any_banner() -> None:
    """Before: the SCRIPTED banner, then pydantic's "String should have at most 4000
    characters" for a 52 KB predicate."""
    result = assay("check", "--snapshot", PROD_EU, "--scripted", DEMO, "x" * 52_000)
    assert result.returncode == 64, result.stderr
    line = one_error_line(result)  # one line: no banner before it
    assert "52,000 characters" in line and "4,000" in line and "String should" not in line


def test_an_option_short_of_values_points_at_its_own_command() -> None:
    """Before: `assay eval --compare a.json` pointed at `assay --help`."""
    result = assay("eval", "--compare", "a.json")
    assert result.returncode == 64
    assert "(see `assay eval --help`)" in one_error_line(result)


def test_the_api_with_an_invalid_setting_is_a_usage_error_not_a_traceback() -> None:
    """Before: `assay api` printed pydantic's traceback and exited 1."""
    result = assay("api", ASSAY_PROFILE="turbo")
    assert result.returncode == 64, result.stderr
    line = one_error_line(result)
    assert "ASSAY_PROFILE" in line and "smoke" in line, line


# --- a reader that goes away ---------------------------------------------------------------------


def closed_pipe_run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run assay with stdout a pipe whose reader has gone (`| head -1` once head is done)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    environment["ASSAY_SNAPSHOT_ROOTS"] = TEST_SNAPSHOT_ROOTS
    try:
        return subprocess.run(
            [ASSAY, *args], stdout=write_end, stderr=subprocess.PIPE, text=True,
            env=environment, cwd=ROOT, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["check", "--snapshot", PROD_EU, "--scripted", DEMO, "--json", PREDICATE],
    ],
)
def test_a_closed_pipe_is_141_not_a_verdict_code(args: list[str]) -> None:
    """Before: exit 1 (typer's choice), which a `set -o pipefail` job reads as `false`
    even when the verdict was `true`. 141 is what a shell reports for SIGPIPE."""
    result = closed_pipe_run(*args)
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr


# --- a snapshot folder that is not one -----------------------------------------------------------


@pytest.mark.parametrize("content", [None, "notes.txt"])
def test_check_on_a_folder_without_objects_is_a_usage_error(
    tmp_path: Path, content: str | None
) -> None:
    """Before: the run went ahead on an empty cluster and the scripted model's answer
    stood (a real one may well call "no pod runs as root" true there)."""
    folder = tmp_path / "captured"
    folder.mkdir()
    if content is not None:
        (folder / content).write_text("kubectl get pods -o yaml\n")
    result = assay("check", "--snapshot", str(folder), "--scripted", DEMO, PREDICATE)
    assert result.returncode == 64, (result.stdout, result.stderr)
    assert result.stdout == ""
    line = one_error_line(result)
    assert "holds no Kubernetes objects" in line and str(folder) in line, line


# --- the first commands a newcomer types --------------------------------------------------------


@pytest.mark.parametrize("args", [[], ["schedule"], ["probe"]])
def test_no_command_shows_the_help_as_help_then_one_error_line(args: list[str]) -> None:
    """Before: the whole help text squashed into one `assay: error: Usage: ...` line."""
    result = assay(*args)
    assert result.returncode == 64, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Usage: assay"), result.stderr
    assert "Commands:" in lines and "Traceback" not in result.stderr
    errors = [line for line in lines if line.startswith("assay: error:")]
    assert errors == [lines[-1]] and "missing a command" in errors[0], result.stderr
    assert len(errors[0]) < 200


def test_version_flag_prints_the_version() -> None:
    """Before: `assay --version` was `No such option: --version` (exit 64)."""
    from importlib.metadata import version

    for flag in ("--version", "version"):
        result = assay(flag)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == version("assay")


@pytest.mark.parametrize("command", ["check", "submit"])
def test_max_cost_zero_is_refused_by_the_flag_not_taken_as_no_limit(
    tmp_path: Path, command: str
) -> None:
    """Before: the help said [x>=0.0]; `check --max-cost 0` then failed in the settings
    with pydantic's text, and `submit --max-cost 0` queued a run with no cost limit."""
    result = assay(command, "--snapshot", PROD_EU, "--max-cost", "0", PREDICATE,
                   XDG_DATA_HOME=str(tmp_path))  # fmt: skip
    assert result.returncode == 64, result.stderr
    line = one_error_line(result)
    assert "--max-cost" in line and "more than 0" in line, line


# --- tables when piped ---------------------------------------------------------------------------

BOX_CHARS = set("─│┃━┏┓┗┛┡┩╇┼┳┻└┘┌┐")
ALL_SNAPSHOTS = str(EXAMPLES / "snapshots" / "*")


def test_schedule_list_and_notify_status_piped_are_plain_one_line_per_row(
    redis_url: str, tmp_path: Path
) -> None:
    """Before: both drew box lines when piped and wrapped each row over several lines,
    unlike every other table (docs/fleet.md: 'no box drawing when piped', fit 80 columns)."""
    fleet = {"ASSAY_REDIS_URL": redis_url, "XDG_DATA_HOME": str(tmp_path)}
    for name, cadence in (
        ("nightly-replicas-in-every-region", ["--cron", "0 2 * * *", "--tz", "Europe/Berlin"]),
        ("replicas", ["--every", "15m"]),
    ):
        added = assay("schedule", "add", name, PREDICATE, *cadence, "--snapshots", ALL_SNAPSHOTS,
                      **fleet)  # fmt: skip
        assert added.returncode == 0, added.stderr
    listing = assay("schedule", "list", **fleet)
    assert listing.returncode == 0, listing.stderr
    assert not BOX_CHARS & set(listing.stdout), listing.stdout
    lines = listing.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), listing.stdout
    assert len([line for line in lines if "active" in line]) == 2, listing.stdout
    assert any(line.lstrip().startswith("replicas ") for line in lines), listing.stdout

    sinks = '{"ops": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}}'
    status = assay("notify", "status", ASSAY_NOTIFY_SINKS=sinks,
                   ASSAY_NOTIFY_SINKS__OPS__HMAC_KEY="k" * 32, **fleet)  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert not BOX_CHARS & set(status.stdout), status.stdout
    rows = status.stdout.splitlines()
    assert all(len(line) <= 80 for line in rows), status.stdout
    assert len(rows) == 2 and rows[1].split()[:2] == ["ops", "webhook"], status.stdout


# --- settings that are silently not settings -----------------------------------------------------


def test_a_misspelt_setting_is_warned_about_not_silently_ignored(tmp_path: Path) -> None:
    """Before: ASSAY_MAX_TOKEN=500 (no S) or `modle:` in the config file changed nothing
    and said nothing; a user believing their run capped walked away. Still a warning,
    not an error: one stale key must not stop a worker."""
    config = tmp_path / "assay.yaml"
    config.write_text("modle: openai/gpt-4o-mini\nprofile: fast\n")
    result = assay("check", "--snapshot", PROD_EU, "--scripted", DEMO, PREDICATE,
                   ASSAY_MAX_TOKEN="500", ASSAY_CONFIG=str(config))  # fmt: skip
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("assay: warning:")]
    assert len(warnings) == 2, result.stderr
    assert "ASSAY_MAX_TOKEN " in warnings[0] and "ASSAY_MAX_TOKENS" in warnings[0], warnings
    assert "'modle'" in warnings[1] and str(config) in warnings[1], warnings
    assert "'model'" in warnings[1], warnings


def test_known_variables_and_compose_ones_are_not_warned_about() -> None:
    result = assay("check", "--snapshot", PROD_EU, "--scripted", DEMO, PREDICATE,
                   ASSAY_MAX_TOKENS="50000", ASSAY_NOTIFY_SINKS__OPS__HMAC_KEY="x" * 32,
                   ASSAY_NOTIFY_SINKS='{"ops": {"type": "webhook", "url": "http://x/hook"}}',
                   ASSAY_UID="1000", ASSAY_IMAGE="assay:dev")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr


# --- a worker started with the wrong flags -------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--pool", "gevent"], "the gevent pool is not supported"),
        (["--pool", "eventlet"], "the eventlet pool is not supported"),
        (["--loglevel", "banana"], "DEBUG, INFO, WARNING"),
    ],
)
def test_a_worker_flag_celery_would_choke_on_is_a_usage_error(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """Before: Celery's traceback (ModuleNotFoundError: gevent; click's BadParameter for
    the log level) and exit 1; and with gevent installed, a worker whose runs stalled each
    other, unpatched, until some never finished."""
    result = assay(
        "worker", *args, XDG_DATA_HOME=str(tmp_path), ASSAY_REDIS_URL="redis://127.0.0.1:1/0"
    )
    assert result.returncode == 64, result.stderr[-2000:]
    assert said in one_error_line(result)


def test_a_worker_whose_own_model_cannot_be_routed_does_not_start(tmp_path: Path) -> None:
    """Before: it started, and every run without a model of its own ended 3 with litellm's
    reason, for as long as it ran."""
    result = assay(
        "worker", XDG_DATA_HOME=str(tmp_path), ASSAY_REDIS_URL="redis://127.0.0.1:1/0",
        ASSAY_MODEL="nonsense-model",
    )  # fmt: skip
    assert result.returncode == 64, result.stderr[-2000:]
    line = one_error_line(result)
    assert "ASSAY_MODEL cannot be used" in line and "nonsense-model" in line, line


# --- a bug in assay itself -----------------------------------------------------------------------


def test_an_unexpected_crash_exits_70_not_a_verdict_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: an exception nobody caught ended the process with Python's exit 1, which a
    CI job reads as a confirmed `false`. 70 (EX_SOFTWARE) is no verdict."""
    from assay import cli
    from assay.commands import evaluate

    def broken(*args: object, **kwargs: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(evaluate, "_run", broken)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["check", "--snapshot", PROD_EU, PREDICATE])
    assert exit_info.value.code == 70
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("assay: error: internal error") and "RuntimeError: a bug" in last


# --- a run id used twice -------------------------------------------------------------------------


def test_a_reused_run_id_says_the_run_was_not_queued_and_whose_it_is(
    redis_url: str, tmp_path: Path
) -> None:
    """Documented: a known run id queues nothing and answers that run. Before, the CLI
    still said 'run X queued; waiting for its verdict', and with another predicate or
    target it showed (and exited with) the other evaluation's verdict without a word."""
    fleet = {"ASSAY_REDIS_URL": redis_url, "XDG_DATA_HOME": str(tmp_path)}
    staging = str(EXAMPLES / "snapshots" / "staging-us")
    first = assay("submit", "--snapshot", PROD_EU, "--run-id", "ci-run", PREDICATE, **fleet)
    assert first.returncode == 0 and "already" not in first.stderr, first.stderr
    same = assay("submit", "--snapshot", PROD_EU, "--run-id", "ci-run", PREDICATE, **fleet)
    assert same.returncode == 0, same.stderr
    assert "run ci-run was already submitted; nothing was queued again" in same.stderr
    other = assay("submit", "--snapshot", staging, "--run-id", "ci-run", "--wait",
                  "--wait-timeout", "0.5", PREDICATE, **fleet)  # fmt: skip
    assert "queued; waiting" not in other.stderr, other.stderr
    assert "run id ci-run already belongs to" in other.stderr, other.stderr
    assert "snapshot:prod-eu" in other.stderr and "pick a new --run-id" in other.stderr


def test_check_on_the_folder_of_several_clusters_warns_that_they_were_merged() -> None:
    """`--snapshot examples/snapshots` (one level too high) merged three clusters into one
    called `snapshot:snapshots` and answered for it without a word on the terminal."""
    result = assay("check", "--snapshot", str(EXAMPLES / "snapshots"), "--scripted", DEMO,
                   PREDICATE)  # fmt: skip
    warnings = [line for line in result.stderr.splitlines() if line.startswith("assay: warning:")]
    assert len(warnings) == 1, result.stderr
    assert "several clusters" in warnings[0], warnings


@pytest.mark.parametrize("api_base", ["localhost:11434/v1", "not a url", "ftp://models/v1"])
def test_an_api_base_that_is_no_http_address_is_a_usage_error(api_base: str) -> None:
    """Before: the run started and ended `cannot_determine` (exit 3, 'the model could not be
    reached'), which a CI job may tolerate or retry; the command line was simply wrong."""
    result = assay("check", "--snapshot", PROD_EU, "--model", "openai/m", "--api-base",
                   api_base, PREDICATE)  # fmt: skip
    assert result.returncode == 64, result.stdout + result.stderr
    line = one_error_line(result)
    assert "http://" in line and api_base in line, line


# --- the API on a port that is taken -------------------------------------------------------------


def test_the_api_on_a_port_in_use_says_so_and_exits_64_not_3(redis_url: str) -> None:
    """Before: 'assay api listening on http://...' and then uvicorn's bind error and its
    startup-failure exit code 3, which is `cannot_determine` in assay's contract."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = assay("api", "--port", str(port), ASSAY_REDIS_URL=redis_url,
                       ASSAY_API_TOKENS='{"t": "read"}')  # fmt: skip
    assert result.returncode == 64, result.stderr
    line = one_error_line(result)
    assert f"127.0.0.1:{port}" in line and "--port" in line, line


def test_an_empty_predicate_reads_as_a_sentence_from_submit_and_batch(
    redis_url: str, tmp_path: Path
) -> None:
    """Before: 'the predicate cannot be submitted: Value error, the predicate text is empty';
    `batch` first noted that its runs would wait for a worker, then refused."""
    fleet = {"ASSAY_REDIS_URL": redis_url, "XDG_DATA_HOME": str(tmp_path)}
    for command in (["submit", "--snapshot", PROD_EU], ["batch", "--snapshots", PROD_EU]):
        result = assay(*command, "   ", **fleet)
        assert result.returncode == 64, result.stderr
        line = one_error_line(result)
        assert "the predicate text is empty" in line and "Value error" not in line, line


# --- Ctrl-C while waiting ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["submit", "--snapshot", PROD_EU, "--wait", PREDICATE], "assay verdict "),
        (["batch", PREDICATE, "--snapshots", ALL_SNAPSHOTS, "--wait"], "assay batch status "),
    ],
)
def test_ctrl_c_while_waiting_exits_130_and_says_where_the_answer_will_be(
    redis_url: str, tmp_path: Path, args: list[str], said: str
) -> None:
    """No worker runs, so --wait waits; Ctrl-C must not be 0-3. Before: 130 without a
    word, though the run (or batch) goes on in the fleet."""
    import signal

    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    environment.update(ASSAY_SNAPSHOT_ROOTS=TEST_SNAPSHOT_ROOTS, ASSAY_REDIS_URL=redis_url,
                       XDG_DATA_HOME=str(tmp_path))  # fmt: skip
    process = subprocess.Popen(
        [ASSAY, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environment, cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # both note that no worker runs, then queue and wait
        seen.append(line)
        if "no worker is running yet" in line:
            break
    db = redis.Redis.from_url(redis_url, decode_responses=True)

    def waiting() -> bool:  # the run is queued, or the batch's fan-out sealed
        if args[0] == "submit":
            return bool(db.keys("assay:run:*"))
        batches = [key for key in db.keys("assay:batch:*") if key.count(":") == 2]
        return any(db.hget(key, "sealed") == "1" for key in batches)

    assert wait_until(waiting, timeout=60), "".join(seen)
    time.sleep(0.5)  # into the wait
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=60)
    assert process.returncode == 130, "".join(seen) + rest
    errors = [line for line in rest.splitlines() if line.startswith("assay: error:")]
    assert len(errors) == 1 and said in errors[0] and "goes on" in errors[0], rest


def test_a_waiting_run_shows_its_wake_up_time_in_utc_with_z() -> None:
    """Before: `assay run` printed `+00:00` where every other command prints `Z`."""
    from datetime import UTC, datetime

    from rich.console import Console

    from assay.render import render_report
    from schemas.budget import Budget
    from schemas.report import RunReport
    from tests.fleet_support import snapshot_request

    request = snapshot_request()
    report = RunReport(
        run_id=request.run_id, check_id=request.check_id, status="waiting", request=request,
        budget=Budget(), model="openai/scripted", wake_at=datetime(2030, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    console = Console(record=True, width=120)
    render_report(report, console)
    shown = console.export_text()
    assert "waiting until 2030-01-01T00:00:00Z" in shown and "+00:00" not in shown


def test_check_help_speaks_of_check_and_submit_help_of_the_workers() -> None:
    """Before: `check --help` said the budget flags were "for submit and batch, the
    workers'"."""
    local = " ".join(assay("check", "--help").stdout.split())
    fleet = " ".join(assay("submit", "--help").stdout.split())
    assert "submit and batch" not in local and "workers'" not in local
    assert "ASSAY_MAX_TOKENS" in local and "the workers' ASSAY_MAX_TOKENS" in fleet
