"""A batch fanned out in chunks queues every run exactly once, registered before it is sent.

``submit_batch`` submits targets ``FANOUT_CHUNK`` (200) at a time, each chunk
in a few round trips. What a user would notice if that went wrong, asserted
against a real redis-server with no worker (the queue is read as the worker
would find it):

* a batch bigger than one chunk: one message per target in the broker, one
  registered run per message, the tally's total right;
* a dated predicate over as many targets: every run held (its request and
  timer stored), nothing queued;
* resubmitting a batch id: the batch gains a fresh run per target (the run ids
  are new), each queued once; the tally counts them all;
* Redis refusing writes half-way through (over its maxmemory): the fan-out fails,
  and no message in the queue names a run the store does not know.

A chunk's tasks go out in one kombu publish batch (one pipeline of LPUSHes) and,
when that round trip fails, again message by message (``Dispatcher.submit_many``).
The failure is injected at the one place a batch talks to Redis, its pipeline's
``execute`` (kombu turns the connection error into ``BatchPublishError``, as it
would for a real one), with some, none or all of its LPUSHes having reached
Redis first:

* none reached Redis: every run of the chunk is queued exactly once, and stays
  registered as queued;
* some or all reached Redis (the reply was what got lost): those runs are queued
  twice. The pipeline is not atomic and the fallback cannot tell what landed, so
  sending is at-least-once; a real worker then records each run once and
  evaluates it once (the second copy finds the verdict);
* the broker itself went away mid-batch: the fallback fails too, the caller gets
  the broker's connection error, and the runs it left out stay registered as
  queued until the lost-run sweeper (workers/fleet/recovery.py) sends them, once,
  after the visibility timeout, without sending again the ones that did land;
* and what the person who submitted is told then: `assay batch` and `assay submit`
  (the CLI's entry point in this process, so the round trip can be broken) exit 69
  with one line saying the runs are registered, when the fleet sends them and what
  else to do; the API answers 503 `broker_unavailable` saying the same without the
  broker's address. What the line promises is then checked against the store.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import structlog
from kombu.exceptions import KombuError, OperationalError
from kombu.transport import redis as kombu_redis

from assay.client import Client
from assay.redis_process import RedisProcess
from assay.submission import FANOUT_CHUNK, latest_batch_id
from assay.testing.scripted_model import ScriptedModel
from scheduler.deferred import deferred_request
from schemas.request import EvaluationRequest, SnapshotTarget
from schemas.settings import AssaySettings, load_settings
from tests.cli_support import run_cli
from tests.fleet_support import (
    PREDICATE,
    finished_report,
    make_snapshots,
    scripted_worker,
    three_step_script,
    wait_until,
)
from workers.fleet.broker import KOMBU_UNACKED_KEY, kombu_queue_keys, queue_name
from workers.fleet.dispatch import Dispatcher
from workers.fleet.recovery import LostRunSweeper
from workers.fleet.store import VerdictStore
from workers.fleet.timers import TimerStore, deferred_timer_id

TARGETS = FANOUT_CHUNK + 50  # more than one chunk, the last one partial
DATED = "on 2030-01-01T00:00:00Z, " + PREDICATE
DUE = datetime(2030, 1, 1, tzinfo=UTC)


def queued_run_ids(client: redis.Redis, settings: AssaySettings) -> list[str]:
    """The run of every message waiting in the fleet's queue, read from the request in its
    body (what a worker evaluates), which must agree with its Celery task id."""
    ids = []
    for key in kombu_queue_keys(queue_name(settings)):
        for raw in client.lrange(key, 0, -1):
            message = json.loads(raw)
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            assert message["headers"]["id"] == args[0]["run_id"]
            ids.append(args[0]["run_id"])
    return ids


def batch_run_ids(client: redis.Redis, settings: AssaySettings, batch_id: str) -> list[str]:
    return [str(r) for r in client.lrange(f"{settings.key_prefix}:batch:{batch_id}:runs", 0, -1)]


@pytest.fixture
def fleet(redis_url: str) -> Iterator[Client]:
    with Client(load_settings(redis_url=redis_url)) as client:
        yield client


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def test_a_batch_over_several_chunks_queues_every_run_once(
    fleet: Client, raw: redis.Redis, tmp_path: Path
) -> None:
    make_snapshots(tmp_path / "many", TARGETS)
    batch_id = fleet.start_batch(PREDICATE, snapshots=str(tmp_path / "many" / "*"))

    queued = queued_run_ids(raw, fleet.settings)
    runs = batch_run_ids(raw, fleet.settings, batch_id)
    assert len(queued) == len(set(queued)) == TARGETS
    assert sorted(queued) == sorted(runs)
    targets = set()
    for run_id in runs:
        state = fleet.run_state(run_id)
        assert state is not None and state.status == "queued" and state.batch_id == batch_id
        targets.add(state.target)
    assert len(targets) == TARGETS
    status = fleet.batch_status(batch_id)
    assert status is not None
    assert (status.total, status.pending, status.sealed) == (TARGETS, TARGETS, True)
    assert status.not_before is None


def test_a_dated_batch_over_several_chunks_holds_every_run(
    fleet: Client, raw: redis.Redis, tmp_path: Path
) -> None:
    make_snapshots(tmp_path / "dated", TARGETS)
    batch_id = fleet.start_batch(DATED, snapshots=str(tmp_path / "dated" / "*"))

    assert queued_run_ids(raw, fleet.settings) == []
    runs = batch_run_ids(raw, fleet.settings, batch_id)
    assert len(set(runs)) == TARGETS
    timers = TimerStore(raw, fleet.settings.key_prefix)
    for run_id in runs:
        held = deferred_request(raw, fleet.settings, run_id)
        assert held is not None and held.not_before == DUE
        assert fleet.due_at(run_id) == DUE
        timer = timers.get(deferred_timer_id(run_id))
        assert timer is not None and timer.due == DUE.timestamp()
    status = fleet.batch_status(batch_id)
    assert status is not None
    assert (status.total, status.pending, status.not_before) == (TARGETS, TARGETS, DUE)


def test_resubmitting_a_batch_id_adds_fresh_runs_each_queued_once(
    fleet: Client, raw: redis.Redis, tmp_path: Path
) -> None:
    make_snapshots(tmp_path / "again", TARGETS)
    pattern = str(tmp_path / "again" / "*")
    batch_id = fleet.start_batch(PREDICATE, snapshots=pattern, batch_id="batch-again")
    assert fleet.start_batch(PREDICATE, snapshots=pattern, batch_id=batch_id) == batch_id

    queued = queued_run_ids(raw, fleet.settings)
    runs = batch_run_ids(raw, fleet.settings, batch_id)
    assert len(queued) == len(set(queued)) == 2 * TARGETS
    assert sorted(queued) == sorted(runs)
    status = fleet.batch_status(batch_id)
    assert status is not None and (status.total, status.pending) == (2 * TARGETS, 2 * TARGETS)


def test_redis_refusing_writes_mid_fan_out_queues_no_task_for_an_unregistered_run(
    tmp_path: Path,
) -> None:
    server = RedisProcess(data_dir=tmp_path / "redis", appendonly=False).start()
    try:
        raw = redis.Redis.from_url(server.url, decode_responses=True)
        make_snapshots(tmp_path / "full", 4 * FANOUT_CHUNK)
        with Client(load_settings(redis_url=server.url)) as fleet:
            fleet.store.ping()
            used = int(raw.info("memory")["used_memory"])
            raw.config_set("maxmemory", used + 1_600_000)  # room for a chunk or two
            with pytest.raises((redis.exceptions.RedisError, KombuError)):
                fleet.start_batch(PREDICATE, snapshots=str(tmp_path / "full" / "*"))
            queued = queued_run_ids(raw, fleet.settings)
            assert FANOUT_CHUNK <= len(queued) < 4 * FANOUT_CHUNK  # it failed mid-way
            registered = {run_id for run_id in queued if fleet.run_state(run_id) is not None}
            assert registered == set(queued)
        raw.close()
    finally:
        server.stop()


CHUNK = 8  # one chunk of a batch, as submit_batch hands it to Dispatcher.submit_many


class BatchRoundTripFailure:
    """The first kombu publish batch from now on (after ``skip``) loses its connection.

    Its pipeline's first ``landed`` LPUSHes reach Redis and are executed; then the
    round trip fails as a dropped connection does (redis-py's ConnectionError, which
    kombu's ``PublishBatch.flush`` reports as ``BatchPublishError``: delivery
    uncertain). ``then`` runs at that moment (the broker going away with it). Later
    batches, and the fallback's single publishes, are untouched.
    """

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        landed: int,
        then: Callable[[], None] = lambda: None,
        skip: int = 0,
    ) -> None:
        self.landed = landed
        self.then = then
        self.held: int | None = None  # commands in the failed round trip, once it failed
        self._armed = True
        self._skip = skip  # publish batches to let through first (a batch's earlier chunks)
        original_init = kombu_redis.PublishBatch.__init__

        def init(batch: Any, channel: Any, max_size: int) -> None:
            original_init(batch, channel, max_size)
            if self._armed and self._skip:
                self._skip -= 1
            elif self._armed:
                self._armed = False
                self._break(batch.pipeline)

        monkeypatch.setattr(kombu_redis.PublishBatch, "__init__", init)

    def _break(self, pipeline: Any) -> None:
        execute = pipeline.execute

        def fail(raise_on_error: bool = True) -> list[Any]:
            self.held = len(pipeline.command_stack)
            del pipeline.command_stack[self.landed :]
            execute(raise_on_error)
            self.then()
            raise redis.exceptions.ConnectionError("Connection closed by server.")

        pipeline.execute = fail


def quick_publish_retries(dispatcher: Dispatcher) -> None:
    """Celery's publish retries (about 35 s against a broker that is gone) cut to a second."""
    dispatcher.app.conf.task_publish_retry_policy = {
        "max_retries": 2,
        "interval_start": 0.1,
        "interval_step": 0.1,
        "interval_max": 0.2,
    }


