"""TLS, mTLS with certificate rotation, bearer tokens bound to a runtime, reflection switch."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest import mock

import aiohttp
import grpc
import pytest
import trustme
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from google.protobuf import descriptor_pb2, message_factory
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status
from turnkeeper.server.app import Sidecar, StartupError
from turnkeeper.server.config import ServerConfig, parse_config
from turnkeeper.server.contract.caller import caller_from_wire
from turnkeeper.server.contract.wire import encode_varint, length_delimited
from turnkeeper.server.edge.auth import load_tokens
from turnkeeper.server.edge.listeners import bind_failure_cause
from turnkeeper.server.edge.security import exposure_warnings
from turnkeeper.server.ops.dashboard.access import COOKIE, DashboardAccess
from turnkeeper.server.ops.http import ops_exposure_warnings
from turnkeeper.server.ops.reflection import v1_file
from turnkeeper.v1 import history_pb2, history_service_pb2_grpc, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

# support/certs.py's Credentials, from the `credentials` fixture in tests/conftest.py.
Credentials = Any


def tls_config(credentials: Credentials, **extra: Any) -> ServerConfig:
    fields: dict[str, Any] = {
        "listen": ("127.0.0.1:0",),
        "tls_cert": str(credentials.server_cert),
        "tls_key": str(credentials.server_key),
        **extra,
    }
    return ServerConfig(**fields)


async def started(config: ServerConfig) -> Sidecar:
    sidecar = Sidecar(config)
    await sidecar.start()
    return sidecar


@pytest.fixture
async def running() -> AsyncIterator[list[Sidecar]]:
    """Sidecars a test starts; all stopped afterwards."""
    sidecars: list[Sidecar] = []
    yield sidecars
    for sidecar in sidecars:
        await sidecar.stop(grace=0)


def channel_credentials(ca: Path, client: Credentials | None = None) -> grpc.ChannelCredentials:
    chain = key = None
    if client is not None:
        chain, key = client.client_cert.read_bytes(), client.client_key.read_bytes()
    return grpc.ssl_channel_credentials(ca.read_bytes(), private_key=key, certificate_chain=chain)


async def estimate(
    target: str,
    creds: grpc.ChannelCredentials | None,
    token: str | None = None,
) -> svc.EstimateTokensResponse:
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    channel = grpc.aio.secure_channel(target, creds) if creds else grpc.aio.insecure_channel(target)
    async with channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        return await stub.EstimateTokens(
            svc.EstimateTokensRequest(history=history()), metadata=metadata, timeout=5
        )


def history() -> history_pb2.History:
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"q{i}") for i in (1, 2)]
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def error_reason(error: grpc.aio.AioRpcError) -> str:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "no rich status"
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            assert info.domain == "turnkeeper.v1"
            return str(info.reason)
    raise AssertionError("no ErrorInfo")


async def test_tls_serves_clients_that_trust_the_ca_and_refuses_plaintext(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    sidecar = await started(tls_config(credentials))
    running.append(sidecar)
    target = sidecar.tcp_addresses[0]
    response = await estimate(target, channel_credentials(credentials.ca))
    assert response.total_tokens > 0
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await estimate(target, None)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_mtls_requires_a_client_certificate_signed_by_the_client_ca(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    sidecar = await started(tls_config(credentials, tls_client_ca=str(credentials.ca)))
    running.append(sidecar)
    target = sidecar.tcp_addresses[0]
    assert (await estimate(target, channel_credentials(credentials.ca, credentials))).turns == 2
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await estimate(target, channel_credentials(credentials.ca))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_rotated_certificate_is_served_to_new_connections_without_a_restart(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    sidecar = await started(tls_config(credentials))
    running.append(sidecar)
    target = sidecar.tcp_addresses[0]
    await estimate(target, channel_credentials(credentials.ca))
    rotated_ca = credentials.rotate_server_pair()
    assert (await estimate(target, channel_credentials(rotated_ca))).turns == 2
    with pytest.raises(grpc.aio.AioRpcError):
        await estimate(target, channel_credentials(credentials.ca))


# The certificate names both loopbacks (support/certs.py).
TWO_PORTS = ("127.0.0.1:0", "[::1]:0")


async def test_two_tls_listeners_each_serve_tls_and_each_reload_a_rotated_certificate(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    sidecar = await started(tls_config(credentials, listen=TWO_PORTS))
    running.append(sidecar)
    assert len(sidecar.tcp_addresses) == 2
    for target in sidecar.tcp_addresses:
        assert (await estimate(target, channel_credentials(credentials.ca))).turns == 2
        with pytest.raises(grpc.aio.AioRpcError):
            await estimate(target, None)
    # Each port has its own file stamps: the first to reload must not hide the change from
    # the other.
    rotated_ca = credentials.rotate_server_pair()
    for target in sidecar.tcp_addresses:
        assert (await estimate(target, channel_credentials(rotated_ca))).turns == 2


async def test_mtls_on_two_listeners_requires_the_client_certificate_on_both(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    config = tls_config(credentials, listen=TWO_PORTS, tls_client_ca=str(credentials.ca))
    sidecar = await started(config)
    running.append(sidecar)
    for target in sidecar.tcp_addresses:
        mutual = channel_credentials(credentials.ca, credentials)
        assert (await estimate(target, mutual)).turns == 2
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await estimate(target, channel_credentials(credentials.ca))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_port_that_cannot_be_bound_names_the_os_error(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    first = await started(tls_config(credentials))
    running.append(first)
    taken = first.tcp_addresses[0]
    with pytest.raises(StartupError, match=rf"cannot listen on {re.escape(taken)}: .*EADDRINUSE"):
        await started(tls_config(credentials, listen=("127.0.0.1:0", taken)))
    with pytest.raises(StartupError, match=r"cannot resolve 'no-such-host\.invalid'"):
        await started(ServerConfig(listen=("no-such-host.invalid:1",)))
    assert bind_failure_cause("unix:/nonexistent-dir/tk.sock") == (
        "No such file or directory (ENOENT)"
    )
    assert bind_failure_cause(f"unix:/tmp/{'x' * 120}.sock") == "AF_UNIX path too long"
    assert "grpc failed to set the port up" in bind_failure_cause("127.0.0.1:0")


async def test_unix_sockets_stay_plaintext_next_to_a_tls_port(
    credentials: Credentials, running: list[Sidecar], tmp_path: Path
) -> None:
    sock = Path("/tmp") / f"tk-sec-{tmp_path.name[-12:]}.sock"
    sidecar = await started(tls_config(credentials, unix=(str(sock),)))
    running.append(sidecar)
    assert (await estimate(f"unix:{sock}", None)).turns == 2


async def test_calls_without_a_known_token_are_unauthenticated_with_error_info(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    sidecar = await started(
        ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(credentials.tokens))
    )
    running.append(sidecar)
    target = sidecar.tcp_addresses[0]
    for token in (None, "not-a-token-of-this-server"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await estimate(target, None, token)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert error_reason(caught.value) == "ERROR_REASON_UNAUTHENTICATED"
        # A refusal returns the call's request id too, for the operator to find its log line.
        trailers = caught.value.trailing_metadata() or ()
        assert [key for key, _ in trailers].count("x-request-id") == 1
    assert (await estimate(target, None, credentials.token)).turns == 2


async def test_health_needs_no_token(credentials: Credentials, running: list[Sidecar]) -> None:
    sidecar = await started(
        ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(credentials.tokens))
    )
    running.append(sidecar)
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        response = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    assert response.status == health_pb2.HealthCheckResponse.SERVING


def trim_request(runtime_id: str) -> svc.TrimHistoryRequest:
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"q{i}") for i in range(4)]
    return svc.TrimHistoryRequest(
        history=history_pb2.History(chat=history_pb2.ChatHistory(messages=rows)),
        mode=trim_pb2.TRIM_MODE_TURN_COUNT,
        explicit_limits=svc.ExplicitLimits(max_history_messages=1),
        caller=trim_pb2.CallerContext(runtime_id=runtime_id, session_id="s"),
    )


async def test_a_token_cannot_act_as_another_runtime(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    """A runtime cannot publish events under another runtime's id."""
    sidecar = await started(
        ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(credentials.tokens))
    )
    running.append(sidecar)

    async def trim(token: str, runtime_id: str) -> svc.TrimHistoryResponse:
        async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
            stub = history_service_pb2_grpc.HistoryServiceStub(channel)
            return await stub.TrimHistory(
                trim_request(runtime_id),
                metadata=(("authorization", f"Bearer {token}"),),
                timeout=5,
            )

    assert (await trim(credentials.token, credentials.runtime_id)).outcome.trimmed
    assert (await trim(credentials.token, "")).outcome.trimmed  # filled with its own runtime
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await trim(credentials.token, "someone-else")
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_reason(caught.value) == "ERROR_REASON_PERMISSION_DENIED"
    assert "someone-else" in (caught.value.details() or "")
    # A "*" token acts as any runtime.
    assert (await trim(credentials.operator_token, "someone-else")).outcome.trimmed


