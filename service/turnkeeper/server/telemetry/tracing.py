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


def server_interceptor(provider: TracerProvider) -> grpc.aio.ServerInterceptor:
    # The instrumentation package ships no type hints.
    interceptor: grpc.aio.ServerInterceptor = aio_server_interceptor(  # type: ignore[no-untyped-call]
        tracer_provider=provider
    )
    return interceptor


def annotate(attributes: dict[str, int | str]) -> None:
    """Adds sizes and counts to the current span (a no-op outside a traced call)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(attributes)
