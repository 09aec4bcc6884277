"""A captured cluster, read from a folder, behind the same protocol as a live one.

A snapshot is a folder of Kubernetes objects as YAML or JSON, exactly what
``kubectl get ... -o yaml|json`` prints: single objects, ``List`` kinds and
multi-document files, in any folder layout. Pod logs live under
``logs/NAMESPACE/POD/CONTAINER.log`` (``CONTAINER.previous.log`` for the
previous container). See examples/snapshots/README.md for capturing one.

Everything is parsed once, when the backend is built (the factory caches it
per folder). A Secret's values are withheld during that parse, before any other
code can see them (redaction.py, layer 1), and the scrubber learns them. One store
holds each object as the API server would (a Secret without its values): probes
and imported policies read it (``as_stored=True``); the tools the model calls read
each object's scrubbed view, made once at load and kept only for the objects where
it differs. A file that does not parse, or is larger than
:data:`MAX_OBJECT_FILE_BYTES` (64 MiB), is recorded in :attr:`problems`,
naming the file, and the rest of the snapshot is still served. So is an
object that had to be adjusted: a cluster-scoped object (built-in, or of a
CRD with ``scope: Cluster``) written with a namespace loses it, as on a real
API server, and the file and object are named in :attr:`problems`.

Objects are served as the API server would serve them once applied: a
namespaced object written without ``metadata.namespace`` (a manifest kept in
git) is in namespace ``default``, as ``kubectl apply`` puts it (the kind's scope
comes from the resource index: built-in kinds and the snapshot's CRDs); an
unquoted YAML timestamp is the API's text (yaml_documents.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from stat import S_ISREG
from typing import Any

import yaml

from schemas.kubernetes_metadata import is_dns1123_subdomain
from workers.engine.toolsets.backend import BackendError, ResourceInfo, not_found
from workers.engine.toolsets.echo import compose, quoted
from workers.engine.toolsets.kinds import (
    BUILTIN_RESOURCES,
    ResourceIndex,
    guess_plural,
    split_api_version,
)
from workers.engine.toolsets.redaction import (
    NOTHING_WITHHELD,
    SecretScrubber,
    Withheld,
    shown,
    withhold_secret_values,
)
from workers.engine.toolsets.selectors import field_matcher, label_matcher
from workers.engine.toolsets.yaml_documents import (
    describe_yaml_error,
    load_documents,
    may_alias,
)

OBJECT_SUFFIXES = frozenset({".yaml", ".yml", ".json"})
LOGS_FOLDER = "logs"
CRD_KEY = ("apiextensions.k8s.io", "CustomResourceDefinition")
# The kinds an older group served as the same resource a built-in group serves today
LEGACY_GROUP_KINDS: dict[str, frozenset[str]] = {
    "extensions": frozenset({"Deployment", "DaemonSet", "ReplicaSet", "Ingress", "NetworkPolicy"}),
    "": frozenset({"Event"}),
}
EVENT_KEYS = (("", "Event"), ("events.k8s.io", "Event"))
DEFAULT_NAMESPACE = "default"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
_LOG_TIMESTAMP = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))\s"
)

ObjectKey = tuple[str, str]  # (namespace or "", name)

MAX_LOG_FILE_BYTES = 16 * 1024 * 1024
"""A longer log file is read from its last 16 MiB (the tools show its newest lines)."""

MAX_OBJECT_FILE_BYTES = 64 * 1024 * 1024
"""A larger object file (.yaml/.yml/.json) is skipped, with a problem naming it.

