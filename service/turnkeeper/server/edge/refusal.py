"""Refusing a call from its headers alone, before a byte of its request is read.

gRPC reads a unary request whole before a unary handler runs, so a refusal written as a unary
handler costs the whole message in memory (32 unauthenticated 60 MB calls: 2 GB, issue 17). The
refusal is written as a request-streaming handler that never reads: the wire framing of a call is
the same whichever side streams, so the client gets the status with its ErrorInfo, and the request
bytes the flow-control window had not already let in stay in the client.
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from turnkeeper.server.api.errors import RequestError
from turnkeeper.v1 import history_service_pb2

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
    """The method's declared grpc_type (a refusal handler's own shape does not change it)."""
    declared = METHOD_TYPES.get(method)
    if declared is not None:
        return declared
    return RPC_TYPES[(handler.request_streaming, handler.response_streaming)]


def refuse_before_reading(error: RequestError) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler for any method that answers `error` at once and never reads the request."""
    status = error.to_status()

    async def refuse(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort_with_status(status)

    return grpc.stream_stream_rpc_method_handler(refuse)
