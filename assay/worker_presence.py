"""Which model the fleet's workers run with, so a client can refuse a run no one could evaluate.

The model is the workers' setting: a request's own ``model`` (``--model``,
the API body's ``model``) wins, else the worker's ``ASSAY_MODEL``; the
client's ``ASSAY_MODEL`` is never sent. A client therefore cannot see from its
own settings whether a run will have a model. Each ``assay worker`` announces
its model under a short-lived key, refreshed while it runs, and the fleet
commands read those keys before they queue anything:

* some live worker has a model, or the request names one: queue it;
* live workers exist and none has a model: refuse (exit 64, one sentence);
* no live worker at all: queue it (it waits for a worker) and say so.

Key (``P`` = settings.key_prefix)::

    P:worker:{host}:{pid}   string  JSON {"model": str, "api_base": str, "keys": [str],
                            "ready": bool, "at": ISO}; TTL PRESENCE_TTL_SECONDS

``api_base`` ("" for none) is the endpoint a run without its own is sent to: whether
litellm can route a model name may depend on it (``assay.model_check``). ``keys`` names
the providers the worker holds an API key for (``workers.engine.provider_keys.held_keys``:
``"*"`` with ``ASSAY_API_KEY``), never a key: a run of a model whose provider no live
worker has a key for is refused at the door instead of failing on the worker. ``ready`` turns
true once Celery says the worker consumes the queue (its ``worker_ready`` signal): what
``assay up`` waits for before it says the fleet is up.

The announcer's client has little patience (``connect_for_loop``): a Redis that is gone
fails an announcement within about a second, the worker logs ``redis_unreachable`` then
and every ``ASSAY_REDIS_OUTAGE_LOG_SECONDS`` until it answers (``RedisOutage``), and a
stopping worker does not sit out half a minute of retries to delete its key (the key's
TTL removes it anyway).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from workers.fleet.redis_client import RedisOutage, lost_connection

PRESENCE_TTL_SECONDS = 30
REFRESH_SECONDS = 10.0
OUTAGE_REFRESH_SECONDS = 1.0  # Redis away: try every second, so its return is seen at once


def presence_key(key_prefix: str, worker: str) -> str:
    return f"{key_prefix}:worker:{worker}"


@dataclass(frozen=True)
class Reach:
    """Where one live worker sends a run that names no endpoint, and the providers it holds
    a key for (None: the worker does not say, an older one)."""

    api_base: str | None
    keys: frozenset[str] | None


@dataclass(frozen=True)
class FleetModels:
    """What the live workers announced: how many there are, their models and endpoints.

    ``endpoints`` holds each live worker's ``api_base`` (None: the worker has none);
    ``endpoints_known`` is False when some live worker does not announce it (an older one).
    ``reach`` holds each worker's endpoint with its keys, for the key check.
    """

    workers: int
    models: frozenset[str]
    endpoints: frozenset[str | None] = frozenset()
    endpoints_known: bool = True
    ready: int = 0  # live workers consuming the queue
    reach: tuple[Reach, ...] = ()


def read_fleet_models(redis: Any, key_prefix: str) -> FleetModels:
    """The live workers' announced models (workers without a model count, with none)."""
    keys = list(redis.scan_iter(match=presence_key(key_prefix, "*"), count=500))
    models: set[str] = set()
    endpoints: set[str | None] = set()
    endpoints_known = True
    ready = 0
    reach: list[Reach] = []
    bodies = redis.mget(keys) if keys else []
    for body in bodies:
        if not body:
            continue
        try:
            announced = json.loads(body)
            model = announced.get("model") or ""
        except (ValueError, AttributeError):
            endpoints_known = False
            continue
        ready += announced.get("ready") is True
        if model:
            models.add(str(model))
        if "api_base" in announced:
            endpoint = str(announced["api_base"]) or None
            endpoints.add(endpoint)
            held = announced.get("keys")
            reach.append(
                Reach(endpoint, frozenset(map(str, held)) if isinstance(held, list) else None)
            )
        else:
            endpoints_known = False
    return FleetModels(
        workers=sum(1 for body in bodies if body),
        models=frozenset(models),
        endpoints=frozenset(endpoints),
        endpoints_known=endpoints_known,
        ready=ready,
        reach=tuple(reach),
    )


class Announcer:
    """Keeps this worker's presence key alive on a daemon thread until stopped."""

    def __init__(
        self,
        redis: Any,
        key_prefix: str,
        model: str | None,
        api_base: str | None = None,
        outage: RedisOutage | None = None,
        keys: frozenset[str] = frozenset(),
    ) -> None:
        self.redis = redis
        self.key = presence_key(key_prefix, f"{socket.gethostname()}:{os.getpid()}")
        self.model = model or ""
        self.api_base = api_base or ""
        self.keys = sorted(keys)
        self.outage = outage
        self.ready = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="assay-presence", daemon=True)

    def announce(self) -> None:
        body = json.dumps(
            {
                "model": self.model,
                "api_base": self.api_base,
                "keys": self.keys,
                "ready": self.ready,
                "at": datetime.now(UTC).isoformat(),
            }
        )
        self.redis.set(self.key, body, ex=PRESENCE_TTL_SECONDS)

    def mark_ready(self, **_: Any) -> None:
        """Celery's ``worker_ready``: this worker consumes the queue now; say so at once."""
        self.ready = True
        with contextlib.suppress(Exception):  # Redis away: the next refresh says it
            self.announce()

    def _loop(self) -> None:
        while True:
            try:
                self.announce()
            except Exception as exc:  # Redis away: say so (throttled); the next round tries
                if self.outage is not None and lost_connection(exc):
                    self.outage.failed(exc)
            else:
                if self.outage is not None:
                    self.outage.answered()
            down = self.outage is not None and self.outage.down
            if self._stop.wait(OUTAGE_REFRESH_SECONDS if down else REFRESH_SECONDS):
                return

    def start(self) -> Announcer:
        """Announce on the thread: a Redis that is down must not delay the worker's start."""
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            self.redis.delete(self.key)
