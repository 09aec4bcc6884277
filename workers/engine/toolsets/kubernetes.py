"""The read-only Kubernetes tools the planner can call, over any ``ClusterBackend``.

Each tool is a small class: a name, a description, a pydantic argument model
(the JSON schema the model is shown is generated from it, and the same model
validates what comes back) and ``run``. They are the same for a snapshot and
a live cluster; only the backend differs.

A failed lookup is an answer, not a crash: ``BackendError`` becomes an
``ok=False`` result such as ``not found: Pod 'x' not found in namespace 'y'``,
which the model can reason about (and which never supports a ``true``).

Every text a tool writes about the model's own arguments (a footer repeating the
namespace and selectors, a log header naming the pod, an error quoting a name)
is built as echo (echo.py), so it can never verify a citation: see :func:`_scope`
and the footers below.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.settings import AssaySettings
from workers.engine.toolsets.backend import BackendError, ClusterBackend, ResourceInfo
from workers.engine.toolsets.base import Tool, ToolResult
from workers.engine.toolsets.compaction import render_object
from workers.engine.toolsets.echo import Marked, compose, echo, quoted
from workers.engine.toolsets.explain_text import render_schema
from workers.engine.toolsets.structured import (
    META_KEY,
    FirstObjects,
    object_rendering,
    table_rendering,
)
from workers.engine.toolsets.tables import (
    KIND_COLUMNS,
    Column,
    format_table,
    printer_columns,
    render_table,
)
from workers.engine.toolsets.truncation import cap_marked, cap_text

ALL_NAMESPACES = frozenset({"", "all", "*", "--all-namespaces", "all-namespaces"})
MAX_LOG_LINES = 2000
DEFAULT_LOG_LINES = 200
# Ceiling on what a logs call reads before the tool's own cap keeps the newest part.
LOG_READ_LIMIT_BYTES = 512 * 1024
_CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"
_PROBLEMS_SHOWN = 3
_DESCRIBE_EVENT_COLUMNS = [column for column in KIND_COLUMNS["Event"] if column[0] != "OBJECT"]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GetArgs(_Args):
    kind: str = Field(
        description="Resource kind, plural or short name: Pod, pods, po, deployments.apps, "
        "Certificate, ingress ..."
    )
    name: str | None = Field(default=None, description="One object's name; omit to list all.")
    namespace: str | None = Field(
        default=None, description='Namespace; omit or "all" for every namespace.'
    )
    label_selector: str | None = Field(
        default=None, description="e.g. 'app=web,tier!=db' or 'env in (prod,staging)'."
    )
    field_selector: str | None = Field(
        default=None, description="e.g. 'status.phase!=Running' or 'spec.nodeName=node-1'."
    )


class DescribeArgs(_Args):
    kind: str = Field(description="Resource kind, plural or short name.")
    name: str = Field(description="The object's name.")
    namespace: str | None = Field(
        default=None, description="Its namespace; may be omitted when the name is unique."
    )


class LogsArgs(_Args):
    namespace: str = Field(description="The pod's namespace.")
    pod: str = Field(description="The pod's name.")
    container: str | None = Field(
        default=None, description="Container name; required when the pod has several."
    )
    tail_lines: int = Field(
        default=DEFAULT_LOG_LINES, ge=1, le=MAX_LOG_LINES, description="Newest lines to return."
    )
    previous: bool = Field(
        default=False, description="Logs of the previous (crashed) container instance."
    )
    since_seconds: int | None = Field(
        default=None, ge=1, description="Only lines from the last N seconds."
    )


class EventsArgs(_Args):
    namespace: str | None = Field(
        default=None, description='Namespace; omit or "all" for every namespace.'
    )
    involved_kind: str | None = Field(
        default=None, description="Only events about objects of this kind, e.g. Pod."
    )
    involved_name: str | None = Field(
        default=None, description="Only events about the object with this name."
    )


class ApiResourcesArgs(_Args):
    pass


class ExplainArgs(_Args):
    kind: str = Field(description="Resource kind, plural or short name, e.g. Certificate.")
    field_path: str | None = Field(
        default=None, description="Dotted field path, e.g. spec.dnsNames; omit for the top."
    )


def _namespace(value: str | None) -> str | None:
    if value is None or value.strip().lower() in ALL_NAMESPACES:
        return None
    return value.strip()


def _error_result(exc: BackendError) -> ToolResult:
    """``not found: ...``: the code is the engine's finding, the message about the request."""
    return ToolResult.of(
        False, compose("{}: {}", exc.code.replace("_", " "), exc.marked), error=exc.code
    )


