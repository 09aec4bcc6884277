"""Which objects of a target a policy rule judges: its kinds resolved, its terms applied.

A rule names kinds (``KindRef``: a resource or a kind, a group, a version) and terms that
narrow them (names, namespaces, selectors, scope). Here the kinds become the target's own
resources (from its discovery, or the snapshot's kinds and CRDs), each listing is planned
(one namespace when every term pins it, else the whole cluster), and each listed object is
kept or not, as the API server (ValidatingAdmissionPolicy), Kyverno or Gatekeeper would
match it at admission:

* a namespaced object is matched by its namespace's name and labels (a namespace carries the
  ``kubernetes.io/metadata.name`` label even when the target holds no Namespace object); a
  Namespace by its own; another cluster-scoped object passes namespace terms;
* a namespace selector that needs labels of a namespace the target does not hold cannot be
  decided: :class:`Undecidable` (the policy then gives no verdict, never a pass).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from schemas.kubernetes_metadata import NAMESPACE_NAME_LABEL as NAME_LABEL
from schemas.policy import KindRef, PolicyRule, ResourceFilter
from workers.engine.toolsets.backend import ResourceInfo

NamespaceLabels = Callable[[str], dict[str, str] | None]


class Undecidable(Exception):
    """Whether the rule selects an object cannot be known from the target; says why."""


def kind_matches(ref: KindRef, resource: ResourceInfo) -> bool:
    """Whether a policy's kind names this served resource (the version is not compared:
    admission matches equivalent versions of a resource, and a cluster serves one)."""
    if ref.group != "*" and ref.group != resource.group:
        return False
    return ref.name == resource.kind or ref.name.lower() == resource.plural


def resources_of(
    rule: PolicyRule, served: Iterable[ResourceInfo], unavailable: Collection[str] = ()
) -> tuple[list[ResourceInfo], list[str]]:
    """The served resources the rule's kinds name, and the kinds it names that the target
    does not serve (nothing of them to judge there).

    ``unavailable``: API groups the target lists but could not say what they serve (an
    aggregated API that is down). A kind found nowhere else that such a group may serve is
    :class:`Undecidable`, never "not served": read as absent, the objects it holds (perhaps
    the violating ones) would pass unseen."""
    served = list(served)
    found: dict[tuple[str, str], ResourceInfo] = {}
    missing: list[str] = []
    for ref in _kind_refs(rule):
        matches = [r for r in served if kind_matches(ref, r)]
        if not matches and unavailable and (ref.group == "*" or ref.group in unavailable):
            groups = sorted(unavailable) if ref.group == "*" else [ref.group]
            raise Undecidable(
                f"{ref.describe()} may be served by API group {', '.join(groups)}, whose "
                "discovery failed (an aggregated API that is down?), so its objects are unknown"
            )
        if not matches:
            missing.append(ref.describe())
        for resource in _preferred(matches, ref):
            found.setdefault((resource.group, resource.kind), resource)
    return list(found.values()), sorted(set(missing))


def _preferred(matches: list[ResourceInfo], ref: KindRef) -> list[ResourceInfo]:
    """One resource per group: the version the policy names when served, else the first."""
    by_group: dict[str, ResourceInfo] = {}
    for resource in matches:
        current = by_group.get(resource.group)
        if current is None or (resource.version == ref.version and current.version != ref.version):
            by_group[resource.group] = resource
    return list(by_group.values())


def _kind_refs(rule: PolicyRule) -> list[KindRef]:
    refs: list[KindRef] = []
    for group in rule.match:
        for term in group:
            for ref in term.kinds or []:
                if ref not in refs:
                    refs.append(ref)
    return refs


def _applies(term: ResourceFilter, resource: ResourceInfo) -> bool:
    return term.kinds is None or any(kind_matches(ref, resource) for ref in term.kinds)


def groups_for(rule: PolicyRule, resource: ResourceInfo) -> list[list[ResourceFilter]]:
    """The rule's match groups that can select objects of ``resource``: every term of the
    group must admit the kind, and at least one must name it."""
    return [
        group
        for group in rule.match
        if all(_applies(term, resource) for term in group)
        and any(term.kinds is not None for term in group)
    ]


def namespaces_to_list(rule: PolicyRule, resource: ResourceInfo) -> list[str] | None:
    """The namespaces to list ``resource`` in for this rule: the names every group pins
    (exact names in ``namespaces``, or a namespace selector that only names them); None
    (the whole cluster) when any group leaves the namespace open, or for a cluster-scoped
    resource."""
    if not resource.namespaced:
        return None
    wanted: set[str] = set()
    for group in groups_for(rule, resource):
        pinned = _pinned(group)
        if pinned is None:
            return None
        wanted |= pinned
    return sorted(wanted)


def _pinned(group: list[ResourceFilter]) -> set[str] | None:
    pinned: set[str] | None = None
    for term in group:
        names: set[str] | None = None
        if term.namespaces is not None and not any(
            ch in n for n in term.namespaces for ch in "*?["
        ):
            names = set(term.namespaces)
        if term.namespace_selector is not None:
            only = term.namespace_selector.names_only()
            if only is not None:
                names = set(only) if names is None else names & set(only)
        if names is not None:
            pinned = names if pinned is None else pinned & names
    return pinned


@dataclass(frozen=True)
class ObjectFilter:
    """Keeps the objects of one resource that a rule judges."""

    rule: PolicyRule
    resource: ResourceInfo
    namespace_labels: NamespaceLabels

    def __call__(self, obj: dict[str, Any]) -> bool:
        return self._matched(obj) and self._exception(obj) is None

    def exception(self, obj: dict[str, Any]) -> str | None:
        """The Kyverno PolicyException that exempts ``obj`` from the rule (an object the rule
        would judge, which the exception's match selects), else None."""
        if not self.rule.exceptions or not self._matched(obj):
            return None
        return self._exception(obj)

    def _matched(self, obj: dict[str, Any]) -> bool:
        groups = groups_for(self.rule, self.resource)
        if not any(all(self._selects(term, obj) for term in group) for group in groups):
            return False
        return not self._any(self.rule.exclude, obj)

    def _exception(self, obj: dict[str, Any]) -> str | None:
        for exception in self.rule.exceptions:
            if self._any(exception.match, obj):
                return exception.name
        return None

    def _any(self, groups: list[list[ResourceFilter]], obj: dict[str, Any]) -> bool:
        """Whether every term of one of ``groups`` (those whose kinds admit the resource)
        selects ``obj``."""
        return any(
            all(self._selects(term, obj) for term in group)
            for group in groups
            if all(_applies(term, self.resource) for term in group)
        )

    def _selects(self, term: ResourceFilter, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        name = str(meta.get("name") or "")
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        assert isinstance(labels, dict)
        if not term.matches_name(name):
            return False
        if term.scope == "Namespaced" and not self.resource.namespaced:
            return False
        if term.scope == "Cluster" and self.resource.namespaced:
            return False
        if term.object_selector is not None and not term.object_selector.matches(labels):
            return False
        is_namespace = self.resource.kind == "Namespace" and self.resource.group == ""
        if not self.resource.namespaced and not is_namespace:
            return True  # namespace terms do not apply to other cluster-scoped objects
        namespace = name if is_namespace else str(meta.get("namespace") or "")
        if not term.matches_namespace_name(namespace):
            return False
        if term.namespace_selector is None:
            return True
        if is_namespace:
            return term.namespace_selector.matches({**labels, NAME_LABEL: name})
        return term.namespace_selector.matches(self._labels_of(namespace, term))

    def _labels_of(self, namespace: str, term: ResourceFilter) -> dict[str, str]:
        labels = self.namespace_labels(namespace)
        if labels is not None:
            return {**labels, NAME_LABEL: namespace}
        selector = term.namespace_selector
        assert selector is not None
        keys = set(selector.match_labels) | {t.key for t in selector.match_expressions}
        if keys <= {NAME_LABEL}:  # a selector on the name alone needs no Namespace object
            return {NAME_LABEL: namespace}
        raise Undecidable(
            f"its namespace selector needs the labels of namespace {namespace!r}, and the "
            "target holds no such Namespace object"
        )
