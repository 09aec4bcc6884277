"""A Redis Sentinel broker: sentinels with their own password, the queue-depth gauge, a dead one.

Real processes on free ports, started here: the broker's redis-server, a
``redis-server --sentinel`` (with ``requirepass``, or an ACL user, where the test
says so), the API, a `celery worker` on the scripted model.

- Sentinels that require a password (``ASSAY_BROKER_SENTINEL_PASSWORD``, not the
  master's): a run goes through end to end; the sweeper's master lookup asks them
  with it; kombu's sentinel connections get it; a missing or wrong one is a clear
  error within seconds, before any run is registered.
- ``assay_queue_depth`` on a Sentinel broker reads the master the sentinels name.
- A dead sentinel (a closed port, a socket that never answers) fails a submit
  within seconds, as a dead ``redis://`` broker does, and registers nothing.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from assay.client import Client
from assay.redis_process import RedisProcess, free_port
from assay.testing.scripted_model import ScriptedModel
from schemas.settings import AssaySettings, load_settings, settings_problem
from schemas.verdict import VerdictKind
from tests.api_support import ApiServer
from tests.fleet_support import (
    PREDICATE,
    ROOT,
    make_snapshots,
    scripted_worker_env,
    snapshot_request,
    start_worker,
    stop_process,
    three_step_script,
    worker_log_tail,
)
from tests.sentinel_support import (
    MASTER_NAME,
    SENTINEL_PASSWORD,
    SentinelBroker,
    sentinel_settings,
    watched_broker,
)
from workers.fleet.broker import broker_redis, configured_app, queue_name
from workers.fleet.dispatch import Dispatcher, RunsNotSent
from workers.fleet.redis_client import RedisUnreachable
from workers.fleet.store import VerdictStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PROD_EU = str(ROOT / "examples" / "snapshots" / "prod-eu")


@pytest.fixture(params=["requirepass", "acl-user"])
def locked_sentinel(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SentinelBroker]:
    """A sentinel that wants a password of its own."""
    with watched_broker(tmp_path, request.param) as broker:
        yield broker


@pytest.fixture(params=["open", "requirepass", "acl-user"])
def any_sentinel(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SentinelBroker]:
    """A sentinel with or without a password of its own."""
    with watched_broker(tmp_path, request.param) as broker:
        yield broker


def queued_on(master: RedisProcess, settings: AssaySettings) -> int:
    direct = redis.Redis(port=master.port)
    try:
        return int(direct.llen(queue_name(settings)))
    finally:
        direct.close()


# --- 1. sentinels with their own password ---------------------------------------------------


def test_a_run_goes_end_to_end_through_sentinels_that_require_a_password(
    redis_url: str, locked_sentinel: SentinelBroker, tmp_path: Path
) -> None:
    """The client (its fail-fast check and kombu's publish) and a real worker (kombu's
    consumer, the sweeper) all reach the master through the password-protected sentinel."""
    settings = sentinel_settings(redis_url, locked_sentinel)
    (snapshot,) = make_snapshots(tmp_path / "snaps", 1)
    with ScriptedModel(three_step_script()) as model, Client(settings) as fleet:
        env = scripted_worker_env(
            redis_url,
            model.url,
            broker_url=locked_sentinel.url,
            broker_sentinel_master=MASTER_NAME,
            broker_sentinel_password=SENTINEL_PASSWORD,
        )
        if locked_sentinel.username:
            env["ASSAY_BROKER_SENTINEL_USERNAME"] = locked_sentinel.username
        receipt = fleet.submit(PREDICATE, snapshot=str(snapshot))
        assert queued_on(locked_sentinel.master, settings) == 1, "sent to the named master"
        worker = start_worker(env, tmp_path / "worker.log", concurrency=4)
        try:
            verdict = fleet.wait(receipt.run_id, timeout=90)
        finally:
            stop_process(worker)
            log = worker_log_tail(tmp_path / "worker.log", 20000)
        assert verdict.verdict == VerdictKind.TRUE, log
    assert SENTINEL_PASSWORD not in log, "the worker never logs the sentinels' password"


def test_the_sweepers_master_lookup_asks_the_sentinels_with_their_password(
    redis_url: str, locked_sentinel: SentinelBroker
) -> None:
    settings = sentinel_settings(redis_url, locked_sentinel)
    found = broker_redis(settings)
    try:
        assert found.ping()
        assert found.connection_pool.get_master_address() == (  # type: ignore[attr-defined]
            "127.0.0.1",
            locked_sentinel.master.port,
        )
    finally:
        found.close()
    without = broker_redis(
        sentinel_settings(
            redis_url, locked_sentinel, broker_sentinel_password=None, broker_sentinel_username=None
        ),
        retries=0,
    )
    with pytest.raises(redis.exceptions.ConnectionError, match="No master found"):
        without.ping()


def test_kombus_sentinel_connections_get_the_password_and_short_timeouts(
    redis_url: str, any_sentinel: SentinelBroker
) -> None:
    """What the fleet's app hands kombu reaches the redis-py ``Sentinel`` kombu builds:
    the sentinels' credentials, seconds-long timeouts and no retries of their own
    (without ``sentinel_kwargs`` redis-py gives them the master's 30 s, retried)."""
    app = configured_app(sentinel_settings(redis_url, any_sentinel))
    with app.connection_for_write() as conn:
        channel = conn.default_channel  # builds kombu's Sentinel and reaches the master
        assert channel.client.ping() and channel.pool is not None  # both of its pools
        for manager in (channel._async_sentinel_manager, channel._sentinel_manager):
            options = manager.sentinels[0].connection_pool.connection_kwargs
            assert options.get("password") == any_sentinel.password
            assert options.get("username") == any_sentinel.username
            assert options["socket_timeout"] <= 5 and options["socket_connect_timeout"] <= 5
            assert options["retry"].get_retries() == 0
            assert manager.connection_kwargs.get("password") is None, "the master has none"
    shown = str(app.conf.humanize(with_defaults=False, censored=True))
    assert SENTINEL_PASSWORD not in shown, "celery's own config dump masks it"


@pytest.mark.parametrize("given", [None, "not-the-password"], ids=["missing", "wrong"])
def test_a_missing_or_wrong_sentinel_password_is_a_clear_error_within_seconds(
    redis_url: str, locked_sentinel: SentinelBroker, given: str | None
) -> None:
    credentials = {"broker_sentinel_password": given}
    if given is None:
        credentials["broker_sentinel_username"] = None
    settings = sentinel_settings(redis_url, locked_sentinel, **credentials)
    started = time.monotonic()
    with Client(settings) as fleet:
        with pytest.raises(RedisUnreachable) as raised:
            fleet.submit(PREDICATE, snapshot=PROD_EU, run_id="never-sent")
        elapsed = time.monotonic() - started
        assert fleet.run_state("never-sent") is None, "nothing registered for a broker refused"
    message = str(raised.value)
    print(f"sentinel password {given!r}: RedisUnreachable after {elapsed:.2f}s: {message}")
    assert elapsed < 15, "a bound against a hang, not a speed figure"
    where = f"sentinel 127.0.0.1:{locked_sentinel.sentinel_port}"
    said = "refused the password" if given else "requires a password"
    assert f"cannot reach the fleet's broker at {locked_sentinel.url} ({where} {said}" in message
    assert "ASSAY_BROKER_SENTINEL_PASSWORD" in message
    assert SENTINEL_PASSWORD not in message and "not-the-password" not in message


def test_the_sentinel_password_is_a_secret_setting() -> None:
    settings = load_settings(
        redis_url="redis://127.0.0.1:1/0",
        broker_url="sentinel://127.0.0.1:26379",
        broker_sentinel_master="m",
        broker_sentinel_password=SENTINEL_PASSWORD,
    )
    assert SENTINEL_PASSWORD not in repr(settings) and SENTINEL_PASSWORD not in str(settings)
    with pytest.raises(ValueError) as raised:
        load_settings(
            redis_url="redis://127.0.0.1:1/0",
            broker_url="sentinel://127.0.0.1:26379",
            broker_sentinel_master="m",
            broker_sentinel_username="ops",
        )
    assert "set ASSAY_BROKER_SENTINEL_PASSWORD too" in settings_problem(raised.value)


# --- 2. the queue-depth gauge ------------------------------------------------------------------


def test_queue_depth_reads_the_master_the_sentinels_name(
    redis_url: str, any_sentinel: SentinelBroker, tmp_path: Path
) -> None:
    """The API's /metrics counts the runs waiting on the master (no worker takes them)."""
    settings = sentinel_settings(redis_url, any_sentinel)
    with Client(settings) as fleet:
        for _ in range(3):
            fleet.submit(PREDICATE, snapshot=PROD_EU)
    assert queued_on(any_sentinel.master, settings) == 3
    metrics_port = free_port()
    server_settings: dict[str, str | None] = {
        "ASSAY_BROKER_URL": any_sentinel.url,
        "ASSAY_BROKER_SENTINEL_MASTER": MASTER_NAME,
        "ASSAY_BROKER_SENTINEL_PASSWORD": any_sentinel.password,
        "ASSAY_BROKER_SENTINEL_USERNAME": any_sentinel.username,
        "ASSAY_METRICS_PORT": str(metrics_port),
    }
    server = ApiServer(redis_url, tmp_path / "api.log", settings=server_settings).start()
    try:
        ready = httpx.get(server.url + "/readyz", timeout=15)
        assert ready.status_code == 200, ready.text
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=15).text
        assert f'assay_queue_depth{{queue="{queue_name(settings)}"}} 3.0' in scraped, scraped
        assert "assay_queue_depth_up 1.0" in scraped
        any_sentinel.master.stop()
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30).text
        assert "assay_queue_depth_up 0.0" in scraped
        assert "assay_queue_depth{" not in scraped, "no stale number once the master is gone"
    finally:
        server.stop()
    assert SENTINEL_PASSWORD not in (tmp_path / "api.log").read_text()


