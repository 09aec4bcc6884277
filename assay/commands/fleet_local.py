"""`assay up` (embedded local mode) and `assay demo` (the README's main command).

`assay up` runs a private redis-server under the data dir (or uses
ASSAY_REDIS_URL), a worker and, when installed, a scheduler replica, waits until
the worker consumes the queue, prints where they are and stays in the foreground
until Ctrl-C (exit 130) or SIGTERM (`assay down`; exit 0), then stops them all:
the scheduler and the worker, then Redis. Each child runs in a session of its own,
so the terminal's SIGINT reaches `assay up` only, never Redis under a stopping
worker. A second Ctrl-C while they stop kills what is left. A second `assay up`
while one runs says so and exits 0: the fleet asked for is up; `assay down` with
none running says so and exits 0 too.

`assay demo` does the same in a temporary folder with the bundled SCRIPTED
model (a replay of examples/scripts/demo.yaml, not an LLM), fans the demo
predicate out over examples/snapshots/*, prints the verdict table, then asks the
same again: the checks whose run compiled a probe are now answered by it, with 0
model tokens, which a second table shows. It ends with the next step a newcomer
takes (their own cluster, a real model) and shuts everything down. It exits 0 when
every example cluster got a verdict both times.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/assay/test_cli_check.py keeps the engine out).
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from assay.commands.fleet_batch import show_batch, wait_with_progress
from assay.commands.fleet_common import EXIT_INTERRUPTED, EXIT_UNAVAILABLE, fail
from assay.commands.options import settings_or_usage
from assay.redis_process import RedisNotInstalled
from assay.terminal_text import print_block, print_line
from schemas.exit_codes import EXIT_INTERNAL
from workers.engine.shown_urls import shown_url

if TYPE_CHECKING:
    from assay.local_mode import LocalFleet

DEMO_PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
DEMO_TIMEOUT_SECONDS = 180.0
REPO_ROOT = Path(__file__).resolve().parents[2]


class StopRequested(KeyboardInterrupt):
    """SIGINT or SIGTERM while a local fleet runs: stop it, then exit for that signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """130 for Ctrl-C, as a shell reports it; 0 for SIGTERM, the stop asked for."""
        return EXIT_INTERRUPTED if self.signum == signal.SIGINT else 0


def _raise_stop(signum: int, frame: Any) -> None:
    raise StopRequested(signum)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stop_on_signals() -> None:
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_stop)


def _stop_fleet(fleet: LocalFleet, model: Any = None) -> None:
    """Stop the fleet (and the scripted model); a second Ctrl-C or SIGTERM meanwhile kills
    what is still running instead of leaving it behind."""
    import threading

    hurry = threading.Event()

    def hurry_up(signum: int, frame: Any) -> None:
        if not hurry.is_set():
            print("stopping now: killing what still runs", file=sys.stderr, flush=True)
        hurry.set()

    for signum in STOP_SIGNALS:
        signal.signal(signum, hurry_up)
    fleet.stop(hurry=hurry)
    if model is not None:
        model.stop()


def _start(fleet: LocalFleet) -> None:
    try:
        fleet.start()
    except RedisNotInstalled as exc:
        fail(str(exc), EXIT_UNAVAILABLE)


