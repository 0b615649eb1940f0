"""Per-RPC telemetry: one access-log line and the grpc_server_* metrics — never content.

Both carry the method, status, duration and sizes only. Every call has a request id: the
caller's `x-request-id` metadata when it sends a usable one, else a new UUID. Every log line of
the call carries it, and the call's trailers return it (`x-request-id`), so a runtime can quote
it and an operator find the call's lines. `edge.interceptor` runs them for every call, in the
same pass as admission control.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from turnkeeper.server.api.caller import CALLER_FIELDS, caller_of
from turnkeeper.server.api.methods import PROBE_PREFIXES
from turnkeeper.server.telemetry import metrics, tracing
from turnkeeper.server.telemetry.logs import REQUEST_ID_KEY, reset_call_ids, set_call_ids

log = logging.getLogger("turnkeeper.access")

Req = TypeVar("Req")
Resp = TypeVar("Resp")

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
# What a caller's request id may be: a UUID, a trace or span id, a load balancer's id.
_USABLE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")


@dataclass
class CallStats:
    method: str
    request_id: str
    # go-grpc-prometheus grpc_type: unary, server_stream, client_stream or bidi_stream.
    rpc_type: str = "unary"
    caller_ids: dict[str, str] = field(default_factory=dict)

    def call_ids(self) -> dict[str, str]:
        return {"request_id": self.request_id, **self.caller_ids}

    def count_response(self, response: Any) -> None:
        # Raw-bytes handlers (every HistoryService method) answer bytes: their size is free.
        self.responses += 1
        if isinstance(response, bytes):
            self.response_bytes += len(response)
        elif isinstance(response, Message):
            self.response_bytes += response.ByteSize()

    started: float = field(default_factory=time.perf_counter)
    request_bytes: int = 0
    response_bytes: int = 0
    requests: int = 0
    responses: int = 0


def _status_of(context: grpc.aio.ServicerContext[Any, Any], error: BaseException | None) -> str:
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        # grpc cancels the handler both when the client cancels and when the deadline passes; a
        # stream's generator that grpc stops iterating is closed at its yield (GeneratorExit).
        remaining = context.time_remaining()
        return "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0 else "CANCELLED"
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if code is not None:  # some grpc versions report the raw integer code
        return next((c.name for c in grpc.StatusCode if c.value[0] == code), str(code))
    return "UNKNOWN" if error is not None and not isinstance(error, grpc.aio.AbortError) else "OK"


def _error_reason(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    """The ErrorInfo reason of a rich error status (set by abort_with_status), if any."""
    for key, value in context.trailing_metadata() or ():
        if key != _STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        for detail in status_pb2.Status.FromString(value).details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return str(info.reason)
    return None


def request_id_of(metadata: Any) -> str:
    """The caller's `x-request-id` when usable, else a new UUID."""
    for key, value in metadata or ():
        if key == REQUEST_ID_KEY and isinstance(value, str) and _USABLE_REQUEST_ID.fullmatch(value):
            return value
    return str(uuid.uuid4())


def return_request_id(context: grpc.aio.ServicerContext[Any, Any], request_id: str) -> None:
    # Set before the handler runs: grpc sends the trailers of an abort at once, and a plain
    # abort or a success sends these. A rich error replaces them, so RequestError.to_status
    # adds the id itself (api/errors.py).
    context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))


def started(
    stats: CallStats, request: Any, context: grpc.aio.ServicerContext[Any, Any]
) -> contextvars.Token[Mapping[str, str]]:
    """A call begins: it is counted, its caller read, its ids put on every log line written in
    this context and its request id returned to the caller. `finish` and `reset_call_ids` (with
    the token returned) end it."""
    metrics.observe_started(stats.method, stats.rpc_type)
    _read_caller(stats, request)
    ids = set_call_ids(stats.call_ids())
    return_request_id(context, stats.request_id)
    return ids


def _read_caller(stats: CallStats, request: Any) -> None:
    number = CALLER_FIELDS.get(stats.method)
    # A refusal that never reads its request gets a request iterator, with no caller to read.
    if number is not None and isinstance(request, bytes | Message):
        try:
            caller = caller_of(request, number)
        except ValueError:  # unreadable bytes: the handler reports them
            return
        stats.caller_ids = {
            "session_id": caller.session_id,
            "runtime_id": caller.runtime_id,
            "agent_id": caller.agent_id,
        }