def _problems_note(backend: ClusterBackend, limit: int) -> str:
    """A warning line when the snapshot had files that could not be read or were adjusted.

    Backends may expose ``problems`` (the snapshot backend does); the model
    must know that a listing, or a "not found", may come from an incomplete
    snapshot, and that an object may differ from its file (a namespace that
    a cluster-scoped object cannot have). Kept under a quarter of the output cap.
    """
    problems: list[str] = list(getattr(backend, "problems", None) or ())
    if not problems:
        return ""
    shown = "; ".join(problems[:_PROBLEMS_SHOWN])
    more = (
        f"; and {len(problems) - _PROBLEMS_SHOWN} more" if len(problems) > _PROBLEMS_SHOWN else ""
    )
    note = (
        f"\nwarning: this snapshot has {len(problems)} problem(s) (files that could not be "
        f"read or objects that were adjusted), so results may be incomplete: {shown}{more}"
    )
    room = limit // 4
    return note if len(note) <= room else note[: room - 1] + "…"


class _KubernetesTool:
    """Shared plumbing: the backend, the size cap, and BackendError -> result."""

    name = ""
    description = ""
    args_model: type[BaseModel] = _Args

    def __init__(self, backend: ClusterBackend, settings: AssaySettings) -> None:
        self.backend = backend
        self.limit = settings.tool_output_limit_chars

    def run(self, args: Any) -> ToolResult:
        try:
            return self._run(args)
        except BackendError as exc:
            result = _error_result(exc)
            return ToolResult.of(False, result.marked + self._note(), **result.meta)

    def _note(self) -> str:
        return _problems_note(self.backend, self.limit)

    def _run(self, args: Any) -> ToolResult:
        raise NotImplementedError

    def _finish(
        self,
        text: str | Marked,
        *,
        truncated: bool = False,
        structured: Callable[[], str] | None = None,
        **meta: Any,
    ) -> ToolResult:
        """The result, capped. ``structured`` renders it again with free text withheld
        (see structured.py); only runs that need it (strict checks) call it."""
        if structured is not None:
            render, cap = structured, 4 * self.limit  # what the model is never shown: not lined up
            meta[META_KEY] = lambda: render()[:cap]
        note = self._note()
        capped, cut = cap_marked(
            Marked(text) if isinstance(text, str) else text, self.limit - len(note)
        )
        return ToolResult.of(True, capped + note, truncated=truncated or cut, **meta)

    def _resolve(self, kind: str) -> ResourceInfo:
        return self.backend.resolve(kind)


def _scope(namespace: str | None) -> Marked:
    """`` in namespace prod``: the namespace is the model's argument, so it is echo."""
    return (
        compose(" in namespace {}", echo(namespace)) if namespace else Marked(" in all namespaces")
    )


def _where(resource: ResourceInfo, namespace: str | None) -> Marked:
    return _scope(namespace) if resource.namespaced else Marked()


