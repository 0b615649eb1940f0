"""Takes the calls of the registered methods from grpc core as they come, so they wait in the edge.

grpc aio asks grpc core for the next call of a registered method through one outstanding request
per method, re-armed by its serving loop once the last one's call has been handed over: under
load every method gets about one call per turn of that loop, so the calls of the method with the
most traffic wait longest in core, where nothing can order them, whatever they cost. This keeps
`depth` more requests outstanding per registered method, each re-armed as soon as its call
arrives, so that grpc core's queues stay short and the calls wait in the edge instead, where
the receiving queue (`edge/admission.py`, `SlotQueue`) serves them by how long they waited for
their method's cost and the load shedder sees them all.

grpc aio has no public way to do this: the requests and the coroutine that serves a call are its
own (`AioServer._make_request_call_future`, `_handle_rpc`, `_schedule_rpc_coro`), as its serving
loop uses them. When they are not there (another grpcio), this does nothing and says so once.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

log = logging.getLogger("turnkeeper.server")

# grpc aio's own serving parts (not in grpc's type stubs).
_cy: Any = importlib.import_module("grpc._cython.cygrpc")
_PARTS = ("_MethodResolver", "_handle_rpc", "_schedule_rpc_coro", "_RequestCallError")


class AcceptAhead:
    """`depth` more outstanding requests for each of `handlers` (method path -> the handler
    registered for it with `add_registered_method_handlers`), from `start` until `stop` or the
    server stops. `interceptors` are the server's, which each call passes as through grpc's own
    serving loop."""

    def __init__(
        self,
        server: grpc.aio.Server,
        handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]],
        interceptors: Sequence[grpc.aio.ServerInterceptor],
        depth: int,
    ) -> None:
        self._server = server
        self._handlers = dict(handlers)
        self._interceptors = tuple(interceptors)
        self._depth = depth
        self._acceptors: list[asyncio.Task[None]] = []
        self._calls: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        if not self._depth or not self._handlers:
            return
        core = getattr(self._server, "_server", None)
        missing = [part for part in _PARTS if not hasattr(_cy, part)]
        if core is None or not hasattr(core, "_make_request_call_future") or missing:
            log.warning(
                "this grpcio cannot take calls ahead of its serving loop: calls of a busy "
                "method wait in grpc core, in the order grpc takes them"
            )
            return
        resolver = _cy._MethodResolver([], self._handlers)
        loop = asyncio.get_running_loop()
        for method in self._handlers:
            for _ in range(self._depth):
                self._acceptors.append(
                    loop.create_task(self._accept(core, resolver, method), name="accept-ahead")
                )

    async def _accept(self, core: Any, resolver: Any, method: str) -> None:
        loop = asyncio.get_running_loop()
        encoded = method.encode()
        while True:
            try:
                state = await core._make_request_call_future(encoded)
            except _cy._RequestCallError:  # the server is shutting down
                return
            coroutine = _cy._handle_rpc(method, resolver, self._interceptors, state, loop, False)
            call = loop.create_task(_cy._schedule_rpc_coro(coroutine, state, loop, method))
            self._calls.add(call)  # (a task nothing refers to may be collected mid-call)
            call.add_done_callback(self._calls.discard)

    async def stop(self) -> None:
        """Stops asking for calls (the calls already taken go on until they end)."""
        for acceptor in self._acceptors:
            acceptor.cancel()
        for acceptor in self._acceptors:
            with contextlib.suppress(asyncio.CancelledError):
                await acceptor
        self._acceptors.clear()
