"""assay: the user's front door (CLI, Python client, HTTP API).

``assay.Client`` is imported on first use, so ``import assay`` (and the CLI's
start-up) does not pay for Redis and Celery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assay.client import Client

__all__ = ["Client"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from assay.client import Client

        return Client
    raise AttributeError(f"module 'assay' has no attribute {name!r}")