def _tail(path: Path, chars: int = 1500) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def up(
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", min=1, help="Worker threads.")
    ] = None,
    scripted: Annotated[
        Path | None,
        typer.Option(
            "--scripted",
            help="Start the bundled SCRIPTED model (not an LLM) replaying this script beside "
            "the fleet and point the workers at it, e.g. examples/scripts/demo.yaml.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach/--foreground",
            help="Return once the fleet is up and leave it running; `assay down` stops it.",
        ),
    ] = False,
) -> None:
    """Start a local fleet (Redis, worker, scheduler) until Ctrl-C (--detach: `assay down`)."""
    from assay.local_mode import LocalFleet, discover_redis_url, state_path

    settings = settings_or_usage()
    state_file = state_path(settings)
    own_fleet = settings.model_copy(update={"redis_url": None})  # this data dir's `assay up`
    if (running := discover_redis_url(own_fleet)) is not None:
        print(
            f"a local fleet is already running here (redis {shown_url(running)}, see "
            f"{state_file}); it is used as it is: `assay down` stops it"
        )
        raise typer.Exit(0)
    if detach:
        raise typer.Exit(_detach(state_file, scripted, concurrency))
    extra_env: dict[str, str] = {}
    model = None
    if scripted is not None:
        model = _scripted_model(scripted)
        extra_env = {"model": SCRIPTED_MODEL, "api_base": model.url, "api_key": "scripted"}
    elif not settings.model:
        print(
            "assay: warning: no model is configured (ASSAY_MODEL is unset), so the workers "
            "cannot evaluate; set ASSAY_MODEL or use `assay up --scripted FILE`",
            file=sys.stderr,
        )
    fleet = LocalFleet(
        data_dir=Path(settings.data_dir),
        redis_url=settings.redis_url,
        concurrency=concurrency,
        extra_env=extra_env,
    )
    _stop_on_signals()
    try:
        _start(fleet)
        problem = fleet.wait_until_ready(settings.key_prefix, WORKER_READY_SECONDS)
    except StopRequested as stop:
        _stop_fleet(fleet, model)
        raise typer.Exit(stop.exit_code) from None
    except BaseException:
        _stop_fleet(fleet, model)
        raise
    if problem is not None:
        print_line(f"assay: error: the local fleet did not start: {problem}", sys.stderr)
        print_block(_tail(fleet.log_path("worker")), sys.stderr)
        _stop_fleet(fleet, model)
        raise typer.Exit(EXIT_UNAVAILABLE)
    fleet.write_state(state_file)  # other shells, `assay api` and `assay down` find it
    print(
        f"redis     {shown_url(fleet.redis_url or '')}"
        + (f"  (data in {fleet.redis.data_dir})" if fleet.redis else "")
    )
    if model is not None:
        print(f"model     SCRIPTED, replaying {scripted} at {model.url} (not a real LLM)")
    for name, child in fleet.children.items():
        print(f"{name:<9} pid {child.pid}  (log {fleet.log_path(name)})")
    print("other shells find this fleet automatically; Ctrl-C stops everything", flush=True)
    code = EXIT_INTERNAL
    try:
        while not (stopped := fleet.exited()):
            time.sleep(0.2)
        for name, exit_code in stopped.items():
            print(f"assay: error: the {name} stopped with exit code {exit_code}:", file=sys.stderr)
            print_block(_tail(fleet.log_path(name)), sys.stderr)
    except StopRequested as stop:
        print("stopping the local fleet (the scheduler and the worker, then Redis)",
              file=sys.stderr, flush=True)  # fmt: skip
        code = stop.exit_code
    finally:
        _stop_fleet(fleet, model)
        state_file.unlink(missing_ok=True)
    print("stopped the local fleet", file=sys.stderr)
    raise typer.Exit(code)


SCRIPTED_MODEL = "openai/scripted"
WORKER_READY_SECONDS = 90.0  # a worker's start-up is a few seconds; a loaded host, more
DETACH_START_SECONDS = WORKER_READY_SECONDS + 30.0


def _scripted_model(script: Path) -> Any:
    from assay.testing.scripted_model import ScriptedModel, ScriptError

    try:
        return ScriptedModel(script, keep_requests=False).start()
    except ScriptError as exc:
        raise typer.BadParameter(str(exc), param_hint="--scripted") from None


def _detach(state_file: Path, scripted: Path | None, concurrency: int | None) -> int:
    """Start `assay up` in its own session and wait until its state file names it, which it
    writes once its worker consumes the queue; print where."""
    import subprocess

    log = state_file.parent / "up.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "assay.cli", "up", "--foreground"]
    if scripted is not None:
        argv += ["--scripted", str(scripted)]
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    with log.open("ab") as out:
        child = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + DETACH_START_SECONDS
    while time.monotonic() < deadline:
        if child.poll() is not None:
            print_block(_tail(log), sys.stderr)
            fail(f"the local fleet did not start (its log above, from {log})", EXIT_UNAVAILABLE)
        url = _started_by(state_file, child.pid)
        if url is not None:
            print(
                f"local fleet up (pid {child.pid}, redis {shown_url(url)}); log {log}; "
                "stop it with `assay down`"
            )
            return 0
        time.sleep(0.2)
    child.terminate()
    fail(
        f"the local fleet did not start within {DETACH_START_SECONDS:g}s; see {log}",
        EXIT_UNAVAILABLE,
    )


def _started_by(state_file: Path, pid: int) -> str | None:
    """The Redis URL in the state file once process ``pid`` has written it, else None."""
    import json

    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("pid") != pid:
        return None
    return str(state.get("redis_url") or "") or None


def down(
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds to wait for it to stop.")
    ] = 30.0,
) -> None:
    """Stop the local fleet `assay up` started (in another shell or with --detach); with none
    running, say so and exit 0 (what was asked for is the case)."""
    import json
    import os

    from assay.local_mode import discover_redis_url, state_path

    settings = settings_or_usage()
    path = state_path(settings)
    nothing = f"nothing running: no local fleet is running here ({path.parent})"
    try:
        if discover_redis_url(settings.model_copy(update={"redis_url": None})) is None:
            raise ProcessLookupError
        pid = int(json.loads(path.read_text())["pid"])
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, OSError, ValueError, KeyError):  # gone meanwhile
        print(nothing)
        raise typer.Exit(0) from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # `up` removes its state file once all is stopped
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if not path.exists():
            break
        time.sleep(0.2)
    else:
        fail(f"the local fleet (pid {pid}) is still stopping after {timeout:g}s", EXIT_INTERNAL)
    print(f"stopped the local fleet (pid {pid})")


