"""What a Kyverno ValidatingPolicy reads of its cluster (``resource.Get`` / ``resource.List``,
``globalContext.Get``), answered from the tick's shared listings of the same target.

The CEL library (workers/policy_engine/cel/lib/kyverno_resource.py) calls a
:class:`ListingReads` bound around the policy's probe runs (run.py). Each call is served
from :class:`~workers.policy_engine.policies.lookups.SharedLookups`: a kind is listed once per tick
whatever the number of policies, objects and calls that read it, and the objects are the
ones the policies judge, as stored (a Secret's values withheld). A resource is named as
Kyverno's dynamic client names it (``apps/v1``, ``deployments``): the version asked for when
the target serves it, else the one it serves (a snapshot holds each kind at the version it
was stored in; an API server serves every version of a resource, converted).

What Kyverno's calls report as failures are failures here too (an evaluation error: the
policy gives no verdict): a resource the target does not serve, a subresource, an object not
found, a namespace given for a cluster-scoped resource. A GlobalContextEntry holds the
objects its ``kubernetesResource`` lists; an entry the policy's files do not define is null,
as Kyverno reads an entry it has not loaded.
"""

from __future__ import annotations

from typing import Any

from workers.engine.toolsets.backend import BackendError, ResourceInfo
from workers.policy_engine.cel.lib.base import CelLibraryError
from workers.policy_engine.cel.lib.kyverno_resource import judged_object
from workers.policy_engine.policies.lookups import SharedLookups
from workers.policy_engine.probes.runner import SECRET_VALUES_WITHHELD

GLOBAL_CONTEXT_KIND = "GlobalContextEntry"


class ListingReads:
    """One policy's reads of its target (the library's ``ClusterReads``).

    ``namespace``: a NamespacedValidatingPolicy's own; ``entries``: the GlobalContextEntry
    documents imported with it, by name; ``secret_values_named``: the policy's expressions
    name a Secret's withheld fields, so a Secret it reads could only be guessed at."""

    def __init__(
        self,
        shared: SharedLookups,
        *,
        namespace: str | None = None,
        entries: dict[str, dict[str, Any]] | None = None,
        secret_values_named: bool = False,
        admission_only: bool = False,
    ) -> None:
        self.shared = shared
        self.namespace = namespace
        self.entries = entries or {}
        self.secret_values_named = secret_values_named
        self.admission_only = admission_only

    def _as_at_admission(self, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The objects as an admission-only policy reads them: Kyverno runs it only while the
        judged object is being created, when the cluster does not hold it yet, so it is
        left out of what the policy reads (on a stored cluster its own listing holds it).
        Read for each object, never as a run's constant (which no object has)."""
        if not self.admission_only:
            return objects
        judged = judged_object()
        if not isinstance(judged, dict):
            raise CelLibraryError(
                "an admission-only policy reads the cluster as it was before each judged "
                "object was stored: read for each object"
            )
        return [o for o in objects if not _same_object(o, judged)]

    def _resource(self, api_version: str, resource: str) -> ResourceInfo:
        if "/" in resource:
            raise CelLibraryError(
                f"failed to read {resource}: a subresource is a request, not a stored object"
            )
        group, _, version = api_version.rpartition("/")
        try:
            served = self.shared.served()
        except BackendError as exc:
            raise CelLibraryError(f"the target's kinds could not be read: {exc.message}") from None
        found = [info for info in served if info.group == group and info.plural == resource]
        found.sort(key=lambda info: info.version != version)  # the version asked for, if served
        for info in found:
            if self.secret_values_named and info.group == "" and info.kind == "Secret":
                raise CelLibraryError(SECRET_VALUES_WITHHELD)
            return info
        raise CelLibraryError(
            f"failed to read {resource} of {api_version}: the target serves no such resource"
        )

    def _listing(self, info: ResourceInfo, namespace: str | None) -> list[dict[str, Any]]:
        try:
            return self.shared.listing(info, namespace)
        except BackendError as exc:
            raise CelLibraryError(f"failed to list {info.plural}: {exc.message}") from None

    def _scoped(self, info: ResourceInfo, namespace: str) -> str | None:
        if namespace and not info.namespaced:
            raise CelLibraryError(
                f"failed to read {info.plural}: it is cluster-scoped, and namespace "
                f"{namespace!r} was given"
            )
        return namespace or None

    def get(self, api_version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        info = self._resource(api_version, resource)
        scoped = self._scoped(info, namespace)
        if info.namespaced and scoped is None:
            raise CelLibraryError(f"failed to get {resource} {name!r}: no namespace was given")
        for obj in self._as_at_admission(self._listing(info, scoped)):
            meta = obj.get("metadata") or {}
            if meta.get("name") == name:
                return obj
        where = f" in namespace {scoped!r}" if scoped else ""
        raise CelLibraryError(f"failed to get resource: {resource} {name!r} not found{where}")

    def list(
        self, api_version: str, resource: str, namespace: str, labels: dict[str, str]
    ) -> dict[str, Any]:
        info = self._resource(api_version, resource)
        objects = self._as_at_admission(self._listing(info, self._scoped(info, namespace)))
        if labels:
            objects = [o for o in objects if _labelled(o, labels)]
        return {
            "apiVersion": info.api_version,
            "kind": f"{info.kind}List",
            "metadata": {},
            "items": objects,
        }

    def global_context(self, name: str, projection: str) -> Any:
        entry = self.entries.get(name)
        if entry is None:
            return None
        if projection:
            raise CelLibraryError(
                f"global context entry {name!r} has no projection {projection!r} served here"
            )
        source = entry.get("kubernetesResource") or {}
        group = str(source.get("group") or "")
        version = str(source.get("version") or "v1")
        api_version = f"{group}/{version}" if group else version
        listed = self.list(
            api_version, str(source.get("resource") or ""), str(source.get("namespace") or ""), {}
        )
        return listed["items"]


def _same_object(obj: dict[str, Any], judged: dict[str, Any]) -> bool:
    """Whether ``obj`` is the judged object (kind, namespace and name)."""
    meta, other = obj.get("metadata") or {}, judged.get("metadata") or {}
    return (
        obj.get("kind") == judged.get("kind")
        and meta.get("name") == other.get("name")
        and (meta.get("namespace") or None) == (other.get("namespace") or None)
    )


def _labelled(obj: dict[str, Any], labels: dict[str, str]) -> bool:
    meta = obj.get("metadata")
    have = (meta.get("labels") if isinstance(meta, dict) else None) or {}
    return all(have.get(key) == value for key, value in labels.items())
