"""Tables: a stream of objects as kubectl-like rows, within a size cap.

``get`` without a name answers with a table, not with the objects: a table is
a summary the model reads at a glance, and a 20,000-pod listing is streamed
row by row until the cap and then only counted, so it never sits in memory or
in a prompt. Full objects (``get`` with a name, ``describe``) go through
:mod:`workers.engine.toolsets.compaction` instead.

* :data:`KIND_COLUMNS` holds the columns of the built-in kinds, as kubectl
  computes them (``pod_status`` is kubectl's STATUS column);
  :func:`printer_columns` reads a CRD's ``additionalPrinterColumns``.
* :func:`render_table` renders rows until the cap, then counts the rest and
  says so; :func:`format_table` aligns any rows (``api_resources`` uses it).

Cells are deterministic: no ages relative to "now".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Cell = Callable[[Mapping[str, Any]], Any]
Column = tuple[str, Cell]
_CELL_WIDTH = 100
_WIDE_CELLS = {"MESSAGE": 160, "IMAGES": 240}
_SEPARATOR = "  "


def _get(obj: Mapping[str, Any], *path: str | int) -> Any:
    current: Any = obj
    for part in path:
        if isinstance(part, int):
            current = current[part] if isinstance(current, list) and len(current) > part else None
        elif isinstance(current, Mapping):
            current = current.get(part)
        else:
            return None
        if current is None:
            return None
    return current


def _num(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _containers(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = _get(obj, "spec", "template", "spec") or _get(
        obj, "spec", "jobTemplate", "spec", "template", "spec"
    )
    return list((spec or obj.get("spec") or {}).get("containers") or [])


def _images(obj: Mapping[str, Any]) -> str:
    return ",".join(str(c.get("image", "")) for c in _containers(obj))


def _pod_ready(pod: Mapping[str, Any]) -> str:
    statuses = _get(pod, "status", "containerStatuses") or []
    total = len(_get(pod, "spec", "containers") or []) or len(statuses)
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def pod_status(pod: Mapping[str, Any]) -> str:
    """The STATUS column as kubectl computes it (CrashLoopBackOff, Init:..., Terminating)."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or status.get("phase") or "Unknown")
    for init in status.get("initContainerStatuses") or []:
        state = init.get("state") or {}
        if (state.get("terminated") or {}).get("exitCode") == 0:
            continue
        waiting = (state.get("waiting") or {}).get("reason")
        if waiting and waiting != "PodInitializing":
            return f"Init:{waiting}"
        if "terminated" in state or "waiting" in state or "running" in state:
            return "Init:" + str((state.get("terminated") or {}).get("reason") or "Running")
    for container in reversed(status.get("containerStatuses") or []):
        state = container.get("state") or {}
        if waiting := (state.get("waiting") or {}).get("reason"):
            reason = str(waiting)
        elif terminated := state.get("terminated"):
            reason = str(terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _restarts(pod: Mapping[str, Any]) -> int:
    return sum(_num(s.get("restartCount")) for s in _get(pod, "status", "containerStatuses") or [])


def _condition(obj: Mapping[str, Any], condition: str) -> str:
    for item in _get(obj, "status", "conditions") or []:
        if isinstance(item, Mapping) and item.get("type") == condition:
            return str(item.get("status", ""))
    return ""


def _generic_status(obj: Mapping[str, Any]) -> str:
    if phase := _get(obj, "status", "phase"):
        return str(phase)
    ready = _condition(obj, "Ready")
    return f"Ready={ready}" if ready else ""


def _ports(service: Mapping[str, Any]) -> str:
    ports = []
    for port in _get(service, "spec", "ports") or []:
        text = str(port.get("port", ""))
        if node_port := port.get("nodePort"):
            text += f":{node_port}"
        ports.append(f"{text}/{port.get('protocol', 'TCP')}")
    return ",".join(ports)


def _external_ip(service: Mapping[str, Any]) -> str:
    ingress = _get(service, "status", "loadBalancer", "ingress") or []
    found = [str(i.get("ip") or i.get("hostname") or "") for i in ingress]
    found += [str(ip) for ip in _get(service, "spec", "externalIPs") or []]
    return ",".join(f for f in found if f) or (
        "<pending>" if _get(service, "spec", "type") == "LoadBalancer" else "<none>"
    )


def _node_roles(node: Mapping[str, Any]) -> str:
    prefix = "node-role.kubernetes.io/"
    labels = _get(node, "metadata", "labels") or {}
    return ",".join(sorted(k[len(prefix) :] for k in labels if k.startswith(prefix))) or "<none>"


def _node_status(node: Mapping[str, Any]) -> str:
    ready = _condition(node, "Ready")
    text = "Ready" if ready == "True" else "NotReady" if ready else "Unknown"
    if _get(node, "spec", "unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _node_ip(node: Mapping[str, Any]) -> str:
    for address in _get(node, "status", "addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""


def _event_object(event: Mapping[str, Any]) -> str:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    return f"{involved.get('kind', '')}/{involved.get('name', '')}"


def _event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or _get(event, "series", "lastObservedTime")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or ""
    )


def _ingress_hosts(ingress: Mapping[str, Any]) -> str:
    return ",".join(str(r.get("host", "*")) for r in _get(ingress, "spec", "rules") or []) or "*"


def _ingress_address(ingress: Mapping[str, Any]) -> str:
    entries = _get(ingress, "status", "loadBalancer", "ingress") or []
    return ",".join(str(e.get("ip") or e.get("hostname") or "") for e in entries)


def _ingress_tls(ingress: Mapping[str, Any]) -> str:
    return ",".join(str(t.get("secretName", "")) for t in _get(ingress, "spec", "tls") or [])


def _fraction(
    obj: Mapping[str, Any], numerator: tuple[str, ...], denominator: tuple[str, ...]
) -> str:
    return f"{_num(_get(obj, *numerator))}/{_num(_get(obj, *denominator))}"


KIND_COLUMNS: dict[str, list[Column]] = {
    "Pod": [
        ("READY", _pod_ready),
        ("STATUS", pod_status),
        ("RESTARTS", _restarts),
        ("NODE", lambda o: _get(o, "spec", "nodeName")),
        ("IMAGES", _images),
    ],
    "Deployment": [
        ("READY", lambda o: _fraction(o, ("status", "readyReplicas"), ("spec", "replicas"))),
        ("UP-TO-DATE", lambda o: _num(_get(o, "status", "updatedReplicas"))),
        ("AVAILABLE", lambda o: _num(_get(o, "status", "availableReplicas"))),
        ("IMAGES", _images),
    ],
    "StatefulSet": [
        ("READY", lambda o: _fraction(o, ("status", "readyReplicas"), ("spec", "replicas"))),
        ("IMAGES", _images),
    ],
    "DaemonSet": [
        ("DESIRED", lambda o: _num(_get(o, "status", "desiredNumberScheduled"))),
        ("CURRENT", lambda o: _num(_get(o, "status", "currentNumberScheduled"))),
        ("READY", lambda o: _num(_get(o, "status", "numberReady"))),
        ("UP-TO-DATE", lambda o: _num(_get(o, "status", "updatedNumberScheduled"))),
        ("AVAILABLE", lambda o: _num(_get(o, "status", "numberAvailable"))),
        ("IMAGES", _images),
    ],
    "ReplicaSet": [
        ("DESIRED", lambda o: _num(_get(o, "spec", "replicas"))),
        ("CURRENT", lambda o: _num(_get(o, "status", "replicas"))),
        ("READY", lambda o: _num(_get(o, "status", "readyReplicas"))),
        ("IMAGES", _images),
    ],
    "Job": [
        ("COMPLETIONS", lambda o: _fraction(o, ("status", "succeeded"), ("spec", "completions"))),
        ("FAILED", lambda o: _num(_get(o, "status", "failed"))),
    ],
    "CronJob": [
        ("SCHEDULE", lambda o: _get(o, "spec", "schedule")),
        ("SUSPEND", lambda o: str(bool(_get(o, "spec", "suspend")))),
        ("ACTIVE", lambda o: len(_get(o, "status", "active") or [])),
        ("LAST-SCHEDULE", lambda o: _get(o, "status", "lastScheduleTime")),
    ],
    "Service": [
        ("TYPE", lambda o: _get(o, "spec", "type") or "ClusterIP"),
        ("CLUSTER-IP", lambda o: _get(o, "spec", "clusterIP")),
        ("EXTERNAL-IP", _external_ip),
        ("PORTS", _ports),
    ],
    "Ingress": [
        ("CLASS", lambda o: _get(o, "spec", "ingressClassName")),
        ("HOSTS", _ingress_hosts),
        ("ADDRESS", _ingress_address),
        ("TLS-SECRETS", _ingress_tls),
    ],
    "IngressClass": [("CONTROLLER", lambda o: _get(o, "spec", "controller"))],
    "Node": [
        ("STATUS", _node_status),
        ("ROLES", _node_roles),
        ("VERSION", lambda o: _get(o, "status", "nodeInfo", "kubeletVersion")),
        ("INTERNAL-IP", _node_ip),
    ],
    "Namespace": [("STATUS", lambda o: _get(o, "status", "phase"))],
    "ConfigMap": [("DATA", lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}))],
    "Secret": [
        ("TYPE", lambda o: o.get("type")),
        ("DATA", lambda o: len(o.get("data") or {}) + len(o.get("stringData") or {})),
    ],
    "PersistentVolumeClaim": [
        ("STATUS", lambda o: _get(o, "status", "phase")),
        ("VOLUME", lambda o: _get(o, "spec", "volumeName")),
        ("CAPACITY", lambda o: _get(o, "status", "capacity", "storage")),
        ("STORAGECLASS", lambda o: _get(o, "spec", "storageClassName")),
    ],
    "PersistentVolume": [
        ("CAPACITY", lambda o: _get(o, "spec", "capacity", "storage")),
        ("STATUS", lambda o: _get(o, "status", "phase")),
        (
            "CLAIM",
            lambda o: "/".join(
                filter(
                    None,
                    (_get(o, "spec", "claimRef", "namespace"), _get(o, "spec", "claimRef", "name")),
                )
            ),
        ),
        ("STORAGECLASS", lambda o: _get(o, "spec", "storageClassName")),
    ],
    "StorageClass": [("PROVISIONER", lambda o: o.get("provisioner"))],
    "HorizontalPodAutoscaler": [
        (
            "REFERENCE",
            lambda o: "/".join(
                str(_get(o, "spec", "scaleTargetRef", part)) for part in ("kind", "name")
            ),
        ),
        ("MIN", lambda o: _get(o, "spec", "minReplicas")),
        ("MAX", lambda o: _get(o, "spec", "maxReplicas")),
        ("REPLICAS", lambda o: _num(_get(o, "status", "currentReplicas"))),
    ],
    "PodDisruptionBudget": [
        ("MIN-AVAILABLE", lambda o: _get(o, "spec", "minAvailable")),
        ("MAX-UNAVAILABLE", lambda o: _get(o, "spec", "maxUnavailable")),
        ("ALLOWED-DISRUPTIONS", lambda o: _num(_get(o, "status", "disruptionsAllowed"))),
    ],
    "CustomResourceDefinition": [
        ("KIND", lambda o: _get(o, "spec", "names", "kind")),
        ("SCOPE", lambda o: _get(o, "spec", "scope")),
        (
            "VERSIONS",
            lambda o: ",".join(str(v.get("name")) for v in _get(o, "spec", "versions") or []),
        ),
    ],
    "Event": [
        ("LAST-SEEN", _event_time),
        ("TYPE", lambda o: o.get("type")),
        ("REASON", lambda o: o.get("reason")),
        ("OBJECT", _event_object),
        ("COUNT", lambda o: o.get("count") or _get(o, "series", "count") or 1),
        ("MESSAGE", lambda o: o.get("message") or o.get("note")),
    ],
}
_GENERIC_COLUMNS: list[Column] = [("STATUS", _generic_status)]
# Kinds whose names are generated hashes: the OBJECT column identifies them better.
_UNNAMED_KINDS = frozenset({"Event"})

