"""A binding's params read from the target cluster, as the API server reads them at admission.

A ValidatingAdmissionPolicy binding whose ``paramRef`` names no object in the imported files
(``ParamSource``) takes its params from the target on every run, through the tick's shared
listings (lookups.py: one listing of the params kind per tick, whatever number of policies
read it). Kubernetes' rules (the ParamRef API reference):

* ``name`` picks one object, ``selector`` every object it selects (``{}``: all of the kind);
  with several, the policy is evaluated with each and must hold for every one;
* ``namespace`` limits the search; for a namespaced params kind left unset, the namespace of
  the object judged is searched (a per-namespace parameter), and a cluster-scoped object
  matched by such a binding is an error;
* with no params found, ``parameterNotFoundAction: Allow`` admits the object, ``Deny``
  applies the policy's ``failurePolicy`` (``Fail``: the object is refused with "no params
  found for policy binding with `Deny` parameterNotFoundAction"; ``Ignore``: admitted).

:func:`params_plan` turns a source into what the run judges: per set of objects (all, or
those of one namespace), the params objects to run the rule with, or a denial.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from schemas.policy import ParamSource
from workers.core.policies.lookups import SharedLookups
from workers.core.toolsets.backend import BackendError, ResourceInfo

NOT_FOUND_MESSAGE = "no params found for policy binding with `Deny` parameterNotFoundAction"


@dataclass(frozen=True)
class ParamsRun:
    """One run of a rule: over the objects ``where`` keeps (by namespace; None: every one),
    with ``params`` (None: ``denied``, every object kept fails with NOT_FOUND_MESSAGE)."""

    params: dict[str, Any] | None
    where: Callable[[str | None], bool] | None = None
    denied: bool = False


@dataclass(frozen=True)
class ParamsPlan:
    """The runs of a rule for one judged kind; ``error``: no verdict, and why."""

    runs: list[ParamsRun] = field(default_factory=list)
    error: str | None = None


def _served(source: ParamSource, shared: SharedLookups) -> ResourceInfo | None:
    for resource in shared.served():
        if resource.kind == source.kind and resource.api_version == source.api_version:
            return resource
    return None


def _selected(source: ParamSource, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for obj in objects:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        if source.name is not None:
            if meta.get("name") == source.name:
                out.append(obj)
        elif source.selector is None or source.selector.matches(meta.get("labels") or {}):
            out.append(obj)
    return out


def _namespace(obj: dict[str, Any]) -> str | None:
    meta = obj.get("metadata")
    return meta.get("namespace") if isinstance(meta, dict) else None


def params_plan(source: ParamSource, judged: ResourceInfo, shared: SharedLookups) -> ParamsPlan:
    """How a rule over ``judged`` objects runs with the params ``source`` names on the target."""
    what = f"{source.kind} ({source.api_version})"
    try:
        resource = _served(source, shared)
    except BackendError as exc:
        return ParamsPlan(error=f"the target's kinds could not be read: {exc.message}")
    if resource is None:
        return ParamsPlan(error=f"its params kind {what} is not served by the target")
    if not resource.namespaced and source.namespace:
        return ParamsPlan(
            error=f"its paramRef names a namespace for the cluster-scoped params kind {what}, "
            "a configuration error the API server refuses"
        )
    per_namespace = resource.namespaced and not source.namespace
    if per_namespace and not judged.namespaced:
        return ParamsPlan(
            error=f"its params ({what}) are read from the judged object's namespace, and a "
            f"{judged.kind} has none (the API server errs on it)"
        )
    try:
        listed = shared.listing(resource, None if per_namespace else source.namespace)
    except BackendError as exc:
        return ParamsPlan(error=f"its params ({what}) could not be listed: {exc.message}")
    found = _selected(source, listed)
    deny = source.not_found_action == "Deny" and source.failure_policy == "Fail"
    if not per_namespace:
        if found:
            return ParamsPlan([ParamsRun(p) for p in found])
        return ParamsPlan([ParamsRun(None, denied=True)] if deny else [])
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for obj in found:
        by_namespace.setdefault(str(_namespace(obj) or ""), []).append(obj)
    runs = [
        ParamsRun(p, where=_in(namespace))
        for namespace, params in sorted(by_namespace.items())
        for p in params
    ]
    if deny:
        runs.append(ParamsRun(None, where=_not_in(set(by_namespace)), denied=True))
    return ParamsPlan(runs)


def _in(namespace: str) -> Callable[[str | None], bool]:
    return lambda name: name == namespace


def _not_in(namespaces: set[str]) -> Callable[[str | None], bool]:
    return lambda name: (name or "") not in namespaces
