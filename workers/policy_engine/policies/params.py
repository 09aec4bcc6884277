"""A rule's params read from the target cluster, as its engine reads them at admission.

A ValidatingAdmissionPolicy binding whose ``paramRef`` names no object in the imported files,
and a Kyverno ClusterPolicy rule with ``validate.cel.paramKind`` and ``paramRef``
(``ParamSource``), take their params from the target on every run, through the tick's shared
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

Kyverno reads a ClusterPolicy rule's the same way (name or selector, namespace, each object
selected), except when none is found: a ``name`` the target lacks is an error whatever
``parameterNotFoundAction`` says, as is none selected with ``Deny``; none selected otherwise
(``Allow``, or unset) admits the object with no expression evaluated. A rule error gives a
check no verdict (``ParamsRun.error``), for the objects it would have judged only.

:func:`params_plan` turns a source into what the run judges: per set of objects (all, or
those of one namespace), the params objects to run the rule with, or a denial.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from schemas.policy import ParamSource
from workers.engine.toolsets.backend import BackendError, ResourceInfo
from workers.policy_engine.policies.documents import name_of, namespace_of
from workers.policy_engine.policies.lookups import SharedLookups

NOT_FOUND_MESSAGE = "no params found for policy binding with `Deny` parameterNotFoundAction"


@dataclass(frozen=True)
class ParamsRun:
    """One run of a rule: over the objects ``where`` keeps (by namespace; None: every one),
    with ``params`` (None: ``denied``, every object kept fails with NOT_FOUND_MESSAGE, or
    ``error``, any object kept leaves the rule without a verdict, for that reason)."""

    params: dict[str, Any] | None
    where: Callable[[str | None], bool] | None = None
    denied: bool = False
    error: str | None = None


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
        elif source.selector is not None and source.selector.matches(meta.get("labels") or {}):
            out.append(obj)
    return out


def _when_missing(source: ParamSource, what: str, where: str) -> ParamsRun | None:
    """The run over objects for which no params object is found (``where``: in which
    namespace it was looked for): a denial, an error, or none (they are admitted)."""
    if source.reader == "kyverno":
        if source.name is not None:
            return ParamsRun(
                None,
                error=f"its params object {what} {source.name!r} is not on the target{where}, "
                "and Kyverno reports the rule as an error",
            )
        if source.not_found_action == "Deny":
            return ParamsRun(
                None,
                error=f"its paramRef selects no {what} on the target{where} and says Deny, "
                "and Kyverno reports the rule as an error",
            )
        return None
    if source.not_found_action == "Deny" and source.failure_policy == "Fail":
        return ParamsRun(None, denied=True)
    return None


def params_plan(source: ParamSource, judged: ResourceInfo, shared: SharedLookups) -> ParamsPlan:
    """How a rule over ``judged`` objects runs with the params ``source`` names on the target."""
    what = f"{source.kind} ({source.api_version})"
    engine = "Kyverno" if source.reader == "kyverno" else "the API server"
    try:
        resource = _served(source, shared)
    except BackendError as exc:
        return ParamsPlan(error=f"the target's kinds could not be read: {exc.message}")
    if resource is None:
        return ParamsPlan(error=f"its params kind {what} is not served by the target")
    if not resource.namespaced and source.namespace:
        return ParamsPlan(
            error=f"its paramRef names a namespace for the cluster-scoped params kind {what}, "
            f"a configuration error {engine} refuses"
        )
    per_namespace = resource.namespaced and not source.namespace
    if per_namespace and not judged.namespaced:
        return ParamsPlan(
            error=f"its params ({what}) are read from the judged object's namespace, and a "
            f"{judged.kind} has none ({engine} errs on it)"
        )
    try:
        listed = shared.listing(resource, None if per_namespace else source.namespace)
    except BackendError as exc:
        return ParamsPlan(error=f"its params ({what}) could not be listed: {exc.message}")
    # in the order the API server lists them (by namespace and name), which Kyverno's
    # reading of several depends on (run.py)
    found = sorted(_selected(source, listed), key=lambda o: (namespace_of(o) or "", name_of(o)))
    if per_namespace:
        where = " in the judged object's namespace"
    else:
        where = f" in namespace {source.namespace}" if source.namespace else ""
    missing = _when_missing(source, what, where)
    if not per_namespace:
        if found:
            return ParamsPlan([ParamsRun(p) for p in found])
        return ParamsPlan([missing] if missing else [])
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for obj in found:
        by_namespace.setdefault(namespace_of(obj) or "", []).append(obj)
    runs = [
        ParamsRun(p, where=_in(namespace))
        for namespace, params in sorted(by_namespace.items())
        for p in params
    ]
    if missing:
        runs.append(replace(missing, where=_not_in(set(by_namespace))))
    return ParamsPlan(runs)


def _in(namespace: str) -> Callable[[str | None], bool]:
    return lambda name: name == namespace


def _not_in(namespaces: set[str]) -> Callable[[str | None], bool]:
    return lambda name: (name or "") not in namespaces
