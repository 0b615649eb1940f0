"""The HistoryService handlers: raw request bytes in, engine work in a worker pool, bytes out.

Every method is registered with no (de)serializer, so undecodable bytes reach our own decoder
(INVALID_ARGUMENT, ERROR_REASON_MALFORMED_REQUEST) instead of failing inside gRPC. The engine work
of a request over the engine's inline limit runs in a bounded thread pool, so the event loop stays
free for health checks and small calls (which are answered on the loop: cheaper than the hop to a
thread); the events a call produced are published on the loop once its work is done.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from turnkeeper.core.overflow import OverflowClassifier
from turnkeeper.server.api import compaction, rpcs
from turnkeeper.server.api.responses import Reply, meter_update
from turnkeeper.server.contract import limits, validation, wire
from turnkeeper.server.contract.errors import RequestError, overloaded
from turnkeeper.server.contract.methods import method_path
from turnkeeper.server.engine.protocol import NATIVE, PYTHON, Engine, HistorySource
from turnkeeper.server.events.common import encode_delivery
from turnkeeper.server.events.feed import EventFeed
from turnkeeper.v1 import errors_pb2
from turnkeeper.v1 import history_service_pb2 as svc

log = logging.getLogger("turnkeeper.server")

Context = grpc.aio.ServicerContext[Any, Any]

INLINE_REQUEST_BYTES = {NATIVE: 1024 * 1024 - 1, PYTHON: 16 * 1024}
"""Requests up to this size are answered on the loop, where their work costs less than the hop to
a worker thread and back. Native: below the default heavy-call size, where answering on the loop
was measured faster than the round trip through the pool (docs/benchmarks.md); Python: small
requests only, whose work is brief beside the hop."""
M = TypeVar("M", bound=Message)
Work = Callable[[bytes], Reply]


class HistoryServicer:
    """Stateless: every call carries its history and profiles; only the event feed is shared."""

    def __init__(
        self,
        feed: EventFeed,
        max_history_rows: int,
        engine: Engine,
        workers: int,
        overflow: OverflowClassifier | None = None,
        max_request_items: int = limits.DEFAULT_MAX_REQUEST_ITEMS,
    ) -> None:
        self._feed = feed
        self._overflow = overflow or OverflowClassifier()
        self._max_rows = max_history_rows
        self._max_items = max_request_items
        self._engine = engine
        self._inline_bytes = INLINE_REQUEST_BYTES.get(
            engine.name, min(INLINE_REQUEST_BYTES.values())
        )
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="engine")

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        """Lets running engine work finish; called once the server has stopped."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _with_history(
        self, request_type: type[M], rpc: Callable[[M, HistorySource], Reply]
    ) -> Work:
        engine, max_rows, max_items = self._engine, self._max_rows, self._max_items

        def work(raw: bytes) -> Reply:
            # The engine applies the item limit: the native one counts inside its scan.
            return rpc(*engine.read(raw, request_type, max_rows, max_items))

        return work

    def _plain(self, request_type: type[M], rpc: Callable[[M], Reply]) -> Work:
        max_items = self._max_items

        def work(raw: bytes) -> Reply:
            limits.check_items(raw, request_type, max_items)
            return rpc(wire.decode(raw, request_type))

        return work

    def _unary(self, name: str, work: Work) -> Callable[[bytes, Context], Any]:
        method = method_path(name)

        async def handle(raw: bytes, context: Context) -> bytes:
            try:
                if len(raw) <= self._inline_bytes:
                    reply = work(raw)
                else:
                    loop = asyncio.get_running_loop()
                    # The call's context (trace span, log call id) goes with its work.
                    context_copy = contextvars.copy_context()
                    reply = await loop.run_in_executor(self._pool, context_copy.run, work, raw)
            except RequestError as error:
                await context.abort_with_status(error.to_status())
                raise AssertionError("abort_with_status returned") from error  # pragma: no cover
            except MemoryError:
                # The process is at its memory limit: this call may succeed later, or elsewhere.
                refusal = overloaded("memory", f"out of memory while serving {name}")
                await context.abort_with_status(refusal.to_status())
                raise AssertionError("abort_with_status returned") from None  # pragma: no cover
            except Exception as error:
                # A bug, never the caller's fault: INTERNAL with details, not UNKNOWN.
                log.exception("internal error in %s", method)
                internal = RequestError(
                    grpc.StatusCode.INTERNAL,
                    errors_pb2.ERROR_REASON_INTERNAL,
                    f"internal error: {type(error).__name__}",
                )
                await context.abort_with_status(internal.to_status())
                raise AssertionError("abort_with_status returned") from error  # pragma: no cover
            # A cancelled call never gets here (the await raises CancelledError). A call past
            # its deadline has nobody to answer either: events of a trim the caller never saw
            # would tell subscribers of a history the runtime did not send.
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0:
                await context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"the deadline passed before {name} finished; nothing was published",
                )
            for event in reply.events:
                self._feed.publish(event)
            if reply.meter is not None and self._feed.wants_meter_updates():
                self._feed.publish_meter(meter_update(*reply.meter))
            return reply.body

        return handle

    async def _trim_events(self, raw: bytes, context: Context) -> AsyncIterator[bytes]:
        """Each stream message as bytes: the events many subscribers are sent are encoded once by
        the feed (`FeedItem`), a batch joins their bytes, and the access log counts bytes for
        free."""
        try:
            limits.check_items(raw, svc.TrimEventsRequest, self._max_items)
            request = wire.decode(raw, svc.TrimEventsRequest)
            validation.check_trim_events(request)
            stream = self._feed.deliveries(request)
            try:
                async for delivery in stream:
                    yield encode_delivery(delivery)
            finally:
                # Unregisters the subscriber now, not when the generator is collected.
                await stream.aclose()
        except RequestError as error:
            await context.abort_with_status(error.to_status())

    def method_handlers(self) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
        """The handlers by method name, for `add_registered_method_handlers`: grpc aio accepts
        the calls of each registered method through its own outstanding request, so a flood of
        one method does not hold up the others (generic handlers share one; which methods get
        their own is contract/methods.py's OWN_ACCEPT_METHODS)."""
        unary: dict[str, Work] = {
            "EstimateTokens": self._with_history(svc.EstimateTokensRequest, rpcs.estimate_tokens),
            "ResolveBudget": self._plain(svc.ResolveBudgetRequest, rpcs.resolve_budget),
            "TrimHistory": self._with_history(svc.TrimHistoryRequest, rpcs.trim_history),
            "PrepareModelCall": self._with_history(
                svc.PrepareModelCallRequest, rpcs.prepare_model_call
            ),
            "PlanCompaction": self._with_history(
                svc.PlanCompactionRequest, compaction.plan_compaction
            ),
            "CheckCapacity": self._with_history(svc.CheckCapacityRequest, rpcs.check_capacity_rpc),
            "SweepOrphans": self._with_history(svc.SweepOrphansRequest, rpcs.sweep_orphans),
            "CapToolResults": self._plain(svc.CapToolResultsRequest, rpcs.cap_tool_results),
            "ClassifyProviderError": self._plain(
                svc.ClassifyProviderErrorRequest,
                functools.partial(rpcs.classify_provider_error, classifier=self._overflow),
            ),
        }
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            name: grpc.unary_unary_rpc_method_handler(self._unary(name, work))
            for name, work in unary.items()
        }
        # Raw request bytes in, raw response bytes out.
        handlers["TrimEvents"] = grpc.unary_stream_rpc_method_handler(self._trim_events)
        return handlers