def batch_chunk(store: VerdictStore, folder: Path, batch_id: str) -> list[EvaluationRequest]:
    """``CHUNK`` runs of a new batch, one per snapshot, as submit_batch builds them."""
    requests = [
        EvaluationRequest(
            text=PREDICATE, target=SnapshotTarget(path=str(snapshot)), batch_id=batch_id
        )
        for snapshot in make_snapshots(folder, CHUNK)
    ]
    store.create_batch(batch_id, kind=requests[0].kind, text=PREDICATE)
    return requests


def assert_registered_and_queued(
    store: VerdictStore, requests: list[EvaluationRequest], batch_id: str
) -> None:
    for request in requests:
        state = store.run_state(request.run_id)
        assert state is not None and state.status == "queued" and state.batch_id == batch_id
    status = store.batch(batch_id)
    assert status is not None and (status.total, status.pending) == (CHUNK, CHUNK)


def test_a_failed_publish_batch_queues_every_run_of_the_chunk_once(
    redis_url: str, raw: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(redis_url=redis_url)
    store = VerdictStore.from_settings(settings)
    dispatcher = Dispatcher.from_settings(settings, store)
    requests = batch_chunk(store, tmp_path / "snaps", "batch-nothing-landed")
    failure = BatchRoundTripFailure(monkeypatch, landed=0)

    receipts = dispatcher.submit_many(requests)

    assert failure.held == CHUNK, "the whole chunk was in the one batch, and it failed"
    run_ids = [request.run_id for request in requests]
    assert [receipt.run_id for receipt in receipts] == run_ids
    assert Counter(queued_run_ids(raw, settings)) == Counter(run_ids)  # each exactly once
    assert_registered_and_queued(store, requests, "batch-nothing-landed")
    dispatcher.close()


@pytest.mark.integration
@pytest.mark.timeout(240)
@pytest.mark.parametrize("landed", [CHUNK // 2, CHUNK], ids=["half-landed", "all-landed"])
def test_runs_a_failed_batch_delivered_are_queued_twice_and_recorded_once(
    redis_url: str,
    raw: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    landed: int,
) -> None:
    settings = load_settings(redis_url=redis_url)
    store = VerdictStore.from_settings(settings)
    dispatcher = Dispatcher.from_settings(settings, store)
    batch_id = f"batch-{landed}-landed"
    requests = batch_chunk(store, tmp_path / "snaps", batch_id)
    failure = BatchRoundTripFailure(monkeypatch, landed=landed)

    dispatcher.submit_many(requests)
    store.seal_batch(batch_id)
    dispatcher.close()

    assert failure.held == CHUNK
    run_ids = [request.run_id for request in requests]
    # What reached Redis before the failure is sent again by the fallback: at-least-once.
    assert Counter(queued_run_ids(raw, settings)) == Counter(run_ids) + Counter(run_ids[:landed])
    assert_registered_and_queued(store, requests, batch_id)

    def all_handled() -> bool:  # every copy taken and acknowledged
        status = store.batch(batch_id)
        return (
            status is not None
            and status.done
            and not queued_run_ids(raw, settings)
            and raw.hlen(KOMBU_UNACKED_KEY) == 0
        )

    # One worker thread takes the copies in queue order, so each second copy comes
    # after its run's verdict: the model is asked for one evaluation per run.
    with (
        ScriptedModel(three_step_script()) as model,
        scripted_worker(redis_url, model.url, tmp_path / "worker.log", concurrency=1),
    ):
        assert wait_until(all_handled, timeout=180)
    status = store.batch(batch_id)
    assert status is not None
    assert (status.total, status.true, status.pending) == (CHUNK, CHUNK, 0)
    for request in requests:
        assert store.history_length(request.check_id) == 1
        assert len(model.requests_for(request.run_id)) == 3  # the 3-step script, once


def test_a_broker_lost_mid_batch_fails_the_submit_and_the_sweeper_sends_what_it_left_out(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = RedisProcess(data_dir=tmp_path / "broker", appendonly=True).start()
    try:
        settings = load_settings(redis_url=redis_url, broker_url=broker.url)
        store = VerdictStore.from_settings(settings)
        dispatcher = Dispatcher.from_settings(settings, store)
        quick_publish_retries(dispatcher)
        requests = batch_chunk(store, tmp_path / "snaps", "batch-broker-lost")
        run_ids = [request.run_id for request in requests]
        half = CHUNK // 2
        # The broker stops (cleanly: what it executed is kept) while the batch's replies
        # are on their way, with the first half of the chunk queued.
        BatchRoundTripFailure(monkeypatch, landed=half, then=broker.stop)

        with pytest.raises(OperationalError, match=f"connecting to 127.0.0.1:{broker.port}"):
            dispatcher.submit_many(requests)
        dispatcher.close()

        assert_registered_and_queued(store, requests, "batch-broker-lost")
        broker.start()
        queue = redis.Redis.from_url(broker.url, decode_responses=True)
        assert Counter(queued_run_ids(queue, settings)) == Counter(run_ids[:half])

        sweeper = LostRunSweeper(
            store,
            Dispatcher.from_settings(settings, store),
            queue,
            queue=queue_name(settings),
            lost_after_seconds=settings.broker_visibility_timeout_seconds,
        )
        # Not lost yet: a run without a message is queued again only once it has been
        # silent for the broker's visibility timeout (then it is; nothing is lost).
        assert sweeper.sweep_once() == []
        after_timeout = datetime.now(UTC) + timedelta(
            seconds=settings.broker_visibility_timeout_seconds + 1
        )
        assert sorted(sweeper.sweep_once(now=after_timeout)) == sorted(run_ids[half:])
        assert Counter(queued_run_ids(queue, settings)) == Counter(run_ids)  # each exactly once
        sweeper.dispatcher.close()
        queue.close()
    finally:
        broker.stop()


# --- what the person who submitted is told when the broker fails the submit ----------------

VISIBILITY_SECONDS = 600  # ASSAY_BROKER_VISIBILITY_TIMEOUT_SECONDS in these tests: "10m"
RESEND = (
    "the fleet's workers send again a run whose message did not reach the broker once it has "
    "waited 10m (ASSAY_BROKER_VISIBILITY_TIMEOUT_SECONDS)"
)


@pytest.fixture
def separate_broker(tmp_path: Path) -> Iterator[RedisProcess]:
    broker = RedisProcess(data_dir=tmp_path / "broker", appendonly=True).start()
    yield broker
    broker.stop()


@pytest.fixture
def assay_cli(
    redis_url: str,
    separate_broker: RedisProcess,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """``assay ARGV`` in this process (so a publish batch can be made to fail) against the
    store and a separate broker -> (exit code, stdout, stderr)."""
    from workers.fleet import dispatch

    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_BROKER_URL", separate_broker.url)
    monkeypatch.setenv("ASSAY_BROKER_VISIBILITY_TIMEOUT_SECONDS", str(VISIBILITY_SECONDS))
    configured_app = dispatch.configured_app

    def quick_app(settings: AssaySettings) -> Any:  # Celery's ~35 s of retries cut to ~1 s
        app = configured_app(settings)
        app.conf.task_publish_retry_policy = QUICK_RETRIES
        return app

    monkeypatch.setattr(dispatch, "configured_app", quick_app)

    def run(*argv: str) -> tuple[int, str, str]:
        return run_cli(capsys, *argv)

    yield run
    structlog.reset_defaults()  # the command configured logging on the captured stderr


QUICK_RETRIES = {"max_retries": 2, "interval_start": 0.1, "interval_step": 0.1, "interval_max": 0.2}


def one_line_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("assay: error: ")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_a_broker_lost_mid_batch_exits_69_saying_the_runs_are_registered_and_when_they_go_out(
    assay_cli: Callable[..., tuple[int, str, str]],
    redis_url: str,
    separate_broker: RedisProcess,
    raw: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`assay batch` over one chunk; the broker stops with half of it queued. What the
    message promises is then checked: every run registered, the sweeper sends the others
    once they waited the visibility timeout, and the batch finishes when they have run."""
    make_snapshots(tmp_path / "snaps", CHUNK)
    BatchRoundTripFailure(monkeypatch, landed=CHUNK // 2, then=separate_broker.stop)

    code, out, err = assay_cli("batch", PREDICATE, "--snapshots", str(tmp_path / "snaps" / "*"))

    assert code == 69 and out == ""
    message = one_line_error(err)
    settings = load_settings(redis_url=redis_url, broker_url=separate_broker.url)
    store = VerdictStore.from_settings(settings)
    batch_id = latest_batch_id(raw, settings.key_prefix)
    assert batch_id is not None
    assert message == (
        f"assay: error: the fleet's broker at {separate_broker.url} failed while queueing "
        f"batch {batch_id} (Error 111 connecting to 127.0.0.1:{separate_broker.port}. "
        f"Connection refused.); its {CHUNK} runs are registered, so nothing is lost: {RESEND}, "
        "and the batch finishes once they have run; not to wait, start the batch again once "
        "the broker is back"
    )
    run_ids = batch_run_ids(raw, settings, batch_id)
    assert len(run_ids) == CHUNK
    for run_id in run_ids:
        state = store.run_state(run_id)
        assert state is not None and state.status == "queued"

    separate_broker.start()
    queue = redis.Redis.from_url(separate_broker.url, decode_responses=True)
    sent = Counter(queued_run_ids(queue, settings))
    assert len(sent) == CHUNK // 2
    sweeper = LostRunSweeper(
        store,
        Dispatcher.from_settings(settings, store),
        queue,
        queue=queue_name(settings),
        lost_after_seconds=VISIBILITY_SECONDS,
    )
    assert sweeper.sweep_once() == []
    after = datetime.now(UTC) + timedelta(seconds=VISIBILITY_SECONDS + 1)
    assert Counter(sweeper.sweep_once(now=after)) == Counter(run_ids) - sent
    assert Counter(queued_run_ids(queue, settings)) == Counter(run_ids)
    for run_id in run_ids:  # as the workers would record them
        request = store.run_request(run_id)
        assert request is not None and store.record_verdict(finished_report(request, "true"))
    status = store.batch(batch_id)
    assert status is not None and status.done and status.total == CHUNK
    sweeper.dispatcher.close()
    queue.close()


def test_a_broker_lost_mid_fan_out_says_which_targets_were_not_submitted(
    assay_cli: Callable[..., tuple[int, str, str]],
    redis_url: str,
    separate_broker: RedisProcess,
    raw: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_snapshots(tmp_path / "snaps", TARGETS)  # the broker stops in the first of two chunks
    BatchRoundTripFailure(monkeypatch, landed=0, then=separate_broker.stop)

    code, _out, err = assay_cli("batch", PREDICATE, "--snapshots", str(tmp_path / "snaps" / "*"))

    assert code == 69
    message = one_line_error(err)
    settings = load_settings(redis_url=redis_url, broker_url=separate_broker.url)
    batch_id = raw.zrange(f"{settings.key_prefix}:batches", 0, -1)
    assert len(batch_id) == 1, "the batch was created"
    assert message.endswith(
        f"failed while queueing batch {batch_id[0]} (Error 111 connecting to "
        f"127.0.0.1:{separate_broker.port}. Connection refused.); its first {FANOUT_CHUNK} "
        f"runs are registered and will run: {RESEND}; but the targets after them were not "
        "submitted, so the batch is closed as incomplete (it finishes with those runs, and "
        "never counts as all true): start the batch again once the broker is back"
    )
    assert len(batch_run_ids(raw, settings, batch_id[0])) == FANOUT_CHUNK
    status = VerdictStore.from_settings(settings).batch(batch_id[0])
    assert status is not None and status.total == FANOUT_CHUNK
    assert status.sealed and status.incomplete and status.stop_reason == "the broker failed"


def test_a_batch_whose_broker_fails_on_a_later_chunk_finishes_incomplete_and_never_exits_0(
    assay_cli: Callable[..., tuple[int, str, str]],
    redis_url: str,
    separate_broker: RedisProcess,
    raw: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three chunks; the broker fails on the second. The batch is not left "enqueueing"
    for ever: it shows as incomplete at once, finishes once its registered runs have
    verdicts, and even with every one of them true `batch status` exits 3, not 0: the
    targets of the third chunk were never evaluated."""
    from fastapi.testclient import TestClient

    from assay.api import create_app
    from tests.api_support import READ_TOKEN, TOKENS, auth

    make_snapshots(tmp_path / "snaps", 2 * FANOUT_CHUNK + 50)
    BatchRoundTripFailure(monkeypatch, landed=0, then=separate_broker.stop, skip=1)

    code, _out, err = assay_cli("batch", PREDICATE, "--snapshots", str(tmp_path / "snaps" / "*"))

    assert code == 69
    registered = 2 * FANOUT_CHUNK
    assert f"its first {registered} runs are registered" in one_line_error(err)
    settings = load_settings(redis_url=redis_url)
    batch_id = latest_batch_id(raw, settings.key_prefix)
    assert batch_id is not None
    state = (
        f"incomplete: the fan-out stopped after {registered} targets (the broker failed); "
        "the targets after them were not submitted"
    )

    code, out, _err = assay_cli("batch", "status", batch_id)
    assert code == 75  # its registered runs have not run yet
    assert f"batch {batch_id} · running, {state} · 0/{registered} done" in out

    store = VerdictStore.from_settings(settings)
    for run_id in batch_run_ids(raw, settings, batch_id):  # as the workers would record them
        request = store.run_request(run_id)
        assert request is not None and store.record_verdict(finished_report(request, "true"))

    code, out, _err = assay_cli("batch", "status", batch_id)
    assert code == 3, "every run true, but a third of the targets never ran: not exit 0"
    assert f"batch {batch_id} · done, {state} · {registered}/{registered} done" in out
    code, out, _err = assay_cli("batch", "status", batch_id, "--json")
    shown = json.loads(out)
    assert code == 3
    assert (shown["done"], shown["sealed"], shown["incomplete"]) == (True, True, True)
    assert (shown["total"], shown["true"], shown["pending"]) == (registered, registered, 0)
    assert shown["stop_reason"] == "the broker failed" and shown["finished_at"] is not None
    with TestClient(create_app(load_settings(redis_url=redis_url, api_tokens=TOKENS))) as api:
        answer = api.get(f"/v1/batches/{batch_id}", headers=auth(READ_TOKEN))
    assert answer.status_code == 200
    assert answer.json() == shown


def test_a_broker_lost_mid_submit_names_the_run_that_is_registered(
    assay_cli: Callable[..., tuple[int, str, str]],
    redis_url: str,
    separate_broker: RedisProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (snapshot,) = make_snapshots(tmp_path / "snaps", 1)
    BatchRoundTripFailure(monkeypatch, landed=0, then=separate_broker.stop)

    code, out, err = assay_cli("submit", "--snapshot", str(snapshot), PREDICATE)

    assert code == 69 and out == ""
    message = one_line_error(err)
    run_id = message.split("failed while queueing run ", 1)[1].split(" ", 1)[0]
    assert message.endswith(
        f"; it is registered, so nothing is lost: {RESEND}; not to wait, submit again as a new "
        "run once the broker is back"
    )
    store = VerdictStore.from_settings(load_settings(redis_url=redis_url))
    state = store.run_state(run_id)
    assert state is not None and state.status == "queued"


def test_the_api_answers_a_broker_lost_mid_submit_with_a_503_that_says_the_run_is_kept(
    redis_url: str, separate_broker: RedisProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from assay.api import create_app
    from tests.api_support import TOKENS, WRITE_TOKEN, auth

    settings = load_settings(
        redis_url=redis_url,
        broker_url=separate_broker.url,
        broker_visibility_timeout_seconds=VISIBILITY_SECONDS,
        api_tokens=TOKENS,
    )
    (snapshot,) = make_snapshots(tmp_path / "snaps", 1)
    body = {
        "text": PREDICATE,
        "target": {"type": "snapshot", "path": str(snapshot)},
        "run_id": "run-kept-1",
    }
    with TestClient(create_app(settings)) as api:
        api.app.state.services.dispatcher.app.conf.task_publish_retry_policy = QUICK_RETRIES
        BatchRoundTripFailure(monkeypatch, landed=0, then=separate_broker.stop)
        answer = api.post("/v1/evaluations", json=body, headers=auth(WRITE_TOKEN))

    assert answer.status_code == 503
    assert answer.json() == {
        "error": {
            "code": "broker_unavailable",
            "message": "The broker failed while queueing run run-kept-1; it is registered, so "
            f"nothing is lost: {RESEND}; not to wait, submit again as a new run once the "
            "broker is back.",
        }
    }
    state = VerdictStore.from_settings(settings).run_state("run-kept-1")
    assert state is not None and state.status == "queued"
