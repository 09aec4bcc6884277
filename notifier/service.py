"""A notifier replica: every verdict change to every configured sink, at least once each.

Each sink has its own consumer group on the store's change stream
(workers/fleet/notify_feed.py) and its own thread here, so a slow or failing sink
never holds up another. Within a sink, one replica delivers in stream order;
replicas share a sink's changes by reading from the same group.

For one change a sink worker

1. reads it (``XREADGROUP >``) or takes it over from a replica that stopped
   answering (``XAUTOCLAIM``), and drops it at once if the sink's static filter
   says so (acknowledged as filtered);
2. holds it until its minimum duration has passed (damping);
3. decides (notifier/policy.py) whether the sink still needs to hear it, and
   delivers it, retrying with exponential backoff and jitter (tenacity) while
   the failure is retryable, each attempt counted in Redis first;
4. acknowledges it once the sink answered 2xx, or moves it to the sink's dead
   letters after ``notify_max_attempts`` attempts or a final refusal.

A heartbeat thread keeps this replica's held changes fresh (their idle time in
the group), so only a replica that really stopped has its changes taken over.
SIGKILL between delivery and acknowledgement means the change is delivered
again by whoever takes it over, with the same idempotency key and body.

Spend-ceiling events (a schedule's, a batch's or the fleet's ceiling at 80% and at
100%, once each per period: workers/fleet/spend.py adds each in the same Lua step
that crosses the threshold) reach every sink the same way, through a second thread
per sink (:class:`SpendSinkWorker`) on the spend guard's event stream.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog
from redis.exceptions import RedisError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from notifier.alertmanager import AlertState, AlertSync
from notifier.events import notification_for, spend_alert, spend_headline, spend_notification
from notifier.policy import decide_message, due_at, matches
from notifier.policy_report_sink import ReportSync
from notifier.policy_report_writer import ReportWriter
from notifier.sinks import (
    AlertmanagerClient,
    DeliveryError,
    Sender,
    SlackSender,
    WebhookSender,
)
from schemas.notify import (
    AlertmanagerSink,
    PolicyReportSink,
    SlackSink,
    WebhookSink,
    missing_secrets,
)
from workers.engine import metrics
from workers.fleet.notify_feed import FeedEntry, SinkFeed, spend_feed
from workers.fleet.spend import event_from_fields
from workers.fleet.store import VerdictStore

if TYPE_CHECKING:
    import httpx

    from schemas.notify import Sink
    from schemas.settings import AssaySettings

_log = structlog.get_logger(__name__)

MAX_HELD_BATCHES = 100  # changes held per sink (most of them waiting out a minimum duration)
PRUNE_EVERY_SECONDS = 600.0
PRUNE_IDLE_MS = 3600 * 1000
LONGEST_BLOCK_SECONDS = 1.0


class NoSinks(ValueError):
    """The configuration names no sink, or a sink without its secret: nothing can be sent."""


class Stopping(Exception):
    """Raised out of a backoff pause when the replica is asked to stop."""


@dataclass
class Held:
    entry: FeedEntry
    due: float  # epoch s


def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, DeliveryError) and exc.retryable


class SinkWorker:
    """Delivers one sink's changes for this replica (run :meth:`run` in its own thread)."""

    def __init__(
        self,
        name: str,
        config: Sink,
        *,
        feed: SinkFeed,
        store: VerdictStore,
        settings: AssaySettings,
        sender: Sender | None = None,
        alerts: AlertSync | None = None,
        reports: ReportSync | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if sum(part is not None for part in (sender, alerts, reports)) != 1:
            raise ValueError("a sink worker needs one of a sender, an alert sync, a report sync")
        self.name = name
        self.config = config
        self.feed = feed
        self.store = store
        self.settings = settings
        self.sender = sender
        self.alerts = alerts
        self.reports = reports
        self.clock = clock
        self.held: dict[str, Held] = {}
        self._lock = threading.Lock()
        self._next_claim = 0.0
        self._next_resend = 0.0
        self._next_prune = 0.0
        self._log = _log.bind(sink=name, sink_type=config.type)

    # --- the loop -------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Deliver until ``stop`` is set; then hand held changes to the other replicas."""
        while not stop.is_set():
            try:
                self.feed.ensure_group()
                break
            except Exception as exc:  # Redis not there yet: wait for it
                self._log.warning("sink cannot reach redis", error=type(exc).__name__)
                stop.wait(1.0)
        self._log.info("sink started")
        while not stop.is_set():
            try:
                self.step(stop)
            except Stopping:
                break
            except Exception as exc:  # a Redis blip or a bug in one change: log, pause, go on
                self._log.warning("sink round failed", error=f"{type(exc).__name__}: {exc}"[:300])
                if "NOGROUP" in str(exc):  # the stream or group was deleted: start afresh
                    self._recreate_group()
                stop.wait(1.0)
        self._shutdown()

    def _recreate_group(self) -> None:
        try:
            self.feed.ensure_group()
        except Exception as exc:
            self._log.warning("sink cannot recreate its group", error=type(exc).__name__)
        with self._lock:
            self.held.clear()

    def step(self, stop: threading.Event) -> None:
        """One round: take over stale changes, resend alerts, read new changes, deliver due ones."""
        now = self.clock()
        if now >= self._next_claim:
            claim_idle = self.settings.notify_claim_idle_seconds
            self._take(
                self.feed.claim_stale(int(claim_idle * 1000), self.settings.notify_batch_size)
            )
            self._next_claim = now + max(0.5, claim_idle / 4)
        if now >= self._next_prune:
            self.feed.prune_consumers(PRUNE_IDLE_MS)
            self._next_prune = now + PRUNE_EVERY_SECONDS
        if self.alerts is not None and now >= self._next_resend:
            self._next_resend = now + self.alerts.config.resend_seconds
            self._resend()
        if self.reports is not None and now >= self._next_resend:
            self._next_resend = now + self.reports.config.resync_seconds
            self._resync()
        due = self._due(now)
        room = self.settings.notify_batch_size - len(due)
        if room > 0 and len(self.held) < self.settings.notify_batch_size * MAX_HELD_BATCHES:
            block_ms = None if due else max(1, int(self._pause(now) * 1000))
            self._take(self.feed.read_new(room, block_ms))
            due = self._due(self.clock())
        elif not due:
            stop.wait(self._pause(now))
        for held in due:
            if stop.is_set():
                return
            self._handle(held, stop)

    def _pause(self, now: float) -> float:
        """Seconds until something is due here: a held change, a claim round, a resend."""
        wake = [now + LONGEST_BLOCK_SECONDS, self._next_claim]
        if self.alerts is not None or self.reports is not None:
            wake.append(self._next_resend)
        with self._lock:
            wake += [held.due for held in self.held.values()]
        return max(0.001, min(wake) - now)

    def _due(self, now: float) -> list[Held]:
        with self._lock:
            return sorted(
                (h for h in self.held.values() if h.due <= now), key=lambda h: h.entry.position
            )

    def _take(self, entries: list[FeedEntry]) -> None:
        for entry in entries:
            if entry.change is not None and not matches(self.config, entry.change, self.name):
                self.feed.ack(entry, "filtered")
                metrics.observe_notify(self.name, "filtered")
                continue
            due = due_at(self.config, entry.change).timestamp() if entry.change else 0.0
            with self._lock:
                self.held[entry.entry_id] = Held(entry, due)

    def _drop(self, entry: FeedEntry) -> None:
        with self._lock:
            self.held.pop(entry.entry_id, None)

    def refresh(self) -> None:
        """Heartbeat: keep held changes ours; forget those another replica took over."""
        with self._lock:
            ids = list(self.held)
        if not ids:
            return
        lost = set(ids) - set(self.feed.keep(ids))
        if lost:
            with self._lock:
                for entry_id in lost:
                    self.held.pop(entry_id, None)
            self._log.info("changes taken over by another replica", count=len(lost))

    def _shutdown(self) -> None:
        with self._lock:
            ids = list(self.held)
            self.held.clear()
        try:
            released = self.feed.release(ids) if ids else []
            self.feed.leave()
        except Exception as exc:  # they go idle and are taken over anyway
            self._log.warning("could not hand back held changes", error=type(exc).__name__)
            return
        self._log.info("sink stopped", handed_back=len(released))

    # --- one change ----------------------------------------------------------------------------
    def _handle(self, held: Held, stop: threading.Event) -> None:
        entry = held.entry
        if not self.feed.keep([entry.entry_id]):  # another replica took it over meanwhile
            self._drop(entry)
            return
        if entry.change is None:
            self._dead(entry, 0, "the change entry is malformed")
            self._drop(entry)
            return
        try:
            if self.alerts is not None:
                self._handle_alert(entry, stop)
            elif self.reports is not None:
                self._handle_report(entry, stop)
            else:
                self._handle_message(entry, stop)
        except (Stopping, RedisError):
            raise  # kept: handed over, or tried again next round
        except Exception as exc:  # a change that cannot become a delivery must not stall the sink
            error = f"could not prepare the delivery ({type(exc).__name__})"
            self._dead(entry, self.feed.attempts(entry.entry_id), error)
        self._drop(entry)

    def _handle_message(self, entry: FeedEntry, stop: threading.Event) -> None:
        change = entry.change
        assert change is not None and self.sender is not None
        summaries = self.store.check_summaries([change.check_id])
        current = summaries[0] if summaries else None
        told = self.feed.told(change.check_id)
        decision = decide_message(self.config, change, current, told)
        if not decision.deliver:
            self.feed.ack(entry, "filtered", decision.remember, decision.remember_mode)
            metrics.observe_notify(self.name, "filtered")
            self._log.info(
                "change not delivered",
                entry=entry.entry_id,
                check_id=change.check_id,
                reason=decision.reason,
            )
            return
        assert decision.presented_from is not None
        notification = notification_for(
            self.store,
            self.settings,
            self.name,
            entry.entry_id,
            change,
            decision.presented_from,
            current,
        )
        sender = self.sender
        if self._deliver(entry, lambda: sender.deliver(notification), stop):
            self.feed.ack(entry, "delivered", decision.remember, "newer")
            metrics.observe_notify(self.name, "delivered")
            self._log.info(
                "change delivered",
                entry=entry.entry_id,
                check_id=change.check_id,
                change=f"{decision.presented_from.value}->{change.to_verdict.value}",
            )

    def _handle_alert(self, entry: FeedEntry, stop: threading.Event) -> None:
        change = entry.change
        assert change is not None and self.alerts is not None
        alerts = self.alerts
        posted: list[AlertState | None] = [None]

        def send() -> None:
            posted[0] = alerts.sync_check(change.check_id)

        if self._deliver(entry, send, stop):
            outcome: Literal["delivered", "filtered"] = "delivered" if posted[0] else "filtered"
            self.feed.ack(entry, outcome)
            metrics.observe_notify(self.name, outcome)
            self._log.info(
                "alert synced", entry=entry.entry_id, check_id=change.check_id, state=posted[0]
            )

    def _handle_report(self, entry: FeedEntry, stop: threading.Event) -> None:
        change = entry.change
        assert change is not None and self.reports is not None
        reports = self.reports
        written = [0]

        def send() -> None:
            written[0] = reports.sync_target(change.target)

        if self._deliver(entry, send, stop):
            outcome: Literal["delivered", "filtered"] = "delivered" if written[0] else "filtered"
            self.feed.ack(entry, outcome)
            metrics.observe_notify(self.name, outcome)
            self._log.info(
                "reports synced", entry=entry.entry_id, target=change.target, reports=written[0]
            )

    def _resync(self) -> None:
        assert self.reports is not None
        lease = max(1.0, self.reports.config.resync_seconds * 0.9)
        if not self.store.try_lock(f"notify-resync:{self.name}", self.feed.consumer, lease):
            return  # another replica rewrites the reports this interval
        try:
            count = self.reports.resync()
        except DeliveryError as exc:
            metrics.observe_notify_failure(self.name)
            self._log.warning("report resync failed", error=str(exc))
            return
        except Exception as exc:  # never let a resync hold up the changes: next interval
            self._log.warning("report resync failed", error=f"{type(exc).__name__}: {exc}"[:300])
            return
        self._log.info("reports resynced", reports=count)

    def _deliver(self, entry: FeedEntry, send: Callable[[], None], stop: threading.Event) -> bool:
        """Try ``send`` until it works or the attempts run out; False when dead-lettered."""
        made = self.feed.attempts(entry.entry_id)
        left = self.settings.notify_max_attempts - made
        if left <= 0:
            self._dead(entry, made, f"gave up after {made} attempts")
            return False

        def pause(seconds: float) -> None:
            if stop.wait(seconds):
                raise Stopping

        retrying = Retrying(
            stop=stop_after_attempt(left),
            wait=self._backoff,
            retry=retry_if_exception(_retryable),
            sleep=pause,
            before_sleep=lambda state: self._retrying(entry, state),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    self.feed.begin_attempt(entry.entry_id)
                    send()
        except DeliveryError as exc:
            metrics.observe_notify_failure(self.name)
            self._dead(entry, self.feed.attempts(entry.entry_id), str(exc))
            return False
        return True

    def _backoff(self, state: RetryCallState) -> float:
        cap = self.settings.notify_retry_max_seconds
        waited = wait_exponential_jitter(initial=min(1.0, cap), max=cap)(state)
        error = state.outcome.exception() if state.outcome else None
        hinted = error.retry_after if isinstance(error, DeliveryError) else None
        return max(waited, hinted or 0.0)

    def _retrying(self, entry: FeedEntry, state: RetryCallState) -> None:
        metrics.observe_notify_failure(self.name)
        error = state.outcome.exception() if state.outcome else None
        self._log.warning(
            "delivery failed, retrying",
            entry=entry.entry_id,
            attempt=state.attempt_number,
            error=str(error),
            retry_in=round(state.upcoming_sleep, 2),
        )

    def _dead(self, entry: FeedEntry, attempts: int, error: str) -> None:
        if self.feed.dead_letter(entry, attempts, error):
            metrics.observe_notify(self.name, "dead_lettered")
            self._log.error(
                "change dead-lettered", entry=entry.entry_id, attempts=attempts, error=error
            )

    def _resend(self) -> None:
        assert self.alerts is not None
        lease = max(1.0, self.alerts.config.resend_seconds * 0.9)
        if not self.store.try_lock(f"notify-resend:{self.name}", self.feed.consumer, lease):
            return  # another replica resends this interval
        try:
            count = self.alerts.resend()
        except DeliveryError as exc:
            metrics.observe_notify_failure(self.name)
            self._log.warning("alert resend failed", error=str(exc))
            return
        except Exception as exc:  # never let a resend hold up the changes: next interval
            self._log.warning("alert resend failed", error=type(exc).__name__)
            return
        if count:
            self._log.debug("alerts resent", count=count)


class SpendSinkWorker(SinkWorker):
    """Delivers one sink's spend-ceiling events for this replica, with the same retries,
    attempt counts and dead letters as its changes (its own keys: ``notify_feed.spend_feed``).

    A webhook gets CloudEvent ``assay.spend.threshold``, Slack a message, Alertmanager
    alert ``AssaySpendCeiling`` firing until the period rolls over; a sink with
    ``spend: false`` acknowledges them as filtered.
    """

    def _take(self, entries: list[FeedEntry]) -> None:
        for entry in entries:
            if not self.config.spend:
                self.feed.ack(entry, "filtered")
                metrics.observe_notify(self.name, "filtered")
                continue
            with self._lock:
                self.held[entry.entry_id] = Held(entry, 0.0)

    def _resend(self) -> None:
        """Verdict alerts are the change worker's to re-post; spend alerts end by themselves."""

    def _handle(self, held: Held, stop: threading.Event) -> None:
        entry = held.entry
        if not self.feed.keep([entry.entry_id]):  # another replica took it over meanwhile
            self._drop(entry)
            return
        try:
            event = event_from_fields(entry.fields)
        except (KeyError, ValueError):
            self._dead(entry, 0, "the spend event is malformed")
            self._drop(entry)
            return
        notification = spend_notification(self.settings, self.name, entry.entry_id, event)
        sender, alerts = self.sender, self.alerts

        def send() -> None:
            if sender is not None:
                sender.deliver(notification)
            elif alerts is not None:
                alerts.client.post_alerts([spend_alert(alerts.config, event)])

        try:
            if self._deliver(entry, send, stop):
                self.feed.ack(entry, "delivered")
                metrics.observe_notify(self.name, "delivered")
                self._log.info(
                    "spend event delivered", entry=entry.entry_id, event=spend_headline(event)
                )
        except (Stopping, RedisError):
            raise  # kept: handed over, or tried again next round
        except Exception as exc:  # an event that cannot become a delivery must not stall it
            error = f"could not prepare the delivery ({type(exc).__name__})"
            self._dead(entry, self.feed.attempts(entry.entry_id), error)
        self._drop(entry)


def build_worker(
    name: str,
    config: Sink,
    *,
    store: VerdictStore,
    settings: AssaySettings,
    http: httpx.Client,
    consumer: str,
    clock: Callable[[], float] = time.time,
    spend: bool = False,
) -> SinkWorker:
    """The worker that delivers ``config``'s verdict changes (``spend``: its spend events)."""
    feed = spend_feed(store, name, consumer) if spend else SinkFeed(store, name, consumer)
    kind = SpendSinkWorker if spend else SinkWorker
    if isinstance(config, PolicyReportSink):
        reports = ReportSync(name, config, store, ReportWriter(config), feed)
        return kind(
            name, config, feed=feed, store=store, settings=settings, reports=reports, clock=clock
        )
    if isinstance(config, AlertmanagerSink):
        sync = AlertSync(name, config, store, AlertmanagerClient(name, config, http), settings)
        return kind(
            name, config, feed=feed, store=store, settings=settings, alerts=sync, clock=clock
        )
    sender: Sender
    if isinstance(config, WebhookSink):
        sender = WebhookSender(name, config, http)
    elif isinstance(config, SlackSink):
        sender = SlackSender(name, config, http)
    else:  # pragma: no cover - the settings model admits no other type
        raise ValueError(f"sink {name} has an unknown type")
    return kind(name, config, feed=feed, store=store, settings=settings, sender=sender, clock=clock)


def http_client(settings: AssaySettings) -> httpx.Client:
    """The notifier's HTTP client: the delivery timeout, no redirects, an honest User-Agent."""
    from importlib.metadata import version

    import httpx

    return httpx.Client(
        timeout=settings.notify_timeout_seconds,
        follow_redirects=False,
        headers={"User-Agent": f"assay-notifier/{version('assay')}"},
    )


class Notifier:
    """One replica: a worker thread per sink and the heartbeat that keeps their changes theirs."""

    def __init__(self, settings: AssaySettings, store: VerdictStore, http: httpx.Client) -> None:
        if not settings.notify_sinks:
            raise NoSinks(
                "no sinks are configured: add notify_sinks to the ASSAY_CONFIG file or set "
                "ASSAY_NOTIFY_SINKS (see docs/alerting.md)"
            )
        missing = [
            variable
            for name, config in sorted(settings.notify_sinks.items())
            for variable in missing_secrets(name, config)
        ]
        if missing:
            raise NoSinks(
                f"a sink's secret is missing: set {', '.join(missing)} (from a Secret or the "
                "environment; see docs/alerting.md)"
            )
        self.settings = settings
        self.consumer = consumer_name()
        self.workers = [
            build_worker(
                name, config, store=store, settings=settings, http=http, consumer=self.consumer
            )
            for name, config in sorted(settings.notify_sinks.items())
        ]
        self.spend_workers = [
            build_worker(
                name,
                config,
                store=store,
                settings=settings,
                http=http,
                consumer=self.consumer,
                spend=True,
            )
            for name, config in sorted(settings.notify_sinks.items())
            if not isinstance(config, PolicyReportSink)  # a report holds verdicts, not spend
        ]

    def statuses(self) -> list[Any]:
        return [w.feed.status(w.config.type) for w in self.workers]

    def run(self, stop: threading.Event) -> None:
        _log.info(
            "notifier started",
            consumer=self.consumer,
            sinks=[f"{w.name} ({w.config.type})" for w in self.workers],
        )
        threads = [
            threading.Thread(target=w.run, args=(stop,), name=f"sink-{w.name}", daemon=True)
            for w in self.workers
        ]
        threads += [
            threading.Thread(target=w.run, args=(stop,), name=f"spend-{w.name}", daemon=True)
            for w in self.spend_workers
        ]
        threads.append(
            threading.Thread(target=self._heartbeat, args=(stop,), name="heartbeat", daemon=True)
        )
        for thread in threads:
            thread.start()
        stop.wait()
        for thread in threads:
            thread.join(timeout=self.settings.notify_timeout_seconds + 5)
        _log.info("notifier stopped", consumer=self.consumer)

    def _heartbeat(self, stop: threading.Event) -> None:
        interval = max(0.25, self.settings.notify_claim_idle_seconds / 4)
        while not stop.wait(interval):
            for worker in [*self.workers, *self.spend_workers]:
                try:
                    worker.refresh()
                except Exception as exc:  # Redis blip: the next beat tries again
                    _log.warning("heartbeat failed", sink=worker.name, error=type(exc).__name__)


def run_notifier(settings: AssaySettings, stop: threading.Event) -> None:
    """Run one notifier replica until ``stop`` is set (``assay notify``)."""

    store = VerdictStore.from_settings(settings)
    with http_client(settings) as http:
        notifier = Notifier(settings, store, http)
        metrics.register_collector("notify", metrics.NotifyCollector(notifier.statuses))
        if settings.metrics_port:
            metrics.start_metrics_server(settings.metrics_port)
        try:
            notifier.run(stop)
        finally:
            store.client.close()


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM / SIGINT: finish the delivery in hand, hand the rest back, exit."""

    def _stop(signum: int, _frame: Any) -> None:
        _log.info("notifier stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
