"""kombu's Redis transport, minus the two AttributeErrors that stop a worker on a Redis restart.

Upstream: celery/kombu#582 ("AttributeError: 'NoneType' object has no attribute
'hostname'" from ``Channel._connparams``, reached through ``conn_or_acquire`` on a
channel whose transport was already detached from its connection). It was closed without
a change to that path: ``_connparams`` still reads ``self.connection.client`` unguarded
in kombu 5.7.0, the newest release (and on kombu's main branch), so this module stays
until a kombu release guards it. tests/fleet/test_redis_transport.py
(``test_closing_after_a_lost_connection_keeps_the_message_reserved``) fails with kombu's
own classes in its place: delete this module when it passes without them.

What goes wrong (kombu 5.7 / celery 5.7, read from their source): when the
broker connection drops, Celery's consumer
(``Consumer.on_connection_error_after_connected``) first calls
``Connection.collect()`` and then ``Connection.close()``. ``collect`` closes the
channels and then detaches the transport from its connection
(``_do_close_transport``: ``transport.client = None``). But closing the redis
channel can fail half-way: ``Channel.close`` first talks to Redis (it drains a
BRPOP in flight, deletes auto-delete fanout queues) and a connection error
there (ignored by ``maybe_close_channel``) leaves the channel open. ``close()`` then closes
that channel a second time; the virtual channel's ``close`` calls
``QoS.restore_unacked_once`` to push the worker's prefetched, unacknowledged
messages back to the queue; the redis ``QoS.restore_unacked`` asks the
channel for a client, whose pool was already torn down, so a new pool is
built from ``self.connection.client`` -- now None -- and it raises
``AttributeError: 'NoneType' object has no attribute 'hostname'``. That is
not one of the transport's connection errors, so ``ignore_errors`` lets it
through and Celery stops the worker as "Unrecoverable error". Whether it
happens depends on what the channel was doing when Redis went away: a race,
which stopped the worker in 3 of 3 runs of tests/fleet/test_fleet_redis_restart.py
(four restarts each) before this module, at the third or fourth restart.

The same detached channel breaks a second way a moment later: a run the worker
was evaluating finishes (``worker_cancel_long_running_tasks_on_connection_loss``
is off), Celery acks its message on the channel it came from, and the ack asks
that closed channel for a client the same way (``'NoneType' object has no
attribute 'client'``), again stopping the worker.

The fix, at the mechanism, in two places:

- a detached channel does not restore: ``QoS.restore_unacked`` leaves the
  prefetched messages where they are;
- a detached channel asked for a Redis connection (an ack, a reject) raises
  redis-py's ``ConnectionError``, a connection error like any other on a lost
  connection, which Celery expects there: it logs "Couldn't ack" and goes on.

Nothing is lost by that. Each of those messages is still in kombu's ``unacked``
hash in Redis (written when it was delivered, removed only by an ack or a
restore), so once the visibility timeout has passed ``QoS.restore_visible``
(every worker runs it) hands it out again, and the fleet's lost-run sweeper
(``workers.fleet.recovery``) re-sends any run whose message vanished
altogether. A run already recorded is not evaluated again (the task returns
"duplicate"), and a copy that runs twice is recorded once (first verdict wins).
This is Celery's documented promise for a connection loss with late acks
("these tasks cannot be acknowledged as the connection is gone, and the tasks
are automatically redelivered"); the patch only keeps the worker alive to keep it.

Restoring over a live connection is unchanged: a worker that shuts down
cleanly still puts its prefetched messages back at once, because its channels
are closed before the transport is detached. The Celery app's connections
(``workers.fleet.broker.FleetConnection``) use these classes for ``redis://``,
``rediss://`` and ``sentinel://`` brokers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

_log = structlog.get_logger(__name__)


def _detached(channel: Any) -> bool:
    """The channel's transport no longer belongs to a connection (closed after a loss)."""
    transport = getattr(channel, "connection", None)
    return transport is None or getattr(transport, "client", None) is None


class QoS(kombu_redis.QoS):
    """Restores unacknowledged messages only while the channel still has its connection."""

    def restore_unacked(self, client: Any = None) -> Any:
        if client is None and _detached(self.channel):
            left = len(self._delivered)
            # Cleared as kombu's own restore does, so a later restore_unacked_once agrees.
            self._delivered.clear()
            _log.warning(
                "broker_restore_skipped",
                messages=left,
                reason="connection lost; they stay reserved in Redis until acked or visible again",
            )
            return None
        return super().restore_unacked(client)


class _RefuseWhenDetached:
    """A detached channel asked for a connection says it is lost, as a connection error."""

    def _connparams(self, asynchronous: bool = False) -> Any:
        if _detached(self):
            raise RedisConnectionError(
                "this broker channel was closed after its connection was lost"
            )
        return super()._connparams(asynchronous)  # type: ignore[misc]


class _SharedClient:
    """One redis-py client per connection pool for the channel's acks, not one per ack.

    Why: kombu's ``conn_or_acquire`` builds a new ``redis.Redis`` each time it is
    asked, and it is asked twice per message (the unacked bookkeeping on delivery,
    and the ack). A ``redis.Redis`` builds its table of ~200 response callbacks in
    its constructor, about 80 us here: 0.16 ms of CPU per message (issue 15).
    A client over a pool is thread-safe (each command borrows a connection), so the
    task threads acking at once can share one. It is rebuilt whenever the channel's
    pool is (kombu drops the pool on a connection loss), and asking for the pool
    first keeps the refusal above for a detached channel.
    """

    _shared: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool  # type: ignore[attr-defined]
        shared = self._shared
        if shared is None or shared.connection_pool is not pool:
            shared = self._shared = self._create_client()  # type: ignore[attr-defined]
        yield shared


class Channel(_SharedClient, _RefuseWhenDetached, kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelChannel(_SharedClient, _RefuseWhenDetached, kombu_redis.SentinelChannel):
    QoS = QoS


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel
