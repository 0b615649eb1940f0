"""edge/pipeline.py: each of the edge's stages alone, and that `MethodEdge` passes a call through
them in the order the stage tuples declare."""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeAlias

import grpc
import pytest
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2
from turnkeeper.server.app import admission_limits
from turnkeeper.server.config import ServerConfig
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.edge import pipeline
from turnkeeper.server.edge.access_log import CallStats, MethodTelemetry
from turnkeeper.server.edge.admission import Admission, AdmissionLimits, ServiceCost
from turnkeeper.server.edge.auth import TokenAuthInterceptor, load_tokens
from turnkeeper.server.edge.drain import CallsInService
from turnkeeper.server.edge.load_shed import LoadShedder, QueueClock
from turnkeeper.server.edge.pipeline import (
    CLIENT_STREAMING_STAGES,
    SERVER_STREAMING_STAGES,
    UNARY_STAGES,
    AccessLog,
    admit,
    arrive,
    authenticate,
    count_requests,
    deadline_passed,
    decode_request,
    enter_service,
    hold_heavy_slot,
    read_request,
    refuse_while_draining,
    shed_load,
    take_receiving_slot,
    wait_for_receiving_slot,
)
from turnkeeper.server.edge.security import security
from turnkeeper.server.edge.server import create_server, load_shedder
from turnkeeper.server.edge.wrapper import Edge
from turnkeeper.v1 import errors_pb2

Metadata: TypeAlias = tuple[tuple[str, str], ...]
SERVICE = "test.Pipeline"
UNARY = f"/{SERVICE}/Unary"
LIMITS = AdmissionLimits(
    max_inflight_bytes=1000,
    heavy_call_bytes=300,
    max_heavy_calls=1,
    max_receiving_calls=1,
    receive_wait_seconds=0.05,
    heavy_wait_seconds=0.05,
)


class FakeContext:
    """The parts of a grpc.aio servicer context the stages use: its headers, its one request
    message (None: the call ended without one), no deadline, its trailers, and an abort that
    records the status and raises as grpc's does."""

    def __init__(self, metadata: Metadata = (), message: bytes | None = b"") -> None:
        self._metadata = metadata
        self._message = message
        self._trailers: tuple[tuple[str, Any], ...] = ()
        self.status: grpc.Status | None = None
        self.done_callbacks: list[Callable[..., object]] = []

    def invocation_metadata(self) -> Metadata:
        return self._metadata

    async def read(self) -> Any:
        return grpc.aio.EOF if self._message is None else self._message

    def time_remaining(self) -> float | None:
        return None

    def set_trailing_metadata(self, trailers: tuple[tuple[str, Any], ...]) -> None:
        self._trailers = trailers

    def trailing_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._trailers

    def code(self) -> grpc.StatusCode | None:
        return None if self.status is None else self.status.code

    async def abort_with_status(self, status: grpc.Status) -> None:
        self.status = status
        self._trailers = tuple(status.trailing_metadata)
        raise grpc.aio.AbortError(status.details)

    def add_done_callback(self, callback: Callable[..., object]) -> None:
        self.done_callbacks.append(callback)


def _context(**kwargs: Any) -> Any:
    """A FakeContext where the stages take a grpc context."""
    return FakeContext(**kwargs)


def _stats() -> CallStats:
    return CallStats(MethodTelemetry(UNARY, "unary"), "pipeline-test")


async def _echo(request: bytes, context: object) -> bytes:
    return request


HANDLER: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(_echo)


def _refusal(answer: RequestError | None) -> RequestError:
    """The refusal a stage answered (None: it let the call on)."""
    assert answer is not None
    return answer


# arrive, enter_service


