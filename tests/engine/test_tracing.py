"""Optional OpenTelemetry tracing: off by default at no cost, nested spans when configured,
and real OTLP/HTTP export to a collector endpoint on this machine."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from schemas.request import EvaluationRequest, SnapshotTarget
from schemas.settings import AssaySettings
from workers.engine import tracing


@pytest.fixture(autouse=True)
def fresh_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test configures tracing from scratch (the module keeps one tracer per process)."""
    monkeypatch.setattr(tracing, "_tracer", None)
    monkeypatch.setattr(tracing, "_provider", None)


def _request() -> EvaluationRequest:
    return EvaluationRequest(
        text="every pod is Ready", target=SnapshotTarget(path="examples/snapshots/prod-eu")
    )


def _evaluate_with_spans(request: EvaluationRequest) -> None:
    """What the engine does: one evaluation span, a model call and a tool call inside it."""
    with tracing.evaluation_span(request) as root:
        with tracing.model_call_span("openai/scripted", iteration=0):
            pass
        with tracing.tool_call_span("get", step=1):
            pass
        root.set_attribute("assay.verdict", "true")


def test_tracing_is_off_by_default_and_spans_do_nothing() -> None:
    assert tracing.configure_tracing(AssaySettings()) is False
    assert not tracing.tracing_enabled()
    _evaluate_with_spans(_request())  # no error, nothing recorded anywhere


def test_configured_spans_nest_and_carry_ids_but_no_content() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    assert tracing.configure_tracing(AssaySettings(), exporter=exporter)
    request = _request()
    _evaluate_with_spans(request)

    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"assay.evaluation", "assay.model_call", "assay.tool_call"}
    root = spans["assay.evaluation"]
    assert root.attributes is not None
    assert root.attributes["assay.run_id"] == request.run_id
    assert root.attributes["assay.check_id"] == request.check_id
    assert root.attributes["assay.verdict"] == "true"
    for child in ("assay.model_call", "assay.tool_call"):
        parent = spans[child].parent
        assert parent is not None and parent.span_id == root.context.span_id
        assert spans[child].context.trace_id == root.context.trace_id
    assert spans["assay.tool_call"].attributes == {"assay.tool": "get", "assay.step": 1}
    assert "every pod is Ready" not in str([dict(s.attributes or {}) for s in spans.values()])


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.received.append((self.path, self.headers.get("content-type", ""), body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    _Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host!s}:{port}/v1/traces", _Collector.received
    server.shutdown()
    server.server_close()


def test_otlp_exporter_sends_the_spans_to_the_configured_endpoint(
    collector: tuple[str, list[tuple[str, str, bytes]]],
) -> None:
    endpoint, received = collector
    settings = AssaySettings(otel_exporter="otlp", otel_endpoint=endpoint)
    assert tracing.configure_tracing(settings)
    request = _request()
    _evaluate_with_spans(request)
    assert tracing.flush_tracing(timeout_seconds=10)

    assert received, "no OTLP export arrived"
    path, content_type, _body = received[0]
    assert path == "/v1/traces"
    assert content_type == "application/x-protobuf"
    for expected in (b"assay.evaluation", b"assay.model_call", request.run_id.encode()):
        assert expected in b"".join(r[2] for r in received)


def test_console_exporter_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert tracing.configure_tracing(AssaySettings(otel_exporter="console"))
    _evaluate_with_spans(_request())
    assert tracing.flush_tracing()
    assert '"name": "assay.evaluation"' in capsys.readouterr().out
