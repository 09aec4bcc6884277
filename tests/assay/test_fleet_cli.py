"""The fleet commands as a user runs them: real `assay` processes, a real worker and Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.redis_process import free_port
from assay.testing.scripted_model import ScriptedModel
from tests.fleet_support import (
    NO_CONFIRMER_PROFILE,
    PREDICATE,
    ROOT,
    TEST_SNAPSHOT_ROOTS,
    children_of,
    make_snapshots,
    scripted_worker_env,
    start_worker,
    stop_process,
    three_step_script,
    wait_until,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ASSAY = [sys.executable, "-m", "assay.cli"]


def assay(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ASSAY, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel(three_step_script()) as scripted:
        yield scripted


@pytest.fixture
def cli_env(redis_url: str) -> dict[str, str]:
    return worker_env(redis_url)


@pytest.fixture
def worker(
    redis_url: str, model: ScriptedModel, tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    process = start_worker(scripted_worker_env(redis_url, model.url), tmp_path / "w.log", 8)
    yield process
    stop_process(process)


def test_submit_wait_verdict_run_and_checks(
    cli_env: dict[str, str], worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    bad, good = make_snapshots(tmp_path / "snaps", 2, bad_every=2)

    waited = assay("submit", PREDICATE, "--snapshot", str(bad), "--wait", env=cli_env)
    assert waited.returncode == 1, waited.stderr
    assert "FALSE" in waited.stdout and "web-bad" in waited.stdout

    queued = assay("submit", PREDICATE, "--snapshot", str(good), "--json", env=cli_env)
    assert queued.returncode == 0, queued.stderr
    receipt = json.loads(queued.stdout)
    assert set(receipt) >= {"run_id", "check_id"}

    def has_verdict() -> bool:
        return assay("verdict", receipt["run_id"], env=cli_env).returncode == 0

    assert wait_until(has_verdict, timeout=60, interval=0.5)
    by_check = assay("verdict", receipt["check_id"], "--json", env=cli_env)
    assert by_check.returncode == 0
    assert json.loads(by_check.stdout)["run_id"] == receipt["run_id"]

    history = assay("verdict", receipt["check_id"], "--history", "5", "--wide", env=cli_env)
    assert history.returncode == 0 and receipt["run_id"] in history.stdout

    steps = assay("run", receipt["run_id"], env=cli_env)
    assert steps.returncode == 0
    assert "[step 1] COMMAND get" in steps.stdout and "TRUE" in steps.stdout

    listed = assay("checks", "--verdict", "false", "--json", env=cli_env)
    assert listed.returncode == 0
    rows = json.loads(listed.stdout)
    assert [r["target"] for r in rows] == ["snapshot:cluster-000"]


def test_exit_codes_for_pending_unknown_and_no_fleet(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    (folder,) = make_snapshots(tmp_path / "snaps", 1)
    queued = assay("submit", PREDICATE, "--snapshot", str(folder), env=cli_env)  # no worker runs
    run_id = queued.stdout.strip()
    assert queued.returncode == 0 and run_id

    pending = assay("verdict", run_id, env=cli_env)
    assert pending.returncode == 75 and "queued" in pending.stderr
    assert assay("run", run_id, env=cli_env).returncode == 75
    unknown = assay("verdict", "no-such-run", env=cli_env)
    assert unknown.returncode == 66 and "assay checks" in unknown.stderr

    nowhere = {k: v for k, v in cli_env.items() if k != "ASSAY_REDIS_URL"}
    nowhere["ASSAY_DATA_DIR"] = str(tmp_path / "empty-data")
    missing = assay("verdict", run_id, env=nowhere)
    assert missing.returncode == 69 and "assay up" in missing.stderr

    usage = assay("submit", PREDICATE, env=cli_env)
    assert usage.returncode == 64, "no target is a usage error, never a verdict code"

    later = assay(
        "submit", PREDICATE, "--snapshot", str(folder), "--in", "1h", "--json", env=cli_env
    )
    assert later.returncode == 0, later.stderr
    deferred = json.loads(later.stdout)
    assert deferred["not_before"] is not None
    assert assay("verdict", deferred["run_id"], env=cli_env).returncode == 75
    import redis

    queue = redis.Redis.from_url(cli_env["ASSAY_REDIS_URL"]).lrange("assay.evaluations", 0, -1)
    assert not any(deferred["run_id"].encode() in item for item in queue), "held, not queued"


def test_batch_wait_then_status(
    cli_env: dict[str, str], worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    make_snapshots(tmp_path / "fleet", 6, bad_every=3)  # clusters 0 and 3 are bad
    pattern = str(tmp_path / "fleet" / "*")
    done = assay("batch", PREDICATE, "--snapshots", pattern, "--wait",
                 "--profile", NO_CONFIRMER_PROFILE, env=cli_env)  # fmt: skip
    assert done.returncode == 1, done.stderr  # some target is false
    for index in range(6):
        assert f"snapshot:cluster-{index:03d}" in done.stdout
    batch_id = done.stdout.split("batch ", 1)[1].split(" ", 1)[0]

    status = assay("batch", "status", batch_id, "--json", env=cli_env)
    assert status.returncode == 1
    tally = json.loads(status.stdout)
    assert (tally["total"], tally["true"], tally["false"], tally["pending"]) == (6, 4, 2, 0)

    results = json.loads(assay("batch", "results", batch_id, "--json", env=cli_env).stdout)
    assert results["batch_id"] == batch_id
    verdicts = sorted(row["verdict"] for row in results["results"])
    assert verdicts == ["false"] * 2 + ["true"] * 4
    lines = assay("batch", "results", batch_id, "--jsonl", env=cli_env).stdout.splitlines()
    assert [json.loads(line) for line in lines] == results["results"]
    empty = assay("batch", PREDICATE, "--snapshots", str(tmp_path / "none-*"), env=cli_env)
    assert empty.returncode == 64 and "matched nothing" in empty.stderr


def test_up_serves_other_shells_and_stops_cleanly(model: ScriptedModel, tmp_path: Path) -> None:
    """Ctrl-C in the terminal (SIGINT to `assay up`'s whole process group, as a terminal
    sends it) stops the scheduler and the worker, then Redis, and exits 130. Before, the
    terminal's SIGINT also killed the private redis-server (same group), the worker then
    sat out its Redis retries until `up` killed it 20 s later, and `up` exited 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env.update(
        ASSAY_DATA_DIR=str(tmp_path / "data"),
        ASSAY_MODEL="openai/scripted",
        ASSAY_API_BASE=model.url,
        ASSAY_API_KEY="scripted-no-key",
        ASSAY_WORKER_CONCURRENCY="4",
        ASSAY_SNAPSHOT_ROOTS=TEST_SNAPSHOT_ROOTS,  # the snapshot lives in tmp_path
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PYTHONPATH=str(ROOT),
    )
    state = tmp_path / "data" / "local.json"
    up = subprocess.Popen(
        [*ASSAY, "up"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        process_group=0,  # a foreground job of its own, as a shell starts it
    )  # fmt: skip
    try:
        assert wait_until(state.exists, timeout=60), up.stderr.read1().decode()  # type: ignore[union-attr]
        children = children_of(up.pid)  # redis-server, the worker, the scheduler
        assert len(children) == 3, children
        (folder,) = make_snapshots(tmp_path / "snaps", 1)
        shell = {k: v for k, v in env.items() if k not in ("ASSAY_MODEL", "ASSAY_API_BASE")}
        waited = assay("submit", PREDICATE, "--snapshot", str(folder), "--wait", env=shell)
        assert waited.returncode == 0, waited.stderr
        assert "TRUE" in waited.stdout
        again = subprocess.run([*ASSAY, "up"], env=env, cwd=ROOT, capture_output=True, text=True)
        assert again.returncode == 0 and "already running" in again.stdout, again.stderr
    finally:
        pressed = time.monotonic()
        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        out, err = up.communicate(timeout=60)
    took = time.monotonic() - pressed
    assert up.returncode == 130, err.decode()
    assert took < 10, f"Ctrl-C took {took:.1f}s: {err.decode()}"  # the old path took 20 s
    assert [pid for pid in children if Path(f"/proc/{pid}").exists()] == [], "nothing survives"
    redis_log = (tmp_path / "data" / "redis" / "redis.log").read_text()
    assert "Received SIGTERM" in redis_log and "Received SIGINT" not in redis_log, redis_log
    for name in ("worker", "scheduler"):
        log = (tmp_path / "data" / "logs" / f"{name}.log").read_text(errors="replace")
        assert "Connection refused" not in log, f"the {name} lost Redis while stopping: {log}"
    assert b"redis" in out and b"worker" in out
    assert not state.exists(), "the state file goes away with the fleet"
    assert (tmp_path / "data" / "redis" / "appendonlydir").is_dir(), "Redis data is kept"
    again = assay("down", env=env)
    assert again.returncode == 0 and "nothing running" in again.stdout, again.stderr


@pytest.fixture
def password_redis(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A redis-server of this test's own that wants a password: (URL with it, password)."""
    import redis as redis_lib

    from assay.redis_process import RedisProcess

    server = RedisProcess(data_dir=tmp_path / "redis").start()
    password = "secretpw-7c1d"
    redis_lib.Redis.from_url(server.url).config_set("requirepass", password)
    yield server.url.replace("redis://", f"redis://:{password}@"), password
    server.stop()


def test_up_detach_returns_with_a_ready_worker_and_never_shows_the_redis_password(
    password_redis: tuple[str, str], tmp_path: Path
) -> None:
    """Before: `up --detach` returned before the worker consumed the queue (a `batch --wait`
    right after said "no worker is running yet"), `assay api` printed ASSAY_REDIS_URL's
    password on its "listening" line, and a second `assay up` exited 70 ("assay failed")."""
    from tests.api_support import TOKENS

    url, password = password_redis
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env.update(
        ASSAY_DATA_DIR=str(tmp_path / "data"),
        ASSAY_REDIS_URL=url,
        ASSAY_SNAPSHOT_ROOTS=str(ROOT),
        ASSAY_API_TOKENS=json.dumps(TOKENS),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PYTHONPATH=str(ROOT),
    )
    demo = str(ROOT / "examples" / "scripts" / "demo.yaml")
    shown: list[str] = []
    try:
        up = assay("up", "--detach", "--scripted", demo, env=env, timeout=150)
        shown += [up.stdout, up.stderr]
        assert up.returncode == 0, up.stderr
        batch = assay("batch", PREDICATE, "--snapshots", "examples/snapshots/*", "--wait",
                      env=env)  # fmt: skip
        shown += [batch.stdout, batch.stderr]
        assert batch.returncode == 1, batch.stderr  # false on staging-us
        assert "no worker is running" not in batch.stderr
        again = assay("up", "--detach", env=env)
        shown += [again.stdout, again.stderr]
        assert again.returncode == 0 and "already running" in again.stdout, again.stderr
        api = subprocess.Popen(
            [*ASSAY, "api", "--port", str(free_port())], env=env, cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert api.stderr is not None
            listening = next(line for line in api.stderr if "listening" in line)
        finally:
            api.terminate()
            rest, errors = api.communicate(timeout=30)
        shown += [listening, rest, errors]
        assert "redis://:***@" in listening, listening
    finally:
        down = assay("down", env=env)
        shown += [down.stdout, down.stderr]
    logs = [p.read_text(errors="replace") for p in (tmp_path / "data").rglob("*.log")]
    leaked = [text for text in shown + logs if password in text]
    assert leaked == [], leaked[0][-2000:]


def test_demo_runs_the_example_fleet_and_exits_zero() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    demo = subprocess.run(
        [*ASSAY, "demo"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=200
    )
    assert demo.returncode == 0, demo.stderr[-2000:]
    assert "SCRIPTED MODEL" in demo.stderr
    for target, verdict in (
        ("snapshot:prod-eu", "TRUE"),
        ("snapshot:staging-us", "FALSE"),
        ("snapshot:dev-ap", "CANNOT DETERMINE"),
    ):
        line = next(line for line in demo.stdout.splitlines() if target in line)
        assert verdict in line, line
    # Before: no probe and no next step. Now the same question again is answered by the
    # probes the first runs compiled, with 0 model tokens, and the demo says what to do next.
    lines = demo.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if "answered by" in line)
    by_probe = [line.split() for line in lines[header + 1 : header + 4] if "probe v" in line]
    assert by_probe and all(cells[-1] == "0" for cells in by_probe), demo.stdout
    assert "Next: ask your own cluster" in demo.stdout
    assert "assay check --context YOUR-CONTEXT --model" in demo.stdout