async def test_arrive_counts_the_call_for_the_shedder_and_keeps_the_callers_request_id() -> None:
    shedder = LoadShedder(target=0.05, queue_calls=4, interval=0.1, retry_after_seconds=1.0)
    shedder.clock = QueueClock(lambda: 0)
    telemetry = MethodTelemetry(UNARY, "unary")
    stats = arrive(shedder, telemetry, _context(metadata=(("x-request-id", "caller-id"),)))
    assert shedder.clock.seen == 1
    assert stats.telemetry is telemetry and stats.request_id == "caller-id"
    assert (stats.requests, stats.request_bytes) == (0, 0)
    # Without a shedder the call still gets its figures, and a request id of its own.
    assert arrive(None, telemetry, _context()).request_id not in ("", "caller-id")


async def test_enter_service_counts_the_calling_task_until_it_leaves() -> None:
    in_service = CallsInService()
    task = enter_service(in_service)
    assert task is asyncio.current_task() and len(in_service) == 1
    in_service.leave(task)
    assert len(in_service) == 0


# authenticate


@pytest.fixture
def token_file(tmp_path: Path) -> tuple[Path, str]:
    """A token file (`--auth-tokens`) with one token, and that token."""
    token = secrets.token_hex(32)
    path = tmp_path / "tokens.toml"
    path.write_text(f'[[tokens]]\ntoken = "{token}"\nruntime_id = "pipeline-runtime"\n')
    return path, token


def _token_auth(token_file: tuple[Path, str]) -> tuple[grpc.aio.ServerInterceptor, ...]:
    return (TokenAuthInterceptor(load_tokens(str(token_file[0]))),)


async def test_authenticate_without_tokens_keeps_the_handler() -> None:
    assert await authenticate((), UNARY, HANDLER, _context()) is HANDLER


async def test_authenticate_keeps_the_handler_of_a_call_with_a_known_token(
    token_file: tuple[Path, str],
) -> None:
    token = token_file[1]
    context = _context(metadata=(("authorization", f"Bearer {token}"),))
    assert await authenticate(_token_auth(token_file), UNARY, HANDLER, context) is HANDLER


async def test_authenticate_refuses_a_call_without_a_token_without_reading_it(
    token_file: tuple[Path, str],
) -> None:
    refusal = await authenticate(_token_auth(token_file), UNARY, HANDLER, _context())
    assert refusal is not HANDLER and refusal.request_streaming
    context = FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        await refusal.stream_unary(iter(()), context)  # type: ignore[arg-type,misc]
    assert context.status is not None
    assert context.status.code == grpc.StatusCode.UNAUTHENTICATED


# refuse_while_draining, shed_load


def test_refuse_while_draining_answers_unavailable_only_while_the_server_drains() -> None:
    admission = Admission(LIMITS)
    assert refuse_while_draining(admission) is None
    admission.draining = True
    refused = _refusal(refuse_while_draining(admission))
    assert refused.code == grpc.StatusCode.UNAVAILABLE
    assert refused.reason == errors_pb2.ERROR_REASON_SHUTTING_DOWN


def _standing_queue(shedder: LoadShedder, waited: float, behind: int) -> None:
    """Gives the shedder's clock the wait and the calls behind of the call that arrived last."""
    clock = shedder.clock = QueueClock(lambda: 0)
    clock.known, clock.waited, clock.behind = True, waited, behind


async def test_shed_load_refuses_only_when_the_shedder_sheds() -> None:
    admission = Admission(LIMITS)
    assert shed_load(None, admission) is None
    shedder = LoadShedder(target=0.05, queue_calls=4, interval=0.0, retry_after_seconds=1.0)
    assert shed_load(shedder, admission) is None  # sees no queue yet
    _standing_queue(shedder, waited=0.01, behind=10)  # a short wait: no standing queue
    assert shed_load(shedder, admission) is None and shedder.refused == 0
    _standing_queue(shedder, waited=1.0, behind=10)
    refused = _refusal(shed_load(shedder, admission))
    assert shedder.refused == 1 and refused is shedder.refusal()
    assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.reason == errors_pb2.ERROR_REASON_OVERLOADED


# take_receiving_slot, wait_for_receiving_slot


def test_take_receiving_slot_takes_a_free_slot_and_no_more() -> None:
    admission = Admission(LIMITS)
    assert take_receiving_slot(admission) and admission.receiving.used == 1
    assert not take_receiving_slot(admission) and admission.receiving.used == 1


