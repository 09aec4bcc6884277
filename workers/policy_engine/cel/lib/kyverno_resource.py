"""Kyverno's ``resource`` and ``globalContext`` libraries, over the target's own listings.

A Kyverno ValidatingPolicy's CEL may read other objects of the cluster:

* ``resource.Get(apiVersion, resource, namespace, name)``: one object;
* ``resource.List(apiVersion, resource, namespace)`` and
  ``resource.List(apiVersion, resource, namespace, {label: value, ...})``: a list
  (``{apiVersion, kind, metadata, items}``), every namespace when ``namespace`` is ``''``;
* in a NamespacedValidatingPolicy the namespace is the policy's own and is not written:
  ``resource.Get(apiVersion, resource, name)``, ``resource.List(apiVersion, resource)``,
  ``resource.List(apiVersion, resource, {labels})``;
* ``resource.ToGVR(apiVersion, kind)``: the resource the target serves the kind as, a
  ``schema.GroupVersionResource`` value that ``resource.Get`` / ``List`` take in place of
  ``apiVersion, resource`` (``resource.Get(gvr, namespace, name)``, ``resource.List(gvr,
  namespace[, labels])``; in a namespaced policy without the namespace); a kind the target
  does not serve is an evaluation error;
* ``globalContext.Get(name, projection)``: a GlobalContextEntry's data: the objects its
  ``kubernetesResource`` lists (``projection`` ``''``), or what its projection of that name
  makes of them; an entry not defined is null.

Kyverno's own names in camel case (``resource.get``, ``resource.toGVR``,
``globalContext.get``, 1.18+) are the same functions. ``resource.Post`` (it creates
objects) is not served, and import refuses it (workers/policy_engine/policies/common.py).

A check answers these from the listings of the target it judges, shared by the tick as
every probe's are: the policy run binds a :class:`ClusterReads` around each probe run
(:func:`reading`); outside one (a model's probe, any other policy) a call is an evaluation
error, never a value. What a call returns is charged to the evaluation's steps by its size,
each time it is made (the runtime converts it into CEL values each time).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from workers.policy_engine.cel.lib.base import (
    CelLibraryError,
    Overload,
    charge,
    converted_values,
    opaque,
    unwrap,
)

# What the runtime converts of a call's result, per step: about two values (each map, list,
# key and scalar one; a string one more per KB). Measured: a listing of 900 small pods (about
# 31,000 values) came back from the library into CEL in about 62 ms on a loaded host, near
# 2 us a value, where a step stands for about 5 us.
CONVERTED_VALUES_PER_STEP = 2


class ClusterReads(Protocol):
    """What the library reads from: the target's objects, as one policy may see them.
    Each method raises :class:`CelLibraryError` (or a ``ValueError``) for what Kyverno
    reports as a failed call (a resource the target does not serve, an object not found)."""

    namespace: str | None  # a namespaced policy's own namespace; None for a cluster one

    def get(self, api_version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        """One object (``namespace`` ``''`` for a cluster-scoped one)."""
        ...

    def list(
        self, api_version: str, resource: str, namespace: str, labels: dict[str, str]
    ) -> dict[str, Any]:
        """A list of objects, as the API server's list answer."""
        ...

    def global_context(self, name: str, projection: str) -> Any:
        """A GlobalContextEntry's data; None for an entry not defined."""
        ...

    def to_gvr(self, api_version: str, kind: str) -> dict[str, str]:
        """``group``, ``version`` and ``resource`` (plural) of a kind the target serves."""
        ...


_current = threading.local()


@contextmanager
def reading(reads: ClusterReads) -> Iterator[None]:
    """Calls of the library in this thread, within the block, read through ``reads``."""
    previous = getattr(_current, "reads", None)
    _current.reads = reads
    try:
        yield
    finally:
        _current.reads = previous


@contextmanager
def judging(obj: Any) -> Iterator[None]:
    """Within the block the object being judged is ``obj`` (the probe program sets it for
    each object): what an admission-only policy's reads leave out (cluster_reads.py)."""
    previous = getattr(_current, "judged", None)
    _current.judged = obj
    try:
        yield
    finally:
        _current.judged = previous


