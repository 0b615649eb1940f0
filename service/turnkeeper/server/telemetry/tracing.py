"""OpenTelemetry tracing: a server span per RPC, continuing the runtime's trace.

opentelemetry-instrumentation-grpc's aio interceptor extracts the W3C `traceparent` the runtime
sent and opens the span; the access interceptor and the trim path add sizes and counts to it.
Span attributes are never message text. `--tracing otlp` exports with the OTLP gRPC exporter
(the `otlp` extra: `pip install 'turnkeeper[otlp]'`), configured by the standard
OTEL_EXPORTER_OTLP_* variables; `console` prints spans (for trying it out).
"""

from __future__ import annotations

from typing import Literal

import grpc
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import aio_server_interceptor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from turnkeeper.server.version import server_version

TracingMode = Literal["none", "otlp", "console"]


class TracingUnavailableError(Exception):
    """`--tracing otlp` without the OTLP exporter installed."""


def _exporter(mode: TracingMode) -> SpanExporter:
    if mode == "console":
        return ConsoleSpanExporter()
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TracingUnavailableError(
            "--tracing otlp needs the OTLP exporter: pip install 'turnkeeper[otlp]'"
        ) from None
    return OTLPSpanExporter()


def tracer_provider(mode: TracingMode) -> TracerProvider | None:
    """The provider for `mode` (None for "none"); OTEL_SERVICE_NAME overrides the name."""
    if mode == "none":
        return None
    resource = Resource.create({SERVICE_NAME: "turnkeeper", "service.version": server_version()})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(_exporter(mode)))
    return provider


_started = False


def tracing_started() -> bool:
    """Whether any server in this process traces: until one does, no call has a span, and the
    per-call span lookups are skipped."""
    return _started


def server_interceptor(provider: TracerProvider) -> grpc.aio.ServerInterceptor:
    global _started
    _started = True
    # The instrumentation package ships no type hints.
    interceptor: grpc.aio.ServerInterceptor = aio_server_interceptor(  # type: ignore[no-untyped-call]
        tracer_provider=provider
    )
    return interceptor


def annotate(attributes: dict[str, int | str]) -> None:
    """Adds sizes and counts to the current span (a no-op outside a traced call)."""
    if not _started:
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(attributes)


def recording() -> bool:
    """Whether the current call has a span that records attributes."""
    return _started and trace.get_current_span().is_recording()


def annotate_call(
    request_bytes: int,
    response_bytes: int,
    requests: int,
    responses: int,
    status: str,
    error_reason: str | None,
) -> None:
    """A finished call's sizes, counts and status on its span; its attributes are built only
    when there is one."""
    if not recording():
        return
    attributes: dict[str, int | str] = {
        "rpc.request.bytes": request_bytes,
        "rpc.response.bytes": response_bytes,
        "rpc.messages.received": requests,
        "rpc.messages.sent": responses,
        "rpc.grpc.status": status,
    }
    if error_reason:
        attributes["turnkeeper.error_reason"] = error_reason
    trace.get_current_span().set_attributes(attributes)
