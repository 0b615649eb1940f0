"""The edge every call passes, inside the handler gRPC calls: `Edge` wraps each handler once, when
it is registered, and the wrapper passes each call through the edge's stages (`edge/pipeline.py`:
authentication, drain, load shedding, receiving slots, reading the request, deadline, admission,
access log and metrics).

A `grpc.aio` server interceptor runs for every call before its handler, and one that wraps the
handler builds it anew per call (a handler and two closures for each). So the sidecar has none by
default. Tracing, when on, is the one interceptor (OpenTelemetry's): the span is open before the
wrapper runs, so every line carries it. Authentication (`edge/auth.py`, a
`grpc.aio.ServerInterceptor`) runs inside the wrapper, on the call's method and headers: its
refusals are logged and counted, and never reach admission, so strangers use none of its budget.

A method whose request is one message is registered as request-streaming (one message is framed
the same either way), so the wrapper runs before gRPC has read the request and reads it itself,
once authentication, load shedding (`edge/load_shed.py`) and admission let it: a refused call's
request stays in the client. The calls reading their request at once are capped, by count
(`--max-receiving-calls`) and by the in-flight byte budget (each reserves the largest request
until admission counts its real size): a call over either waits for a slot, and is refused if
none comes free in time.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from typing import Protocol

import grpc

from turnkeeper.server.edge.admission import Admission
from turnkeeper.server.edge.drain import CallsInService
from turnkeeper.server.edge.load_shed import LoadShedder
from turnkeeper.server.edge.pipeline import Handler, MethodEdge


class Edge:
    """Wraps the handlers of every service the sidecar serves; `registry` registers them."""

    def __init__(
        self,
        admission: Admission,
        auth: Sequence[grpc.aio.ServerInterceptor] = (),
        shedder: LoadShedder | None = None,
    ) -> None:
        self.admission = admission
        self.auth = tuple(auth)
        self.shedder = shedder
        # What a drain whose grace runs out answers itself (edge/drain.py).
        self.in_service = CallsInService()
        # The wrapped handlers registered as methods of their own, by path (edge/accept_ahead.py).
        self.registered: dict[str, Handler] = {}

    def wrap(self, method: str, handler: Handler) -> Handler:
        """`handler` (of the method at path `method`) with the edge around each of its calls.
        Handlers that are not coroutines or async generators (none are registered by the
        sidecar) pass through unwrapped rather than being re-threaded."""
        call = MethodEdge(self, method, handler)
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


__all__ = ["Edge", "HandlerRegistry"]
