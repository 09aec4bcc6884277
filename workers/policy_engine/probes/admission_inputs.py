"""What an imported policy reads besides its object, served as for a CREATE of the stored object.

An admission policy's CEL reads ``request``, ``oldObject`` and ``namespaceObject`` beside
``object``. A check judges each stored object as if it were created now, so:

* ``request`` is the API server's admission request of that CREATE (its ``kind``,
  ``resource``, ``requestKind``, ``requestResource``, ``name``, ``namespace``, ``operation``
  and ``dryRun``), built as k8s.io/apiserver builds it for CEL: fields it leaves empty are
  absent (a CREATE of the object itself has no ``subResource``; a cluster-scoped object no
  ``namespace``, except a Namespace, whose own name the API server puts there).
  ``request.userInfo``, ``request.uid`` and ``request.options`` describe who asked and how:
  a stored object has none, and import refuses a policy that reads them (policies/common.py).
* ``oldObject`` is null, as on every CREATE, so ``oldObject == null || ...`` and
  ``[object, oldObject].exists(o, o != null && ...)`` mean what they mean at admission.
* ``namespaceObject`` is the target's Namespace the object is in, as the API server gives
  it (its name, labels, annotations and the rest of its metadata but managed fields and
  owners; its spec and status; no ``apiVersion``/``kind``), null for a cluster-scoped object.
  The Namespaces come from the target's one listing of them: a policy view shares the tick's
  (policies/lookups.py), any other backend is listed once per probe run. A namespaced object
  whose Namespace the target does not hold cannot be judged (the API server would never have
  admitted it): the run says so and gives no verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from workers.engine.toolsets.backend import BackendError, ClusterBackend, ResourceInfo

ADMISSION_INPUTS = ("request", "oldObject", "namespaceObject")
# The admission request's fields a check serves (module docstring); the rest are refused.
SERVED_REQUEST_FIELDS = frozenset({
    "kind", "resource", "subResource", "requestKind", "requestResource", "requestSubResource",
    "name", "namespace", "operation", "dryRun",
})  # fmt: skip
# metadata the API server copies into namespaceObject (k8s.io/apiserver admission CEL filter)
_NAMESPACE_METADATA = (
    "name", "generateName", "namespace", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "finalizers",
)  # fmt: skip


class AdmissionInputMissing(Exception):
    """An input the object needs cannot be served (its Namespace is not on the target, the
    Namespaces could not be listed); the message says which, in one sentence."""


class NamespaceSource(Protocol):
    """A backend that serves the target's Namespaces from a listing it shares (a policy view)."""

    def namespace_object(self, name: str) -> dict[str, Any] | None: ...


def create_request(obj: dict[str, Any], resource: ResourceInfo) -> dict[str, Any]:
    """The admission request of a CREATE of ``obj`` (a ``resource`` object), as CEL reads it."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    served = {"group": resource.group, "version": resource.version, "resource": resource.plural}
    request: dict[str, Any] = {
        "kind": kind,
        "resource": served,
        "requestKind": dict(kind),
        "requestResource": dict(served),
        "operation": "CREATE",
        "dryRun": False,
    }
    name = meta.get("name")
    if name:
        request["name"] = str(name)
    namespace = _namespace_of(obj, resource)
    if namespace:
        request["namespace"] = namespace
    return request


def _namespace_of(obj: dict[str, Any], resource: ResourceInfo) -> str | None:
    """The request's namespace: the object's for a namespaced kind, a Namespace's own name."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    if resource.namespaced:
        return str(meta.get("namespace") or "") or None
    if resource.group == "" and resource.kind == "Namespace":
        return str(meta.get("name") or "") or None
    return None


def namespace_as_served(namespace: dict[str, Any]) -> dict[str, Any]:
    """A stored Namespace as the API server gives it to CEL as ``namespaceObject``."""
    meta = namespace.get("metadata") if isinstance(namespace.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    out: dict[str, Any] = {"metadata": {k: meta[k] for k in _NAMESPACE_METADATA if k in meta}}
    for part in ("spec", "status"):
        if part in namespace:
            out[part] = namespace[part]
    return out


class AdmissionInputs:
    """One probe run's admission inputs: built per object, the Namespaces read once."""

    def __init__(self, backend: ClusterBackend, wanted: frozenset[str]) -> None:
        self.wanted = wanted
        self._backend = backend
        self._namespaces: Callable[[str], dict[str, Any] | None] | None = None
        self._served: dict[str, dict[str, Any] | None] = {}

    def for_object(self, obj: dict[str, Any], resource: ResourceInfo) -> dict[str, Any]:
        """The inputs ``obj`` is judged with (only those the probe reads)."""
        out: dict[str, Any] = {}
        if "request" in self.wanted:
            out["request"] = create_request(obj, resource)
        if "oldObject" in self.wanted:
            out["oldObject"] = None
        if "namespaceObject" in self.wanted:
            out["namespaceObject"] = self._namespace_object(obj, resource)
        return out

    def _namespace_object(self, obj: dict[str, Any], resource: ResourceInfo) -> Any:
        name = _namespace_of(obj, resource)
        if name is None:
            return None  # a cluster-scoped object: null, as the API server gives it
        if name not in self._served:
            try:
                stored = self._lookup()(name)
            except BackendError as exc:
                raise AdmissionInputMissing(
                    "it reads namespaceObject and the target's namespaces could not be "
                    f"listed: {exc.message}"
                ) from None
            self._served[name] = None if stored is None else namespace_as_served(stored)
        served = self._served[name]
        if served is None:
            raise AdmissionInputMissing(
                f"it reads namespaceObject and the target holds no Namespace {name!r} "
                "(the API server would not have admitted an object in it)"
            )
        return served

    def _lookup(self) -> Callable[[str], dict[str, Any] | None]:
        if self._namespaces is None:
            shared = getattr(self._backend, "namespace_object", None)
            self._namespaces = shared if callable(shared) else self._listed()
        return self._namespaces

    def _listed(self) -> Callable[[str], dict[str, Any] | None]:
        """The backend's Namespaces, listed once for this run."""
        resource = self._backend.resolve("namespaces")
        objects = list(self._backend.list_objects(resource, None, as_stored=True))
        by_name = {str((o.get("metadata") or {}).get("name")): o for o in objects}
        return by_name.get
