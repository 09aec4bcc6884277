"""One target's listings for one tick, shared by every probe of the policies run there.

Two hundred imported policies over one cluster ask for the same few lists: every Pod,
Deployment, Namespace... Each probe's lookup goes through :class:`SharedLookups`, which
lists each (kind, namespace) once per tick, and a kind once for the whole cluster when
any probe of the tick needs it cluster-wide (every namespace's listing is then served
from that one). The backend's own client is used, so its per-target QPS limit, retries
and deadline still apply to the requests made. A listing that fails fails every probe
that needs it, without asking again.

It is the one place a tick reads the target's objects, including those a policy reads
besides the objects it judges: the Namespaces (namespace selectors and ``namespaceObject``,
:meth:`SharedLookups.namespace_object`), a binding's params objects (params.py); any other
reader of cluster objects for policies goes through :meth:`SharedLookups.listing` too.

A probe reads through a :class:`PolicyView` of the shared listings: a backend that
answers ``list_objects`` with the objects its rule selects (matching.py), and nothing else
(a policy probe makes one listing).

Listings hold the objects as stored (``as_stored``): a policy judges what admission would
see, a Secret without its values (runner.py). What a probe says about them is scrubbed
by the runner with the backend's own scrubber, which knows the target's Secrets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from workers.engine.toolsets.backend import BackendError, ClusterBackend, ResourceInfo
from workers.engine.toolsets.redaction import SecretScrubber
from workers.engine.toolsets.selectors import field_matcher, label_matcher
from workers.policy_engine.policies.documents import namespace_of
from workers.policy_engine.policies.matching import Undecidable

Key = tuple[str, str, str | None]  # group, kind, namespace (None: the whole cluster)


class SharedLookups:
    """Listings of one backend, each made at most once: (kind, namespace) per tick."""

    def __init__(self, backend: ClusterBackend) -> None:
        self.backend = backend
        self.requests = 0  # listings made (one per (kind, namespace) at most)
        self._lists: dict[Key, list[dict[str, Any]] | BackendError] = {}
        self._whole: set[tuple[str, str]] = set()  # kinds planned cluster-wide
        self._served: list[ResourceInfo] | BackendError | None = None
        self._namespaces: dict[str, dict[str, Any]] | BackendError | None = None
        self._lock = threading.Lock()

    # -- planning ----------------------------------------------------------------------------
    def plan(self, needs: Iterable[tuple[ResourceInfo, str | None]]) -> None:
        """Listings the tick will ask for: a kind any probe lists cluster-wide is listed
        once, cluster-wide, and serves every namespace's listing of it."""
        for resource, namespace in needs:
            if namespace is None or not resource.namespaced:
                self._whole.add((resource.group, resource.kind))

    # -- reading -----------------------------------------------------------------------------
    def served(self) -> list[ResourceInfo]:
        """The target's resources (its discovery, or the snapshot's kinds), read once."""
        with self._lock:
            if self._served is None:
                try:
                    self._served = list(self.backend.api_resources())
                except BackendError as exc:
                    self._served = exc
            if isinstance(self._served, BackendError):
                raise self._served
            return self._served

    def unavailable(self) -> tuple[str, ...]:
        """API groups the target lists but could not describe (a live cluster's aggregated
        API that is down; a snapshot has none), read with the served resources."""
        self.served()
        groups = getattr(self.backend, "unavailable_groups", None)
        return tuple(groups()) if callable(groups) else ()

    def listing(self, resource: ResourceInfo, namespace: str | None) -> list[dict[str, Any]]:
        """The objects of ``resource`` in ``namespace`` (None: every namespace)."""
        namespace = namespace if resource.namespaced else None
        whole = (resource.group, resource.kind) in self._whole or namespace is None
        key: Key = (resource.group, resource.kind, None if whole else namespace)
        with self._lock:
            cached = self._lists.get(key)
            if cached is None:
                self.requests += 1
                try:
                    cached = list(self.backend.list_objects(resource, key[2], as_stored=True))
                except BackendError as exc:
                    cached = exc
                self._lists[key] = cached
        if isinstance(cached, BackendError):
            raise cached
        if whole and namespace is not None:
            return [o for o in cached if namespace_of(o) == namespace]
        return cached

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        """The labels of the target's Namespace ``name``; None when it holds no such object.
        Every Namespace is listed once, the first time a rule needs one's labels."""
        try:
            namespace = self.namespace_object(name)
        except BackendError as exc:
            raise Undecidable(
                f"the target's namespaces could not be listed: {exc.message}"
            ) from None
        if namespace is None:
            return None
        return dict((namespace.get("metadata") or {}).get("labels") or {})

    def namespace_object(self, name: str) -> dict[str, Any] | None:
        """The target's Namespace ``name`` as stored; None when it holds no such object.
        Every Namespace is listed once per tick, for selectors and ``namespaceObject`` alike
        (BackendError when that listing fails)."""
        if self._namespaces is None:
            try:
                resource = self.backend.resolve("namespaces")
                objects = self.listing(resource, None)
                self._namespaces = {str((o.get("metadata") or {}).get("name")): o for o in objects}
            except BackendError as exc:
                self._namespaces = exc
        if isinstance(self._namespaces, BackendError):
            raise self._namespaces
        return self._namespaces.get(name)

    def view(
        self,
        keep: Callable[[dict[str, Any]], bool],
        exempt: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> PolicyView:
        """The listings narrowed to what ``keep`` selects; ``exempt`` names the exception
        (a Kyverno PolicyException) that takes an object out of the rule, if any."""
        return PolicyView(self, keep, exempt)


class PolicyView:
    """What one policy probe reads: the shared listings, narrowed to what its rule selects.

    A backend to the probe runner (it resolves kinds and scrubs as the target does), with
    listing only, of objects as stored: every other tool is refused (a policy probe makes
    one listing)."""

    def __init__(
        self,
        shared: SharedLookups,
        keep: Callable[[dict[str, Any]], bool],
        exempt: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        self._shared = shared
        self._keep = keep
        self._exempt = exempt
        self.name = shared.backend.name
        # objects a Kyverno PolicyException exempts from the rule, with its name: not
        # judged, and reported skip (run.py)
        self.exempted: list[tuple[dict[str, Any], str]] = []

    @property
    def scrubber(self) -> SecretScrubber:
        return self._shared.backend.scrubber

    @property
    def problems(self) -> list[str]:
        return list(getattr(self._shared.backend, "problems", None) or ())

    def api_resources(self) -> list[ResourceInfo]:
        return self._shared.served()

    def namespace_object(self, name: str) -> dict[str, Any] | None:
        """The tick's Namespace ``name`` (``namespaceObject``, probes/admission_inputs.py)."""
        return self._shared.namespace_object(name)

    def resolve(self, kind: str) -> ResourceInfo:
        return self._shared.backend.resolve(kind)

    def list_objects(
        self,
        resource: ResourceInfo,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        as_stored: bool = True,
    ) -> Iterator[dict[str, Any]]:
        """The shared listing's objects the rule selects: always as stored (what a policy
        probe judges), whatever ``as_stored`` says."""
        by_label, by_field = label_matcher(label_selector), field_matcher(field_selector)
        objects = self._shared.listing(resource, namespace)
        try:
            kept = [o for o in objects if by_label(o) and by_field(o) and self._keep(o)]
            if self._exempt is not None:
                exempt = self._exempt
                chosen = {id(o) for o in kept}
                self.exempted = [
                    (o, name)
                    for o in objects
                    if id(o) not in chosen and by_label(o) and by_field(o)
                    if (name := exempt(o)) is not None
                ]
        except Undecidable as exc:
            raise BackendError("unsupported", str(exc)) from None
        return iter(kept)

    def get(
        self, resource: ResourceInfo, name: str, namespace: str | None, *, as_stored: bool = True
    ) -> dict[str, Any]:
        raise BackendError("unsupported", "a policy probe only lists objects")

    def events(
        self,
        namespace: str | None,
        involved_kind: str | None = None,
        involved_name: str | None = None,
        *,
        as_stored: bool = True,
    ) -> list[dict[str, Any]]:
        raise BackendError("unsupported", "a policy probe only lists objects")

    def logs(self, namespace: str, pod: str, *args: Any, **kwargs: Any) -> str:
        raise BackendError("unsupported", "a policy probe only lists objects")

    def explain(self, resource: ResourceInfo, field_path: str | None = None) -> dict[str, Any]:
        return self._shared.backend.explain(resource, field_path)

    def close(self) -> None:
        """The shared backend is closed by whoever opened it, once the tick ends."""
