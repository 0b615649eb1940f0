"""A scripted fake HistoryService for the clients' retry tests (with_server.py --overloaded).

Its EstimateTokens reads a script from the first row of the request's chat history,
`<call id> <CODE>:<RetryInfo delay in ms, -1 for none> ...`, e.g. `a1 RESOURCE_EXHAUSTED:300
UNAVAILABLE:-1`: the attempts of that call id are refused in that order, then answered with
`total_tokens` = the number of attempts it took. So a client in any language can check what it
retried, how often and after which delays, against one server.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent import futures

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2
from turnkeeper.v1 import history_service_pb2 as svc

_SERVICE = "turnkeeper.v1.HistoryService"


class _Script:
    def __init__(self) -> None:
        self._attempts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def estimate_tokens(
        self, request: svc.EstimateTokensRequest, context: grpc.ServicerContext
    ) -> svc.EstimateTokensResponse:
        rows = request.history.chat.messages
        call_id, *steps = (rows[0].content if rows else "").split()
        with self._lock:
            self._attempts[call_id] += 1
            attempt = self._attempts[call_id]
        if attempt > len(steps):
            return svc.EstimateTokensResponse(total_tokens=attempt)
        code_name, delay_ms = steps[attempt - 1].split(":")
        code = grpc.StatusCode[code_name]
        status = status_pb2.Status(code=code.value[0], message=f"scripted refusal {attempt}")
        if int(delay_ms) >= 0:
            delay = duration_pb2.Duration()
            delay.FromMilliseconds(int(delay_ms))
            status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(code, status.message)


def start() -> tuple[grpc.Server, str]:
    """Starts the fake on a free loopback port; returns it and its `127.0.0.1:PORT`."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)]
    )
    handler = grpc.unary_unary_rpc_method_handler(
        _Script().estimate_tokens,
        request_deserializer=svc.EstimateTokensRequest.FromString,
        response_serializer=svc.EstimateTokensResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_SERVICE, {"EstimateTokens": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"
