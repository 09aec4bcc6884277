"""Which tools one evaluation gets: the backend picked from its target, plus opt-in toolsets.

``build_registry`` is what the engine calls (``EngineDeps(tools=build_registry)``).
Parsed snapshots are cached per folder, keyed by the files' paths, sizes and
mtimes, so a worker evaluating many predicates on one snapshot parses it once
and an edited snapshot is re-read. A snapshot folder is parsed only if it lies
inside this process's snapshot roots (workers/engine/snapshot_roots.py): the request
may have come from anywhere that can write to the broker.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from schemas.request import ContextTarget, EvaluationRequest, InClusterTarget, SnapshotTarget
from schemas.settings import AssaySettings
from workers.engine.snapshot_roots import SnapshotOutsideRoots, SnapshotRoots
from workers.engine.toolsets.backend import BackendError, ClusterBackend
from workers.engine.toolsets.base import Tool, ToolRegistry
from workers.engine.toolsets.kubernetes import kubernetes_tools
from workers.engine.toolsets.redaction import PATTERNS
from workers.engine.toolsets.shell import shell_tools
from workers.engine.toolsets.snapshot_backend import FolderListing, SnapshotBackend, SnapshotError

SNAPSHOT_CACHE_SIZE = 32

Signature = tuple[tuple[str, int, int], ...]


class ToolsetUnavailable(RuntimeError):
    """A requested toolset or target cannot be served; the message says what to do."""


class SnapshotCache:
    """Parsed snapshots by folder, re-parsed when any file in the folder changes."""

    def __init__(self, size: int = SNAPSHOT_CACHE_SIZE) -> None:
        self._size = size
        self._entries: OrderedDict[Path, tuple[Signature, SnapshotBackend]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str | Path, *, resolved: bool = False) -> SnapshotBackend:
        """The parsed snapshot at ``path``; ``resolved``: the caller already resolved it.

        The folder is listed and parsed outside the lock, which guards only the table:
        a run whose snapshot is slow to read (a network file system, a large folder)
        holds up no other run's start. Two runs missing the same folder at once may
        both parse it; the second parse replaces the first in the table.
        """
        root = Path(path) if resolved else Path(path).expanduser().resolve()
        try:
            listing = FolderListing.walk(root)
        except OSError:
            return SnapshotBackend(root)  # raises SnapshotError with the reason
        signature = listing.signature()
        with self._lock:
            cached = self._entries.get(root)
            if cached is not None and cached[0] == signature:
                self._entries.move_to_end(root)
                return cached[1]
        backend = SnapshotBackend(root, listing)
        with self._lock:
            self._entries[root] = (signature, backend)
            self._entries.move_to_end(root)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return backend

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


snapshot_cache = SnapshotCache()


def backend_for(
    target: SnapshotTarget | ContextTarget | InClusterTarget, settings: AssaySettings
) -> ClusterBackend:
    """The cluster behind a request's target."""
    if isinstance(target, SnapshotTarget):
        try:
            folder = SnapshotRoots.for_local(settings).confine(target.path)  # resolved
            return snapshot_cache.get(folder, resolved=True)
        except (SnapshotError, SnapshotOutsideRoots) as exc:
            raise ToolsetUnavailable(str(exc)) from None
    try:  # lazy: the kubernetes client costs ~1 s to import and only live targets need it
        from workers.engine.toolsets.live_backend import LiveBackend
    except ImportError as exc:
        raise ToolsetUnavailable(
            f"live clusters are not supported by this installation ({exc}); "
            "use a snapshot target (--snapshot PATH) instead"
        ) from None
    try:
        return LiveBackend.from_target(target, settings)
    except BackendError as exc:
        raise ToolsetUnavailable(exc.message) from None


def build_registry(request: EvaluationRequest, settings: AssaySettings) -> ToolRegistry:
    """The tools offered to one run, per ``request.toolsets``.

    Raises ``ToolsetUnavailable`` when the target cannot be opened or an
    opt-in toolset is requested but not configured.
    """
    tools: list[Tool] = []
    closers = []
    scrubber = PATTERNS  # no cluster: credential patterns only
    cluster = None
    if "kubernetes" in request.toolsets:
        backend = cluster = backend_for(request.target, settings)
        closers.append(backend.close)
        scrubber = backend.scrubber  # shell output is scrubbed of the cluster's Secrets too
        tools.extend(kubernetes_tools(backend, settings))
    if "shell" in request.toolsets:
        if settings.shell_config is None:
            raise ToolsetUnavailable(
                "the shell toolset was requested but is not enabled; "
                "set ASSAY_SHELL_CONFIG to a shell policy file to enable it"
            )
        try:
            tools.extend(shell_tools(settings))
        except (OSError, ValueError) as exc:
            raise ToolsetUnavailable(str(exc)) from None
    return ToolRegistry(tools, closers, scrubber, backend=cluster)
