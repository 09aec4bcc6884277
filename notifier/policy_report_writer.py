"""The policyreport sink's writer: the one place assay writes to a Kubernetes API server.

Evaluations read clusters through ``workers.engine.toolsets.live_transport``, which has no
write path at all; this module is apart from it on purpose. It is built from the
sink's own settings (``PolicyReportSink``: its kubeconfig, or the notifier pod's own
service account for the target ``in-cluster``), never from ``ASSAY_KUBECONFIG``, so it
holds none of the readers' credentials and they hold none of its. It writes only the
report kinds of ``notifier.policy_reports.RESOURCES``: a document of any other kind is
refused before a request is made, and the RBAC of deploy/kubernetes/components/
policy-reports grants those resources and nothing else.

A report is written with server-side apply (one PATCH creates or updates it, owned by
field manager ``assay``), never forced: a report another engine wrote under the same name
(its fields owned by another field manager) answers 409 Conflict and is left as it is. A
report is removed with DELETE when it no longer has results, on the condition that it is
still the object the apply made (its uid), so a report someone else has since made under
that name is never deleted.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from notifier.policy_reports import API_VERSIONS, RESOURCES, ReportApi
from notifier.sinks import DeliveryError

if TYPE_CHECKING:
    from schemas.notify import PolicyReportSink

FIELD_MANAGER = "assay"
APPLY_PATCH = "application/apply-patch+yaml"
IN_CLUSTER = "in-cluster"
TIMEOUT_SECONDS = 10.0


class ReportWriter:
    """Server-side applies and deletes report objects in the clusters of a sink's targets."""

    def __init__(self, config: PolicyReportSink) -> None:
        self.config = config
        self.api: ReportApi = config.api
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def context_for(self, target: str) -> str | None:
        """The writer's context for ``target``; None when the sink has no cluster for it."""
        mapped = self.config.contexts.get(target)
        if mapped is not None:
            return mapped
        if target.startswith("snapshot:"):
            return None  # a folder of objects, no cluster to write to
        if self.config.kubeconfig is None:
            return IN_CLUSTER if target == IN_CLUSTER else None
        return target

    def writes_to(self, target: str) -> bool:
        return self.context_for(target) is not None

    def _objects_api(self, target: str) -> Any:
        context = self.context_for(target)
        if context is None:
            raise DeliveryError(f"no cluster to write {target!r}'s reports to", retryable=False)
        with self._lock:
            found = self._clients.get(context)
            if found is not None:
                return found
            from kubernetes.client import ApiClient, Configuration, CustomObjectsApi
            from kubernetes.config import ConfigException, load_incluster_config, load_kube_config

            configuration = Configuration()
            try:
                if context == IN_CLUSTER and self.config.kubeconfig is None:
                    load_incluster_config(client_configuration=configuration)
                else:
                    load_kube_config(
                        config_file=self.config.kubeconfig,
                        context=context,
                        client_configuration=configuration,
                        persist_config=False,
                    )
            except (ConfigException, OSError, ValueError) as exc:
                raise DeliveryError(
                    f"cannot load the report writer's credentials for {target!r}: {exc}",
                    retryable=False,
                ) from None
            configuration.retries = 0  # the sink retries, with its backoff
            api = CustomObjectsApi(ApiClient(configuration))
            self._clients[context] = api
            return api

    def _where(self, document: dict[str, Any]) -> tuple[str, str, str, str | None]:
        """(group, version, plural, namespace) of a report document; other kinds refused."""
        api_version, kind, cluster_kind = API_VERSIONS[self.api]
        group, namespaced_plural, cluster_plural = RESOURCES[self.api]
        if document.get("apiVersion") != api_version or document.get("kind") not in (
            kind,
            cluster_kind,
        ):
            raise DeliveryError(
                f"the report writer writes {kind} and {cluster_kind} only, not "
                f"{document.get('apiVersion')}/{document.get('kind')}",
                retryable=False,
            )
        version = api_version.split("/", 1)[1]
        namespace = document.get("metadata", {}).get("namespace")
        if document["kind"] == kind:
            if not namespace:
                raise DeliveryError(f"a {kind} needs a namespace", retryable=False)
            return group, version, namespaced_plural, namespace
        return group, version, cluster_plural, None

    def apply(self, target: str, document: dict[str, Any]) -> str | None:
        """Create or update ``document`` in ``target``'s cluster (server-side apply, not
        forced); returns the object's uid. A report another field manager owns: a
        ``DeliveryError`` with status 409, not retryable."""
        group, version, plural, namespace = self._where(document)
        api = self._objects_api(target)
        name = document["metadata"]["name"]
        common = {
            "body": document,
            "field_manager": FIELD_MANAGER,
            "force": False,
            "_content_type": APPLY_PATCH,
            "_request_timeout": TIMEOUT_SECONDS,
        }
        answer = self._call(
            target,
            lambda: (
                api.patch_namespaced_custom_object(
                    group, version, namespace, plural, name, **common
                )
                if namespace is not None
                else api.patch_cluster_custom_object(group, version, plural, name, **common)
            ),
        )
        metadata = answer.get("metadata") if isinstance(answer, dict) else None
        uid = metadata.get("uid") if isinstance(metadata, dict) else None
        return str(uid) if uid else None

    def delete(self, target: str, namespace: str | None, name: str, uid: str | None) -> None:
        """Remove a report this sink wrote (only while it is the object with ``uid``, when
        known); one already gone is fine."""
        api_version, kind, cluster_kind = API_VERSIONS[self.api]
        document = {
            "apiVersion": api_version,
            "kind": kind if namespace else cluster_kind,
            "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
        }
        group, version, plural, _ = self._where(document)
        api = self._objects_api(target)
        options: dict[str, Any] = {"_request_timeout": TIMEOUT_SECONDS}
        if uid is not None:
            options["body"] = {"preconditions": {"uid": uid}}
        self._call(
            target,
            lambda: (
                api.delete_namespaced_custom_object(
                    group, version, namespace, plural, name, **options
                )
                if namespace
                else api.delete_cluster_custom_object(group, version, plural, name, **options)
            ),
            missing_ok=True,
        )

    @staticmethod
    def _call(target: str, request: Any, missing_ok: bool = False) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return request()
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            if exc.status == 409:
                raise DeliveryError(
                    f"the API server of {target!r} answered 409 Conflict: the report is "
                    "another writer's (another field manager owns it, or it was made anew "
                    "under that name), and assay writes only its own",
                    retryable=False,
                    status=409,
                ) from None
            retryable = exc.status is None or exc.status == 429 or exc.status >= 500
            raise DeliveryError(
                f"the API server of {target!r} answered {exc.status} {exc.reason}",
                retryable=retryable,
                status=exc.status,
            ) from None
        except (HTTPError, OSError) as exc:
            raise DeliveryError(
                f"the API server of {target!r} cannot be reached ({type(exc).__name__})",
                retryable=True,
            ) from None
