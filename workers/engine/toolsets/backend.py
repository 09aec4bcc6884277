"""The read-only view of one cluster that the Kubernetes tools are written against.

Two implementations: ``snapshot_backend.SnapshotBackend`` (a folder of YAML)
and ``live_backend.LiveBackend`` (an API server through the kubernetes
client). The tools never know which one they have. There is deliberately no
method that could change a cluster.

Objects are returned as plain dicts shaped like the API's JSON, in one of two views
of one store (``redaction.py``):

* by default, what the model reads: a Secret's ``data`` / ``stringData`` values
  replaced by ``REDACTED``, copies of them elsewhere and credential shapes scrubbed;
* with ``as_stored=True``, for deterministic evaluation only (probes, imported
  policies): each object as the API server holds it, a Secret without its
  ``data`` / ``stringData`` (absent, as if RBAC hid them, never a placeholder).
  What is said about such objects is scrubbed before it leaves the process.

Each backend's ``scrubber`` knows the Secret values it has seen, so the tool
registry can scrub every tool output of a run with it once more.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from workers.engine.toolsets.echo import Marked, echo

if TYPE_CHECKING:
    from workers.engine.toolsets.redaction import SecretScrubber

REDACTED = "<redacted by assay>"


@dataclass(frozen=True)
class ResourceInfo:
    kind: str
    plural: str
    group: str  # "" for the core group
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


class BackendError(Exception):
    """A lookup that failed in a way the model should read about, not crash on.

    ``code`` is one of: not_found, forbidden, gone, timeout, unavailable,
    bad_request, unsupported.

    ``out_of_time``: the run's deadline (``bind_deadline``), not the lookup's own
    limits, ended it: no time was left to finish or retry it. The model path reads
    the message like any other; a probe re-run ends ``cannot_determine`` with
    ``budget_exhausted="deadline"`` instead of falling back to the model, which would
    have no time either (workers/fleet/probe_rerun.py).

    ``message`` is about the model's request, so a plain string counts as echo as a
    whole (workers/engine/toolsets/echo.py): it may quote the names and selectors the
    model chose, or repeat the API server's words about them, and must never verify a
    citation. A message built as :class:`~workers.engine.toolsets.echo.Marked` text says
    precisely which parts repeat the model's arguments; the rest (``not found in
    namespace``) may be cited.
    """

    def __init__(self, code: str, message: str | Marked, *, out_of_time: bool = False) -> None:
        text = message if isinstance(message, Marked) else echo(message)
        super().__init__(text.text)
        self.code = code
        self.message = text.text
        self.marked = text
        self.out_of_time = out_of_time


def not_found(name: str, namespace: str | None, message: str | Marked) -> BackendError:
    """Not found; when the name asked for was copied from a redacted one, why it cannot be.

    An object whose name (or namespace) holds a Secret's value is listed with that part
    ``REDACTED``; a lookup by the name as shown cannot reach it. Saying only "not found"
    would read as "absent", so the reason is given, without the value.
    """
    if REDACTED in name or REDACTED in (namespace or ""):
        return BackendError(
            "not_found",
            f"a name shown as holding {REDACTED} holds a Secret's value, which assay hides "
            "wherever it appears, object names included, so it cannot be looked up by what is "
            "shown; read the object in the listing of its kind instead",
        )
    return BackendError("not_found", message)


class ClusterBackend(Protocol):
    name: str

    @property
    def scrubber(self) -> SecretScrubber:
        """Removes the Secret values this backend has seen (and credential patterns) from text."""
        ...

    def api_resources(self) -> list[ResourceInfo]: ...

    def resolve(self, kind: str) -> ResourceInfo:
        """Map 'pods', 'Pod', 'po', 'deployments.apps' ... to a resource; BackendError if none."""
        ...

    def list_objects(
        self,
        resource: ResourceInfo,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        as_stored: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """Stream matching objects (live: page by page), so callers can stop early.

        Selectors match the objects as stored, as the API server matches them.
        ``as_stored``: the objects as stored, for deterministic evaluation (module docstring).
        """
        ...

    def get(
        self, resource: ResourceInfo, name: str, namespace: str | None, *, as_stored: bool = False
    ) -> dict[str, Any]: ...

    def events(
        self,
        namespace: str | None,
        involved_kind: str | None = None,
        involved_name: str | None = None,
        *,
        as_stored: bool = False,
    ) -> list[dict[str, Any]]: ...

    def logs(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        tail_lines: int | None = None,
        previous: bool = False,
        since_seconds: int | None = None,
        limit_bytes: int | None = None,
    ) -> str: ...

    def explain(self, resource: ResourceInfo, field_path: str | None = None) -> dict[str, Any]:
        """The OpenAPI schema (or sub-schema at ``field_path``) for a kind."""
        ...

    def close(self) -> None:
        """Release what one run opened (a live client's connections); called when it ends."""
        ...
