"""OpenTelemetry: a server span per RPC that continues the runtime's trace, sizes and counts only."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from turnkeeper.server.app import Sidecar
from turnkeeper.server.config import ServerConfig, parse_config
from turnkeeper.server.telemetry import tracing
from turnkeeper.server.telemetry.call_ids import CallContextFilter
from turnkeeper.v1 import history_pb2, history_service_pb2_grpc, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SECRET = "zq-span-secret-51c2"


@pytest.fixture
async def traced() -> AsyncIterator[tuple[Sidecar, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sidecar = Sidecar(ServerConfig(listen=("127.0.0.1:0",)), tracer_provider=provider)
    await sidecar.start()
    try:
        yield sidecar, exporter
    finally:
        await sidecar.stop(grace=0)


def request() -> svc.TrimHistoryRequest:
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content=SECRET)]
    for index in range(4):
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"{SECRET}{index}"))
    return svc.TrimHistoryRequest(
        history=history_pb2.History(chat=history_pb2.ChatHistory(messages=rows)),
        mode=trim_pb2.TRIM_MODE_TURN_COUNT,
        explicit_limits=svc.ExplicitLimits(max_history_messages=1, breadcrumb_text=SECRET),
        caller=trim_pb2.CallerContext(session_id="s-1"),
    )


async def test_the_span_continues_the_runtimes_trace_with_sizes_and_counts(
    traced: tuple[Sidecar, InMemorySpanExporter], caplog: pytest.LogCaptureFixture
) -> None:
    sidecar, exporter = traced
    caplog.handler.addFilter(CallContextFilter())
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01"
    with caplog.at_level(logging.INFO):
        async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
            stub = history_service_pb2_grpc.HistoryServiceStub(channel)
            response = await stub.TrimHistory(
                request(), metadata=(("traceparent", traceparent),), timeout=5
            )
    assert response.outcome.trimmed
    (span,) = [s for s in exporter.get_finished_spans() if s.name.endswith("/TrimHistory")]
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_ID
    attributes = dict(span.attributes or {})
    assert attributes["rpc.request.bytes"] == request().ByteSize()
    assert attributes["rpc.messages.sent"] == 1
    assert attributes["rpc.response.bytes"] == response.ByteSize()
    assert attributes["rpc.grpc.status"] == "OK"
    assert attributes["turnkeeper.trim.turn_limit.dropped_turns"] == 3
    assert (
        attributes["turnkeeper.trim.turn_limit.tokens_after"]
        < (attributes["turnkeeper.trim.turn_limit.tokens_before"])
    )
    assert not any(SECRET in str(value) for value in attributes.values())
    # The call's log lines carry the same trace id.
    access = [r for r in caplog.records if r.name == "turnkeeper.access"]
    assert access and all(getattr(r, "trace_id", None) == TRACE_ID for r in access)


async def test_a_failed_call_records_its_status_and_reason(
    traced: tuple[Sidecar, InMemorySpanExporter],
) -> None:
    sidecar, exporter = traced
    bad = history_pb2.History(
        chat=history_pb2.ChatHistory(messages=[history_pb2.ChatMessage(role=99)])
    )
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.EstimateTokens(svc.EstimateTokensRequest(history=bad), timeout=5)
    # grpc sends an abort's status at once, before the handler has unwound and its span ended:
    # the span may end a moment after the client has its error.
    for _ in range(100):
        spans = [s for s in exporter.get_finished_spans() if s.name.endswith("/EstimateTokens")]
        if spans:
            break
        await asyncio.sleep(0.01)
    (span,) = spans
    attributes = dict(span.attributes or {})
    assert attributes["rpc.grpc.status"] == "INVALID_ARGUMENT"
    assert attributes["turnkeeper.error_reason"] == "ERROR_REASON_INVALID_HISTORY"


def test_tracing_is_off_by_default_and_chosen_by_flag() -> None:
    assert ServerConfig().tracing == "none"
    assert tracing.tracer_provider("none") is None
    assert parse_config(["--tracing", "console"], {}).tracing == "console"
    provider = tracing.tracer_provider("otlp")  # the otlp extra is part of the dev install
    assert provider is not None
    provider.shutdown()


def test_log_format_json_is_a_flag_and_a_variable() -> None:
    assert parse_config(["--log-format", "json"], {}).log_format == "json"
    assert parse_config([], {"TURNKEEPER_LOG_FORMAT": "json"}).log_format == "json"
