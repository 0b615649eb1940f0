"""The edge's stages, declared in the order a call passes them, and `MethodEdge`, which passes a
method's calls through them.

A unary call passes `UNARY_STAGES`: it arrives (counted for load shedding, its figures begin),
enters service (a drain whose grace runs out answers it from here, `edge/drain.py`), is
authenticated on its headers (`edge/auth.py`, when tokens are configured), refused while the
server drains, shed under a standing queue (`edge/load_shed.py`), takes a receiving slot, has its
request read and decoded, opens its access log (`edge/access_log.py`), is dropped when its
deadline has passed, and is admitted (`edge/admission.py`) before its handler runs. A stream
passes the stages that apply to it (`SERVER_STREAMING_STAGES`, `CLIENT_STREAMING_STAGES`).

Each stage is a small function here, tested alone. `MethodEdge` calls them in their declared
order in one function per kind of call, since a chain of coroutines would cost every call one
per stage: a stage that may have to wait is split into the part every call runs at once and the
part only a waiting call runs (`wait_for_receiving_slot`, `hold_heavy_slot`), so a call that
waits for nothing runs no coroutine it does not need.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Final, NoReturn, Protocol, TypeAlias, cast

import grpc
from google.protobuf.message import DecodeError

from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.contract.methods import PROBE_PREFIXES
from turnkeeper.server.edge.access_log import (
    CallStats,
    MethodTelemetry,
    finish,
    request_id_of,
    started,
)
from turnkeeper.server.edge.admission import Admission, ServiceCost
from turnkeeper.server.edge.drain import CallsInService
from turnkeeper.server.edge.handlers import rpc_type
from turnkeeper.server.edge.load_shed import LoadShedder
from turnkeeper.server.telemetry.call_ids import reset_call_ids
from turnkeeper.v1 import errors_pb2

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
# What a handler's behaviours are; built once here, as `cast` evaluates its type on every call.
_Unary: TypeAlias = Callable[..., Awaitable[Any]]
_Streaming: TypeAlias = Callable[..., AsyncIterator[Any]]

DEADLINE_PASSED = "the deadline passed before the call started"


class EdgeState(Protocol):
    """What the calls of every method share (`wrapper.Edge`)."""

    admission: Admission
    auth: tuple[grpc.aio.ServerInterceptor, ...]
    shedder: LoadShedder | None
    in_service: CallsInService


# The stages.


def arrive(shedder: LoadShedder | None, telemetry: MethodTelemetry, context: Context) -> CallStats:
    """The call's figures; the first thing every call does. Every call counts for the shedder,
    which times how long calls waited for the server to take them."""
    if shedder is not None:
        shedder.arrived()
    return CallStats(telemetry, request_id_of(context.invocation_metadata()))


def enter_service(in_service: CallsInService) -> asyncio.Task[object] | None:
    """Counts the call in service until its answer, so that a drain whose grace runs out answers
    it rather than let grpc cancel it; `in_service.leave` it with what this returned."""
    return in_service.enter()


async def authenticate(
    auth: Iterable[grpc.aio.ServerInterceptor], method: str, handler: Handler, context: Context
) -> Handler:
    """What authentication makes of the method's handler for this call: the handler, or a
    refusal (a request-streaming handler that never reads its request). A server without tokens
    skips this stage, which costs a coroutine."""
    details = _CallDetails(method, context.invocation_metadata())
    authenticated = await _intercepted(auth, handler, details)
    assert authenticated is not None, "authentication never drops a method"
    return authenticated


def refuse_while_draining(admission: Admission) -> RequestError | None:
    """The answer to a call (not a probe) that arrives while the server drains."""
    if admission.draining:
        return admission.draining_refusal()
    return None


def shed_load(shedder: LoadShedder | None, admission: Admission) -> RequestError | None:
    """The refusal of a call that arrives behind a standing queue, before it waits in it."""
    if shedder is not None and shedder.refuses(admission.receiving):
        return shedder.refusal()
    return None


def take_receiving_slot(admission: Admission) -> bool:
    """Takes a receiving slot when one is free and no call waits for one; otherwise the call
    waits for one (`wait_for_receiving_slot`)."""
    return admission.receiving.try_take()


async def wait_for_receiving_slot(admission: Admission, cost: ServiceCost) -> RequestError | None:
    """Waits for a receiving slot among the calls of its cost; the refusal when none came."""
    if await admission.receiving_slot(cost):
        return None
    return admission.receiving_refusal()


async def read_request(context: Context, stats: CallStats) -> bytes:
    """The call's one request message, counted; a call that ends without one is answered
    INVALID_ARGUMENT."""
    raw = await context.read()
    if raw is grpc.aio.EOF:
        await context.abort_with_status(_no_message().to_status())
    stats.count_request(len(raw))
    return cast(bytes, raw)


def decode_request(handler: Handler, raw: bytes) -> Any:
    """The request as the handler takes it (raw bytes for every HistoryService method), or the
    error to answer when it does not decode."""
    deserializer = handler.request_deserializer
    if deserializer is None:
        return raw
    try:
        return deserializer(raw)
    except (DecodeError, ValueError, TypeError) as error:
        return RequestError(
            grpc.StatusCode.INVALID_ARGUMENT,
            errors_pb2.ERROR_REASON_MALFORMED_REQUEST,
            f"the request message does not decode: {error}",
        )


class AccessLog:
    """One call from `started` to `finish`, its access line and metrics, whichever way it ends
    (the exception that ends it, cancellation and a closed generator included, is its status)."""

    __slots__ = ("_context", "_ids", "_in_generator", "_stats")

    def __init__(
        self, stats: CallStats, request: Any, context: Context, in_generator: bool = False
    ) -> None:
        self._stats = stats
        self._context = context
        self._in_generator = in_generator
        self._ids = started(stats, request, context)

    def __enter__(self) -> None:
        return None

    def __exit__(self, _kind: object, error: BaseException | None, _traceback: object) -> None:
        finish(self._stats, self._context, error)
        if not self._in_generator:
            reset_call_ids(self._ids)
            return
        # A generator closed from another context (garbage collection) cannot reset the
        # variable; its own context then dies with it.
        with contextlib.suppress(ValueError):
            reset_call_ids(self._ids)


def deadline_passed(remaining: float | None) -> bool:
    """Whether nobody waits for the answer any more (`remaining`: the call's time left, None
    without a deadline): such a call does no work and publishes nothing."""
    return remaining is not None and remaining <= 0


def admit(admission: Admission, request_bytes: int) -> bool | RequestError:
    """Counts the received request's bytes in and gives back the call's receiving slot, at once:
    whether the call is heavy (it then holds a heavy slot, `hold_heavy_slot`), or the refusal
    when its bytes would pass the budget."""
    try:
        return admission.count_in(request_bytes, receiving=True)
    except RequestError as over:
        return over


async def hold_heavy_slot(
    admission: Admission, request_bytes: int, remaining: float | None, context: Context
) -> None:
    """Waits for a heavy slot for an admitted heavy call, or answers its refusal; the memory of
    a heavy call counts until its response is sent, when gRPC's done callback tells admission."""
    try:
        await admission.heavy_slot(request_bytes, remaining)
    except RequestError as over:
        await _abort(context, over)
    # (grpc-stubs type the callback as a class of their own.)
    context.add_done_callback(cast(Any, admission.sent))


