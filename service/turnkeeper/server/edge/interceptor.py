"""The edge every call passes, inside the handler gRPC calls: authentication, admission, access log
and metrics in one pass.

A `grpc.aio` server interceptor runs for every call before its handler, and one that wraps the
handler builds it anew per call (the edge interceptor built a handler and two closures for each).
So the sidecar has none by default: `Edge.wrap` wraps each handler once, when it is registered,
and the wrapper does the edge's work per call. Tracing, when on, is the one interceptor
(OpenTelemetry's): the span is open before the wrapper runs, so every line carries it.
Authentication (`edge/auth.py`, a `grpc.aio.ServerInterceptor`) runs inside the wrapper, on the
call's method and headers: its refusals are logged and counted here, and never reach admission,
so strangers use none of its budget.

A method whose request is one message is registered as request-streaming (one message is framed
the same either way), so the wrapper runs before gRPC has read the request and reads it itself,
once authentication, load shedding (`edge/load_shed.py`) and admission let it: a refused call's
request stays in the client. The calls reading their request at once are capped, by count
(`--max-receiving-calls`) and by the in-flight byte budget (each reserves the largest request
until admission counts its real size): a call over either waits in FIFO order for a slot, and is
refused if none comes free in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Sequence
from typing import Any, NoReturn, Protocol, TypeAlias, cast

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
from turnkeeper.server.telemetry.logs import reset_call_ids
from turnkeeper.v1 import errors_pb2

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
# What a handler's behaviours are; built once here, as `cast` evaluates its type on every call.
_Unary: TypeAlias = Callable[..., Awaitable[Any]]
_Streaming: TypeAlias = Callable[..., AsyncIterator[Any]]


class _CallDetails(grpc.HandlerCallDetails):
    """What an interceptor reads of a call: its method and its headers."""

    def __init__(self, method: str, invocation_metadata: Any) -> None:
        self.method = method
        self.invocation_metadata = invocation_metadata


def _no_message() -> RequestError:
    return RequestError(
        grpc.StatusCode.INVALID_ARGUMENT,
        errors_pb2.ERROR_REASON_MALFORMED_REQUEST,
        "the call ended before its request message arrived",
    )


def _undecodable(error: Exception) -> RequestError:
    return RequestError(
        grpc.StatusCode.INVALID_ARGUMENT,
        errors_pb2.ERROR_REASON_MALFORMED_REQUEST,
        f"the request message does not decode: {error}",
    )


class Edge:
    """Wraps the handlers of every service the sidecar serves; `registry` registers them."""

    def __init__(
        self,
        admission: Admission,
        auth: Sequence[grpc.aio.ServerInterceptor] = (),
        shedder: LoadShedder | None = None,
    ) -> None:
        self.admission = admission
        self._auth = tuple(auth)
        self.shedder = shedder
        # What a drain whose grace runs out answers itself (edge/drain.py).
        self.in_service = CallsInService()
        # The wrapped handlers registered as methods of their own, by path (edge/accept_ahead.py).
        self.registered: dict[str, Handler] = {}

    def wrap(self, method: str, handler: Handler) -> Handler:
        """`handler` (of the method at path `method`) with the edge around each of its calls.
        Handlers that are not coroutines or async generators (none are registered by the
        sidecar) pass through unwrapped rather than being re-threaded."""
        call = _MethodEdge(self, method, handler)
        serializer = handler.response_serializer
        if handler.unary_unary is not None and inspect.iscoroutinefunction(handler.unary_unary):
            return grpc.stream_unary_rpc_method_handler(call.unary, None, serializer)
        if handler.unary_stream is not None and inspect.isasyncgenfunction(handler.unary_stream):
            return grpc.stream_stream_rpc_method_handler(call.unary_stream, None, serializer)
        if handler.stream_unary is not None and inspect.iscoroutinefunction(handler.stream_unary):
            return grpc.stream_unary_rpc_method_handler(call.stream_unary, None, serializer)
        if handler.stream_stream is not None and inspect.isasyncgenfunction(handler.stream_stream):
            return grpc.stream_stream_rpc_method_handler(call.stream_stream, None, serializer)
        return handler

    def registry(
        self, server: HandlerRegistry, own_accept: Collection[str] | None = None
    ) -> HandlerRegistry:
        """`server` as something to register handlers with (generated `add_*_to_server`
        functions take it), every handler wrapped. Of the registered method handlers, those
        whose paths are not in `own_accept` (when given) are served by a generic handler."""
        return _WrappingRegistry(self, server, own_accept)


class HandlerRegistry(Protocol):
    """The registration half of `grpc.aio.Server`."""

    def add_generic_rpc_handlers(
        self, generic_rpc_handlers: Sequence[grpc.GenericRpcHandler]
    ) -> None: ...

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, Handler]
    ) -> None: ...


class _WrappingRegistry:
    def __init__(
        self, edge: Edge, server: HandlerRegistry, own_accept: Collection[str] | None
    ) -> None:
        self._edge = edge
        self._server = server
        self._own_accept = own_accept

    def add_generic_rpc_handlers(
        self, generic_rpc_handlers: Sequence[grpc.GenericRpcHandler]
    ) -> None:
        self._server.add_generic_rpc_handlers(
            tuple(_WrappingGenericHandler(self._edge, inner) for inner in generic_rpc_handlers)
        )

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, Handler]
    ) -> None:
        own: dict[str, Handler] = {}
        shared: dict[str, Handler] = {}
        for name, handler in method_handlers.items():
            path = f"/{service_name}/{name}"
            own_accept = self._own_accept is None or path in self._own_accept
            (own if own_accept else shared)[name] = wrapped = self._edge.wrap(path, handler)
            if own_accept:
                self._edge.registered[path] = wrapped
        if own:
            self._server.add_registered_method_handlers(service_name, own)
        if shared:
            self._server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(service_name, shared),)
            )


class _WrappingGenericHandler(grpc.GenericRpcHandler):
    """A generic handler's handlers, each wrapped the first time its method is called (only
    methods it serves are remembered: a client cannot grow the cache with made-up names)."""

    def __init__(self, edge: Edge, inner: grpc.GenericRpcHandler) -> None:
        self._edge = edge
        self._inner = inner
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        known = self._wrapped.get(method)
        if known is None or known[0] is not handler:
            known = self._wrapped[method] = (handler, self._edge.wrap(method, handler))
        return known[1]


class _MethodEdge:
    """The edge of one method: what its calls share is resolved here, once."""

    def __init__(self, edge: Edge, method: str, handler: Handler) -> None:
        self.edge = edge
        self.auth = edge._auth
        self.admission = edge.admission
        self.method = method
        self.handler = handler
        self.telemetry = MethodTelemetry(method, rpc_type(method, handler))
        # A probe must see the server even when it is busy.
        self.probe = method.startswith(PROBE_PREFIXES)
        # What a call of this method costs, by which the receiving queue orders it.
        self.cost = ServiceCost()

    def _stats(self, context: Context) -> CallStats:
        """The call's figures; the first thing every call does."""
        # How long the call waited for us to take it (load_shed): every call counts.
        shedder = self.edge.shedder
        if shedder is not None:
            shedder.arrived()
        return CallStats(self.telemetry, request_id_of(context.invocation_metadata()))

    async def _authenticated(self, context: Context) -> Handler:
        """What authentication (`self.auth`, when there is any) makes of the method's handler for
        this call: the handler, or a refusal. Without authentication a call uses `self.handler`
        without this step (a coroutine per call)."""
        details = _CallDetails(self.method, context.invocation_metadata())
        handler = await _intercepted(self.auth, self.handler, details)
        assert handler is not None, "authentication never drops a method"
        return handler

    def _refusal(self) -> RequestError | None:
        """Why a unary call is refused before its request is read, if it is: the server is
        draining. (Authentication's refusals come as handlers.)"""
        if not self.probe and self.admission.draining:
            return self.admission.draining_refusal()
        return None

    @staticmethod
    async def _read(context: Context, stats: CallStats) -> Any:
        raw = await context.read()
        if raw is grpc.aio.EOF:
            await context.abort_with_status(_no_message().to_status())
        stats.count_request(len(raw))
        return raw

    @staticmethod
    async def _refuse(
        stats: CallStats,
        context: Context,
        refusal: RequestError | Callable[[], Awaitable[Any]],
    ) -> Any:
        """Answers a call refused before its request is read: with `refusal`, or by running it
        (authentication's refusal handler, on the unread requests)."""
        with _Call(stats, None, context):
            if isinstance(refusal, RequestError):
                await _abort(context, refusal)
            return await refusal()

    async def unary(self, requests: AsyncIterator[Any], context: Context) -> Any:
        """A unary call: authenticated, admitted, its one request read, answered, logged. From
        its arrival to its answer it is in service, which a drain whose grace ends answers
        UNAVAILABLE rather than let grpc cancel it (edge/drain.py)."""
        stats = self._stats(context)
        in_service = self.edge.in_service
        task = in_service.enter()
        try:
            return await self._unary(stats, requests, context, task)
        except asyncio.CancelledError:
            # Ended by the drain while it waited to be read (once read, `_unary` answers).
            ended = in_service.refusal_if_ended(task)
            if ended is None:
                raise
            return await self._refuse(stats, context, ended)
        finally:
            in_service.leave(task)

    async def _unary(
        self,
        stats: CallStats,
        requests: AsyncIterator[Any],
        context: Context,
        task: asyncio.Task[object] | None,
    ) -> Any:
        handler = await self._authenticated(context) if self.auth else self.handler
        if handler.request_streaming:
            refuse = cast(_Unary, handler.stream_unary)
            return await self._refuse(stats, context, functools.partial(refuse, requests, context))
        refused = self._refusal()
        admission = self.admission
        probe = self.probe
        if refused is None and not probe:
            shedder = self.edge.shedder
            if shedder is not None and shedder.refuses(admission.receiving):
                refused = shedder.refusal()
            elif not (admission.receiving.try_take() or await admission.receiving_slot(self.cost)):
                refused = admission.receiving_refusal()
        if refused is not None:
            return await self._refuse(stats, context, refused)
        began = time.monotonic()
        # A call (not a probe) holds a receiving slot, with its reservation, until admission
        # has counted its bytes in, or it ends before that.
        receiving = not probe
        heavy: bool | None = None
        try:
            raw = await context.read()
            if raw is grpc.aio.EOF:
                await context.abort_with_status(_no_message().to_status())
            stats.count_request(len(raw))
            request = _decoded(handler, raw)
            with _Call(stats, request, context):
                try:
                    if isinstance(request, RequestError):
                        await context.abort_with_status(request.to_status())
                    if not probe:
                        remaining = context.time_remaining()
                        if remaining is not None and remaining <= 0:
                            # Nobody waits for the answer any more: no work, nothing published.
                            await context.abort(
                                grpc.StatusCode.DEADLINE_EXCEEDED,
                                "the deadline passed before the call started",
                            )
                        # Admission: a light call at once, without a coroutine.
                        receiving = False  # count_in gives it back
                        try:
                            admitted_heavy = admission.count_in(stats.request_bytes, receiving=True)
                            if admitted_heavy:
                                await admission.heavy_slot(stats.request_bytes, remaining)
                        except RequestError as over:
                            await _abort(context, over)
                        heavy = admitted_heavy
                        if heavy:
                            # (grpc-stubs type the callback as a class of their own.)
                            context.add_done_callback(cast(Any, admission.sent))
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
        """A call with one request and a stream of responses (TrimEvents, health Watch)."""
        stats = self._stats(context)
        handler = await self._authenticated(context) if self.auth else self.handler
        if handler.request_streaming:
            async for item in self._refused_stream(stats, context, handler, requests):
                yield item
            return
        refused = self._refusal()
        if refused is not None:
            await self._refuse(stats, context, refused)
            return
        raw = await self._read(context, stats)
        request = _decoded(handler, raw)
        with _Call(stats, request, context, in_generator=True):
            if isinstance(request, RequestError):
                await context.abort_with_status(request.to_status())
            behavior = cast(_Streaming, handler.unary_stream)
            async for item in behavior(request, context):
                stats.count_response(item)
                yield item

    async def _refused_stream(
        self, stats: CallStats, context: Context, handler: Handler, requests: Any
    ) -> AsyncIterator[Any]:
        with _Call(stats, None, context, in_generator=True):
            refuse = cast(_Streaming, handler.stream_stream)
            async for item in refuse(requests, context):
                yield item  # pragma: no cover (a refusal aborts)

    def _counted(self, requests: AsyncIterator[Any], stats: CallStats) -> AsyncIterator[Any]:
        deserializer = self.handler.request_deserializer

        async def counted() -> AsyncIterator[Any]:
            async for raw in requests:
                stats.count_request(len(raw))
                yield deserializer(raw) if deserializer is not None else raw

        return counted()

    async def stream_unary(self, requests: AsyncIterator[Any], context: Context) -> Any:
        """A client-streaming call (none in the sidecar's services; here for completeness)."""
        stats = self._stats(context)
        handler = await self._authenticated(context) if self.auth else self.handler
        with _Call(stats, None, context):
            behavior = cast(_Unary, handler.stream_unary)
            response = await behavior(self._counted(requests, stats), context)
            stats.count_response(response)
            return response

    async def stream_stream(self, requests: AsyncIterator[Any], context: Context) -> Any:
        """A bidirectional call (server reflection)."""
        stats = self._stats(context)
        handler = await self._authenticated(context) if self.auth else self.handler
        with _Call(stats, None, context, in_generator=True):
            behavior = cast(_Streaming, handler.stream_stream)
            async for item in behavior(self._counted(requests, stats), context):
                stats.count_response(item)
                yield item


async def _abort(context: Context, error: RequestError) -> NoReturn:
    """Ends the call with `error`'s status."""
    await context.abort_with_status(error.to_status())
    raise AssertionError("abort_with_status returned")  # pragma: no cover


def _decoded(handler: Handler, raw: bytes) -> Any:
    """The request as the handler takes it (raw bytes for every HistoryService method), or the
    error to answer when it does not decode."""
    deserializer = handler.request_deserializer
    if deserializer is None:
        return raw
    try:
        return deserializer(raw)
    except (DecodeError, ValueError, TypeError) as error:
        return _undecodable(error)


class _Call:
    """One call from `started` to `finish`, whichever way it ends (the exception that ends it,
    cancellation and a closed generator included, is its status)."""

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


__all__ = ["Edge", "HandlerRegistry"]