def finish(
    stats: CallStats, context: grpc.aio.ServicerContext[Any, Any], error: BaseException | None
) -> None:
    status = _status_of(context, error)
    seconds = time.perf_counter() - stats.started
    reason = _error_reason(context) if status != "OK" else None
    tracing.annotate(
        {
            "rpc.request.bytes": stats.request_bytes,
            "rpc.response.bytes": stats.response_bytes,
            "rpc.messages.received": stats.requests,
            "rpc.messages.sent": stats.responses,
            "rpc.grpc.status": status,
            **({"turnkeeper.error_reason": reason} if reason else {}),
        }
    )
    metrics.observe_rpc(
        stats.method,
        stats.rpc_type,
        status,
        seconds,
        stats.request_bytes,
        stats.response_bytes,
        stats.requests,
        stats.responses,
        reason,
    )
    # Probes poll constantly; at DEBUG they do not drown real traffic.
    level = logging.DEBUG if stats.method.startswith(PROBE_PREFIXES) else logging.INFO
    if not log.isEnabledFor(level):
        return
    duration_ms = round(seconds * 1000.0, 2)
    log.log(
        level,
        "rpc method=%s status=%s duration_ms=%.2f request_bytes=%d response_bytes=%d requests=%d "
        "responses=%d",
        stats.method,
        status,
        duration_ms,
        stats.request_bytes,
        stats.response_bytes,
        stats.requests,
        stats.responses,
        extra={
            "method": stats.method,
            "status": status,
            "duration_ms": duration_ms,
            "request_bytes": stats.request_bytes,
            "response_bytes": stats.response_bytes,
            "requests": stats.requests,
            "responses": stats.responses,
            **({"error_reason": reason} if reason else {}),
        },
    )


def logged(
    handler: grpc.RpcMethodHandler[Req, Resp], stats: CallStats
) -> grpc.RpcMethodHandler[Req, Resp]:
    """The handler, its completion logged and counted, sizes only. Request size is measured on
    the wire bytes (wrapping the deserializer), so it is exact and costs nothing extra. Handlers
    that are not coroutines or async generators (none are registered by the sidecar) pass through
    unlogged rather than being re-threaded."""
    inner_deserializer = handler.request_deserializer

    def deserialize(data: bytes) -> Req:
        stats.request_bytes += len(data)
        stats.requests += 1
        return inner_deserializer(data) if inner_deserializer is not None else cast(Req, data)

    serializer = handler.response_serializer
    if handler.unary_unary is not None and inspect.iscoroutinefunction(handler.unary_unary):
        return grpc.unary_unary_rpc_method_handler(
            _unary_response(cast(Callable[..., Awaitable[Any]], handler.unary_unary), stats),
            deserialize,
            serializer,
        )
    if handler.stream_unary is not None and inspect.iscoroutinefunction(handler.stream_unary):
        return grpc.stream_unary_rpc_method_handler(
            _unary_response(cast(Callable[..., Awaitable[Any]], handler.stream_unary), stats),
            deserialize,
            serializer,
        )
    if handler.unary_stream is not None:
        wrapped = _stream_response(handler.unary_stream, stats)
        if wrapped is not None:
            return grpc.unary_stream_rpc_method_handler(wrapped, deserialize, serializer)
    if handler.stream_stream is not None:
        wrapped = _stream_response(handler.stream_stream, stats)
        if wrapped is not None:
            return grpc.stream_stream_rpc_method_handler(wrapped, deserialize, serializer)
    return handler


def _unary_response(
    behavior: Callable[..., Awaitable[Any]],
    stats: CallStats,
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]:
    async def logged(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        ids = started(stats, request, context)
        error: BaseException | None = None
        try:
            response = await behavior(request, context)
            stats.count_response(response)
            return response
        except BaseException as caught:
            error = caught
            raise
        finally:
            finish(stats, context, error)
            reset_call_ids(ids)

    return logged


def _reset_in_generator(ids: Any) -> None:
    # A generator closed from another context (garbage collection) cannot reset the variable;
    # its own context then dies with it.
    with contextlib.suppress(ValueError):
        reset_call_ids(ids)


def _stream_response(
    behavior: Callable[..., Any], stats: CallStats
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any] | None:
    if inspect.isasyncgenfunction(behavior):

        async def logged_gen(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            ids = started(stats, request, context)
            error: BaseException | None = None
            try:
                async for item in behavior(request, context):
                    stats.count_response(item)
                    yield item
            except BaseException as caught:
                error = caught
                raise
            finally:
                finish(stats, context, error)
                _reset_in_generator(ids)

        return logged_gen
    if inspect.iscoroutinefunction(behavior):
        # Writes through context.write(); responses are not counted on this path.
        async def logged_coro(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            ids = started(stats, request, context)
            error: BaseException | None = None
            try:
                await behavior(request, context)
            except BaseException as caught:
                error = caught
                raise
            finally:
                finish(stats, context, error)
                reset_call_ids(ids)

        return logged_coro
    return None