def count_requests(
    requests: AsyncIterator[Any], stats: CallStats, handler: Handler
) -> AsyncIterator[Any]:
    """A streaming call's requests, each counted as it is read and decoded for the handler."""
    deserializer = handler.request_deserializer

    async def counted() -> AsyncIterator[Any]:
        async for raw in requests:
            stats.count_request(len(raw))
            yield deserializer(raw) if deserializer is not None else raw

    return counted()


UNARY_STAGES: Final = (
    arrive,
    enter_service,
    authenticate,
    refuse_while_draining,
    shed_load,
    take_receiving_slot,
    read_request,
    decode_request,
    AccessLog,
    deadline_passed,
    admit,
)
"""A unary call's stages, in order; probes skip the draining refusal, load shedding, the
receiving slot, the deadline and admission, since they must see the server when it is busy."""
SERVER_STREAMING_STAGES: Final = (
    arrive,
    authenticate,
    refuse_while_draining,
    read_request,
    decode_request,
    AccessLog,
)
"""A call with one request and a stream of responses (TrimEvents, health Watch)."""
CLIENT_STREAMING_STAGES: Final = (arrive, authenticate, AccessLog, count_requests)
"""A call with a stream of requests (server reflection)."""


class MethodEdge:
    """The edge of one method: what its calls share is resolved here, once, and each kind of
    call passes its stages in one function."""

    def __init__(self, edge: EdgeState, method: str, handler: Handler) -> None:
        self.edge = edge
        self.auth = edge.auth
        self.admission = edge.admission
        self.method = method
        self.handler = handler
        self.telemetry = MethodTelemetry(method, rpc_type(method, handler))
        # A probe must see the server even when it is busy.
        self.probe = method.startswith(PROBE_PREFIXES)
        # What a call of this method costs, by which the receiving queue orders it.
        self.cost = ServiceCost()

    async def unary(self, requests: AsyncIterator[Any], context: Context) -> Any:
        """A unary call, through `UNARY_STAGES`. From its arrival to its answer it is in
        service, which a drain whose grace ends answers UNAVAILABLE rather than let grpc cancel
        it (edge/drain.py)."""
        stats = arrive(self.edge.shedder, self.telemetry, context)
        in_service = self.edge.in_service
        task = enter_service(in_service)
        try:
            return await self._unary(stats, requests, context, task)
        except asyncio.CancelledError:
            # Ended by the drain while it waited to be read (once read, `_unary` answers).
            ended = in_service.refusal_if_ended(task)
            if ended is None:
                raise
            return await _refuse(stats, context, ended)
        finally:
            in_service.leave(task)

    async def _unary(
        self,
        stats: CallStats,
        requests: AsyncIterator[Any],
        context: Context,
        task: asyncio.Task[object] | None,
    ) -> Any:
        handler = (
            await authenticate(self.auth, self.method, self.handler, context)
            if self.auth
            else self.handler
        )
        if handler.request_streaming:  # authentication's refusal, which never reads the request
            refusal = cast(_Unary, handler.stream_unary)
            return await _refuse(stats, context, functools.partial(refusal, requests, context))
        admission = self.admission
        probe = self.probe
        refused: RequestError | None = None
        if not probe:
            refused = refuse_while_draining(admission)
            if refused is None:
                refused = shed_load(self.edge.shedder, admission)
            if refused is None and not take_receiving_slot(admission):
                refused = await wait_for_receiving_slot(admission, self.cost)
        if refused is not None:
            return await _refuse(stats, context, refused)
        began = time.monotonic()
        # A call (not a probe) holds a receiving slot, with its reservation, until admission
        # has counted its bytes in, or it ends before that.
        receiving = not probe
        heavy: bool | None = None
        try:
            raw = await read_request(context, stats)
            request = decode_request(handler, raw)
            with AccessLog(stats, request, context):
                try:
                    if isinstance(request, RequestError):
                        await context.abort_with_status(request.to_status())
                    if not probe:
                        remaining = context.time_remaining()
                        if deadline_passed(remaining):
                            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, DEADLINE_PASSED)
                        receiving = False  # admit gives it back, whatever it answers
                        admitted = admit(admission, stats.request_bytes)
                        if isinstance(admitted, RequestError):
                            await _abort(context, admitted)
                        if admitted:
                            await hold_heavy_slot(
                                admission, stats.request_bytes, remaining, context
                            )
                        heavy = admitted
                    behavior = cast(_Unary, handler.unary_unary)
                    response = await behavior(request, context)
                    stats.count_response(response)
                    return response
                except asyncio.CancelledError:
                    # Ended by the drain: answered here, so its access line says so.
                    ended = self.edge.in_service.refusal_if_ended(task)
                    if ended is None:
                        raise
                    await _abort(context, ended)
        finally:
            if receiving:
                admission.receiving.give()
            if heavy is not None:
                admission.release(stats.request_bytes, heavy)
            if not probe:
                self.cost.observe(time.monotonic() - began)

    async def unary_stream(self, requests: AsyncIterator[Any], context: Context) -> Any:
        """A call with one request and a stream of responses, through
        `SERVER_STREAMING_STAGES`."""
        stats = arrive(self.edge.shedder, self.telemetry, context)
        handler = (
            await authenticate(self.auth, self.method, self.handler, context)
            if self.auth
            else self.handler
        )
        if handler.request_streaming:
            async for item in _refused_stream(stats, context, handler, requests):
                yield item
            return
        refused = None if self.probe else refuse_while_draining(self.admission)
        if refused is not None:
            await _refuse(stats, context, refused)
            return
        raw = await read_request(context, stats)
        request = decode_request(handler, raw)
        with AccessLog(stats, request, context, in_generator=True):
            if isinstance(request, RequestError):
                await context.abort_with_status(request.to_status())
            behavior = cast(_Streaming, handler.unary_stream)
            async for item in behavior(request, context):
                stats.count_response(item)
                yield item

    async def stream_unary(self, requests: AsyncIterator[Any], context: Context) -> Any:
        """A client-streaming call (none in the sidecar's services; here for completeness),
        through `CLIENT_STREAMING_STAGES`."""
        stats = arrive(self.edge.shedder, self.telemetry, context)
        handler = (
            await authenticate(self.auth, self.method, self.handler, context)
            if self.auth
            else self.handler
        )
        with AccessLog(stats, None, context):
            behavior = cast(_Unary, handler.stream_unary)
            response = await behavior(count_requests(requests, stats, self.handler), context)
            stats.count_response(response)
            return response

    async def stream_stream(self, requests: AsyncIterator[Any], context: Context) -> Any:
        """A bidirectional call (server reflection), through `CLIENT_STREAMING_STAGES`."""
        stats = arrive(self.edge.shedder, self.telemetry, context)
        handler = (
            await authenticate(self.auth, self.method, self.handler, context)
            if self.auth
            else self.handler
        )
        with AccessLog(stats, None, context, in_generator=True):
            behavior = cast(_Streaming, handler.stream_stream)
            async for item in behavior(count_requests(requests, stats, self.handler), context):
                stats.count_response(item)
                yield item


