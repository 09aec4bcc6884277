"""Celery task events are a setting: off by default (nothing listens), on for Flower."""

from __future__ import annotations

import time

import pytest
import redis

from schemas.settings import load_settings
from workers.fleet.broker import configured_app


def published_on_send(redis_url: str, task_events: bool) -> list[bytes]:
    """The channels a task send publishes to on the broker (events go out as PUBLISH)."""
    listener = redis.Redis.from_url(redis_url).pubsub()
    listener.psubscribe("*")
    listener.get_message(timeout=1)  # the subscription confirmation
    app = configured_app(load_settings(redis_url=redis_url, task_events=task_events))
    try:
        app.send_task("assay.test.nothing")
        channels = []
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            message = listener.get_message(timeout=0.1)
            if message and message["type"] == "pmessage":
                channels.append(message["channel"])
        return channels
    finally:
        app.close()
        listener.close()


@pytest.mark.parametrize("task_events", [False, True])
def test_task_events_are_published_only_when_turned_on(redis_url: str, task_events: bool) -> None:
    channels = published_on_send(redis_url, task_events)
    sent_events = [c for c in channels if b"task" in c or b"celeryev" in c]
    assert bool(sent_events) is task_events, channels


def test_workers_send_events_only_when_turned_on(redis_url: str) -> None:
    off = configured_app(load_settings(redis_url=redis_url))
    assert off.conf.worker_send_task_events is False
    on = configured_app(load_settings(redis_url=redis_url, task_events=True))
    assert on.conf.worker_send_task_events is True
