"""What the interceptors share: the type of the continuation gRPC hands them, and `refusal`.

`refusal` is the handler a refused call gets: it fails the call at once and never reads the
request. gRPC reads a unary request whole before the handler runs; a client-streaming handler
gets an iterator instead, and one message is framed the same either way. So a refusal is a
streaming-request handler, of the call's response shape, that aborts without iterating: the
request's bytes stay in the client. Authentication refuses with it (the edge, which reads the
request itself, refuses without reading it too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc
from grpc_health.v1 import health_pb2

from turnkeeper.server.contract.errors import RequestError
from turnkeeper.v1 import history_service_pb2

Req = TypeVar("Req")
Resp = TypeVar("Resp")

# The next interceptor (or the server's handler lookup), as `intercept_service` receives it.
Continuation: TypeAlias = (
    "Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Req, Resp] | None]]"
)


def refusal(
    handler: grpc.RpcMethodHandler[Req, Resp], error: RequestError
) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler answering `error` in place of `handler`, without reading the request."""

    async def refuse(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort_with_status(error.to_status())

    async def refuse_stream(
        requests: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        await context.abort_with_status(error.to_status())
        yield  # pragma: no cover (abort raises)

    serializer = handler.response_serializer
    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_stream, None, serializer)
    return grpc.stream_unary_rpc_method_handler(refuse, None, serializer)


# (request_streaming, response_streaming) -> go-grpc-prometheus grpc_type.
RPC_TYPES = {
    (False, False): "unary",
    (False, True): "server_stream",
    (True, False): "client_stream",
    (True, True): "bidi_stream",
}


def _method_types() -> dict[str, str]:
    """The grpc_type of every method this server serves from its descriptors, by method path."""
    types = {}
    for file in (history_service_pb2.DESCRIPTOR, health_pb2.DESCRIPTOR):
        for service in file.services_by_name.values():
            for method in service.methods:
                shape = (method.client_streaming, method.server_streaming)
                types[f"/{service.full_name}/{method.name}"] = RPC_TYPES[shape]
    return types


METHOD_TYPES = _method_types()


def rpc_type(method: str, handler: grpc.RpcMethodHandler[Any, Any]) -> str:
    """The method's declared grpc_type: a refusal's request-streaming shape does not change it."""
    declared = METHOD_TYPES.get(method)
    if declared is not None:
        return declared
    return RPC_TYPES[(handler.request_streaming, handler.response_streaming)]