def _bad_requests(field_violations: Any) -> list[str]:
    return [v.field for v in field_violations]


async def test_an_unreadable_caller_is_invalid_argument_with_or_without_a_token(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    """A runtime-bound token does not change the answer to bytes that do not decode; protobuf's
    reading of the caller (not the edge's quick scan) is what the token is held to."""
    tokened = await started(
        ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(credentials.tokens))
    )
    running.append(tokened)
    plain = await started(ServerConfig(listen=("127.0.0.1:0",)))
    running.append(plain)
    valid = trim_request(credentials.runtime_id).SerializeToString()
    # The caller field holding bytes that are no CallerContext.
    caller = svc.TrimHistoryRequest.DESCRIPTOR.fields_by_name["caller"].number
    unreadable = valid + length_delimited(caller, b"\xff\xff")
    # A group (wire types 3 and 4) the quick scan does not read, but protobuf keeps as unknown.
    group = encode_varint(99 << 3 | 3) + encode_varint(99 << 3 | 4)
    other_runtime = trim_pb2.CallerContext(runtime_id="someone-else").SerializeToString()
    hidden = valid + group + length_delimited(caller, other_runtime)

    async def call(sidecar: Sidecar, body: bytes, token: str | None) -> grpc.aio.AioRpcError:
        async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
            method = channel.unary_unary("/turnkeeper.v1.HistoryService/TrimHistory")
            metadata = (("authorization", f"Bearer {token}"),) if token else None
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await method(body, metadata=metadata, timeout=5)
            return caught.value

    answers = [
        await call(plain, unreadable, None),
        await call(tokened, unreadable, credentials.token),
        await call(tokened, unreadable, credentials.operator_token),
    ]
    for answer in answers:
        assert answer.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_reason(answer) == "ERROR_REASON_MALFORMED_REQUEST"
        status = rpc_status.from_call(answer)
        assert status is not None
        request = error_details_pb2.BadRequest()
        assert any(detail.Unpack(request) for detail in status.details)
        assert _bad_requests(request.field_violations) == ["caller"]
    denied = await call(tokened, hidden, credentials.token)
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "someone-else" in (denied.details() or "")


