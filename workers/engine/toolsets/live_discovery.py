"""What a live API server serves: discovery, cached per target, and kind resolution.

Discovery reads ``/api``, ``/api/v1``, ``/apis`` and each group's preferred
version, the way kubectl does, so CustomResourceDefinitions appear exactly
like built-ins. The result is cached per target for
``settings.discovery_ttl_seconds``: a fleet of runs against one cluster asks
once, not once per run.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from schemas.kubernetes_metadata import is_dns1123_subdomain
from workers.engine.toolsets.backend import BackendError, ResourceInfo
from workers.engine.toolsets.kinds import ResourceIndex
from workers.engine.toolsets.live_transport import GetOnlyTransport


def _path_safe(name: str) -> bool:
    """A group, version or resource name must be a DNS subdomain (lowercase). Discovery of
    an aggregated API is written by that API's own server, and these names become path
    segments unquoted: the API server decodes %2F before routing, so anything else could
    turn a list into another path (a node's proxy)."""
    return is_dns1123_subdomain(name)


# key -> (fetched at, resources, groups listed whose discovery failed)
_cache: dict[str, tuple[float, list[ResourceInfo], tuple[str, ...]]] = {}
_cache_lock = threading.Lock()


def discover(transport: GetOnlyTransport, ttl_seconds: float) -> list[ResourceInfo]:
    """The readable resources of the transport's target, at most ``ttl_seconds`` old."""
    return _discovered(transport, ttl_seconds)[1]


def unavailable_groups(transport: GetOnlyTransport, ttl_seconds: float) -> tuple[str, ...]:
    """The API groups the target lists but whose discovery failed when its resources were
    last read (an aggregated API that is down): their kinds are unknown, not absent."""
    return _discovered(transport, ttl_seconds)[2]


def _discovered(
    transport: GetOnlyTransport, ttl_seconds: float
) -> tuple[float, list[ResourceInfo], tuple[str, ...]]:
    now = time.monotonic()
    with _cache_lock:
        cached = _cache.get(transport.target_key)
    if cached is not None and now - cached[0] < ttl_seconds:
        return cached
    resources, unavailable = _fetch(transport)
    entry = (now, resources, tuple(unavailable))
    with _cache_lock:
        _cache[transport.target_key] = entry
    return entry


def _fetch(transport: GetOnlyTransport) -> tuple[list[ResourceInfo], list[str]]:
    resources: list[ResourceInfo] = []
    unavailable: list[str] = []
    core = transport.get_json("/api", action="read the API versions (/api)")
    for version in core.get("versions") or ["v1"]:
        if not _path_safe(str(version)):
            continue
        doc = transport.get_json(f"/api/{version}", action=f"read API discovery for {version}")
        resources.extend(_resources_of(doc, "", version))
    groups = transport.get_json("/apis", action="read the API groups (/apis)")
    for group in groups.get("groups") or []:
        preferred = group.get("preferredVersion") or (group.get("versions") or [{}])[0]
        group_version = preferred.get("groupVersion")
        if not group_version or "/" not in group_version:
            continue
        if not all(_path_safe(part) for part in str(group_version).split("/", 1)):
            continue
        try:
            doc = transport.get_json(
                f"/apis/{group_version}", action=f"read API discovery for {group_version}"
            )
        except BackendError as exc:
            # An aggregated API that is down must not hide the rest (as kubectl). One the run's
            # deadline cut off is not down: skipping it would cache a list without its kinds,
            # and every run of the target would read them as not served until re-discovery.
            if exc.code in ("unavailable", "not_found", "timeout") and not exc.out_of_time:
                unavailable.append(str(group_version).split("/", 1)[0])
                continue
            raise
        name, version = group_version.split("/", 1)
        resources.extend(_resources_of(doc, name, version))
    return resources, unavailable


def _resources_of(doc: dict[str, Any], group: str, version: str) -> list[ResourceInfo]:
    found = []
    for entry in doc.get("resources") or []:
        plural = entry.get("name", "")
        verbs = set(entry.get("verbs") or [])
        if not _path_safe(str(plural)) or not verbs & {"get", "list"}:
            continue  # subresources (pods/log, pods/exec), unreadable types, hostile names
        found.append(
            ResourceInfo(
                kind=entry.get("kind", ""),
                plural=plural,
                group=group,
                version=version,
                namespaced=bool(entry.get("namespaced")),
                short_names=tuple(entry.get("shortNames") or ()),
            )
        )
    return found


def resolve_kind(resources: list[ResourceInfo], kind: str) -> ResourceInfo:
    """Map 'pods', 'Pod', 'po', 'deployments.apps' ... to one resource, as the snapshot does.

    Discovery lists the core group first, so ``events`` means core/v1 Events.
    """
    return ResourceIndex(resources).resolve(kind)
