"""Optional OpenTelemetry tracing: one span per evaluation, child spans per model and tool call.

Tracing is off unless ``settings.otel_exporter`` is ``console`` or ``otlp`` and the
``otel`` extra (opentelemetry-sdk, plus opentelemetry-exporter-otlp-proto-http
for ``otlp``) is installed. When it is off, :func:`span` hands out a do-nothing
span without importing opentelemetry, so an untraced worker pays nothing.

Spans carry ids and names only (run id, check id, model, tool name), never
prompts, tool output or arguments, so nothing a Secret-bearing lookup returned
can leave through a trace.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import structlog

if TYPE_CHECKING:
    from schemas.request import EvaluationRequest
    from schemas.settings import AssaySettings

TRACER_NAME = "assay"
_log = structlog.get_logger(__name__)
_lock = threading.Lock()
_tracer: Any = None  # an opentelemetry Tracer once configured; None = tracing off
_provider: Any = None  # its TracerProvider, kept to flush spans at shutdown


class SpanLike(Protocol):
    def set_attribute(self, key: str, value: Any) -> None: ...


class _NoopSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        return None


_NOOP = _NoopSpan()


def _build_exporter(settings: AssaySettings) -> Any:
    if settings.otel_exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stdout)  # the stdout of now, not of import time
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if settings.otel_endpoint:
        return OTLPSpanExporter(endpoint=settings.otel_endpoint)
    return OTLPSpanExporter()


def configure_tracing(settings: AssaySettings, exporter: Any = None) -> bool:
    """Install a tracer provider for this process; returns whether tracing is on.

    ``exporter`` overrides the one the settings name (tests pass an in-memory one).
    Safe to call more than once: the first successful call wins.
    """
    global _tracer, _provider
    if settings.otel_exporter == "none" and exporter is None:
        return _tracer is not None
    with _lock:
        if _tracer is not None:
            return True
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

            chosen = exporter if exporter is not None else _build_exporter(settings)
        except ImportError as exc:
            _log.warning(
                "tracing_unavailable",
                exporter=settings.otel_exporter,
                error=str(exc),
                hint="install the otel extra: pip install 'assay[otel]'",
            )
            return False
        provider = TracerProvider(resource=Resource.create({"service.name": "assay"}))
        # Console and test exporters want spans at once; a network exporter wants batches.
        simple = exporter is not None or settings.otel_exporter == "console"
        provider.add_span_processor(
            SimpleSpanProcessor(chosen) if simple else BatchSpanProcessor(chosen)
        )
        _provider = provider
        _tracer = provider.get_tracer(TRACER_NAME)
        return True


def flush_tracing(timeout_seconds: float = 5.0) -> bool:
    """Export the spans still buffered (call before a process exits); True when done."""
    if _provider is None:
        return True
    return bool(_provider.force_flush(int(timeout_seconds * 1000)))


def tracing_enabled() -> bool:
    return _tracer is not None


@contextmanager
def span(name: str, **attributes: str | int | float | bool | None) -> Iterator[SpanLike]:
    """A span named ``name`` under the current one; a no-op when tracing is off."""
    tracer = _tracer
    if tracer is None:
        yield _NOOP
        return
    with tracer.start_as_current_span(name) as current:
        for key, value in attributes.items():
            if value is not None:
                current.set_attribute(f"assay.{key}", value)
        yield current


def evaluation_span(request: EvaluationRequest) -> Any:
    """The root span of one evaluation; set ``assay.verdict`` on it when the run ends."""
    return span(
        "assay.evaluation",
        run_id=request.run_id,
        check_id=request.check_id,
        batch_id=request.batch_id,
        kind=request.kind,
        profile=request.profile,
        target=request.target.name,
    )


def model_call_span(model: str, iteration: int | None = None) -> Any:
    """A span around one model call (retries included)."""
    return span("assay.model_call", model=model, iteration=iteration)


def tool_call_span(tool: str, step: int | None = None) -> Any:
    """A span around one read-only tool call; arguments are not recorded."""
    return span("assay.tool_call", tool=tool, step=step)
