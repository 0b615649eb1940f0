"""Issue 17 "UNKNOWN is still possible": running out of memory while serving a call is
RESOURCE_EXHAUSTED (ErrorInfo OVERLOADED, limit=memory, RetryInfo), a condition to retry, not a
bug."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from turnkeeper.server.api import rpcs
from turnkeeper.server.api.responses import Reply
from turnkeeper.server.app import Sidecar
from turnkeeper.server.config import ServerConfig
from turnkeeper.v1 import history_service_pb2 as svc


def _no_memory(*args: object, **kwargs: object) -> Reply:
    raise MemoryError


async def test_memory_error_is_resource_exhausted_with_retry_info(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rpcs, "resolve_budget", _no_memory)
    sidecar = Sidecar(ServerConfig(listen=("127.0.0.1:0",)))
    await sidecar.start()
    try:
        async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
            call = channel.unary_unary("/turnkeeper.v1.HistoryService/ResolveBudget")
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await call(svc.ResolveBudgetRequest().SerializeToString(), timeout=10)
    finally:
        await sidecar.stop(grace=1)
    error = failed.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = dict(error.trailing_metadata() or ())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(details)
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info) and status.details[1].Unpack(retry)
    assert info.reason == "ERROR_REASON_OVERLOADED" and info.metadata["limit"] == "memory"
    assert retry.retry_delay.seconds == 1


async def test_a_request_over_max_receive_bytes_is_refused_with_error_info() -> None:
    """The probe: a 64 MiB + 1 request got RESOURCE_EXHAUSTED from gRPC core, with no details."""
    limit = 1024 * 1024
    sidecar = Sidecar(ServerConfig(listen=("127.0.0.1:0",), max_receive_bytes=limit))
    await sidecar.start()
    try:
        async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
            call = channel.unary_unary("/turnkeeper.v1.HistoryService/EstimateTokens")
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await call(b"\x00" * (limit + 1), timeout=10)
            # What fits is still served.
            resolve = channel.unary_unary("/turnkeeper.v1.HistoryService/ResolveBudget")
            await resolve(b"", timeout=10)
    finally:
        await sidecar.stop(grace=1)
    error = failed.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = dict(error.trailing_metadata() or ())["grpc-status-details-bin"]
    info = error_details_pb2.ErrorInfo()
    assert status_pb2.Status.FromString(details).details[0].Unpack(info)
    assert info.reason == "ERROR_REASON_REQUEST_TOO_LARGE"
    assert info.metadata["limit"] == "max_receive_bytes"
    assert info.metadata["max_bytes"] == str(limit)