async def test_caller_ids_over_the_limit_are_refused_naming_each(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    sidecar = await started(ServerConfig(listen=("127.0.0.1:0",)))
    running.append(sidecar)
    request = trim_request("rt")
    request.caller.session_id = "é" * 128  # 256 bytes: the most an id may hold
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        assert (await stub.TrimHistory(request, timeout=5)).outcome.trimmed
        request.caller.session_id += "x"
        request.caller.turn_id = "t" * 10_000
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.TrimHistory(request, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_reason(caught.value) == "ERROR_REASON_INVALID_CALLER"
    status = rpc_status.from_call(caught.value)
    assert status is not None
    bad = error_details_pb2.BadRequest()
    assert any(detail.Unpack(bad) for detail in status.details)
    assert _bad_requests(bad.field_violations) == ["caller.session_id", "caller.turn_id"]


async def test_operators_limit_which_tokens_may_subscribe_to_trim_events(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    sidecar = await started(
        ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(credentials.tokens))
    )
    running.append(sidecar)
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        denied = stub.TrimEvents(
            svc.TrimEventsRequest(),
            metadata=(("authorization", f"Bearer {credentials.events_denied_token}"),),
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await denied.read()
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error_reason(caught.value) == "ERROR_REASON_PERMISSION_DENIED"
        allowed = stub.TrimEvents(
            svc.TrimEventsRequest(),
            metadata=(("authorization", f"Bearer {credentials.token}"),),
        )
        assert (await allowed.read()).WhichOneof("item") == "heartbeat"
        allowed.cancel()


SCOPED_TOKENS = {
    "a": ("a-9f1c2e7b5d3a4068b1e2c3d4f5a6b7c8", "runtime-a", ""),
    "b": ("b-3e8d1f6a2c5b4907a8e1d2c3b4a5f6e7", "runtime-b", ""),
    "fleet": ("f-7a2b9c4d1e6f4830b5a6c7d8e9f0a1b2", "dashboards", "read_all_runtimes = true\n"),
    "operator": ("o-4d6e8f0a2b3c4d5e6f708192a3b4c5d6", "*", "read_all_runtimes = true\n"),
}


@pytest.fixture
async def scoped(tmp_path: Path, running: list[Sidecar]) -> Sidecar:
    """A sidecar whose tokens are bound to runtime-a, runtime-b, a fleet reader and an operator."""
    path = tmp_path / "tokens.toml"
    path.write_text(
        "".join(
            f'[[tokens]]\ntoken = "{token}"\nruntime_id = "{runtime}"\n{extra}'
            for token, runtime, extra in SCOPED_TOKENS.values()
        )
    )
    sidecar = await started(ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(path)))
    running.append(sidecar)
    return sidecar


def bearer(who: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {SCOPED_TOKENS[who][0]}"),)


async def subscribe(
    stub: history_service_pb2_grpc.HistoryServiceStub, who: str, **request: Any
) -> Any:
    """An open TrimEvents stream, past its opening heartbeat."""
    call = stub.TrimEvents(svc.TrimEventsRequest(**request), metadata=bearer(who))
    assert (await call.read()).WhichOneof("item") == "heartbeat"
    return call


async def trimmed_turns(call: Any, n: int) -> list[tuple[str, str]]:
    """(runtime_id, session_id) of the next `n` events of a stream (heartbeats skipped)."""
    seen: list[tuple[str, str]] = []
    while len(seen) < n:
        item = await asyncio.wait_for(call.read(), 5)
        if item.WhichOneof("item") == "event":
            caller = item.event.trimmed.caller
            seen.append((caller.runtime_id, caller.session_id))
    return seen


async def test_a_runtime_token_reads_its_own_runtime_only(scoped: Sidecar) -> None:
    """Issue 17 (1): runtime A's token asking for B's events is PERMISSION_DENIED; without a
    runtime filter it gets A's events alone; the fleet reader and the operator see all."""
    async with grpc.aio.insecure_channel(scoped.tcp_addresses[0]) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        for asked in (["runtime-b"], ["runtime-a", "runtime-b"]):
            call = stub.TrimEvents(svc.TrimEventsRequest(runtime_ids=asked), metadata=bearer("a"))
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call.read()
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert error_reason(caught.value) == "ERROR_REASON_PERMISSION_DENIED"
            assert "'runtime-b'" in (caught.value.details() or "")
        own = await subscribe(stub, "a")
        named = await subscribe(stub, "a", runtime_ids=["runtime-a"])
        b_sessions = await subscribe(stub, "a", session_ids=["b-session-1"])
        fleet = await subscribe(stub, "fleet")
        operator = await subscribe(stub, "operator")
        for runtime, session in (("runtime-b", "b-session-1"), ("runtime-a", "a-session-1")):
            request = trim_request(runtime)
            request.caller.session_id = session
            await stub.TrimHistory(request, metadata=bearer("operator"), timeout=5)
        both = [("runtime-b", "b-session-1"), ("runtime-a", "a-session-1")]
        assert await trimmed_turns(own, 1) == [("runtime-a", "a-session-1")]
        assert await trimmed_turns(named, 1) == [("runtime-a", "a-session-1")]
        assert await trimmed_turns(fleet, 2) == both
        assert await trimmed_turns(operator, 2) == both
        # The session filter narrows the token's scope, never widens it: B's session is not A's.
        marker = trim_request("runtime-a")
        marker.caller.session_id = "b-session-1"
        await stub.TrimHistory(marker, metadata=bearer("a"), timeout=5)
        assert await trimmed_turns(b_sessions, 1) == [("runtime-a", "b-session-1")]
        for call in (own, named, b_sessions, fleet, operator):
            call.cancel()


@pytest.mark.parametrize("engine", ["native", "python"])
async def test_an_empty_runtime_id_is_filled_with_the_tokens_runtime(
    tmp_path: Path, running: list[Sidecar], engine: str
) -> None:
    """Issue 17 (2): A's token with `caller{runtime_id: "", session_id: "b-session-1"}`
    publishes as runtime-a; B's session watcher (B's token) does not see it."""
    path = tmp_path / "tokens.toml"
    path.write_text(
        "".join(
            f'[[tokens]]\ntoken = "{token}"\nruntime_id = "{runtime}"\n{extra}'
            for token, runtime, extra in SCOPED_TOKENS.values()
        )
    )
    sidecar = await started(
        ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(path), engine=engine)
    )
    running.append(sidecar)
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        b_watch = await subscribe(stub, "b", session_ids=["b-session-1"])
        fleet = await subscribe(stub, "fleet", session_ids=["b-session-1"])
        meters = await subscribe(stub, "fleet", include_meter_updates=True)
        sneaky = trim_request("")
        sneaky.caller.session_id = "b-session-1"
        sneaky.caller.agent_id = "agent-7"
        response = await stub.TrimHistory(sneaky, metadata=bearer("a"), timeout=5)
        assert response.outcome.trimmed
        item = await asyncio.wait_for(fleet.read(), 5)
        caller = item.event.trimmed.caller
        # Filled, and nothing else of the caller lost.
        assert (caller.runtime_id, caller.session_id, caller.agent_id) == (
            "runtime-a",
            "b-session-1",
            "agent-7",
        )
        # A request with no CallerContext at all gets one naming the token's runtime.
        bare = svc.PrepareModelCallRequest(history=history())
        await stub.PrepareModelCall(bare, metadata=bearer("a"), timeout=5)
        while (update := await asyncio.wait_for(meters.read(), 5)).WhichOneof("item") != (
            "meter_update"
        ):
            pass
        assert update.meter_update.caller.runtime_id == "runtime-a"
        # B's own event in its session reaches B's watcher first: A's never did.
        own = trim_request("runtime-b")
        own.caller.session_id = "b-session-1"
        await stub.TrimHistory(own, metadata=bearer("b"), timeout=5)
        assert await trimmed_turns(b_watch, 1) == [("runtime-b", "b-session-1")]
        for call in (b_watch, fleet, meters):
            call.cancel()


async def list_services(target: str, token: str | None = None) -> list[str]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        calls = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
            metadata=(("authorization", f"Bearer {token}"),) if token else None,
        )
        async for response in calls:
            return [s.name for s in response.list_services_response.service]
    return []


async def test_with_tokens_reflection_needs_one_and_health_does_not(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    """Probes carry no token, so health is exempt; reflection describes every method, so it is
    not (admission exempts both: they are cheap)."""
    sidecar = await started(
        ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(credentials.tokens))
    )
    running.append(sidecar)
    target = sidecar.tcp_addresses[0]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await list_services(target)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "turnkeeper.v1.HistoryService" in await list_services(target, credentials.token)


def v1_reflection_messages() -> tuple[Any, Any]:
    """grpc.reflection.v1's request and response classes (grpcio-reflection ships no v1 code)."""
    file = v1_file()
    return (
        message_factory.GetMessageClass(file.message_types_by_name["ServerReflectionRequest"]),
        message_factory.GetMessageClass(file.message_types_by_name["ServerReflectionResponse"]),
    )


async def reflect_v1(target: str, **request: Any) -> Any:
    """One grpc.reflection.v1 request, answered by its response."""
    request_class, response_class = v1_reflection_messages()
    async with grpc.aio.insecure_channel(target) as channel:
        info = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=request_class.SerializeToString,
            response_deserializer=response_class.FromString,
        )
        call = info(iter([request_class(**request)]), timeout=5)
        async for response in call:
            return response
    raise AssertionError("no reflection response")


