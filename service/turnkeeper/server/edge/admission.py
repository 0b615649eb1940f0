"""Admission control: a budget of in-flight request bytes and a cap on concurrent heavy calls.

Checked when a unary call's request has been received and before any work is done on it, so an
overloaded sidecar answers RESOURCE_EXHAUSTED (ErrorInfo reason OVERLOADED + RetryInfo) instead of
running out of memory. Everything runs on the event loop, so plain counters need no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2

from turnkeeper.server.api.errors import RequestError
from turnkeeper.server.api.methods import PROBE_PREFIXES
from turnkeeper.server.edge.handlers import Continuation, refusal
from turnkeeper.v1 import errors_pb2

Req = TypeVar("Req")
Resp = TypeVar("Resp")


@dataclass(frozen=True)
class AdmissionLimits:
    """`max_inflight_bytes`: the request bytes all admitted calls may hold together.
    `heavy_call_bytes`: a request at least this big is heavy; `max_heavy_calls` may run at once.
    `max_receiving_calls`: calls whose request is still arriving, at once (gRPC holds each whole);
    one more waits up to `receive_wait_seconds` for a slot before it is refused.
    `retry_after_seconds`: the RetryInfo delay a refused client is given."""

    max_inflight_bytes: int
    heavy_call_bytes: int
    max_heavy_calls: int
    max_receiving_calls: int = 8
    receive_wait_seconds: float = 5.0
    retry_after_seconds: float = 1.0


class Admission:
    """The shared counters: `acquire` when a call starts, `release` when it ends."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self.inflight_bytes = 0
        self.heavy_calls = 0
        self.calls = 0
        self.receiving = 0
        self.slot_freed = asyncio.Event()
        self.refused = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._last_activity = 0.0  # time.monotonic() of the last call start or end

    def acquire(self, request_bytes: int) -> bool:
        """Counts the call in, or raises RequestError(RESOURCE_EXHAUSTED) when it would pass a
        limit. Returns whether the call is heavy, for `release`."""
        limits = self.limits
        heavy = request_bytes >= limits.heavy_call_bytes
        if heavy and self.heavy_calls >= limits.max_heavy_calls:
            raise self._refusal(
                "max_heavy_calls",
                f"{self.heavy_calls} requests of {limits.heavy_call_bytes} bytes or more are "
                f"running; this server runs at most {limits.max_heavy_calls} at once",
            )
        # A call alone over the budget would never be admitted: let it run when nothing else does.
        if self.inflight_bytes and self.inflight_bytes + request_bytes > limits.max_inflight_bytes:
            raise self._refusal(
                "max_inflight_request_bytes",
                f"{self.inflight_bytes} request bytes are in flight; {request_bytes} more would "
                f"pass this server's budget of {limits.max_inflight_bytes}",
            )
        self.inflight_bytes += request_bytes
        self.heavy_calls += heavy
        self.calls += 1
        self._idle.clear()
        self._last_activity = time.monotonic()
        return heavy

    def release(self, request_bytes: int, heavy: bool) -> None:
        self.inflight_bytes -= request_bytes
        self.heavy_calls -= heavy
        self.calls -= 1
        self._last_activity = time.monotonic()
        if not self.calls:
            self._idle.set()

    async def wait_quiet(self, quiet: float, limit: float) -> None:
        """Waits until no call has started or ended for `quiet` seconds, or `limit` passed."""
        end = time.monotonic() + limit
        while (now := time.monotonic()) < end:
            pause = self._last_activity + quiet - now
            if pause <= 0:
                return
            await asyncio.sleep(min(pause, end - now))

    async def wait_idle(self, limit: float) -> bool:
        """Waits up to `limit` seconds for every admitted call to end; True if they did."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), limit)
        return self._idle.is_set()

    async def receiving_slot(self) -> bool:
        """Waits (up to `receive_wait_seconds`) until fewer than `max_receiving_calls` calls are
        receiving their request; False when none came free. A waiting call's bytes stay in the
        client: the server has not asked for them."""
        end = time.monotonic() + self.limits.receive_wait_seconds
        while self.receiving >= self.limits.max_receiving_calls:
            remaining = end - time.monotonic()
            if remaining <= 0:
                return False
            self.slot_freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.slot_freed.wait(), remaining)
        return True

    def receiving_refusal(self) -> RequestError:
        return self._refusal(
            "max_receiving_calls",
            f"{self.receiving} requests are arriving; this server receives at most "
            f"{self.limits.max_receiving_calls} at once",
        )

    def _refusal(self, limit: str, message: str) -> RequestError:
        self.refused += 1
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(self.limits.retry_after_seconds * 1e9))
        return RequestError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            errors_pb2.ERROR_REASON_OVERLOADED,
            f"server overloaded: {message}; retry later",
            details=[error_details_pb2.RetryInfo(retry_delay=delay)],
            metadata={"limit": limit},
        )


class _Receiving:
    """One call's slot among those receiving their request; freed once, whichever comes first:
    the message arrived, or the call ended before it did (its handler is then dropped)."""

    def __init__(self, admission: Admission) -> None:
        admission.receiving += 1
        self.free = weakref.finalize(self, _free_slot, admission)


def _free_slot(admission: Admission) -> None:
    admission.receiving -= 1
    admission.slot_freed.set()


class AdmissionInterceptor(grpc.aio.ServerInterceptor):
    """Counts every unary call in and out of `Admission`, sized by its request bytes.

    gRPC reads a unary request whole before any handler runs, so the number of calls receiving
    their request at once is capped here, before the read: a call over that cap waits for a slot,
    and if none comes free in time it is refused by a handler that never reads it
    (`handlers.refusal`), so its bytes never enter the process.
    """

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    async def intercept_service(
        self,
        continuation: Continuation[Req, Resp],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Req, Resp] | None:
        handler = await continuation(handler_call_details)
        behavior = handler.unary_unary if handler is not None else None
        if (
            handler is None
            or behavior is None
            or not inspect.iscoroutinefunction(behavior)
            # A probe must see the server even when it is busy.
            or handler_call_details.method.startswith(PROBE_PREFIXES)
        ):
            return handler
        admission = self.admission
        if not await admission.receiving_slot():
            return refusal(handler, admission.receiving_refusal())
        return _admitted(
            handler, cast(Callable[..., Awaitable[Any]], behavior), admission, _Receiving(admission)
        )


def _admitted(
    handler: grpc.RpcMethodHandler[Req, Resp],
    behavior: Callable[..., Awaitable[Any]],
    admission: Admission,
    slot: _Receiving,
) -> grpc.RpcMethodHandler[Req, Resp]:
    inner_deserializer = handler.request_deserializer
    size = [0]  # this call's request bytes, measured on the wire

    def deserialize(data: bytes) -> Req:
        size[0] = len(data)
        slot.free()
        return inner_deserializer(data) if inner_deserializer is not None else cast(Req, data)

    async def admitted(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        request_bytes = size[0]
        try:
            heavy = admission.acquire(request_bytes)
        except RequestError as refused:
            await context.abort_with_status(refused.to_status())
            raise AssertionError("abort_with_status returned") from refused  # pragma: no cover
        try:
            return await behavior(request, context)
        finally:
            admission.release(request_bytes, heavy)

    return grpc.unary_unary_rpc_method_handler(admitted, deserialize, handler.response_serializer)
