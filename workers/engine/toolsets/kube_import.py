"""The kubernetes client, imported once per process under one lock.

The package's modules import one another in a cycle (``kubernetes.config`` imports
``kubernetes.client``, whose modules import back), so two threads that first import
different parts of it at the same moment can each hold one of Python's per-module import
locks and wait for the other's: one of them then fails with ``_DeadlockError``. A worker
starts many live runs on many threads at once, and the client is imported lazily (it
costs about a second), so every place that imports it first calls :func:`ensure_imported`.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_imported = False


def ensure_imported() -> None:
    """Import the parts of the kubernetes client assay uses, once, one thread at a time."""
    global _imported
    if _imported:
        return
    with _lock:
        if not _imported:
            import kubernetes.client
            import kubernetes.client.exceptions
            import kubernetes.config  # noqa: F401

            _imported = True