async def test_reflection_answers_v1_and_v1alpha_clients(running: list[Sidecar]) -> None:
    sidecar = await started(ServerConfig(listen=("127.0.0.1:0",)))
    running.append(sidecar)
    target = sidecar.tcp_addresses[0]
    both = {"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}
    listed_alpha = set(await list_services(target))
    response = await reflect_v1(target, list_services="")
    assert response.DESCRIPTOR.full_name == "grpc.reflection.v1.ServerReflectionResponse"
    listed_v1 = {service.name for service in response.list_services_response.service}
    assert listed_v1 == listed_alpha
    assert {"turnkeeper.v1.HistoryService", "grpc.health.v1.Health"} | both <= listed_v1
    # A v1 client can describe the service (grpcurl's `describe`), and v1 itself.
    for symbol, file in [
        ("turnkeeper.v1.HistoryService", "turnkeeper/v1/history_service.proto"),
        ("grpc.reflection.v1.ServerReflection", "grpc/reflection/v1/reflection.proto"),
    ]:
        described = await reflect_v1(target, file_containing_symbol=symbol)
        names = [
            descriptor_pb2.FileDescriptorProto.FromString(raw).name
            for raw in described.file_descriptor_response.file_descriptor_proto
        ]
        assert file in names, names


async def test_reflection_can_be_switched_off(running: list[Sidecar]) -> None:
    on = await started(ServerConfig(listen=("127.0.0.1:0",)))
    off = await started(ServerConfig(listen=("127.0.0.1:0",), reflection=False))
    running += [on, off]
    assert "turnkeeper.v1.HistoryService" in await list_services(on.tcp_addresses[0])
    # Nothing is written on the call: a request still being sent when the server answers
    # UNIMPLEMENTED would fail on the client's side as INTERNAL instead.
    for version in ("v1alpha", "v1"):
        async with grpc.aio.insecure_channel(off.tcp_addresses[0]) as channel:
            path = f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo"
            call = channel.stream_stream(path)()
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call.read()
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED, version
    assert parse_config(["--no-reflection"], {}).reflection is False
    assert parse_config([], {"TURNKEEPER_REFLECTION": "false"}).reflection is False


def test_a_non_loopback_bind_without_tls_or_auth_is_warned_about(
    credentials: Credentials,
) -> None:
    exposed = ServerConfig(listen=("0.0.0.0:50051", "127.0.0.1:1"))
    warnings = exposure_warnings(exposed)
    assert len(warnings) == 2
    assert "0.0.0.0:50051 without TLS" in warnings[0] and "127.0.0.1:1" not in warnings[0]
    assert "without authentication" in warnings[1]
    assert exposure_warnings(ServerConfig(listen=("127.0.0.1:1", "[::1]:2", "localhost:3"))) == []
    secured = tls_config(credentials, listen=("[::]:50051",), auth_tokens=str(credentials.tokens))
    assert exposure_warnings(secured) == []
    assert len(exposure_warnings(ServerConfig(listen=("tk.example:1",)))) == 2


async def test_the_warning_is_logged_at_startup(
    running: list[Sidecar], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="turnkeeper.server"):
        running.append(await started(ServerConfig(listen=("0.0.0.0:0",))))
    assert any("without TLS" in record.getMessage() for record in caplog.records)


STRONG = "6f354f389d5c6a18c763bcbc035e0cb4"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "tokens: Field required"),
        ('[[tokens]]\ntoken = "short"\nruntime_id = "r"\n', "about 24 bits of entropy"),
        (f'[[tokens]]\ntoken = "{STRONG}"\n', "runtime_id: Field required"),
        (
            f'[[tokens]]\ntoken = "{STRONG}"\nruntime_id = "a"\n' * 2,
            "the same token is listed twice",
        ),
        (
            '[[tokens]]\ntoken = "changeme-changeme-changeme-12345"\nruntime_id = "r"\n',
            "tokens.0.token: .* 18 of them in repeats or runs",
        ),
        ("[[tokens]\n", "token file"),
        # The fleet-wide reader is an explicit grant, even for an operator token.
        (f'[[tokens]]\ntoken = "{STRONG}"\nruntime_id = "*"\n', "read_all_runtimes = true"),
    ],
)
async def test_a_bad_token_file_is_a_startup_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(text)
    sidecar = Sidecar(ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(path)))
    with pytest.raises(StartupError, match=message):
        await sidecar.start()


