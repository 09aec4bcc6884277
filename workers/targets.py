"""Expanding a batch's target glob into targets, one at a time.

Both generators stream: a glob over 1,000 snapshot folders or kubeconfig
contexts yields one small target at a time, so fan-out can enqueue as it goes.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path

from schemas.request import ContextTarget, SnapshotTarget


class TargetGlobError(ValueError):
    """The glob could not be expanded (unreadable kubeconfig, bad pattern)."""


def snapshot_targets(pattern: str) -> Iterator[SnapshotTarget]:
    """Snapshot folders matching ``pattern`` (e.g. ``examples/snapshots/*``), as absolute paths.

    Absolute, because the workers that read them may run in another directory.
    """
    for path in glob.iglob(os.path.expanduser(pattern)):
        if Path(path).is_dir():
            yield SnapshotTarget(path=str(Path(path).resolve()))


def context_targets(pattern: str, kubeconfig: str | None = None) -> Iterator[ContextTarget]:
    """Contexts of the kubeconfig whose name matches ``pattern`` (shell-style glob)."""
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
