"""The one interceptor every call passes: access log, metrics and admission control in one pass.

Each layer of interceptor costs a call a coroutine, a handler and a deserializer wrapper of its
own; together the access log and admission were a quarter of a small call's cost (issue 19), so
they share one. Authentication runs inside it (it is this interceptor's continuation): its
refusals need only the headers, are logged here, and never reach admission, so strangers use none
of its budget. Tracing, when on, runs outside it, so every line below carries the span.

gRPC reads a unary request whole before any handler runs, so the calls receiving their request at
once are capped here, before the read, by count and by the in-flight byte budget (each reserves the
largest request until admission counts its real size): a call over either waits in FIFO order for
a slot, and if none comes free in time it is refused by a handler that never reads it
(`handlers.refusal`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc

from turnkeeper.server.api.errors import RequestError
from turnkeeper.server.api.methods import PROBE_PREFIXES
from turnkeeper.server.edge.access_log import (
    CallStats,
    finish,
    logged,
    request_id_of,
    started,
)
from turnkeeper.server.edge.admission import Admission, ReceivingSlot, shutting_down_refusal
from turnkeeper.server.edge.handlers import Continuation, refusal, rpc_type
from turnkeeper.server.edge.load_shed import LoadShedder
from turnkeeper.server.telemetry.logs import reset_call_ids

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class EdgeInterceptor(grpc.aio.ServerInterceptor):
    """Logs and counts every call; counts every unary call in and out of `Admission`."""

    def __init__(self, admission: Admission, shedder: LoadShedder | None = None) -> None:
        self.admission = admission
        self.shedder = shedder

    async def intercept_service(
        self,
        continuation: Continuation[Req, Resp],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        # How long the call waited for us to take it (load_shed): every call counts.
        if self.shedder is not None:
            self.shedder.arrived()
        handler = await continuation(details)
        if handler is None:
            return None
        method = details.method
        stats = CallStats(
            method=method,
            request_id=request_id_of(details.invocation_metadata),
            rpc_type=rpc_type(method, handler),
        )
        # A probe must see the server even when it is busy.
        if method.startswith(PROBE_PREFIXES):
            return logged(handler, stats)
        admission = self.admission
        if admission.draining:
            return logged(refusal(handler, shutting_down_refusal()), stats)
        behavior = handler.unary_unary
        if behavior is None or not inspect.iscoroutinefunction(behavior):
            return logged(handler, stats)
        if self.shedder is not None and self.shedder.refuses():
            return logged(refusal(handler, self.shedder.refusal()), stats)
        if not await admission.receiving_slot():
            return logged(refusal(handler, admission.receiving_refusal()), stats)
        return _admitted(
            handler,
            cast(Callable[..., Awaitable[Any]], behavior),
            stats,
            admission,
            ReceivingSlot(admission),
        )


def _admitted(
    handler: grpc.RpcMethodHandler[Req, Resp],
    behavior: Callable[..., Awaitable[Any]],
    stats: CallStats,
    admission: Admission,
    slot: ReceivingSlot,
) -> grpc.RpcMethodHandler[Req, Resp]:
    inner_deserializer = handler.request_deserializer

    def deserialize(data: bytes) -> Req:
        # The receiving slot (and its reservation) is freed once admission has counted these.
        stats.request_bytes = len(data)
        stats.requests = 1
        return inner_deserializer(data) if inner_deserializer is not None else cast(Req, data)

    async def admitted(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        ids = started(stats, request, context)
        error: BaseException | None = None
        heavy: bool | None = None
        try:
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0:
                # Nobody waits for the answer any more: no work, nothing published.
                await context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed before the call started"
                )
            try:
                heavy = await admission.admit(stats.request_bytes, remaining, slot.free)
                if heavy:
                    # (grpc-stubs type the callback as a class of their own.)
                    context.add_done_callback(cast(Any, admission.sent))
            except RequestError as refused:
                await context.abort_with_status(refused.to_status())
            response = await behavior(request, context)
            stats.count_response(response)
            return response
        except BaseException as caught:
            error = caught
            raise
        finally:
            slot.free()
            if heavy is not None:
                admission.release(stats.request_bytes, heavy)
            finish(stats, context, error)
            reset_call_ids(ids)

    return grpc.unary_unary_rpc_method_handler(admitted, deserialize, handler.response_serializer)