async def test_wait_for_receiving_slot_gets_a_freed_slot_or_answers_the_refusal() -> None:
    admission = Admission(LIMITS)
    assert take_receiving_slot(admission)
    refused = _refusal(await wait_for_receiving_slot(admission, ServiceCost()))
    assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.reason == errors_pb2.ERROR_REASON_OVERLOADED
    waiting = asyncio.create_task(wait_for_receiving_slot(admission, ServiceCost()))
    await asyncio.sleep(0)
    admission.receiving.give()
    assert await waiting is None and admission.receiving.used == 1


# read_request, decode_request


async def test_read_request_counts_the_one_message() -> None:
    stats = _stats()
    assert await read_request(_context(message=b"abc"), stats) == b"abc"
    assert (stats.requests, stats.request_bytes) == (1, 3)


async def test_read_request_answers_invalid_argument_when_no_message_came() -> None:
    stats = _stats()
    context = FakeContext(message=None)
    with pytest.raises(grpc.aio.AbortError):
        await read_request(context, stats)  # type: ignore[arg-type]
    assert context.status is not None
    assert context.status.code == grpc.StatusCode.INVALID_ARGUMENT
    assert (stats.requests, stats.request_bytes) == (0, 0)


def test_decode_request_hands_raw_bytes_on_without_a_deserializer() -> None:
    raw = b"\x0a\x01x"
    assert decode_request(HANDLER, raw) is raw


def test_decode_request_decodes_with_the_handlers_deserializer() -> None:
    handler: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(
        _echo, request_deserializer=health_pb2.HealthCheckRequest.FromString
    )
    raw = health_pb2.HealthCheckRequest(service="x").SerializeToString()
    assert decode_request(handler, raw) == health_pb2.HealthCheckRequest(service="x")


@pytest.mark.parametrize("error", [DecodeError("bad"), ValueError("bad"), TypeError("bad")])
def test_decode_request_turns_an_undecodable_request_into_invalid_argument(
    error: Exception,
) -> None:
    def undecodable(raw: bytes) -> object:
        raise error

    handler: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(
        _echo, request_deserializer=undecodable
    )
    refused = decode_request(handler, b"\xff")
    assert isinstance(refused, RequestError)
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.reason == errors_pb2.ERROR_REASON_MALFORMED_REQUEST
    assert "does not decode" in refused.message


# AccessLog


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[object, object]]:
    return [
        (getattr(record, "method", None), getattr(record, "status", None))
        for record in caplog.records
        if record.name == "turnkeeper.access"
    ]


def test_access_log_writes_one_line_and_returns_the_request_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    context = FakeContext()
    with (
        caplog.at_level(logging.INFO, logger="turnkeeper.access"),
        AccessLog(_stats(), b"", context),  # type: ignore[arg-type]
    ):
        assert ("x-request-id", "pipeline-test") in context.trailing_metadata()
    assert _access_lines(caplog) == [(UNARY, "OK")]


def test_access_log_gives_the_exception_that_ends_the_call_as_its_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="turnkeeper.access"):
        with pytest.raises(RuntimeError), AccessLog(_stats(), b"", _context()):
            raise RuntimeError("the handler failed")
        with pytest.raises(asyncio.CancelledError), AccessLog(_stats(), b"", _context()):
            raise asyncio.CancelledError
    assert _access_lines(caplog) == [(UNARY, "UNKNOWN"), (UNARY, "CANCELLED")]


# deadline_passed


@pytest.mark.parametrize(
    ("remaining", "passed"), [(None, False), (1.0, False), (0.0, True), (-0.5, True)]
)
def test_deadline_passed(remaining: float | None, passed: bool) -> None:
    assert deadline_passed(remaining) is passed


# admit, hold_heavy_slot