# A small JSONPath subset, enough for CRD additionalPrinterColumns:
# .a.b, [0], [*], [?(@.type=="Ready")]
_JSONPATH_TOKEN = re.compile(
    r"\.(?P<field>[A-Za-z0-9_\-]+)|\[(?P<index>\d+|\*)\]"
    r"|\[\?\(@\.(?P<fkey>[A-Za-z0-9_\-]+)\s*==\s*[\"'](?P<fvalue>[^\"']*)[\"']\)\]"
)


def jsonpath_values(obj: Any, path: str) -> list[Any]:
    """Evaluate a printer-column JSONPath; unknown syntax yields no values."""
    current = [obj]
    position = 0
    while position < len(path):
        match = _JSONPATH_TOKEN.match(path, position)
        if not match:
            return []
        position = match.end()
        following: list[Any] = []
        for item in current:
            if match["field"] is not None and isinstance(item, Mapping):
                if match["field"] in item:
                    following.append(item[match["field"]])
            elif match["index"] is not None and isinstance(item, list):
                if match["index"] == "*":
                    following.extend(item)
                elif int(match["index"]) < len(item):
                    following.append(item[int(match["index"])])
            elif match["fkey"] is not None and isinstance(item, list):
                following.extend(
                    e
                    for e in item
                    if isinstance(e, Mapping) and str(e.get(match["fkey"])) == match["fvalue"]
                )
        current = following
    return current