def judged_object() -> Any:
    """The object being judged in this thread, or None (between objects, or a run's
    constants, which no object has)."""
    return getattr(_current, "judged", None)


def require_kyverno_policy(function: str) -> None:
    """Raise unless a Kyverno ValidatingPolicy is being run in this thread: Kyverno's own
    libraries (hash, json, image) answer only there, as they exist only in Kyverno."""
    if getattr(_current, "reads", None) is None:
        raise CelLibraryError(
            f"{function} is Kyverno's library: only an imported Kyverno ValidatingPolicy calls it"
        )


def _reads(function: str) -> ClusterReads:
    found: ClusterReads | None = getattr(_current, "reads", None)
    if found is None:
        raise CelLibraryError(
            f"{function} is Kyverno's library: only an imported Kyverno ValidatingPolicy, "
            "run on a target, reads other objects"
        )
    return found


def _charged(value: Any, what: str) -> Any:
    """``value`` after charging its conversion into CEL values: each call converts it again,
    and is charged again."""
    charge(1 + converted_values(value) // CONVERTED_VALUES_PER_STEP, what)
    return value


def _cluster_scope(reads_: ClusterReads, function: str) -> None:
    if reads_.namespace is not None:
        raise CelLibraryError(
            f"no such overload: {function} in a namespaced policy takes no namespace (it "
            "reads the policy's own)"
        )


def _namespaced_scope(reads_: ClusterReads, function: str) -> str:
    if reads_.namespace is None:
        raise CelLibraryError(f"no such overload: {function} needs a namespace argument here")
    return reads_.namespace


def _labels(value: dict[Any, Any]) -> dict[str, str]:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise CelLibraryError("no such overload: labels must be a map of strings to strings")
    return dict(value)


def get(api_version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
    found = _reads("resource.Get")
    _cluster_scope(found, "resource.Get")
    return _charged(found.get(api_version, resource, namespace, name), "resource.Get()")


def get_own(api_version: str, resource: str, name: str) -> dict[str, Any]:
    found = _reads("resource.Get")
    namespace = _namespaced_scope(found, "resource.Get")
    return _charged(found.get(api_version, resource, namespace, name), "resource.Get()")


def list_in(api_version: str, resource: str, namespace: str) -> dict[str, Any]:
    found = _reads("resource.List")
    _cluster_scope(found, "resource.List")
    return _charged(found.list(api_version, resource, namespace, {}), "resource.List()")


def list_labelled(
    api_version: str, resource: str, namespace: str, labels: dict[Any, Any]
) -> dict[str, Any]:
    found = _reads("resource.List")
    _cluster_scope(found, "resource.List")
    listed = found.list(api_version, resource, namespace, _labels(labels))
    return _charged(listed, "resource.List()")


def list_own(api_version: str, resource: str) -> dict[str, Any]:
    found = _reads("resource.List")
    namespace = _namespaced_scope(found, "resource.List")
    return _charged(found.list(api_version, resource, namespace, {}), "resource.List()")


def list_own_labelled(api_version: str, resource: str, labels: dict[Any, Any]) -> dict[str, Any]:
    found = _reads("resource.List")
    namespace = _namespaced_scope(found, "resource.List")
    listed = found.list(api_version, resource, namespace, _labels(labels))
    return _charged(listed, "resource.List()")


def global_entry(name: str) -> Any:
    return _charged(_reads("globalContext.Get").global_context(name, ""), "globalContext.Get()")


def global_projection(name: str, projection: str) -> Any:
    value = _reads("globalContext.Get").global_context(name, projection)
    return _charged(value, "globalContext.Get()")


GVR = "gvr"  # values.py: Kyverno's schema.GroupVersionResource


def to_gvr(api_version: str, kind: str) -> Any:
    return opaque(GVR, **_reads("resource.ToGVR").to_gvr(api_version, kind))


def _named(gvr: Any) -> tuple[str, str]:
    """(apiVersion, resource) of a ``schema.GroupVersionResource`` value."""
    parts = unwrap(gvr, GVR)
    group, version = str(parts["group"]), str(parts["version"])
    return (f"{group}/{version}" if group else version), str(parts["resource"])


def _by_gvr(read: Callable[..., Any]) -> Callable[..., Any]:
    """``read`` taking a ``schema.GroupVersionResource`` where it takes apiVersion, resource."""

    def call(gvr: Any, *rest: Any) -> Any:
        return read(*_named(gvr), *rest)

    return call


get_gvr, get_own_gvr = _by_gvr(get), _by_gvr(get_own)
list_gvr, list_gvr_labelled = _by_gvr(list_in), _by_gvr(list_labelled)
list_own_gvr, list_own_gvr_labelled = _by_gvr(list_own), _by_gvr(list_own_labelled)


def _one(_: Any = None, *__: Any) -> int:
    return 1  # the arguments are short; what the call returns is charged when it is read


def _overloads(suffix: str, resource: str, context: str) -> list[Overload]:
    s = "string"
    return [
        Overload(f"{resource}.Get", f"kyverno_{suffix}_get_cluster", (s, s, s, s), "map", get,
                 cost=_one),
        Overload(f"{resource}.Get", f"kyverno_{suffix}_get_own", (s, s, s), "map", get_own,
                 cost=_one),
        Overload(f"{resource}.List", f"kyverno_{suffix}_list_cluster", (s, s, s), "map",
                 list_in, cost=_one),
        Overload(f"{resource}.List", f"kyverno_{suffix}_list_cluster_labels", (s, s, s, "map"),
                 "map", list_labelled, cost=_one),
        Overload(f"{resource}.List", f"kyverno_{suffix}_list_own", (s, s), "map", list_own,
                 cost=_one),
        Overload(f"{resource}.List", f"kyverno_{suffix}_list_own_labels", (s, s, "map"), "map",
                 list_own_labelled, cost=_one),
        Overload(f"{resource}.ToGVR", f"kyverno_{suffix}_to_gvr", (s, s), GVR, to_gvr,
                 cost=_one),
        Overload(f"{resource}.Get", f"kyverno_{suffix}_get_gvr", (GVR, s, s), "map", get_gvr,
                 cost=_one),
        Overload(f"{resource}.Get", f"kyverno_{suffix}_get_own_gvr", (GVR, s), "map",
                 get_own_gvr, cost=_one),
        Overload(f"{resource}.List", f"kyverno_{suffix}_list_gvr", (GVR, s), "map", list_gvr,
                 cost=_one),
        Overload(f"{resource}.List", f"kyverno_{suffix}_list_gvr_labels", (GVR, s, "map"),
                 "map", list_gvr_labelled, cost=_one),
        Overload(f"{resource}.List", f"kyverno_{suffix}_list_own_gvr", (GVR,), "map",
                 list_own_gvr, cost=_one),
        Overload(f"{resource}.List", f"kyverno_{suffix}_list_own_gvr_labels", (GVR, "map"),
                 "map", list_own_gvr_labelled, cost=_one),
        Overload(f"{context}.Get", f"kyverno_{suffix}_global", (s,), "dyn", global_entry,
                 cost=_one),
        Overload(f"{context}.Get", f"kyverno_{suffix}_global_projection", (s, s), "dyn",
                 global_projection, cost=_one),
    ]  # fmt: skip


def _camel(overloads: list[Overload]) -> list[Overload]:
    """Kyverno 1.18's lower-case names of the same functions."""
    out = []
    for o in overloads:
        namespace, _, name = o.function.rpartition(".")
        camel = f"{namespace}.{name[0].lower()}{name[1:]}"
        out.append(Overload(camel, o.id + "_camel", o.params, o.result, o.impl, o.member, o.cost))
    return out


OVERLOADS = [*_overloads("pascal", "resource", "globalContext")]
OVERLOADS = [*OVERLOADS, *_camel(OVERLOADS)]
