"""The edge wraps every handler at registration (no grpc.aio interceptor): what it must still do.

Health and reflection go through it (logged and counted, never admitted), a probe's undecodable request gets
an honest status, and a generic handler's wrapper remembers only the methods it serves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from turnkeeper.server.app import Sidecar
from turnkeeper.server.config import ServerConfig
from turnkeeper.server.contract.methods import OWN_ACCEPT_METHODS, method_path
from turnkeeper.server.edge.admission import Admission, AdmissionLimits
from turnkeeper.server.edge.wrapper import Edge
from turnkeeper.server.telemetry.call_ids import CallContextFilter
from turnkeeper.server.telemetry.metrics import REGISTRY

HEALTH_CHECK = "/grpc.health.v1.Health/Check"


@pytest.fixture
async def sidecar() -> AsyncIterator[Sidecar]:
    server = Sidecar(ServerConfig(listen=("127.0.0.1:0",)))
    await server.start()
    try:
        yield server
    finally:
        await server.stop(grace=0)


def handled(service: str, method: str, rpc_type: str) -> float:
    labels = {
        "grpc_service": service,
        "grpc_method": method,
        "grpc_type": rpc_type,
        "grpc_code": "OK",
    }
    return REGISTRY.get_sample_value("grpc_server_handled_total", labels) or 0.0


async def test_health_and_reflection_calls_are_logged_and_counted(
    sidecar: Sidecar, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.handler.addFilter(CallContextFilter())
    health_before = handled("grpc.health.v1.Health", "Check", "unary")
    with caplog.at_level(logging.DEBUG, logger="turnkeeper.access"):
        async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
            answer = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), metadata=(("x-request-id", "edge-health"),)
            )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                metadata=(("x-request-id", "edge-reflection"),),
            )
            services = [
                service.name
                async for response in stream
                for service in response.list_services_response.service
            ]
            assert "turnkeeper.v1.HistoryService" in services
    lines = {
        getattr(record, "request_id", None): record
        for record in caplog.records
        if record.name == "turnkeeper.access"
    }
    for request_id, method in (
        ("edge-health", HEALTH_CHECK),
        ("edge-reflection", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"),
    ):
        record = lines[request_id]
        assert (record.levelno, record.method, record.status) == (logging.DEBUG, method, "OK")
    # (Other servers of this process may still finish reflection streams: health is exact.)
    assert handled("grpc.health.v1.Health", "Check", "unary") == health_before + 1


async def test_an_undecodable_probe_request_is_invalid_argument(sidecar: Sidecar) -> None:
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await channel.unary_unary(HEALTH_CHECK)(b"\xff\xff\xff", timeout=5)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not decode" in (raised.value.details() or "")


def test_a_generic_handler_wrapper_remembers_only_served_methods() -> None:
    served = grpc.unary_unary_rpc_method_handler(_answer)
    inner = grpc.method_handlers_generic_handler("pkg.Service", {"Known": served})
    admission = Admission(
        AdmissionLimits(max_inflight_bytes=1 << 20, heavy_call_bytes=1 << 20, max_heavy_calls=1)
    )
    registered: list[grpc.GenericRpcHandler] = []

    class Registry:
        def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
            registered.extend(handlers)

        def add_registered_method_handlers(self, name: str, handlers: object) -> None:
            raise AssertionError("not used here")

    Edge(admission).registry(Registry()).add_generic_rpc_handlers((inner,))
    (wrapper,) = registered
    known = wrapper.service(_Details("/pkg.Service/Known"))
    assert known is not None and known.request_streaming  # the wrapper reads the request
    assert wrapper.service(_Details("/pkg.Service/Known")) is known  # wrapped once
    for index in range(100):
        assert wrapper.service(_Details(f"/pkg.Service/Made{index}")) is None
    assert len(wrapper._wrapped) == 1  # type: ignore[attr-defined]


class _Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


async def _answer(request: bytes, context: object) -> bytes:
    return request


def test_only_the_own_accept_methods_are_registered_and_the_rest_served_generically() -> None:
    served = grpc.unary_unary_rpc_method_handler(_answer)
    admission = Admission(
        AdmissionLimits(max_inflight_bytes=1 << 20, heavy_call_bytes=1 << 20, max_heavy_calls=1)
    )
    registered: dict[str, dict[str, grpc.RpcMethodHandler[object, object]]] = {}
    generic: list[grpc.GenericRpcHandler] = []

    class Registry:
        def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
            generic.extend(handlers)

        def add_registered_method_handlers(
            self, name: str, handlers: dict[str, grpc.RpcMethodHandler[object, object]]
        ) -> None:
            registered[name] = handlers

    registry = Edge(admission).registry(Registry(), {"/pkg.Service/Hot"})
    registry.add_registered_method_handlers("pkg.Service", {"Hot": served, "Rare": served})
    assert list(registered) == ["pkg.Service"] and list(registered["pkg.Service"]) == ["Hot"]
    assert registered["pkg.Service"]["Hot"].request_streaming  # wrapped by the edge
    (shared,) = generic
    rare = shared.service(_Details("/pkg.Service/Rare"))
    assert rare is not None and rare.request_streaming  # wrapped by the edge too
    assert shared.service(_Details("/pkg.Service/Hot")) is None
    # Without a set, every method keeps its own accept (as grpc's generated code registers).
    registered.clear()
    generic.clear()
    Edge(admission).registry(Registry()).add_registered_method_handlers(
        "pkg.Service", {"Hot": served, "Rare": served}
    )
    assert list(registered["pkg.Service"]) == ["Hot", "Rare"] and not generic


async def test_the_sidecar_registers_the_per_call_methods_and_still_serves_the_rest(
    sidecar: Sidecar,
) -> None:
    assert method_path("TrimHistory") in OWN_ACCEPT_METHODS
    assert method_path("SweepOrphans") not in OWN_ACCEPT_METHODS
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        # Served through the generic handler: an empty request is valid for it.
        answer = await channel.unary_unary(method_path("ClassifyProviderError"))(b"", timeout=5)
        assert isinstance(answer, bytes)
        watch = channel.unary_stream("/grpc.health.v1.Health/Watch")(
            health_pb2.HealthCheckRequest().SerializeToString(), timeout=5
        )
        async for _ in watch:
            break
        watch.cancel()


async def test_a_call_that_ends_before_its_request_arrives_gives_its_receiving_slot_back() -> None:
    server = Sidecar(
        ServerConfig(listen=("127.0.0.1:0",), max_receiving_calls=1, receive_wait_seconds=0)
    )
    await server.start()
    method = method_path("ClassifyProviderError")  # an empty request is valid for it
    released = asyncio.Event()

    async def never() -> AsyncIterator[bytes]:
        # The call's headers go out; its request message never does.
        await released.wait()
        yield b""  # pragma: no cover

    try:
        async with grpc.aio.insecure_channel(server.tcp_addresses[0]) as channel:
            held = channel.stream_unary(method)(never())
            for _ in range(100):
                if server.admission.receiving.used:
                    break
                await asyncio.sleep(0.02)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await channel.unary_unary(method)(b"", timeout=5)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            held.cancel()
            for _ in range(100):
                if not server.admission.receiving.used:
                    break
                await asyncio.sleep(0.02)
            assert server.admission.receiving.used == 0
            assert server.admission.inflight_bytes == 0
            assert isinstance(await channel.unary_unary(method)(b"", timeout=5), bytes)
            released.set()
    finally:
        await server.stop(grace=0)