def printer_columns(crd: Mapping[str, Any], version: str | None = None) -> list[Column]:
    """Columns a CRD declares for ``kubectl get`` (minus ages, which depend on "now")."""
    versions = _get(crd, "spec", "versions") or []
    chosen = next((v for v in versions if v.get("name") == version), None) or next(
        (v for v in versions if v.get("storage")), versions[0] if versions else {}
    )
    declared = (
        chosen.get("additionalPrinterColumns")
        or _get(crd, "spec", "additionalPrinterColumns")
        or []
    )
    columns: list[Column] = []
    for column in declared:
        path = column.get("jsonPath") or column.get("JSONPath")
        if not path or column.get("type") == "date" or _num(column.get("priority")) > 0:
            continue

        def cell(obj: Mapping[str, Any], path: str = str(path)) -> str:
            return ",".join(str(v) for v in jsonpath_values(obj, path) if v is not None)

        columns.append((str(column.get("name", path)).upper().replace(" ", "-"), cell))
    return columns


def _clean_cell(value: Any, width: int) -> str:
    if value is None:
        return ""
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def format_table(
    headers: list[str], rows: list[list[str]], *, keep_empty: set[str] | None = None
) -> list[str]:
    """Aligned lines, kubectl style; columns empty in every row are left out."""
    keep = [
        i
        for i, header in enumerate(headers)
        if header in (keep_empty or set()) or any(row[i] for row in rows)
    ]
    widths = {i: max(len(row[i]) for row in [headers, *rows]) for i in keep}
    return [
        _SEPARATOR.join(row[i].ljust(widths[i]) for i in keep).rstrip() for row in [headers, *rows]
    ]


