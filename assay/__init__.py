"""assay: the user's front door (CLI, Python client, HTTP API).

``assay.Client`` (and ``assay.RedisUnreachable``, what it raises within seconds
when the fleet's Redis does not answer, ``assay.RunsNotSent``, what it raises
when the broker fails a submit whose runs are registered, and
``assay.UnroutableModel``, what it raises for a model no worker could call) is
imported on first use,
so ``import assay`` (and the CLI's start-up) does not pay for Redis and Celery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assay.client import Client, RedisUnreachable, RunsNotSent, UnroutableModel

__all__ = ["Client", "RedisUnreachable", "RunsNotSent", "UnroutableModel"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from assay.client import Client

        return Client
    if name == "RedisUnreachable":
        from workers.fleet.redis_client import RedisUnreachable

        return RedisUnreachable
    if name == "RunsNotSent":
        from workers.fleet.dispatch import RunsNotSent

        return RunsNotSent
    if name == "UnroutableModel":
        from assay.client import UnroutableModel

        return UnroutableModel
    raise AttributeError(f"module 'assay' has no attribute {name!r}")