async def test_a_key_that_does_not_match_the_certificate_is_a_startup_error(
    credentials: Credentials,
) -> None:
    config = ServerConfig(
        listen=("127.0.0.1:0",),
        tls_cert=str(credentials.server_cert),
        tls_key=str(credentials.client_key),
    )
    with pytest.raises(StartupError, match="cannot use --tls-cert"):
        await Sidecar(config).start()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tls-cert", "/c.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-key", "/k.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-client-ca", "/ca.pem"], "--tls-client-ca needs --tls-cert"),
    ],
)
def test_tls_flags_that_do_not_go_together_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_config(argv, {})
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_the_caller_is_read_from_raw_request_bytes_as_protobuf_would() -> None:
    request = trim_request("runtime-a")
    number = svc.TrimHistoryRequest.DESCRIPTOR.fields_by_name["caller"].number
    assert caller_from_wire(request.SerializeToString(), number) == request.caller
    # A repeated occurrence merges into the first, as protobuf parsing does.
    later = svc.TrimHistoryRequest(caller=trim_pb2.CallerContext(runtime_id="runtime-b"))
    data = request.SerializeToString() + later.SerializeToString()
    assert caller_from_wire(data, number).runtime_id == "runtime-b"
    assert caller_from_wire(data, number).session_id == "s"
    assert svc.TrimHistoryRequest.FromString(data).caller == caller_from_wire(data, number)
    with pytest.raises(ValueError):
        caller_from_wire(b"\x0a\xff", number)