@dataclass(frozen=True)
class RenderedTable:
    text: str
    shown: int
    total: int

    @property
    def truncated(self) -> bool:
        return self.shown < self.total


def render_table(
    objects: Iterable[Mapping[str, Any]],
    kind: str,
    *,
    limit_chars: int,
    with_namespace: bool,
    columns: list[Column] | None = None,
    footer: Callable[[int], str] | None = None,
) -> RenderedTable:
    """A kubectl-like table of ``objects``, streamed: rows until the cap, then counting only.

    ``footer(total)`` supplies the closing line (count and drill-down hint); an
    explicit truncation marker is added when rows were left out.
    """
    chosen = columns if columns is not None else KIND_COLUMNS.get(kind, _GENERIC_COLUMNS)
    all_columns: list[Column] = []
    if kind not in _UNNAMED_KINDS:
        all_columns.append(("NAME", lambda o: _get(o, "metadata", "name")))
    if with_namespace:
        all_columns.insert(0, ("NAMESPACE", lambda o: _get(o, "metadata", "namespace")))
    all_columns.extend(chosen)
    headers = [header for header, _ in all_columns]
    widths = [len(header) for header in headers]
    rows: list[list[str]] = []
    total = 0
    budget = limit_chars - 200  # room for the footer and the truncation marker
    full = False
    for obj in objects:
        total += 1
        if full:
            continue
        row = []
        for header, cell in all_columns:
            try:
                value = cell(obj)
            except Exception:  # a malformed object gets "?" rather than hiding the table
                value = "?"
            row.append(_clean_cell(value, _WIDE_CELLS.get(header, _CELL_WIDTH)))
        new_widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
        line_width = sum(new_widths) + len(_SEPARATOR) * (len(new_widths) - 1) + 1
        if rows and (len(rows) + 2) * line_width > budget:
            full = True
            continue
        rows.append(row)
        widths = new_widths

    lines = format_table(headers, rows, keep_empty={"NAME", "NAMESPACE"}) if rows else []
    if len(rows) < total:
        lines.append(
            f"... truncated, {total - len(rows)} more rows not shown ({total} in all); "
            "narrow with namespace, label_selector or field_selector"
        )
    if footer is not None:
        lines.append(footer(total))
    return RenderedTable("\n".join(lines), len(rows), total)