# What the stages share.


class _CallDetails(grpc.HandlerCallDetails):
    """What authentication reads of a call: its method and its headers."""

    def __init__(self, method: str, invocation_metadata: Any) -> None:
        self.method = method
        self.invocation_metadata = invocation_metadata


def _no_message() -> RequestError:
    return RequestError(
        grpc.StatusCode.INVALID_ARGUMENT,
        errors_pb2.ERROR_REASON_MALFORMED_REQUEST,
        "the call ended before its request message arrived",
    )


async def _abort(context: Context, error: RequestError) -> NoReturn:
    """Ends the call with `error`'s status."""
    await context.abort_with_status(error.to_status())
    raise AssertionError("abort_with_status returned")  # pragma: no cover


async def _refuse(
    stats: CallStats,
    context: Context,
    refusal: RequestError | Callable[[], Awaitable[Any]],
) -> Any:
    """Answers a call refused before its request is read: with `refusal`, or by running it
    (authentication's refusal handler, on the unread requests)."""
    with AccessLog(stats, None, context):
        if isinstance(refusal, RequestError):
            await _abort(context, refusal)
        return await refusal()


async def _refused_stream(
    stats: CallStats, context: Context, handler: Handler, requests: Any
) -> AsyncIterator[Any]:
    with AccessLog(stats, None, context, in_generator=True):
        refusal = cast(_Streaming, handler.stream_stream)
        async for item in refusal(requests, context):
            yield item  # pragma: no cover (a refusal aborts)


async def _intercepted(
    interceptors: Iterable[grpc.aio.ServerInterceptor],
    handler: Handler,
    details: grpc.HandlerCallDetails,
) -> Handler | None:
    """What `interceptors`, in order, make of `handler` for the call `details` (as gRPC runs a
    server's interceptor chain)."""
    chain = iter(interceptors)

    async def continuation(call: grpc.HandlerCallDetails) -> Handler | None:
        interceptor = next(chain, None)
        if interceptor is None:
            return handler
        return await interceptor.intercept_service(continuation, call)

    return await continuation(details)