def test_admit_counts_a_light_call_in_and_gives_its_receiving_slot_back() -> None:
    admission = Admission(LIMITS)
    assert take_receiving_slot(admission)
    assert admit(admission, 100) is False
    assert (admission.inflight_bytes, admission.calls, admission.receiving.used) == (100, 1, 0)


def test_admit_tells_a_heavy_call() -> None:
    admission = Admission(LIMITS)
    assert take_receiving_slot(admission)
    assert admit(admission, 300) is True
    assert (admission.inflight_bytes, admission.receiving.used) == (300, 0)


def test_admit_refuses_a_call_over_the_budget_and_still_gives_its_slot_back() -> None:
    admission = Admission(LIMITS)
    assert take_receiving_slot(admission) and admit(admission, 900) is True
    assert take_receiving_slot(admission)
    refused = admit(admission, 200)
    assert isinstance(refused, RequestError)
    assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (admission.inflight_bytes, admission.receiving.used) == (900, 0)


async def test_hold_heavy_slot_takes_a_free_slot_and_counts_the_memory_until_sent() -> None:
    admission = Admission(LIMITS)
    assert take_receiving_slot(admission) and admit(admission, 300) is True
    context = FakeContext()
    await hold_heavy_slot(admission, 300, None, context)  # type: ignore[arg-type]
    assert admission.heavy_calls == 1 and context.done_callbacks == [admission.sent]


async def test_hold_heavy_slot_answers_the_refusal_when_no_slot_comes_free() -> None:
    admission = Admission(LIMITS)
    assert take_receiving_slot(admission) and admit(admission, 300) is True
    await hold_heavy_slot(admission, 300, None, _context())
    assert take_receiving_slot(admission) and admit(admission, 300) is True
    context = FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        await hold_heavy_slot(admission, 300, 1.0, context)  # type: ignore[arg-type]
    assert context.status is not None
    assert context.status.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert admission.inflight_bytes == 300 and admission.heavy_calls == 1


# count_requests


async def _raw(*messages: bytes) -> AsyncIterator[bytes]:
    for message in messages:
        yield message


async def test_count_requests_counts_each_request_as_it_is_read() -> None:
    stats = _stats()
    counted = count_requests(_raw(b"ab", b"cde"), stats, HANDLER)
    assert await anext(counted) == b"ab"
    assert (stats.requests, stats.request_bytes) == (1, 2)
    assert [request async for request in counted] == [b"cde"]
    assert (stats.requests, stats.request_bytes) == (2, 5)


async def test_count_requests_decodes_each_request_for_the_handler() -> None:
    handler: grpc.RpcMethodHandler[Any, Any] = grpc.stream_unary_rpc_method_handler(
        _echo, request_deserializer=health_pb2.HealthCheckRequest.FromString
    )
    raw = health_pb2.HealthCheckRequest(service="x").SerializeToString()
    counted = count_requests(_raw(raw), _stats(), handler)
    assert [request async for request in counted] == [health_pb2.HealthCheckRequest(service="x")]


# The order of the stages.

STAGE_TUPLES = {
    "UNARY_STAGES": UNARY_STAGES,
    "SERVER_STREAMING_STAGES": SERVER_STREAMING_STAGES,
    "CLIENT_STREAMING_STAGES": CLIENT_STREAMING_STAGES,
}
# The halves of stages that only a call that has to wait runs.
WAITING_HALVES = (wait_for_receiving_slot, hold_heavy_slot)


@pytest.mark.parametrize("name", STAGE_TUPLES)
def test_every_stage_named_is_a_function_or_class_of_the_pipeline(name: str) -> None:
    for stage in STAGE_TUPLES[name]:
        assert inspect.isfunction(stage) or inspect.isclass(stage), stage
        assert stage.__module__ == pipeline.__name__, stage
        assert getattr(pipeline, stage.__name__) is stage, stage