class GetTool(_KubernetesTool):
    name = "get"
    description = (
        "List objects of a kind as a table (like kubectl get), or read one object as YAML when "
        "name is given. Filter with namespace, label_selector and field_selector."
    )
    args_model = GetArgs

    def _run(self, args: GetArgs) -> ToolResult:
        name = args.name
        try:
            resource = self._resolve(args.kind)
        except BackendError:
            if name is not None or "/" not in args.kind:
                raise
            kind, name = args.kind.split("/", 1)  # kubectl's "deployment/api" form
            resource = self._resolve(kind)
        namespace = _namespace(args.namespace)
        if name:
            obj = self.backend.get(resource, name, namespace)
            text = render_object(obj)
            if args.label_selector or args.field_selector:
                text += "(selectors are ignored when a name is given)\n"
            return self._finish(text, kind=resource.kind, structured=lambda: object_rendering(obj))
        objects = FirstObjects(
            self.backend.list_objects(
                resource, namespace, args.label_selector, args.field_selector
            ),
            keep=max(1, self.limit // 10),  # a shown row is longer than 10 characters
        )
        filters = Marked()
        for label, value in (
            ("label_selector", args.label_selector),
            ("field_selector", args.field_selector),
        ):
            if value:
                filters += compose(" matching {} {}", label, quoted(value))

        def footer(total: int) -> Marked:
            """The closing line: counts are the engine's, the scope and filters the model's."""
            where = _where(resource, namespace)
            if total == 0:
                return compose("No {} found{}{}.", resource.plural, where, filters)
            plural = resource.kind if total == 1 else resource.plural
            counted = compose("{} {}{}{}.", str(total), plural, where, filters)
            if resource.kind == "Event":  # event names are hashes; filter by object instead
                return counted + " Narrow with events involved_kind=KIND involved_name=NAME"
            ns_hint = Marked()
            if resource.namespaced:
                ns_hint = compose(" namespace={}", echo(namespace) if namespace else "NAMESPACE")
            return compose("{} Details: get kind={} name=NAME{}", counted, resource.kind, ns_hint)

        columns = self._columns(resource)
        with_namespace = resource.namespaced and namespace is None
        table = render_table(
            objects,
            resource.kind,
            limit_chars=self.limit - len(self._note()),
            with_namespace=with_namespace,
            columns=columns,
        )
        shown = objects.kept[: table.shown]

        def structured() -> str:
            # The footer's echo is in the rendering too; the engine withholds it from the
            # structured view by its spans, as from the output (workers/engine/evidence.py).
            return table_rendering(
                shown,
                resource.kind,
                with_namespace=with_namespace,
                columns=columns,
                footer=lambda _: footer(table.total).text,
            )

        return self._finish(
            _with_footer(table.text, footer(table.total)),
            truncated=table.truncated,
            kind=resource.kind,
            rows=table.shown,
            total=table.total,
            structured=structured,
        )

    def _columns(self, resource: ResourceInfo) -> list[Column] | None:
        """Built-in kinds have fixed columns; custom ones use their CRD's printer columns."""
        if resource.kind in KIND_COLUMNS or not resource.group:
            return None
        try:
            crd_resource = self.backend.resolve(_CRD_RESOURCE)
            crd = self.backend.get(crd_resource, f"{resource.plural}.{resource.group}", None)
        except BackendError:
            return None
        return printer_columns(crd, resource.version) or None


def _with_footer(table: str, footer: Marked) -> Marked:
    """The table's lines, then its footer line (as ``render_table(footer=...)`` joins them)."""
    return (table + "\n" + footer) if table else footer


class DescribeTool(_KubernetesTool):
    name = "describe"
    description = (
        "One object in full (compact YAML) followed by the events about it, like kubectl describe."
    )
    args_model = DescribeArgs

    def _run(self, args: DescribeArgs) -> ToolResult:
        resource = self._resolve(args.kind)
        obj = self.backend.get(resource, args.name, _namespace(args.namespace))
        namespace = (obj.get("metadata") or {}).get("namespace")
        events = self.backend.events(namespace, resource.kind, args.name)
        events_text = "Events: <none>"
        events_truncated = False
        shown_events: list[dict[str, Any]] = []
        if events:
            table = render_table(
                events,
                "Event",
                limit_chars=max(self.limit // 3, 500),
                with_namespace=False,
                columns=_DESCRIBE_EVENT_COLUMNS,  # every row is about this object
            )
            events_text, events_truncated = "Events:\n" + table.text, table.truncated
            shown_events = events[: table.shown]
        budget = self.limit - len(events_text) - len(self._note()) - 1
        body, cut = cap_text(render_object(obj), max(budget, 200))

        def structured() -> str:
            events_part = "Events: <none>"
            if shown_events:
                events_part = "Events:\n" + table_rendering(
                    shown_events, "Event", with_namespace=False, columns=_DESCRIBE_EVENT_COLUMNS
                )
            return f"{object_rendering(obj).rstrip()}\n{events_part}"

        return self._finish(
            f"{body.rstrip()}\n{events_text}",
            truncated=cut or events_truncated,
            kind=resource.kind,
            events=len(events),
            structured=structured,
        )


class LogsTool(_KubernetesTool):
    name = "logs"
    description = (
        "The newest lines of a container's log (tail_lines, default 200); previous=true for the "
        "instance that crashed before the current one."
    )
    args_model = LogsArgs

    def _run(self, args: LogsArgs) -> ToolResult:
        text = self.backend.logs(
            args.namespace,
            args.pod,
            container=args.container,
            tail_lines=args.tail_lines,
            previous=args.previous,
            since_seconds=args.since_seconds,
            limit_bytes=LOG_READ_LIMIT_BYTES,
        )
        which = " (previous instance)" if args.previous else ""
        container = compose(" container {}", echo(args.container)) if args.container else ""
        header = compose(  # names the pod the model asked for: echo
            "logs of pod {}/{}{}{}:\n", echo(args.namespace), echo(args.pod), container, which
        )
        body, truncated = cap_text(
            text or "(no log lines)\n", self.limit - len(header), keep="tail"
        )
        return ToolResult.of(True, header + body, truncated=truncated)


class EventsTool(_KubernetesTool):
    name = "events"
    description = (
        "Events (oldest first) in a namespace or everywhere, optionally only those about one "
        "kind and/or one object name."
    )
    args_model = EventsArgs

    def _run(self, args: EventsArgs) -> ToolResult:
        involved_kind = args.involved_kind
        # The kind as the engine resolved it is the cluster's word; as given, the model's.
        kind_said: str | Marked = echo(involved_kind) if involved_kind else ""
        if involved_kind:
            # A kind the cluster does not serve may still appear in events: keep it as given.
            with contextlib.suppress(BackendError):
                involved_kind = kind_said = self._resolve(involved_kind).kind
        namespace = _namespace(args.namespace)
        events = self.backend.events(namespace, involved_kind, args.involved_name)
        about = [part for part in (kind_said, echo(args.involved_name or "")) if part]
        suffix = compose(" about {}", about[0]) if about else Marked()
        if len(about) == 2:
            suffix += compose(" {}", about[1])
        where = _scope(namespace)
        table = render_table(
            events,
            "Event",
            limit_chars=self.limit - len(self._note()),
            with_namespace=namespace is None,
        )
        total = table.total
        if total == 0:
            footer = compose("No events found{}{}.", where, suffix)
        else:
            footer = compose(
                "{} event{}{}{}.", str(total), "s" if total != 1 else "", where, suffix
            )
        return self._finish(
            _with_footer(table.text, footer),
            truncated=table.truncated,
            rows=table.shown,
            total=table.total,
        )


class ApiResourcesTool(_KubernetesTool):
    name = "api_resources"
    description = "The resource kinds this cluster serves, with short names and API groups."
    args_model = ApiResourcesArgs

    def _run(self, args: ApiResourcesArgs) -> ToolResult:
        resources = sorted(self.backend.api_resources(), key=lambda r: (r.group, r.kind))
        rows = [
            [
                r.plural,
                ",".join(r.short_names),
                r.api_version,
                "true" if r.namespaced else "false",
                r.kind,
            ]
            for r in resources
        ]
        headers = ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
        text = "\n".join(format_table(headers, rows, keep_empty=set(headers)))
        return self._finish(f"{text}\n{len(rows)} resource types.", total=len(rows))


class ExplainTool(_KubernetesTool):
    name = "explain"
    description = (
        "The documented fields of a kind (its OpenAPI schema), optionally at a field path such "
        "as spec.dnsNames, like kubectl explain."
    )
    args_model = ExplainArgs

    def _run(self, args: ExplainArgs) -> ToolResult:
        resource = self._resolve(args.kind)
        path = _strip_kind_prefix(args.field_path, resource)
        schema = self.backend.explain(resource, path)
        return self._finish(render_schema(resource.kind, resource.api_version, path, schema))


def _strip_kind_prefix(field_path: str | None, resource: ResourceInfo) -> str | None:
    """``certificate.spec.dnsNames`` (kubectl's form) -> ``spec.dnsNames``."""
    if not field_path:
        return None
    head, _, rest = field_path.strip(".").partition(".")
    names = {resource.kind.lower(), resource.plural.lower(), *map(str.lower, resource.short_names)}
    return (rest or None) if head.lower() in names else field_path.strip(".")


ToolFactory = Callable[[ClusterBackend, AssaySettings], _KubernetesTool]
TOOL_CLASSES: Mapping[str, ToolFactory] = {
    cls.name: cls
    for cls in (GetTool, DescribeTool, LogsTool, EventsTool, ApiResourcesTool, ExplainTool)
}


def kubernetes_tools(backend: ClusterBackend, settings: AssaySettings) -> list[Tool]:
    """The six read-only Kubernetes tools over one backend."""
    return [factory(backend, settings) for factory in TOOL_CLASSES.values()]