async def ops_get(
    address: str, path: str, ca: Path | None, headers: dict[str, str] | None = None
) -> int:
    """The status of GET <path> on the ops port, over HTTPS trusting `ca`, or plain HTTP."""
    scheme = "https" if ca else "http"
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{scheme}://{address}{path}", ssl=context or False, headers=headers) as r,
    ):
        return r.status


async def test_the_ops_port_has_tls_when_grpc_has_it(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    """Issue 17 (3): the same certificate, re-read when it rotates; plain HTTP is refused."""
    sidecar = await started(tls_config(credentials, http="127.0.0.1:0"))
    running.append(sidecar)
    address = sidecar.http_address
    assert address is not None
    assert await ops_get(address, "/healthz", credentials.ca) == 200
    with pytest.raises(aiohttp.ClientError):
        await ops_get(address, "/healthz", None)
    rotated = credentials.rotate_server_pair()
    assert await ops_get(address, "/metrics", rotated) == 200
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await ops_get(address, "/metrics", credentials.ca)
    plain = await started(tls_config(credentials, http="127.0.0.1:0", http_plaintext=True))
    running.append(plain)
    assert plain.http_address is not None
    assert await ops_get(plain.http_address, "/healthz", None) == 200


async def test_the_ops_port_can_have_its_own_certificate(
    running: list[Sidecar], tmp_path: Path
) -> None:
    ca = trustme.CA()
    cert, key, ca_file = tmp_path / "ops.pem", tmp_path / "ops.key", tmp_path / "ops-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    issued = ca.issue_cert("127.0.0.1")
    issued.private_key_pem.write_to_path(str(key))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    config = ServerConfig(
        listen=("127.0.0.1:0",), http="127.0.0.1:0", http_tls_cert=str(cert), http_tls_key=str(key)
    )
    sidecar = await started(config)  # the gRPC port itself without TLS
    running.append(sidecar)
    assert sidecar.http_address is not None
    assert await ops_get(sidecar.http_address, "/readyz", ca_file) == 200


async def test_metrics_can_require_a_token_while_probes_stay_open(
    credentials: Credentials, running: list[Sidecar]
) -> None:
    sidecar = await started(
        tls_config(
            credentials,
            http="127.0.0.1:0",
            auth_tokens=str(credentials.tokens),
            metrics_auth=True,
        )
    )
    running.append(sidecar)
    address, ca = sidecar.http_address, credentials.ca
    assert address is not None
    assert await ops_get(address, "/metrics", ca) == 401
    wrong = {"Authorization": "Bearer not-a-token-of-this-server"}
    assert await ops_get(address, "/metrics", ca, wrong) == 401
    good = {"Authorization": f"Bearer {credentials.events_denied_token}"}
    assert await ops_get(address, "/metrics", ca, good) == 200
    assert await ops_get(address, "/healthz", ca) == 200
    assert await ops_get(address, "/readyz", ca) == 200
    with pytest.raises(SystemExit):
        parse_config(["--metrics-auth"], {})


def test_an_open_ops_port_next_to_token_auth_is_warned_about(credentials: Credentials) -> None:
    tokens = str(credentials.tokens)
    open_port = ServerConfig(http="0.0.0.0:9464", auth_tokens=tokens)
    warnings = ops_exposure_warnings(open_port)
    assert len(warnings) == 2
    assert "plain HTTP" in warnings[0] and "0.0.0.0:9464" in warnings[0]
    assert "--metrics-auth" in warnings[1]
    secured = tls_config(credentials, http="[::]:9464", auth_tokens=tokens, metrics_auth=True)
    assert ops_exposure_warnings(secured) == []
    assert ops_exposure_warnings(ServerConfig(http="127.0.0.1:9464", auth_tokens=tokens)) == []
    assert ops_exposure_warnings(ServerConfig(http="0.0.0.0:9464")) == []  # no tokens to protect


async def test_the_ops_warning_is_logged_at_startup(
    credentials: Credentials, running: list[Sidecar], caplog: pytest.LogCaptureFixture
) -> None:
    config = ServerConfig(
        listen=("127.0.0.1:0",), http="0.0.0.0:0", auth_tokens=str(credentials.tokens)
    )
    with caplog.at_level(logging.WARNING, logger="turnkeeper.server"):
        running.append(await started(config))
    assert any("answers /metrics to anyone" in r.getMessage() for r in caplog.records)


async def test_the_dashboard_sign_in_never_takes_a_token_in_clear_beyond_loopback(
    credentials: Credentials,
) -> None:
    access = DashboardAccess(load_tokens(str(credentials.tokens)))
    bearer = {"Authorization": f"Bearer {credentials.token}"}

    def request(peer: str) -> web.Request:
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda name, default=None: (
            (peer, 40000) if name == "peername" else default
        )
        return make_mocked_request(
            "POST", "/dashboard/session", headers=bearer, transport=transport
        )

    refused = await access.sign_in(request("10.1.2.3"))
    assert refused.status == 403
    accepted = await access.sign_in(request("127.0.0.1"))
    assert accepted.status == 204
    cookie = accepted.cookies[COOKIE]
    assert cookie["secure"] and cookie["httponly"] and cookie["samesite"] == "Strict"
