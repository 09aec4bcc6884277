"""The worker's Celery app: the broker's configuration plus the evaluation task.

``celery -A workers.fleet.celery_app worker`` and ``assay worker`` both use the
``app`` attribute of this module, built on first access from the settings.
Clients that only send tasks use ``workers.fleet.broker.configured_app``, which
does not import the engine. This module is the top of the fleet: it imports the
task (and through it the engine); nothing in the fleet imports it.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery

from schemas.settings import AssaySettings, load_settings
from workers.fleet.broker import configured_app
from workers.fleet.tasks import register_tasks


def create_app(settings: AssaySettings | None = None) -> Celery:
    """The worker's app for these settings, with ``assay.evaluate`` registered."""
    settings = settings or load_settings()
    app = configured_app(settings)
    register_tasks(app, settings)
    return app


_app: Celery | None = None
_app_lock = threading.Lock()


def get_app() -> Celery:
    """The process-wide worker app, built from ``load_settings()`` on first use."""
    global _app
    with _app_lock:
        if _app is None:
            _app = create_app()
        return _app


def __getattr__(name: str) -> Any:
    # `celery -A workers.fleet.celery_app` looks up `app`; building it on first access
    # keeps `import workers.fleet.celery_app` free of settings errors.
    if name in ("app", "celery"):
        return get_app()
    raise AttributeError(name)