Why: every object file is read whole and parsed into memory, so one hostile or
mistaken file (a 5 GB dump) would exhaust a worker shared by many runs. Real
``kubectl get -o yaml`` output of a whole busy cluster stays well below this.
"""

MAX_ALIAS_EXPANSION = 1_000_000
"""Nodes a YAML document that uses aliases may expand to (values and entries counted)."""


class SnapshotError(Exception):
    """The snapshot folder itself is unusable (missing, not a folder)."""


class FileTooLarge(OSError):
    """An object file holds more than :data:`MAX_OBJECT_FILE_BYTES` (or the reader's ``limit``)."""


class _AliasProblem(ValueError):
    """A YAML document whose aliases refer to themselves or expand past the limit."""


def _unaliased(node: Any, budget: list[int], active: set[int]) -> Any:
    """``node`` as a tree of its own: every alias copied, within ``budget`` nodes.

    Why: YAML aliases load as one shared object, so nine aliases of nine
    aliases ("billion laughs") cost nothing to parse but 10^9 steps to every
    walk over the object (scrubbing, rendering), and an alias inside its own
    anchor loads as a cycle that no walk ever leaves. Shared copies also let
    adjusting one object (redacting, dropping a namespace) change another.
    """
    if not isinstance(node, dict | list):
        return node
    if id(node) in active:
        raise _AliasProblem("refer to themselves")
    budget[0] -= 1 + len(node)
    if budget[0] < 0:
        raise _AliasProblem(f"expand past {MAX_ALIAS_EXPANSION:,} values")
    active.add(id(node))
    try:
        if isinstance(node, dict):
            return {key: _unaliased(value, budget, active) for key, value in node.items()}
        return [_unaliased(item, budget, active) for item in node]
    finally:
        active.discard(id(node))


def _parse_timestamp(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _event_time(event: dict[str, Any]) -> str:
    series = event.get("series") or {}
    return str(
        event.get("lastTimestamp")
        or series.get("lastObservedTime")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


@dataclass(frozen=True)
class FolderListing:
    """Every entry under a snapshot folder, from one walk.

    Why one walk: the snapshot cache keys on the entries' sizes and mtimes,
    and the backend then loads the object files among them; walking the folder
    once for both saves a directory read and a stat per file, each a GIL
    hand-over on a busy worker (issue 15). The walk is ``Path.rglob("*")``'s:
    every entry, descending into real folders but not into symlinked ones.
    """

    root: Path  # resolved
    entries: tuple[tuple[str, Path, os.stat_result | None], ...]  # relative, path, stat (followed)

    @classmethod
    def walk(cls, root: Path) -> FolderListing:
        """``root`` (already resolved) walked; OSError if it is not a readable folder."""
        found: list[tuple[str, Path, os.stat_result | None]] = []
        folders = [(root, "")]  # a stack, not recursion: any depth of nesting is walked
        while folders:
            folder, prefix = folders.pop()
            try:
                with os.scandir(folder) as listing:
                    entries = list(listing)
            except OSError:
                if folder is root:
                    raise
                continue  # unreadable or gone while walking, as rglob skips it
            for entry in entries:
                path = folder / entry.name
                try:
                    stat: os.stat_result | None = entry.stat()
                except OSError:  # a broken symlink, or removed meanwhile
                    stat = None
                found.append((prefix + entry.name, path, stat))
                try:
                    descend = entry.is_dir(follow_symlinks=False)
                except OSError:
                    descend = False
                if descend:
                    folders.append((path, f"{prefix}{entry.name}/"))
        found.sort(key=lambda item: item[0].split("/"))  # the order sorted(rglob(...)) gives
        return cls(root, tuple(found))

    def signature(self) -> tuple[tuple[str, int, int], ...]:
        """What changes when any file in the folder changes: paths, mtimes and sizes."""
        return tuple(sorted((rel, st.st_mtime_ns, st.st_size) for rel, _, st in self.entries if st))


def read_text(file: Path, size: int, limit: int = MAX_OBJECT_FILE_BYTES) -> str:
    """``file.read_text(encoding="utf-8")``: the whole file, UTF-8, newlines made ``\\n``.

    Why not ``read_text`` itself: it makes nine system calls (two fstat, an isatty
    ioctl, two seeks) where an open, reads to the end and a close do, and in a
    worker each call hands the GIL to another run's thread (issue 15). ``size``
    (from the folder listing) sizes the first read: it reads on to the end, so a
    file that grew since is read whole, never cut short. A read that returns less
    than asked, exactly at the listed size, is taken as the end (a regular file's
    read is short only there), which saves the last read of nothing.

    Raises :class:`FileTooLarge` once more than ``limit`` bytes have been read, so
    a file that grew (or was swapped) after its size was checked still costs at
    most ``limit`` bytes of memory, and is refused rather than read in part.
    """
    # O_NONBLOCK: a file swapped for a FIFO after the listing must not hang the run
    descriptor = os.open(file, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        chunks, left = [], limit + 1  # one byte past the limit tells "too large" from "full"
        while left > 0:
            wanted = min(max(size + 1, 65536), left)
            chunk = os.read(descriptor, wanted)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
            if len(chunk) < wanted and limit + 1 - left == size:
                break  # a short read ending at the listed size is the end: no read of b"" more
    finally:
        os.close(descriptor)
    if left <= 0:
        raise FileTooLarge(f"larger than {_mebibytes(limit)}")
    text = b"".join(chunks).decode("utf-8")
    if "\r" in text:  # universal newlines, as read_text applies them
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def private_copy(value: Any) -> Any:
    """A copy of parsed snapshot data that shares nothing mutable with it.

    Why not ``copy.deepcopy``: what a snapshot holds is what the YAML loader builds
    (dicts, lists, the sets and tuples of ``!!set``/``!!omap``, and immutable
    scalars), with no object shared once aliases are copied, so ``deepcopy``'s memo
    and per-type dispatch buy nothing: this is several times faster, which every
    tool call over a large listing pays for each object it returns.
    """
    if isinstance(value, dict):
        return {key: private_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [private_copy(item) for item in value]
    if isinstance(value, tuple):
        return tuple(private_copy(item) for item in value)
    if isinstance(value, set):
        return set(value)  # its members are hashable, so immutable
    return value  # str, int, float, bool, None, bytes, date and datetime


def _mebibytes(size: int) -> str:
    """``64 MiB`` for a whole number of MiB, else the bytes (small limits in tests)."""
    return f"{size >> 20} MiB" if size and size % (1 << 20) == 0 else f"{size:,} bytes"


def _in_default_namespace(metadata: dict[str, Any]) -> None:
    """Put ``metadata`` in namespace "default", right after its name (where the API has it)."""
    entries = [(key, value) for key, value in metadata.items() if key != "namespace"]
    metadata.clear()
    for key, value in entries:
        metadata[key] = value
        if key == "name":
            metadata["namespace"] = DEFAULT_NAMESPACE
    metadata.setdefault("namespace", DEFAULT_NAMESPACE)


@cache
def _builtin_lookups() -> tuple[dict[tuple[str, str], ResourceInfo], dict[str, ResourceInfo]]:
    """The built-in kinds by (group, kind) and by kind (the first listed wins), built once.

    Why: every snapshot load built them again, for each run of a fleet (issue 15).
    """
    by_key = {(info.group, info.kind): info for info in BUILTIN_RESOURCES}
    by_kind: dict[str, ResourceInfo] = {}
    for info in BUILTIN_RESOURCES:
        by_kind.setdefault(info.kind, info)
    return by_key, by_kind


class SnapshotBackend:
    """``ClusterBackend`` over a snapshot folder. Thread-safe: read-only after ``__init__``."""

    def __init__(self, path: str | Path, listing: FolderListing | None = None) -> None:
        """``listing``: the folder already walked (by the snapshot cache), its root resolved."""
        if listing is None:
            root = Path(path).expanduser()
            if not root.is_dir():
                raise SnapshotError(
                    f"snapshot folder {str(path)!r} does not exist or is not a folder; "
                    "pass a folder of kubectl YAML/JSON (see examples/snapshots/README.md)"
                )
            try:
                listing = FolderListing.walk(root.resolve())
            except OSError as exc:  # a folder it may not list: say so, as for any bad folder
                raise SnapshotError(
                    f"snapshot folder {str(path)!r} could not be read ({exc.strerror or exc})"
                ) from None
        self.root = listing.root
        self.name = f"snapshot:{self.root.name}"
        self.problems: list[str] = []
        self._raw: list[dict[str, Any]] = []
        self._sources: list[str] = []  # the file of each object in _raw
        self._secret_values: list[str | bytes] = []
        self._withheld: dict[int, Withheld] = {}  # by id() of a Secret in _raw, until served
        for relative, file, stat in listing.entries:
            parts = relative.split("/")
            if (
                file.suffix.lower() in OBJECT_SUFFIXES
                and parts[0] != LOGS_FOLDER
                and not any(part.startswith(".") for part in parts)
                and stat is not None
                and S_ISREG(stat.st_mode)
            ):
                self._load_file(file, relative, stat.st_size)
        self._scrubber = SecretScrubber(self._secret_values)
        del self._secret_values  # only the scrubber's automaton keeps them
        self._index, self._objects = self._build_index(self._raw)
        self._views = self._served_views()
        del self._raw, self._sources, self._withheld
        if not self._objects:
            raise SnapshotError(self._no_objects(path))

    def _no_objects(self, path: str | Path) -> str:
        """Why a folder without a single object is refused, and what to pass instead.

        Served, it would be an empty cluster, where "no pod runs as root" is vacuously
        true: a wrong ``--snapshot`` folder must not become a confident verdict.
        """
        why = (
            f"{len(self.problems)} file(s) could not be used, e.g. {self.problems[0]}"
            if self.problems
            else "no .yaml, .yml or .json file with an object in it"
        )
        return (
            f"snapshot folder {str(path)!r} holds no Kubernetes objects ({why}); pass a "
            "folder of `kubectl get -o yaml` output (see examples/snapshots/README.md)"
        )

    # ------------------------------------------------------------------ loading

    def _load_file(self, file: Path, relative: str, size: int) -> None:
        if size > MAX_OBJECT_FILE_BYTES:  # the listing's size: not even opened
            self._skip_too_large(relative)
            return
        try:
            text = read_text(file, size, MAX_OBJECT_FILE_BYTES)
        except FileTooLarge:  # it grew past the cap after it was listed
            self._skip_too_large(relative)
            return
        except (OSError, UnicodeDecodeError) as exc:
            self.problems.append(f"{relative}: could not be read ({exc}); it was skipped")
            return
        if file.suffix.lower() == ".json":
            try:
                self._add_document(json.loads(text), relative, 1)
            except json.JSONDecodeError as exc:
                self.problems.append(
                    f"{relative}: not valid JSON (line {exc.lineno}: {exc.msg}); it was skipped"
                )
            except RecursionError:  # json.loads past ~1000 levels: one bad file, not the folder
                self.problems.append(
                    f"{relative}: not valid JSON (nested too deep); it was skipped"
                )
            return
        number = 0
        aliases = may_alias(text)
        try:
            for number, document in enumerate(load_documents(text), start=1):
                if aliases:
                    try:
                        document = _unaliased(document, [MAX_ALIAS_EXPANSION], set())
                    except (_AliasProblem, RecursionError) as exc:
                        reason = str(exc) if isinstance(exc, _AliasProblem) else "nest too deep"
                        self.problems.append(
                            f"{relative}: document {number} uses YAML aliases that {reason}; "
                            "it was skipped"
                        )
                        continue
                self._add_document(document, relative, number)
        except yaml.YAMLError as exc:
            kept = f"; its first {number} document(s) were kept" if number else ""
            self.problems.append(f"{relative}: not valid YAML ({describe_yaml_error(exc)}){kept}")

    def _skip_too_large(self, relative: str) -> None:
        self.problems.append(
            f"{relative}: larger than {_mebibytes(MAX_OBJECT_FILE_BYTES)}; it was skipped"
        )

    def _add_document(self, document: Any, relative: str, number: int) -> None:
        if document is None:
            return
        if not isinstance(document, dict):
            self.problems.append(f"{relative}: document {number} is not a Kubernetes object")
            return
        pending = [document]  # a stack: a List item may be a List itself, at any depth
        while pending:
            current = pending.pop()
            kind = str(current.get("kind") or "")
            items = current.get("items")
            if not (kind.endswith("List") and isinstance(items, list)):
                self._add_object(current, relative, number)
                continue
            # Its items are objects to serve (a Secret among them redacted), never its content.
            item_kind = kind[: -len("List")]
            for item in reversed(items):  # popped in file order
                if isinstance(item, dict):
                    if item_kind:
                        item.setdefault("kind", item_kind)
                    item.setdefault("apiVersion", current.get("apiVersion", "v1"))
                    pending.append(item)

    def _add_object(self, obj: dict[str, Any], relative: str, number: int) -> None:
        metadata = obj.get("metadata")
        if not obj.get("kind") or not isinstance(metadata, dict) or not metadata.get("name"):
            self.problems.append(
                f"{relative}: document {number} has an object without kind or metadata.name; "
                "it was skipped"
            )
            return
        withheld = withhold_secret_values(obj)
        if withheld.keys or withheld.values:
            self._secret_values.extend(withheld.values)
            self._withheld[id(obj)] = withheld
        self._raw.append(obj)
        self._sources.append(relative)

    def _build_index(
        self, raw: list[dict[str, Any]]
    ) -> tuple[ResourceIndex, dict[tuple[str, str], dict[ObjectKey, dict[str, Any]]]]:
        known: list[ResourceInfo] = list(BUILTIN_RESOURCES)
        for crd, relative in zip(raw, self._sources, strict=True):
            if (crd["kind"], split_api_version(str(crd.get("apiVersion", "")))[0]) != (
                CRD_KEY[1],
                CRD_KEY[0],
            ):
                continue
            try:
                info = self._crd_resource(crd)
            except (TypeError, AttributeError, ValueError) as exc:
                self.problems.append(
                    f"{relative}: CustomResourceDefinition {crd['metadata']['name']!r} is "
                    f"malformed ({type(exc).__name__}); its kind is not served"
                )
                continue
            if info is not None:
                known.append(info)
        builtin_by_key, builtin_by_kind = _builtin_lookups()
        by_key, by_kind = dict(builtin_by_key), dict(builtin_by_kind)
        for info in known[len(BUILTIN_RESOURCES) :]:  # a CRD's own kind
            by_key[(info.group, info.kind)] = info
            by_kind.setdefault(info.kind, info)
        guessed: set[tuple[str, str]] = set()

        objects: dict[tuple[str, str], dict[ObjectKey, dict[str, Any]]] = {}
        origins: dict[tuple[str, str, ObjectKey], str] = {}  # the file each object came from
        for obj, relative in zip(raw, self._sources, strict=True):
            group, version = split_api_version(str(obj.get("apiVersion", "")))
            kind = str(obj["kind"])
            # Same kind under a legacy group (extensions/v1beta1 Ingress, a v1 Event) is the
            # same resource; under any other group it is a kind of its own (OpenShift's
            # authorization.openshift.io ClusterRole is not rbac's, and is listed apart)
            info = by_key.get((group, kind))
            if info is None and kind in LEGACY_GROUP_KINDS.get(group, ()):
                info = by_kind.get(kind)
            if info is None:
                info = ResourceInfo(kind, guess_plural(kind), group, version, False)
                by_key[(group, kind)] = by_kind[kind] = info
                known.append(info)
                guessed.add((group, kind))
            metadata = obj["metadata"]
            if (info.group, info.kind) not in guessed:
                if not info.namespaced:
                    self._ignore_namespace(obj, info, relative)
                elif not metadata.get("namespace"):
                    _in_default_namespace(metadata)  # as kubectl apply puts it
            key = (str(metadata.get("namespace") or ""), str(metadata["name"]))
            stored = objects.setdefault((info.group, info.kind), {})
            earlier = stored.get(key)
            if earlier is not None and earlier != obj:
                self._note_conflict(kind, key, origins[(info.group, info.kind, key)], relative)
            stored[key] = obj
            origins[(info.group, info.kind, key)] = relative

        # Kinds known only from their objects are namespaced when their objects are; then
        # their objects written without a namespace are in "default", as for any other.
        for position in range(len(BUILTIN_RESOURCES), len(known)):
            info = known[position]
            stored = objects.get((info.group, info.kind), {})
            if (info.group, info.kind) in guessed and any(ns for ns, _ in stored):
                known[position] = ResourceInfo(
                    info.kind, info.plural, info.group, info.version, True, info.short_names
                )
                for namespace, name in [key for key in stored if not key[0]]:
                    obj = stored.pop((namespace, name))
                    _in_default_namespace(obj["metadata"])
                    if (DEFAULT_NAMESPACE, name) in stored:
                        continue  # written twice, once with "default": that one is served
                    stored[(DEFAULT_NAMESPACE, name)] = obj
        sorted_objects = {key: dict(sorted(found.items())) for key, found in objects.items()}
        return ResourceIndex.builtin_with(known[len(BUILTIN_RESOURCES) :]), sorted_objects

    def _served_views(self) -> dict[int, dict[str, Any]]:
        """What the model reads of each stored object (by its id()), where that differs from
        it: shown (redaction.py) and scrubbed of the snapshot's Secret values and credential
        shapes. Made once, after every object has its final namespace."""
        views: dict[int, dict[str, Any]] = {}
        for stored in self._objects.values():
            for obj in stored.values():
                withheld = self._withheld.get(id(obj), NOTHING_WITHHELD)
                view = self._scrubber.scrubbed_view(shown(obj, withheld))
                if view is not obj:
                    views[id(obj)] = view
        return views

    def _note_conflict(self, kind: str, key: ObjectKey, earlier: str, relative: str) -> None:
        """An object captured twice with different content: the later file's is served.

        Overlapping captures (``kubectl get all`` and ``get pods``) repeat objects
        identically and are not reported; different content usually means the
        folder holds several clusters (``--snapshot`` one level too high).
        """
        namespace, name = key
        shown = f"{namespace}/{name}" if namespace else name
        self.problems.append(
            f"{relative}: {kind} {shown} is also in {earlier} with different content; the "
            f"one in {relative} is served (does this folder hold several clusters?)"
        )

    def _ignore_namespace(self, obj: dict[str, Any], info: ResourceInfo, relative: str) -> None:
        """Serve a cluster-scoped object as the API server would: without a namespace.

        Manifests sometimes carry one (a ClusterRole with ``namespace: test``);
        the API server ignores it, so lookups by name must find the object.
        The snapshot no longer matches its file there, so that is reported.
        """
        metadata = obj["metadata"]
        namespace = metadata.pop("namespace", None)
        if namespace:
            self.problems.append(
                f"{relative}: {info.kind} {metadata['name']!r} is cluster-scoped; "
                f"its metadata.namespace {namespace!r} was ignored"
            )

    @staticmethod
    def _crd_resource(crd: dict[str, Any]) -> ResourceInfo | None:
        """The resource a CRD serves; None without a group or kind.

        Raises TypeError / AttributeError / ValueError on a malformed one (a list where
        a name belongs), which the caller reports as one problem: one bad file must not
        make the whole snapshot unreadable.
        """
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        if not spec.get("group") or not names.get("kind"):
            return None
        versions = spec.get("versions") or []
        storage = next((v for v in versions if v.get("storage")), versions[0] if versions else {})
        info = ResourceInfo(
            kind=names["kind"],
            plural=names.get("plural") or guess_plural(names["kind"]),
            group=spec["group"],
            version=storage.get("name") or spec.get("version") or "v1",
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
        )
        texts = (info.kind, info.plural, info.group, info.version, *info.short_names)
        if not all(isinstance(text, str) for text in texts):
            raise TypeError("its names, group and versions must be strings")
        return info

    # ------------------------------------------------------------------ protocol

    def close(self) -> None:
        """Nothing to release: parsed snapshots are cached and shared across runs."""

    @property
    def scrubber(self) -> SecretScrubber:
        """Knows every Secret value of the snapshot; fixed once parsed."""
        return self._scrubber

    def api_resources(self) -> list[ResourceInfo]:
        return self._index.resources

    def present_resources(self) -> list[ResourceInfo]:
        """The resource types that have at least one object in this snapshot."""
        return [
            info for info in self._index.resources if self._objects.get((info.group, info.kind))
        ]

    def resolve(self, kind: str) -> ResourceInfo:
        return self._index.resolve(kind)

    def _stored(self, resource: ResourceInfo) -> dict[ObjectKey, dict[str, Any]]:
        return self._objects.get((resource.group, resource.kind), {})

    def _out(self, obj: dict[str, Any], as_stored: bool) -> dict[str, Any]:
        """A private copy of ``obj`` as stored, or of what the model reads of it."""
        return private_copy(obj if as_stored else self._views.get(id(obj), obj))

    def list_objects(
        self,
        resource: ResourceInfo,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        as_stored: bool = False,
    ) -> Iterator[dict[str, Any]]:
        # Parse the selectors now, so a bad one fails at the call, not mid-iteration.
        labels_match = label_matcher(label_selector)
        fields_match = field_matcher(field_selector)
        stored = self._stored(resource)
        wanted_namespace = namespace if resource.namespaced else None
        return (
            self._out(obj, as_stored)
            for (obj_namespace, _), obj in stored.items()
            if (wanted_namespace is None or obj_namespace == wanted_namespace)
            and labels_match(obj)
            and fields_match(obj)
        )

    def get(
        self, resource: ResourceInfo, name: str, namespace: str | None, *, as_stored: bool = False
    ) -> dict[str, Any]:
        stored = self._stored(resource)
        if not resource.namespaced:
            found = stored.get(("", name))
            if found is None:
                raise not_found(name, None, compose("{} {} not found", resource.kind, quoted(name)))
            return self._out(found, as_stored)
        if namespace is not None:
            found = stored.get((namespace, name))
            if found is None:
                raise not_found(
                    name,
                    namespace,
                    compose(
                        "{} {} not found in namespace {}",
                        resource.kind,
                        quoted(name),
                        quoted(namespace),
                    ),
                )
            return self._out(found, as_stored)
        matches = [obj for (_, obj_name), obj in stored.items() if obj_name == name]
        if not matches:
            raise not_found(
                name, None, compose("{} {} not found in any namespace", resource.kind, quoted(name))
            )
        if len(matches) > 1:
            namespaces = ", ".join(m["metadata"].get("namespace", "") for m in matches)
            raise BackendError(
                "bad_request",
                f"{resource.kind} {name!r} exists in namespaces {namespaces}; name one",
            )
        return self._out(matches[0], as_stored)

    def events(
        self,
        namespace: str | None,
        involved_kind: str | None = None,
        involved_name: str | None = None,
        *,
        as_stored: bool = False,
    ) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for key in EVENT_KEYS:
            for (obj_namespace, _), event in self._objects.get(key, {}).items():
                if namespace is not None and obj_namespace != namespace:
                    continue
                involved = event.get("involvedObject") or event.get("regarding") or {}
                if involved_kind and str(involved.get("kind", "")).lower() != involved_kind.lower():
                    continue
                if involved_name and involved.get("name") != involved_name:
                    continue
                found.append(event)
        found.sort(key=_event_time)
        return [self._out(event, as_stored) for event in found]

    def logs(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        tail_lines: int | None = None,
        previous: bool = False,
        since_seconds: int | None = None,
        limit_bytes: int | None = None,
    ) -> str:
        for label, value in (("namespace", namespace), ("pod", pod), ("container", container)):
            if value is not None and not is_dns1123_subdomain(value):
                raise BackendError("bad_request", f"{label} {value!r} is not a valid name")
        pod_dir = self.root / LOGS_FOLDER / namespace / pod
        pod_object = self._stored(self._index.resolve("Pod")).get((namespace, pod))
        if pod_object is None and not pod_dir.is_dir():
            raise BackendError("not_found", f"pod {pod!r} not found in namespace {namespace!r}")
        container = self._pick_container(pod_object, pod_dir, pod, container)
        if not is_dns1123_subdomain(container):  # from the pod's annotation: content, not a path
            raise BackendError("bad_request", f"container {container!r} is not a valid name")
        file = pod_dir / (f"{container}.previous.log" if previous else f"{container}.log")
        text = self._log_text(file)
        if text is None:
            which = "previous log" if previous else "log"
            raise BackendError(
                "not_found",
                f"the snapshot holds no {which} for container {container!r} of pod {pod!r} "
                f"in namespace {namespace!r}",
            )
        lines = self._scrubber.text(text).splitlines()
        if since_seconds is not None:
            lines = self._since(lines, since_seconds)
        if tail_lines is not None:
            lines = lines[-tail_lines:] if tail_lines > 0 else []
        text = "\n".join(lines) + ("\n" if lines else "")
        if limit_bytes is not None:  # the API server's limitBytes: the first N bytes
            text = text.encode("utf-8")[:limit_bytes].decode("utf-8", errors="ignore")
        return text

    def _log_text(self, file: Path) -> str | None:
        """The log file's text (its last :data:`MAX_LOG_FILE_BYTES`), or None if there is none.

        Only a regular file inside the snapshot folder counts: a log that is a
        symlink to ``/etc/passwd`` or to another snapshot, or a device or FIFO,
        is "no log", as snapshot roots promise (docs/threat-model.md). A file
        longer than the cap loses its older part, from a line boundary.
        """
        try:
            resolved = file.resolve()
            if not resolved.is_relative_to(self.root):
                return None
            descriptor = os.open(resolved, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except (OSError, RuntimeError):  # missing, unreadable, a symlink loop
            return None
        try:
            stat = os.fstat(descriptor)
            if not S_ISREG(stat.st_mode):
                return None
            start = max(0, stat.st_size - MAX_LOG_FILE_BYTES)
            os.lseek(descriptor, start, os.SEEK_SET)
            chunks, left = [], stat.st_size - start
            while left > 0 and (chunk := os.read(descriptor, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
        except OSError:
            return None
        finally:
            os.close(descriptor)
        data = b"".join(chunks)
        if start > 0:  # cut inside the file: the first line is partial
            data = data[data.find(b"\n") + 1 :]
        return data.decode("utf-8", errors="replace")

    def _pick_container(
        self, pod_object: dict[str, Any] | None, pod_dir: Path, pod: str, container: str | None
    ) -> str:
        spec = (pod_object or {}).get("spec") or {}
        declared = [
            c.get("name")
            for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
            if c.get("name")
        ]
        if not declared and pod_dir.is_dir():
            declared = sorted(
                {f.name.split(".")[0] for f in pod_dir.iterdir() if f.name.endswith(".log")}
            )
        if container is not None:
            if declared and container not in declared:
                raise BackendError(
                    "not_found",
                    f"pod {pod!r} has no container {container!r}; "
                    f"its containers are {', '.join(declared)}",
                )
            return container
        annotations = ((pod_object or {}).get("metadata") or {}).get("annotations") or {}
        if default := annotations.get(DEFAULT_CONTAINER_ANNOTATION):
            return str(default)
        app_containers = [c.get("name") for c in spec.get("containers") or [] if c.get("name")]
        candidates = app_containers or declared
        if len(candidates) == 1:
            return str(candidates[0])
        if not candidates:
            raise BackendError("not_found", f"the snapshot holds no logs for pod {pod!r}")
        raise BackendError(
            "bad_request",
            f"pod {pod!r} has several containers ({', '.join(candidates)}); name one",
        )

    @staticmethod
    def _since(lines: list[str], since_seconds: int) -> list[str]:
        """Lines from the last ``since_seconds`` before the newest timestamped line.

        A snapshot has no "now", so the newest log line stands in for it. Logs
        captured without ``--timestamps`` cannot be filtered and come back whole.
        """
        stamps = [
            _parse_timestamp(m.group(1)) if (m := _LOG_TIMESTAMP.match(line)) else None
            for line in lines
        ]
        known = [s for s in stamps if s is not None]
        if not known:
            return lines
        cutoff = max(known) - timedelta(seconds=since_seconds)
        kept: list[str] = []
        keep = False
        for line, stamp in zip(lines, stamps, strict=True):
            if stamp is not None:
                keep = stamp >= cutoff
            if keep:
                kept.append(line)
        return kept

    def explain(self, resource: ResourceInfo, field_path: str | None = None) -> dict[str, Any]:
        crd = next(
            (
                crd
                for crd in self._objects.get(CRD_KEY, {}).values()
                if (crd.get("spec") or {}).get("group") == resource.group
                and ((crd.get("spec") or {}).get("names") or {}).get("kind") == resource.kind
            ),
            None,
        )
        if crd is None:
            raise BackendError(
                "unsupported",
                f"this snapshot carries no schema for {resource.kind} (only "
                "CustomResourceDefinitions in the snapshot carry one); read an object with get",
            )
        crd = self._views.get(id(crd), crd)  # the schema is shown to the model: scrubbed
        spec = crd["spec"]
        versions = spec.get("versions") or []
        version: dict[str, Any] = next(
            (v for v in versions if v.get("name") == resource.version),
            next((v for v in versions if v.get("storage")), {}),
        )
        schema = (version.get("schema") or spec.get("validation") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            raise BackendError(
                "unsupported",
                f"the CustomResourceDefinition of {resource.kind} in this snapshot has no schema",
            )
        return private_copy(schema_at(schema, field_path, resource.kind))


def schema_at(schema: dict[str, Any], field_path: str | None, kind: str) -> dict[str, Any]:
    """The sub-schema at a dotted path (``spec.dnsNames``); arrays are stepped through."""
    current = schema
    walked: list[str] = []
    for part in [p for p in (field_path or "").split(".") if p]:
        while current.get("type") == "array" and isinstance(current.get("items"), dict):
            current = current["items"]
        properties = current.get("properties") or {}
        if part not in properties:
            where = ".".join(walked) or kind
            known = ", ".join(sorted(properties)) or "none"
            raise BackendError(
                "not_found", f"{kind} has no field {part!r} under {where}; fields there: {known}"
            )
        current = properties[part]
        walked.append(part)
    return current
