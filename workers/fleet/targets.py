"""Expanding a batch's target glob into targets, one at a time.

Both generators stream: a glob over 1,000 snapshot folders or kubeconfig
contexts yields one small target at a time, so fan-out can enqueue as it goes.
Snapshot globs stay inside the snapshot roots (workers/engine/snapshot_roots.py): the
pattern's fixed folders are checked first, then every match again, so a
symlink inside a root that points out of it is skipped.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path

import structlog

from schemas.request import ContextTarget, SnapshotTarget
from workers.engine.snapshot_roots import SnapshotOutsideRoots, SnapshotRoots
from workers.engine.toolsets.kube_import import ensure_imported

_log = structlog.get_logger(__name__)


class TargetGlobError(ValueError):
    """The glob could not be expanded (unreadable kubeconfig, bad pattern)."""


def snapshot_targets(pattern: str, roots: SnapshotRoots) -> Iterator[SnapshotTarget]:
    """Snapshot folders matching ``pattern`` (e.g. ``examples/snapshots/*``) inside ``roots``.

    Paths are absolute and resolved, because the workers that read them may run
    in another directory. Raises ``SnapshotOutsideRoots`` when the pattern's
    fixed folders lie outside the roots; a match that resolves outside is skipped.
    """
    for path in glob.iglob(roots.confine_pattern(pattern)):
        if not Path(path).is_dir():
            continue
        try:
            resolved = roots.confine(path)
        except SnapshotOutsideRoots:
            _log.warning("snapshot_match_outside_roots", pattern=pattern, match=path)
            continue
        yield SnapshotTarget(path=str(resolved))


def context_targets(pattern: str, kubeconfig: str | None = None) -> Iterator[ContextTarget]:
    """Contexts of the kubeconfig whose name matches ``pattern`` (shell-style glob)."""
    ensure_imported()
    from kubernetes import config

    try:
        contexts, _active = config.list_kube_config_contexts(config_file=kubeconfig)
    except Exception as exc:  # the kubernetes client raises several unrelated types here
        where = kubeconfig or "the default kubeconfig"
        raise TargetGlobError(
            f"could not read contexts from {where} ({exc}); pass --kubeconfig or fix the file"
        ) from exc
    for context in contexts or []:
        name = str(context.get("name", ""))
        if name and fnmatchcase(name, pattern):
            yield ContextTarget(context=name, kubeconfig=kubeconfig)
