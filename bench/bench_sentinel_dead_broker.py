"""How long a submit takes to fail on a Sentinel broker that cannot take it (prints figures).

Cases, each against a private redis-server for the store (never the machine's Redis):

* ``closed``: the sentinel URL names a port nothing listens on;
* ``silent``: a socket that accepts connections and never answers (a hung or
  black-holed sentinel);
* ``master-down``: a real ``redis-server --sentinel`` whose master was stopped and
  which has noticed (past its down-after);
* ``master-unnoticed``: the same before the sentinel notices (its down-after is a
  minute): it still names the stopped master;
* ``wrong-password``: a real sentinel with ``requirepass``, asked with another password.

Two ways in each case: ``assay submit`` (the CLI: the fail-fast check, then the
publish), and ``Dispatcher.submit`` without the fail-fast check (what a publish
costs when the broker went away after the check: kombu's connection and publish
retries over the sentinel connections' timeouts).

Run: ``.venv/bin/python bench/bench_sentinel_dead_broker.py [--case NAME ...]``.
To measure another checkout's code, run it with ``PYTHONPATH=/that/checkout``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from assay.redis_process import RedisProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "examples" / "snapshots" / "prod-eu"
MASTER = "bench-broker"
CASES = ("closed", "silent", "master-down", "master-unnoticed", "wrong-password")


@contextmanager
def silent_port() -> Iterator[int]:
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


@contextmanager
def sentinel(
    folder: Path, master: RedisProcess, requirepass: str | None, down_after_ms: int
) -> Iterator[int]:
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "sentinel.conf"
    config.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {folder}\nlogfile {folder / 'sentinel.log'}\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {master.port} 1\n"
        f"sentinel down-after-milliseconds {MASTER} {down_after_ms}\n"
        + (f"requirepass {requirepass}\n" if requirepass else "")
    )
    process = subprocess.Popen([binary, str(config), "--sentinel"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(0.5)  # let it connect to its master
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def broker_for(case: str, folder: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """(sentinel URL, extra ASSAY_* settings) for one case."""
    with ExitStack() as stack:
        if case == "closed":
            yield f"sentinel://127.0.0.1:{free_port()}/0", {}
        elif case == "silent":
            yield f"sentinel://127.0.0.1:{stack.enter_context(silent_port())}/0", {}
        else:
            master = RedisProcess(data_dir=folder / "master").start()
            stack.callback(master.stop)
            password = "sentinel-secret" if case == "wrong-password" else None
            down_after = 60_000 if case == "master-unnoticed" else 1000
            port = stack.enter_context(sentinel(folder / "sentinel", master, password, down_after))
            extra = {}
            if case.startswith("master-"):
                master.stop()
                if case == "master-down":
                    time.sleep(2)  # past down-after: the sentinel calls it down
            else:
                extra["BROKER_SENTINEL_PASSWORD"] = "not-the-password"
            yield f"sentinel://127.0.0.1:{port}/0", extra


def timed(action: Callable[[], str]) -> tuple[str, float]:
    started = time.perf_counter()
    outcome = action()
    return outcome, time.perf_counter() - started


def cli_submit(store: str, url: str, extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env.update(
        ASSAY_REDIS_URL=store,
        ASSAY_BROKER_URL=url,
        ASSAY_BROKER_SENTINEL_MASTER=MASTER,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    env.update({f"ASSAY_{k}": v for k, v in extra.items()})
    done = subprocess.run(
        [sys.executable, "-m", "assay.cli", "submit", "--snapshot", str(SNAPSHOT), "x is y"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    return f"exit {done.returncode}: {(errors or [''])[-1][:160]}"


def publish_only(store: str, url: str, extra: dict[str, str]) -> str:
    from schemas.request import EvaluationRequest, SnapshotTarget
    from schemas.settings import load_settings
    from workers.fleet.dispatch import Dispatcher
    from workers.fleet.store import VerdictStore

    fields = {"broker_sentinel_password": extra["BROKER_SENTINEL_PASSWORD"]} if extra else {}
    settings = load_settings(
        redis_url=store, broker_url=url, broker_sentinel_master=MASTER, **fields
    )
    store_ = VerdictStore.from_settings(settings)
    dispatcher = Dispatcher.from_settings(settings, store_)  # no fail-fast check
    request = EvaluationRequest.model_validate(
        {"text": "x is y", "target": SnapshotTarget(path=str(SNAPSHOT))}
    )
    try:
        dispatcher.submit_many([request])  # the front doors' way (assay.submission)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    finally:
        dispatcher.close()
    return "sent"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", action="append", choices=CASES)
    parser.add_argument("--skip-publish", action="store_true", help="only the CLI")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = RedisProcess(data_dir=Path(tmp) / "store").start()
        try:
            print(f"{'case':<17} {'path':<13} {'seconds':>8}  outcome")
            for case in options.case or CASES:
                ways = [("assay submit", cli_submit)]
                if not options.skip_publish:
                    ways.append(("publish only", publish_only))
                for name, way in ways:
                    with broker_for(case, Path(tmp) / case / name.replace(" ", "-")) as (url, x):
                        outcome, seconds = timed(lambda: way(store.url, url, x))  # noqa: B023
                    print(f"{case:<17} {name:<13} {seconds:8.1f}  {outcome}", flush=True)
        finally:
            store.stop()


if __name__ == "__main__":
    main()
