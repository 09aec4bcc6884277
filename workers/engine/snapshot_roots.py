"""Where snapshot folders may be read from: under the configured roots, symlinks resolved.

A snapshot target names a folder that a worker parses and shows to the model,
and whose content ends up in the stored run report. Without a limit, anyone
who may submit (over HTTP, or by writing to the broker) could have ``/etc`` or
``../..`` read back to them. So every snapshot path must resolve (symlinks
followed, ``..`` applied) to a folder inside one of the snapshot roots:

* ``ASSAY_SNAPSHOT_ROOTS`` (``settings.snapshot_roots``) when it is set, for
  every process; an empty list allows no snapshot at all;
* when it is not set: **none** for the HTTP API (it refuses every snapshot
  target until roots are configured), and the process's working directory for
  everything started from a shell: the CLI, the Python client, workers and
  scheduler replicas (``assay up`` children inherit the folder it ran in).

The check runs where a path enters (API, CLI, client, schedule creation) and
again on the worker right before parsing, because a message on the broker may
come from anywhere. Callers get the resolved absolute path back and use that,
so the folder checked is the folder read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schemas.settings import AssaySettings

GLOB_CHARACTERS = frozenset("*?[")
SETTING = "ASSAY_SNAPSHOT_ROOTS"


class SnapshotOutsideRoots(ValueError):
    """A snapshot path or pattern lies outside the snapshot roots; the message says what to set."""


@dataclass(frozen=True)
class SnapshotRoots:
    """The folders snapshot targets must lie in (resolved), and how to explain a refusal."""

    roots: tuple[Path, ...]
    source: str
    over_http: bool = False

    @classmethod
    def of(
        cls, folders: Iterable[str | Path], source: str, over_http: bool = False
    ) -> SnapshotRoots:
        return cls(_resolved(tuple(str(f) for f in folders)), source, over_http)

    @classmethod
    def for_api(cls, settings: AssaySettings) -> SnapshotRoots:
        """The HTTP API's roots: the setting, or none at all."""
        return cls.of(settings.snapshot_roots or [], SETTING, over_http=True)

    @classmethod
    def for_local(cls, settings: AssaySettings) -> SnapshotRoots:
        """Roots of a process started from a shell (CLI, client, worker, scheduler)."""
        if settings.snapshot_roots is not None:
            return cls.of(settings.snapshot_roots, SETTING)
        return cls.of([Path.cwd()], "the current directory")

    # --- checks --------------------------------------------------------------------------
    def contains(self, resolved: Path) -> bool:
        """Whether a resolved path is a root or lies under one (compared as text: every
        evaluation asks, and ``Path.is_relative_to`` re-parses both paths each time)."""
        text = str(resolved)
        return any(text == root or text.startswith(prefix) for root, prefix in self._prefixes)

    @cached_property
    def _prefixes(self) -> tuple[tuple[str, str], ...]:
        return tuple((str(root), str(root).rstrip(os.sep) + os.sep) for root in self.roots)

    def confine(self, path: str | Path) -> Path:
        """``path`` resolved (symlinks followed) if it lies inside a root, else a refusal."""
        text = str(path)
        expanded = text if self.over_http else os.path.expanduser(text)
        try:
            # os.path.realpath, not Path.resolve: that adds a stat of the result to detect a
            # symlink loop, one more system call (a GIL hand-over) in every evaluation. A
            # loop resolves to a path that cannot be opened (ELOOP), so the run still fails,
            # with that reason, when it reads the folder.
            resolved = Path(os.path.realpath(expanded))
        except (OSError, ValueError):  # a NUL byte
            raise self._refusal(text) from None
        if not self.contains(resolved):
            raise self._refusal(text)
        return resolved

    def confine_pattern(self, pattern: str) -> str:
        """An absolute glob whose fixed leading folders resolve inside a root.

        Each folder the pattern matches is checked again when it is expanded
        (:func:`workers.fleet.targets.snapshot_targets`), so a symlink inside a root
        that points out of it is skipped there.
        """
        expanded = pattern if self.over_http else os.path.expanduser(pattern)
        if ".." in Path(expanded).parts:
            raise SnapshotOutsideRoots(
                f"the snapshot pattern {pattern!r} contains '..'; name the folders directly"
            )
        absolute = Path(os.path.abspath(expanded))
        parts = absolute.parts
        fixed = next((i for i, part in enumerate(parts) if GLOB_CHARACTERS & set(part)), len(parts))
        if fixed == len(parts):
            return str(self.confine(absolute))
        try:  # parts[0] is the root "/", never a glob, so there is a fixed base
            base = self.confine(Path(*parts[:fixed]))
        except SnapshotOutsideRoots:
            raise self._refusal(pattern) from None
        return str(base.joinpath(*parts[fixed:]))

    def _refusal(self, path: str) -> SnapshotOutsideRoots:
        if self.over_http:
            if not self.roots:
                return SnapshotOutsideRoots(
                    f"snapshot target {path!r} was refused because this server allows no "
                    f"snapshot folders until {SETTING} names them; set it on the API and the "
                    "workers"
                )
            return SnapshotOutsideRoots(
                f"snapshot target {path!r} is outside the folders this server allows; add its "
                f"folder to {SETTING} on the API and the workers"
            )
        if not self.roots:
            return SnapshotOutsideRoots(
                f"snapshot target {path!r} was refused because {SETTING} allows no folder; "
                "list the folders snapshots may come from in it"
            )
        listed = ", ".join(str(root) for root in self.roots)
        return SnapshotOutsideRoots(
            f"snapshot target {path!r} is outside the snapshot roots ({listed}, from "
            f"{self.source}); move it under one of them or add its folder to {SETTING}"
        )


@lru_cache(maxsize=64)
def _resolved(folders: tuple[str, ...]) -> tuple[Path, ...]:
    """Roots resolved once per process: a worker asks for them on every evaluation."""
    return tuple(Path(os.path.expanduser(folder)).resolve() for folder in folders)