def _demo_files() -> tuple[Path, str]:
    script = REPO_ROOT / "examples" / "scripts" / "demo.yaml"
    snapshots = REPO_ROOT / "examples" / "snapshots"
    if not script.is_file() or not snapshots.is_dir():
        fail(
            f"the demo needs examples/scripts/demo.yaml and examples/snapshots/ from the assay "
            f"source tree (looked in {REPO_ROOT}); run it from a checkout",
            EXIT_UNAVAILABLE,
        )
    return script, str(snapshots / "*")


def demo(
    keep_logs: Annotated[
        bool, typer.Option("--keep-logs", help="Keep the demo's folder (logs) afterwards.")
    ] = False,
) -> None:
    """Run the example fleet end to end with the SCRIPTED model and print the verdict table."""
    from assay.client import Client, WaitTimeout
    from assay.local_mode import LocalFleet
    from assay.testing.scripted_model import SCRIPTED_MODEL_NAME, ScriptedModel

    script, snapshots = _demo_files()
    settings = settings_or_usage()
    folder = Path(tempfile.mkdtemp(prefix="assay-demo-"))
    print(f"SCRIPTED MODEL - replaying {script}, not a real LLM", file=sys.stderr, flush=True)
    model = ScriptedModel(script, keep_requests=False).start()
    fleet = LocalFleet(
        data_dir=folder,
        concurrency=8,
        with_scheduler=False,
        extra_env={
            "model": SCRIPTED_MODEL_NAME,
            "api_base": model.url,
            "api_key": "scripted-demo",
            "key_prefix": "assay-demo",
            "log_format": "json",
            "snapshot_roots": str(REPO_ROOT / "examples" / "snapshots"),
        },
    )
    _stop_on_signals()
    code = EXIT_INTERNAL
    try:
        _start(fleet)
        print(
            f"local fleet: redis {shown_url(fleet.redis_url or '')}, "
            f"worker pid {fleet.children['worker'].pid}",
            file=sys.stderr,
        )
        demo_settings = settings.model_copy(
            update={
                "redis_url": fleet.redis_url,
                "key_prefix": "assay-demo",
                "snapshot_roots": [REPO_ROOT / "examples" / "snapshots"],
            }
        )
        with Client(demo_settings) as client:
            try:
                status = _demo_batch(client, snapshots)
                show_batch(client, status, json_output=False)
                print(
                    "\nThe same question again. A check whose run proposed a probe (its "
                    "lookups and a CEL expression, kept once it reproduced the verdict) is "
                    "now answered by it, without the model:",
                    file=sys.stderr,
                    flush=True,
                )
                again = _demo_batch(client, snapshots)
            except WaitTimeout as exc:
                print_line(f"assay: error: the demo did not finish: {exc}", sys.stderr)
                print_block(_tail(fleet.log_path("worker")), sys.stderr)
            else:
                _show_answered_by(client, again)
                print(DEMO_NEXT_STEP)
                code = 0
    except StopRequested:
        code = EXIT_INTERRUPTED
    finally:
        _stop_fleet(fleet, model)
        if keep_logs:
            print(f"demo logs kept in {folder}", file=sys.stderr)
        else:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    raise typer.Exit(code)


DEMO_NEXT_STEP = f"""
Next: ask your own cluster, with a real model (the scripted one knows only this predicate):
  export ASSAY_API_KEY=...          # your provider's key
  assay check --context YOUR-CONTEXT --model openai/gpt-4o-mini "{DEMO_PREDICATE}"
Then keep it checked: `assay up` in one terminal, `assay schedule add` in another
(docs/fleet.md, docs/scheduler.md); what a probe is: docs/probes.md."""


def _demo_batch(client: Any, snapshots: str) -> Any:
    batch_id = client.start_batch(DEMO_PREDICATE, snapshots=snapshots)
    print(f"batch {batch_id}: {DEMO_PREDICATE!r} over {snapshots}", file=sys.stderr)
    return wait_with_progress(client, batch_id, DEMO_TIMEOUT_SECONDS)


def _show_answered_by(client: Any, status: Any) -> None:
    """Each target's verdict with what answered it (its probe, or the model) and the model
    tokens it took: a probe's verdict took none."""
    from assay.commands.fleet_common import stdout_console
    from assay.fleet_render import failures_first, verdict_cell
    from assay.render import Col, add_line, line_table, safe_markup

    console = stdout_console()
    table = line_table(
        console, Col("target", "gives"), Col("verdict"), Col("answered by"),
        Col("model tokens", justify="right"),
    )  # fmt: skip
    rows = sorted(client.batch_results(status.batch_id), key=lambda r: failures_first(r.verdict))
    verdicts = client.store.run_verdicts([row.run_id for row in rows])
    for row in rows:
        verdict = verdicts.get(row.run_id)
        if verdict is None:
            continue
        by = f"probe v{verdict.probe_version}" if verdict.source == "probe" else "the model"
        add_line(table, safe_markup(row.target), verdict_cell(verdict.verdict), by,
                 f"{verdict.usage.total_tokens:,}")  # fmt: skip
    console.print(table, soft_wrap=False)


def register(app: typer.Typer) -> None:
    app.command("up")(up)
    app.command("down")(down)
    app.command("demo")(demo)