def _recording(stage: Any, passed: list[str]) -> Any:
    """`stage`, noting its name in `passed` each time a call enters it."""
    name = stage.__name__
    if inspect.isclass(stage):

        def recorded_init(self: Any, *args: Any, **kwargs: Any) -> None:
            passed.append(name)
            stage.__init__(self, *args, **kwargs)

        return type(name, (stage,), {"__init__": recorded_init})
    if inspect.iscoroutinefunction(stage):

        async def recorded_coroutine(*args: Any, **kwargs: Any) -> Any:
            passed.append(name)
            return await stage(*args, **kwargs)

        return recorded_coroutine

    def recorded(*args: Any, **kwargs: Any) -> Any:
        passed.append(name)
        return stage(*args, **kwargs)

    return recorded


@pytest.fixture
def passed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stages the calls enter, in order: every stage of the pipeline module records itself."""
    names: list[str] = []
    stages = {stage for stages in STAGE_TUPLES.values() for stage in stages}
    for stage in stages | set(WAITING_HALVES):
        monkeypatch.setattr(pipeline, stage.__name__, _recording(stage, names))
    return names


async def _stream(request: bytes, context: object) -> AsyncIterator[bytes]:
    yield request
    yield request


async def _joined(requests: AsyncIterator[bytes], context: object) -> bytes:
    return b"".join([request async for request in requests])


@pytest.fixture
async def server(token_file: tuple[Path, str]) -> AsyncIterator[tuple[str, Metadata]]:
    """A server built as the app builds its own (its options, load shedder, token
    authentication and edge), serving a unary, a server-streaming and a client-streaming
    method; its address and the headers of a call with a token it knows."""
    tokens, token = token_file
    config = ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(tokens))
    admission = Admission(admission_limits(config))
    _, auth = security(config)
    assert auth, "the token file turns authentication on"
    shedder = load_shedder(config, admission)
    grpc_server = create_server(config, shedder, None)
    Edge(admission, auth, shedder).registry(grpc_server).add_registered_method_handlers(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(_echo),
            "ServerStreaming": grpc.unary_stream_rpc_method_handler(_stream),
            "ClientStreaming": grpc.stream_unary_rpc_method_handler(_joined),
        },
    )
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    await grpc_server.start()
    try:
        yield f"127.0.0.1:{port}", (("authorization", f"Bearer {token}"),)
    finally:
        await grpc_server.stop(0)


def _names(stages: tuple[Any, ...]) -> list[str]:
    return [stage.__name__ for stage in stages]


def _one_at_a_time(*messages: bytes) -> Iterator[bytes]:
    yield from messages


async def _unary_call(channel: grpc.aio.Channel, metadata: Metadata) -> None:
    unary: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(UNARY)
    assert await unary(b"ping", metadata=metadata, timeout=5) == b"ping"


async def _server_streaming_call(channel: grpc.aio.Channel, metadata: Metadata) -> None:
    stream: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(
        f"/{SERVICE}/ServerStreaming"
    )
    call = stream(b"ping", metadata=metadata, timeout=5)
    assert [item async for item in call] == [b"ping", b"ping"]


async def _client_streaming_call(channel: grpc.aio.Channel, metadata: Metadata) -> None:
    joined: grpc.aio.StreamUnaryMultiCallable[bytes, bytes] = channel.stream_unary(
        f"/{SERVICE}/ClientStreaming"
    )
    answer = await joined(_one_at_a_time(b"pi", b"ng"), metadata=metadata, timeout=5)
    assert answer == b"ping"


@pytest.mark.parametrize(
    ("make_call", "stages"),
    [
        (_unary_call, UNARY_STAGES),
        (_server_streaming_call, SERVER_STREAMING_STAGES),
        (_client_streaming_call, CLIENT_STREAMING_STAGES),
    ],
    ids=["unary", "server streaming", "client streaming"],
)
async def test_a_call_passes_the_stages_of_its_kind_in_their_order(
    server: tuple[str, Metadata],
    passed: list[str],
    make_call: Callable[[grpc.aio.Channel, Metadata], Awaitable[None]],
    stages: tuple[Any, ...],
) -> None:
    address, metadata = server
    async with grpc.aio.insecure_channel(address) as channel:
        await make_call(channel, metadata)
    assert passed == _names(stages)
