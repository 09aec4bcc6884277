"""Finding runs whose broker message was lost, and sending them again.

Celery's Redis transport takes a message off the queue with BRPOP and only
then writes it to its ``unacked`` hash; a worker killed between the two
(SIGKILL, OOM) loses that message for good, acks_late or not. The verdict
store knows better: every run without a verdict sits in ``P:unfinished``,
scored by its last sign of life (for a parked run: its wake-up instant, so a
continuation the scheduler sent and the broker lost is found too). The
sweeper, one per fleet at a time (a lease in the store), looks at runs
silent for longer than the broker's
visibility timeout, checks whether the broker still holds a message for them
(waiting in the queue, or reserved by a worker in ``unacked``) and re-sends
those it does not. Re-sending is safe: a run is recorded once however many
copies run.

Only Redis brokers need this (Sentinel too: the sweeper follows the master the
sentinels name); with RabbitMQ an unacknowledged message is never lost, and the
sweeper is not started.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
import structlog

from schemas.settings import AssaySettings
from workers.fleet.broker import (
    KOMBU_UNACKED_KEY,
    broker_redis,
    broker_url,
    has_visibility_timeout,
    kombu_queue_keys,
    queue_name,
)
from workers.fleet.checkpoints import load
from workers.fleet.dispatch import Dispatcher
from workers.fleet.store import VerdictStore

_log = structlog.get_logger(__name__)

SCAN_PAGE = 1000


def _task_id(raw: str | bytes) -> str | None:
    """The Celery task id (our run id) of one kombu message as stored in Redis."""
    try:
        message: Any = json.loads(raw)
    except ValueError:
        return None
    if isinstance(message, list) and message:  # unacked: [message, exchange, routing_key]
        message = message[0]
    if not isinstance(message, dict):
        return None
    headers = message.get("headers") or {}
    task_id = headers.get("id") or message.get("properties", {}).get("correlation_id")
    return str(task_id) if task_id else None


def broker_run_ids(client: redis.Redis, queue: str) -> set[str]:
    """Run ids with a message in the broker: waiting in ``queue`` or reserved (unacked)."""
    present: set[str] = set()
    for key in kombu_queue_keys(queue):
        start = 0
        while True:
            page = client.lrange(key, start, start + SCAN_PAGE - 1)
            present.update(filter(None, (_task_id(item) for item in page)))
            if len(page) < SCAN_PAGE:
                break
            start += SCAN_PAGE
    for _, raw in client.hscan_iter(KOMBU_UNACKED_KEY, count=SCAN_PAGE):
        task_id = _task_id(raw)
        if task_id:
            present.add(task_id)
    return present


class LostRunSweeper:
    """Re-sends runs that have no verdict and no message anywhere in the broker."""

    def __init__(
        self,
        store: VerdictStore,
        dispatcher: Dispatcher,
        broker: redis.Redis,
        *,
        queue: str,
        lost_after_seconds: float,
        redis_for_checkpoints: Any = None,
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.broker = broker
        self.queue = queue
        self.lost_after = timedelta(seconds=lost_after_seconds)
        self.redis_for_checkpoints = redis_for_checkpoints
        self.owner = uuid.uuid4().hex

    @property
    def interval_seconds(self) -> float:
        return max(1.0, min(60.0, self.lost_after.total_seconds() / 2))

    def sweep_once(self, now: datetime | None = None) -> list[str]:
        """One pass; returns the run ids sent again."""
        now = now or datetime.now(UTC)
        if not self.store.try_lock("sweeper", self.owner, self.interval_seconds * 2):
            return []
        silent = self.store.unfinished_before(now - self.lost_after)
        if not silent:
            return []
        in_broker = broker_run_ids(self.broker, self.queue)
        return self._resend(silent, in_broker, now)

    def _resend(self, silent: Iterable[str], in_broker: set[str], now: datetime) -> list[str]:
        sent: list[str] = []
        for run_id in silent:
            state = self.store.run_state(run_id)
            if state is None or state.verdict is not None:
                self.store.forget_unfinished(run_id)  # expired, or finished meanwhile
                continue
            if run_id in in_broker:  # waiting in the queue, or reserved by a live worker
                self.store.look_again_at(run_id, now)
                continue
            request = self.store.run_request(run_id)
            if request is None:
                self.store.forget_unfinished(run_id)
                continue
            self.dispatcher.send(request, resume_sequence=self._resume_sequence(run_id))
            self.store.look_again_at(run_id, now)
            sent.append(run_id)
            _log.warning("lost_run_resent", run_id=run_id, status=state.status)
        return sent

    def _resume_sequence(self, run_id: str) -> int | None:
        """A run that was parked before resumes from its checkpoint, not from scratch."""
        if self.redis_for_checkpoints is None:
            return None
        checkpoint = load(self.redis_for_checkpoints, self.dispatcher.settings, run_id)
        return checkpoint.sequence if checkpoint is not None else None

    def run(self, stop: threading.Event) -> None:
        """Sweep until ``stop`` is set; errors are logged and the loop goes on."""
        while not stop.wait(self.interval_seconds):
            try:
                self.sweep_once()
            except Exception as exc:  # Redis away: try again next interval
                _log.warning("sweep_failed", error=str(exc))


def start_sweeper(settings: AssaySettings, store: VerdictStore, dispatcher: Dispatcher) -> Any:
    """Start the sweeper thread on a Redis-family broker; returns its stop event or None.

    On a Sentinel broker the sweeper reads the master the sentinels name
    (``broker_redis``), so after a failover it looks in the new master's queue.
    """
    if not has_visibility_timeout(settings):
        return None
    separate = broker_url(settings) != settings.redis_url
    sweeper = LostRunSweeper(
        store,
        dispatcher,
        broker_redis(settings) if separate else store.client,
        queue=queue_name(settings),
        lost_after_seconds=settings.broker_visibility_timeout_seconds,
        redis_for_checkpoints=store.client,
    )
    stop = threading.Event()
    threading.Thread(target=sweeper.run, args=(stop,), name="assay-sweeper", daemon=True).start()
    return stop
