"""``assay_queue_depth``: evaluations waiting in the broker, read from Redis at scrape time.

It lives in the fleet, not beside the other metrics in ``workers.engine.metrics``,
because it reads the broker's own keys (``workers.fleet.broker``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from workers.engine.metrics import NAMESPACE
from workers.fleet.broker import KOMBU_PRIORITY_STEPS, kombu_queue_keys


class QueueDepthCollector(Collector):
    """``assay_queue_depth{queue}``: messages waiting in the broker, read at scrape time.

    ``redis_factory`` returns a redis client for the broker; a broker that does not
    answer yields no sample (and ``assay_queue_depth_up 0``) rather than a stale number.
    """

    def __init__(self, redis_factory: Callable[[], Any], queues: Iterable[str]) -> None:
        self._redis_factory = redis_factory
        self._queues = list(queues)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            f"{NAMESPACE}_queue_depth",
            "Evaluations waiting in the broker queue, read from Redis at scrape time.",
            labels=["queue"],
        )
        up = GaugeMetricFamily(
            f"{NAMESPACE}_queue_depth_up", "1 when the broker answered the last scrape."
        )
        try:
            client = self._redis_factory()
            pipe = client.pipeline(transaction=False)
            for queue in self._queues:
                for key in kombu_queue_keys(queue):
                    pipe.llen(key)
            sizes = pipe.execute()
        except Exception:  # a scrape must never fail because the broker is down
            up.add_metric([], 0)
            yield up
            return
        steps = len(KOMBU_PRIORITY_STEPS)
        for index, queue in enumerate(self._queues):
            depth.add_metric(
                [queue], sum(int(n) for n in sizes[index * steps : (index + 1) * steps])
            )
        up.add_metric([], 1)
        yield depth
        yield up