# --- 3. a dead Sentinel broker ------------------------------------------------------------------


@pytest.fixture(params=["closed-port", "silent-socket"])
def dead_sentinel_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A sentinel URL nothing answers at: a closed port, or one that accepts and never replies."""
    if request.param == "closed-port":
        yield f"sentinel://127.0.0.1:{free_port()}/0"
        return
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    try:
        yield f"sentinel://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        listener.close()


def test_a_dead_sentinel_broker_fails_a_submit_within_seconds_and_registers_nothing(
    redis_url: str, dead_sentinel_url: str
) -> None:
    """As for a dead ``redis://`` broker: ``RedisUnreachable`` naming the broker, before any
    run is registered (kombu's retries over the sentinel connections took from 5 s on a
    closed port to over 5 minutes on a silent one)."""
    settings = load_settings(
        redis_url=redis_url, broker_url=dead_sentinel_url, broker_sentinel_master=MASTER_NAME
    )
    with Client(settings) as fleet:
        started = time.monotonic()
        with pytest.raises(RedisUnreachable) as raised:
            fleet.submit(PREDICATE, snapshot=PROD_EU, run_id="never-sent")
        elapsed = time.monotonic() - started
        assert fleet.run_state("never-sent") is None
    message = str(raised.value)
    print(f"dead sentinel broker: RedisUnreachable after {elapsed:.2f}s: {message}")
    assert elapsed < 15, "a bound against a hang, not a speed figure"
    port = dead_sentinel_url.rsplit(":", 1)[1].split("/")[0]
    assert message.startswith(
        f"cannot reach the fleet's broker at {dead_sentinel_url} (sentinel 127.0.0.1:{port}: "
    )
    assert message.endswith("start it or fix ASSAY_BROKER_URL")


def test_a_publish_that_fails_on_a_dead_sentinel_names_it_in_a_few_words(redis_url: str) -> None:
    """Past the fail-fast check (the broker went away after it): ``RunsNotSent`` says which
    sentinel failed, not redis-py's 900-character repr of its client."""
    port = free_port()
    settings = load_settings(
        redis_url=redis_url,
        broker_url=f"sentinel://127.0.0.1:{port}/0",
        broker_sentinel_master=MASTER_NAME,
    )
    store = VerdictStore.from_settings(settings)
    dispatcher = Dispatcher.from_settings(settings, store)  # no fail-fast check
    request = snapshot_request()
    try:
        with pytest.raises(RunsNotSent) as raised:
            dispatcher.submit_many([request])  # the front doors' way (assay.submission)
    finally:
        dispatcher.close()
    assert store.run_state(request.run_id) is not None, "registered before sending"
    message = str(raised.value)
    assert f"(No master found for '{MASTER_NAME}' : sentinel 127.0.0.1:{port} - " in message
    assert "<redis." not in message and len(message) < 600, message
    assert re.search(r"it is registered, so nothing is lost", message)


def test_a_dead_sentinel_broker_is_exit_69_from_the_cli(
    redis_url: str, sentinel_broker: SentinelBroker, tmp_path: Path
) -> None:
    """`assay submit` with the sentinel's master gone: 69 with one line, nothing sent."""
    sentinel_broker.master.stop()
    env = {
        "ASSAY_BROKER_URL": sentinel_broker.url,
        "ASSAY_BROKER_SENTINEL_MASTER": MASTER_NAME,
    }
    argv = [sys.executable, "-m", "assay.cli", "submit", "--snapshot", PROD_EU, PREDICATE]
    result = subprocess.run(
        argv,
        cwd=ROOT,
        env={**scripted_worker_env(redis_url, "http://127.0.0.1:1"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 69, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("assay: error: ")]
    assert len(errors) == 1, result.stderr
    assert f"cannot reach the fleet's broker at {sentinel_broker.url}" in errors[0]
    assert f"master '{MASTER_NAME}' at 127.0.0.1:{sentinel_broker.master.port}" in errors[0]
