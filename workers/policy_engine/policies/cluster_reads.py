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
found, a namespace given for a cluster-scoped resource, a kind ``resource.ToGVR`` finds no
resource of. A GlobalContextEntry is the one the policy's files define, else the target's
own (Kyverno's ``kyverno.io`` GlobalContextEntries, cluster-scoped); one neither holds is
null, as Kyverno reads an entry it has not loaded. Its data is the list of objects its
``kubernetesResource`` lists; a projection is its JMESPath over that list, run as Kyverno
runs it (kyverno_jmespath.py) once a run (for each object, for an admission-only policy). An
entry that calls a service (``apiCall``) lives outside the cluster: reading it is an error
that says so.
"""

from __future__ import annotations

from typing import Any

from workers.engine.toolsets.backend import BackendError, ResourceInfo
from workers.policy_engine.cel.lib.base import CelLibraryError, charge, converted_values, refuse
from workers.policy_engine.cel.lib.kyverno_resource import CONVERTED_VALUES_PER_STEP, judged_object
from workers.policy_engine.policies.kyverno_jmespath import ProjectionError, search, values_within
from workers.policy_engine.policies.lookups import SharedLookups
from workers.policy_engine.probes.runner import SECRET_VALUES_WITHHELD

GLOBAL_CONTEXT_KIND = "GlobalContextEntry"
GLOBAL_CONTEXT_GROUP = "kyverno.io"
API_CALL = "lives outside the cluster (an API call)"
MAX_PROJECTED_VALUES = 1_000_000  # far past what the cost bound lets a run convert


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
        self._projected: dict[tuple[str, str], Any] = {}

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

    def _served(self) -> list[ResourceInfo]:
        try:
            return self.shared.served()
        except BackendError as exc:
            raise CelLibraryError(f"the target's kinds could not be read: {exc.message}") from None

    def _resource(self, api_version: str, resource: str) -> ResourceInfo:
        if "/" in resource:
            raise CelLibraryError(
                f"failed to read {resource}: a subresource is a request, not a stored object"
            )
        group, _, version = api_version.rpartition("/")
        served = self._served()
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

    def to_gvr(self, api_version: str, kind: str) -> dict[str, str]:
        """The resource the target serves ``kind`` of ``api_version`` as (Kyverno asks the API
        server's REST mapping): its group, the version asked for, its plural."""
        if api_version.count("/") > 1:
            raise CelLibraryError(f"failed to map kind to resource: bad apiVersion {api_version!r}")
        group, _, version = api_version.rpartition("/")
        for info in self._served():
            if info.group == group and info.kind == kind:
                return {"group": group, "version": version, "resource": info.plural}
        raise CelLibraryError(
            f"failed to map kind to resource: no matches for kind {kind!r} in version "
            f"{api_version!r}"
        )

    def global_context(self, name: str, projection: str) -> Any:
        spec = self._entry(name)
        if spec is None:
            return None
        source = spec.get("kubernetesResource")
        if spec.get("apiCall") or not isinstance(source, dict):
            raise CelLibraryError(f"global context entry {name!r} {API_CALL}")
        key = (name, projection)
        if key in self._projected:
            return self._projected[key]
        group = str(source.get("group") or "")
        version = str(source.get("version") or "v1")
        api_version = f"{group}/{version}" if group else version
        objects = self.list(
            api_version, str(source.get("resource") or ""), str(source.get("namespace") or ""), {}
        )["items"]
        if not projection:
            return objects
        query = next(
            (
                p.get("jmesPath")
                for p in spec.get("projections") or []
                if isinstance(p, dict) and p.get("name") == projection
            ),
            None,
        )
        if not isinstance(query, str):
            raise CelLibraryError(
                f"global context entry {name!r}: projection {projection!r} not found"
            )
        # the query runs over every object once: charged as converting them would be
        charge(1 + converted_values(objects) // CONVERTED_VALUES_PER_STEP, "globalContext.Get()")
        try:
            value = search(query, objects)
        except ProjectionError as exc:
            raise CelLibraryError(
                f"global context entry {name!r}: projection {projection!r} not found: {exc}"
            ) from None
        # a result that repeats its parts (``@ | [@, @] | [@, @]``) is small to hold and huge
        # to convert: refused past a bound before its conversion is counted and charged
        if values_within(value, MAX_PROJECTED_VALUES) is None:
            refuse(
                f"globalContext.Get() of projection {projection!r} would convert more than "
                f"{MAX_PROJECTED_VALUES:,} values"
            )
        if not self.admission_only:  # else it depends on the judged object
            self._projected[key] = value
        return value

    def _entry(self, name: str) -> dict[str, Any] | None:
        """The spec of the GlobalContextEntry ``name``: the policy's files', else the
        target's; None when neither holds one (nor serves Kyverno's GlobalContextEntries)."""
        if name in self.entries:
            return self.entries[name]
        for info in self._served():
            if info.group == GLOBAL_CONTEXT_GROUP and info.kind == GLOBAL_CONTEXT_KIND:
                for obj in self._listing(info, None):
                    meta = obj.get("metadata") or {}
                    if isinstance(meta, dict) and meta.get("name") == name:
                        spec = obj.get("spec")
                        return spec if isinstance(spec, dict) else {}
                return None
        return None


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
