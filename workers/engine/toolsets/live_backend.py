"""``LiveBackend``: the ``ClusterBackend`` of a real API server, read through the kubernetes client.

The kubernetes client provides what is hard to get right (kubeconfig
contexts, exec and OIDC credential plugins, client certificates, the
in-cluster service account); every request then goes through
:class:`~workers.engine.toolsets.live_transport.GetOnlyTransport`, which can only
send GET. There is no create, patch, delete, exec, attach, port-forward or
proxy anywhere in this package.

Lists are streamed page by page (``limit`` + ``continue``) with server-side
selectors, so the caller can stop after the rows it will show and a 20,000-pod
cluster never sits in memory.

Secrets: before its first lookup returns anything, a backend (one run) reads
every Secret it may (one paged list of ``/api/v1/secrets``, Helm release
Secrets included, as the snapshot backend reads them) and teaches its
:class:`SecretScrubber` their values (``data``, ``stringData``, their
last-applied copy; never names or labels). Every object then leaves this module
with its Secret values withheld (redaction.py, layer 1): as stored for probes and
imported policies (``as_stored=True``), otherwise as the model reads it, values
redacted and copies of them scrubbed, as are events, log text and explain
schemas. When RBAC forbids reading Secrets (the recommended role does), only the
Secret-independent patterns (DSN passwords, credential keys, PEM keys, JWTs) can
be scrubbed; that is logged once per target and documented in docs/live-clusters.md.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterator
from typing import Any

import structlog

from schemas.request import ContextTarget, InClusterTarget
from schemas.settings import AssaySettings
from workers.engine.toolsets import live_discovery, live_openapi
from workers.engine.toolsets.backend import BackendError, ResourceInfo, not_found
from workers.engine.toolsets.echo import compose, quoted
from workers.engine.toolsets.kube_import import ensure_imported
from workers.engine.toolsets.live_transport import (
    GetOnlyTransport,
    TransportLimits,
    namespace_segment,
    path_segment,
)
from workers.engine.toolsets.redaction import SecretScrubber, shown, withhold_secret_values

LOG_BYTE_CAP = 512 * 1024
"""Never ask for more log than this, whatever the caller wants: the tools show far less."""

EVENTS_CAP = 1000
"""Events kept per lookup; a namespace with more is summarised by the newest ones."""

REDISCOVER_AFTER_SECONDS = 10.0
"""An unknown kind refreshes discovery at most this often (a CRD may have just been added)."""

EVENT_RESOURCE = ResourceInfo(
    kind="Event", plural="events", group="", version="v1", namespaced=True
)

_log = structlog.get_logger("assay.live")
_unreadable_reported: set[str] = set()  # targets whose unreadable Secrets were logged
_unreadable_lock = threading.Lock()


class LiveBackend:
    """One cluster (a kubeconfig context or the in-cluster service account), read-only."""

    def __init__(self, name: str, transport: GetOnlyTransport, settings: AssaySettings) -> None:
        self.name = name
        self._transport = transport
        self._settings = settings
        self._scrubber = SecretScrubber()
        self.secrets_readable: bool | None = None  # None until the first lookup asked

    @classmethod
    def from_target(
        cls,
        target: ContextTarget | InClusterTarget,
        settings: AssaySettings,
        *,
        deadline: float | None = None,
    ) -> LiveBackend:
        """Build from a request's target; ``deadline`` is the run's ``time.monotonic()`` end.

        Raises ``BackendError("unavailable")`` when the kubeconfig or the
        service account cannot be loaded; no request is sent here.
        """
        ensure_imported()
        from kubernetes.client import ApiClient, Configuration
        from kubernetes.config import ConfigException, load_incluster_config, load_kube_config

        configuration = Configuration()
        try:
            if isinstance(target, InClusterTarget):
                load_incluster_config(client_configuration=configuration)
                source = "in-cluster"
            else:
                path = target.kubeconfig or settings.kubeconfig
                load_kube_config(
                    config_file=path,
                    context=target.context,
                    client_configuration=configuration,
                    persist_config=False,  # never write the user's kubeconfig back
                )
                source = f"{path or '~/.kube/config'}#{target.context}"
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
            raise BackendError(
                "unavailable",
                f"cannot load the cluster credentials for {target.name}: {exc}; "
                "check --context and ASSAY_KUBECONFIG (or the in-cluster service account)",
            ) from None
        configuration.retries = False  # tenacity in the transport is the only retry layer
        limits = TransportLimits(
            request_timeout=settings.kube_request_timeout_seconds,
            retry_deadline=settings.kube_retry_deadline_seconds,
            qps=settings.kube_qps,
        )
        transport = GetOnlyTransport(
            ApiClient(configuration),
            target_key=f"{source}@{configuration.host}",
            target_name=target.name,
            limits=limits,
            deadline=deadline,
        )
        return cls(target.name, transport, settings)

    def close(self) -> None:
        self._transport.close()

    def bind_deadline(self, deadline: float) -> None:
        """End every later lookup by this ``time.monotonic()`` instant (the run's deadline).

        Why: the run's budget bounds its model calls; without this, a slow or
        endless cluster (pages forever, an answer a byte at a time) kept the
        worker's thread past the deadline by the retry deadline of each request.
        """
        self._transport.deadline = deadline

    @property
    def scrubber(self) -> SecretScrubber:
        return self._scrubber

    # --- secrets, learned once per backend (one run) ----------------------------------

    def _learn_secrets(self) -> None:
        """Teach the scrubber every Secret value RBAC lets assay read; once, before any output.

        Forbidden (the recommended RBAC) or not served: patterns only, logged
        once per target. Any other failure fails the lookup that asked, and
        the next lookup tries again: output is never shown unscrubbed
        because the Secrets could not be read just then.
        """
        if self.secrets_readable is not None:
            return
        hidden: list[str | bytes] = []
        try:
            for item in self._items(
                "/api/v1/secrets",
                {},
                "list secrets across the cluster (their values are scrubbed from all output)",
            ):
                hidden.extend(withhold_secret_values(_with_type(item, "v1", "Secret")).values)
        except BackendError as exc:
            if exc.code not in ("forbidden", "not_found"):
                raise BackendError(
                    exc.code,
                    exc.marked + " (assay reads the Secrets it may see before showing "
                    "anything, to scrub copies of their values; try the lookup again)",
                    out_of_time=exc.out_of_time,
                ) from None
            self.secrets_readable = False
            self._report_unreadable(exc)
            return
        self._scrubber.learn(hidden)
        self.secrets_readable = True

    def _report_unreadable(self, exc: BackendError) -> None:
        key = self._transport.target_key
        with _unreadable_lock:
            if key in _unreadable_reported:
                return
            _unreadable_reported.add(key)
        _log.info(
            "secrets_not_readable",
            target=self.name,
            reason=exc.code,
            scrubbing="patterns only: DSN passwords, credential keys, PEM private keys, JWTs",
        )

    def _sanitize(self, obj: dict[str, Any], as_stored: bool) -> dict[str, Any]:
        """Withhold a Secret's values (and learn them); then the object as stored, or as the
        model reads it: shown, and scrubbed of known values and credential shapes."""
        withheld = withhold_secret_values(obj)
        if withheld.values:
            self._scrubber.learn(withheld.values)
        if as_stored:
            return obj
        return self._scrubber.scrub_object(shown(obj, withheld))

    # --- discovery --------------------------------------------------------------------

    def api_resources(self) -> list[ResourceInfo]:
        return list(live_discovery.discover(self._transport, self._settings.discovery_ttl_seconds))

    def unavailable_groups(self) -> tuple[str, ...]:
        """API groups the target lists whose discovery failed (see live_discovery)."""
        return live_discovery.unavailable_groups(
            self._transport, self._settings.discovery_ttl_seconds
        )

    def resolve(self, kind: str) -> ResourceInfo:
        """Resolve through cached discovery; on a miss, look again if the cache is not fresh.

        A CRD installed after discovery was cached is then found without
        waiting for the TTL, while a made-up kind costs at most one refresh
        every ``REDISCOVER_AFTER_SECONDS``.
        """
        try:
            return live_discovery.resolve_kind(self.api_resources(), kind)
        except BackendError as exc:
            if exc.code != "not_found":
                raise
        ttl = min(self._settings.discovery_ttl_seconds, REDISCOVER_AFTER_SECONDS)
        return live_discovery.resolve_kind(live_discovery.discover(self._transport, ttl), kind)

    def explain(self, resource: ResourceInfo, field_path: str | None = None) -> dict[str, Any]:
        self._learn_secrets()
        schema = live_openapi.explain(
            self._transport, resource, field_path, self._settings.discovery_ttl_seconds
        )
        return self._scrubber.scrubbed_copy(schema)

    # --- objects ----------------------------------------------------------------------

    def list_objects(
        self,
        resource: ResourceInfo,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        as_stored: bool = False,
    ) -> Iterator[dict[str, Any]]:
        self._learn_secrets()
        namespace = namespace if resource.namespaced else None
        path = self._collection_path(resource, namespace)
        where = f"in namespace {namespace}" if namespace else "across the cluster"
        action = f"list {resource.plural} {where}"
        query: dict[str, Any] = {
            "labelSelector": label_selector or None,
            "fieldSelector": field_selector or None,
        }
        return self._paginate(resource, path, query, action, as_stored)

    def get(
        self, resource: ResourceInfo, name: str, namespace: str | None, *, as_stored: bool = False
    ) -> dict[str, Any]:
        """One object; a namespaced one without a namespace is looked up in all of them."""
        self._learn_secrets()
        namespace = namespace if resource.namespaced else None
        if resource.namespaced and not namespace:
            return self._find_in_any_namespace(resource, name, as_stored)
        path = f"{self._collection_path(resource, namespace)}/{path_segment(name, 'name')}"
        where = f" in namespace {namespace}" if namespace else ""
        try:
            obj = self._transport.get_json(path, action=f"get {resource.plural} {name}{where}")
        except BackendError as exc:
            if exc.code != "not_found":
                raise
            place = compose(" in namespace {}", quoted(namespace)) if namespace else ""
            raise not_found(
                name, namespace, compose("{} {} not found{}", resource.kind, quoted(name), place)
            ) from None
        return self._sanitize(_with_type(obj, resource.api_version, resource.kind), as_stored)

    def _find_in_any_namespace(
        self, resource: ResourceInfo, name: str, as_stored: bool
    ) -> dict[str, Any]:
        path_segment(name, "name")  # the same validation as a direct get
        matches = []
        for obj in self.list_objects(
            resource, None, field_selector=f"metadata.name={name}", as_stored=as_stored
        ):
            matches.append(obj)
            if len(matches) > 1:
                break
        if not matches:
            raise not_found(
                name, None, compose("{} {} not found in any namespace", resource.kind, quoted(name))
            )
        if len(matches) > 1:
            namespaces = ", ".join(str(m["metadata"].get("namespace", "")) for m in matches)
            raise BackendError(
                "bad_request",
                f"{resource.kind} {name!r} exists in several namespaces ({namespaces}); name one",
            )
        return matches[0]

    def events(
        self,
        namespace: str | None,
        involved_kind: str | None = None,
        involved_name: str | None = None,
        *,
        as_stored: bool = False,
    ) -> list[dict[str, Any]]:
        selectors = []
        if involved_kind:
            selectors.append(f"involvedObject.kind={involved_kind}")
        if involved_name:
            selectors.append(f"involvedObject.name={involved_name}")
        newest: list[tuple[str, int, dict[str, Any]]] = []  # a min-heap of the newest events
        for count, event in enumerate(
            self.list_objects(
                EVENT_RESOURCE,
                namespace,
                field_selector=",".join(selectors) or None,
                as_stored=as_stored,
            )
        ):
            entry = (_event_time(event), count, event)
            if len(newest) < EVENTS_CAP:
                heapq.heappush(newest, entry)
            else:
                heapq.heappushpop(newest, entry)
        return [event for _, _, event in sorted(newest)]

    def logs(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        tail_lines: int | None = None,
        previous: bool = False,
        since_seconds: int | None = None,
        limit_bytes: int | None = None,
    ) -> str:
        path = (
            f"/api/v1/namespaces/{namespace_segment(namespace)}"
            f"/pods/{path_segment(pod, 'pod name')}/log"
        )
        query: dict[str, Any] = {
            "container": container or None,
            "tailLines": tail_lines if tail_lines is not None and tail_lines >= 0 else None,
            "previous": True if previous else None,
            "sinceSeconds": since_seconds if since_seconds and since_seconds > 0 else None,
            "limitBytes": min(limit_bytes or LOG_BYTE_CAP, LOG_BYTE_CAP),
        }
        which = "previous logs" if previous else "logs"
        target = f"pod {pod}" + (f" container {container}" if container else "")
        self._learn_secrets()
        text = self._transport.get_text(
            path, query, action=f"read the {which} of {target} in namespace {namespace}"
        )
        return self._scrubber.text(text)

    # --- internals --------------------------------------------------------------------

    @staticmethod
    def _collection_path(resource: ResourceInfo, namespace: str | None) -> str:
        base = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
        if resource.namespaced and namespace:
            base += f"/namespaces/{namespace_segment(namespace)}"
        return f"{base}/{resource.plural}"

    def _paginate(
        self,
        resource: ResourceInfo,
        path: str,
        query: dict[str, Any],
        action: str,
        as_stored: bool,
    ) -> Iterator[dict[str, Any]]:
        """Yield objects page by page (see :meth:`_items`), as :meth:`_sanitize` makes them."""
        for item, item_kind in self._items_with_kind(path, query, action):
            typed = _with_type(item, resource.api_version, item_kind or resource.kind)
            yield self._sanitize(typed, as_stored)

    def _items(self, path: str, query: dict[str, Any], action: str) -> Iterator[dict[str, Any]]:
        """Raw list items, page by page (only for learning Secrets: nothing else sees them)."""
        for item, _ in self._items_with_kind(path, query, action):
            yield item

    def _items_with_kind(
        self, path: str, query: dict[str, Any], action: str
    ) -> Iterator[tuple[dict[str, Any], str]]:
        """Yield list items page by page; on an expired continue token, restart the list once.

        After a restart, objects already yielded are skipped (by uid), so the
        caller sees each object once even though the list was read twice.
        """
        restarted = False
        seen: set[str] = set()
        token: str | None = None
        while True:
            page_query = {**query, "limit": self._settings.kube_page_size, "continue": token}
            try:
                page = self._transport.get_json(path, page_query, action=action)
            except BackendError as exc:
                if exc.code == "gone" and token and not restarted:
                    restarted, token = True, None
                    continue
                raise
            items = _page_items(page, self._transport.target_name, action)
            item_kind = str(page.get("kind", "")).removesuffix("List")
            for item in items:
                key = _identity(item)
                if restarted and key in seen:
                    continue
                seen.add(key)
                yield item, item_kind
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return


def _page_items(page: dict[str, Any], target: str, action: str) -> list[dict[str, Any]]:
    """The objects of one page of a list; BackendError when the answer is no list at all.

    Why: an answer of 200 that is a Status (an aggregated API or a proxy in front reporting
    its own failure), or an object without ``items``, lists nothing; read as an empty list
    it would be the "nothing to judge" that passes an imported policy and reads as "none
    found" to the model. A list kind holds ``items`` (``null`` for none, as Go encodes an
    empty slice), and each item is an object."""
    items = page.get("items", ...)
    kind = str(page.get("kind", ""))
    if (
        kind == "Status"
        or items is ...
        or not (items is None or isinstance(items, list))
        or not all(isinstance(item, dict) for item in items or [])
    ):
        raise BackendError(
            "unavailable",
            f"the API server of {target} answered with no list of objects (kind "
            f"{kind or 'missing'!r}) when assay tried to {action}; the lookup failed",
        )
    return list(items or [])


def _with_type(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """List items come without apiVersion/kind; add them first, as kubectl shows them."""
    if "apiVersion" in obj and "kind" in obj:
        return obj
    return {"apiVersion": obj.get("apiVersion", api_version), "kind": obj.get("kind", kind), **obj}


def _identity(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


def _event_time(event: dict[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )
