"""The asyncio client: `AsyncTurnkeeperClient` (grpc.aio) and its resumable `AsyncTrimWatch`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from types import TracebackType
from typing import Self, TypeVar

import grpc
import grpc.aio
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc as svc_grpc
from turnkeeper.v1 import trim_pb2

from ._options import (
    DEFAULT,
    DEFAULT_TIMEOUT,
    ChannelOption,
    Metadata,
    MetadataTuple,
    Timeout,
    Transport,
    channel_options,
    resolve_timeout,
    target,
    transport_of,
    with_token,
)
from ._watch import (
    Backoff,
    CursorState,
    DisconnectHook,
    build_request,
    is_retryable,
    not_subscribed,
)
from .errors import TurnkeeperError, decode_rpc_error

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class AsyncTurnkeeperClient:
    """An asyncio turnkeeper client over one grpc.aio channel.

    Use `AsyncTurnkeeperClient.connect("host:port")` or `.connect(unix_path=...)` inside a
    running event loop, and `async with` (or `await close()`) to release the channel.
    Every unary method raises `TurnkeeperError` with the decoded status details.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        metadata: Metadata = (),
        wait_for_ready: bool = False,
    ) -> None:
        self._channel = channel
        self._stub = svc_grpc.HistoryServiceStub(channel)
        self._timeout = timeout
        self._metadata = tuple(metadata)
        self._wait_for_ready = wait_for_ready
        # Known when connect() opened the channel; a channel passed in could be anything.
        self._transport: Transport | None = None

    @classmethod
    def connect(
        cls,
        address: str | None = None,
        *,
        unix_path: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        metadata: Metadata = (),
        wait_for_ready: bool = False,
        options: Sequence[ChannelOption] = (),
        credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
    ) -> Self:
        """Opens a channel to a TCP `host:port` address or a Unix socket path (exactly one).

        `credentials` (e.g. `tls_credentials(ca=..., client_cert=..., client_key=...)`) makes it
        TLS or mTLS; `token` sends `authorization: Bearer <token>` with every call.
        """
        where = target(address, unix_path)
        opts = channel_options(options)
        channel = (
            grpc.aio.secure_channel(where, credentials, options=opts)
            if credentials is not None
            else grpc.aio.insecure_channel(where, options=opts)
        )
        client = cls(
            channel,
            timeout=timeout,
            metadata=with_token(metadata, token),
            wait_for_ready=wait_for_ready,
        )
        client._transport = transport_of(credentials)
        return client

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(
        self,
        method: grpc.aio.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        timeout: Timeout,
        metadata: Metadata | None,
    ) -> Resp:
        try:
            return await method(
                request,
                timeout=resolve_timeout(timeout, self._timeout),
                metadata=(*self._metadata, *(metadata or ())),
                wait_for_ready=self._wait_for_ready,
            )
        except grpc.RpcError as error:
            raise decode_rpc_error(error, self._transport) from error

    async def estimate_tokens(
        self,
        request: svc.EstimateTokensRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.EstimateTokensResponse:
        """Prices a history: the total, each row, the turn count and the image part."""
        return await self._call(self._stub.EstimateTokens, request, timeout, metadata)

    async def resolve_budget(
        self,
        request: svc.ResolveBudgetRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.ResolveBudgetResponse:
        """Resolves the route, its capacity, the token budget and the turn limit."""
        return await self._call(self._stub.ResolveBudget, request, timeout, metadata)

    async def trim_history(
        self,
        request: svc.TrimHistoryRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.TrimHistoryResponse:
        """Applies one trimming operation; `history_trimmed` is set when turns were dropped."""
        return await self._call(self._stub.TrimHistory, request, timeout, metadata)

    async def prepare_model_call(
        self,
        request: svc.PrepareModelCallRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.PrepareModelCallResponse:
        """Resolve, sweep, trim and pre-flight in one call; raises FAILED_PRECONDITION when it
        does not fit (the `TurnkeeperError.capacity_report` says by how much)."""
        return await self._call(self._stub.PrepareModelCall, request, timeout, metadata)

    async def check_capacity(
        self,
        request: svc.CheckCapacityRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.CheckCapacityResponse:
        """The capacity pre-flight alone; raises FAILED_PRECONDITION when it does not fit."""
        return await self._call(self._stub.CheckCapacity, request, timeout, metadata)

    async def sweep_orphans(
        self,
        request: svc.SweepOrphansRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.SweepOrphansResponse:
        """Removes tool results without a call and tool calls without a result."""
        return await self._call(self._stub.SweepOrphans, request, timeout, metadata)

    async def classify_provider_error(
        self,
        request: svc.ClassifyProviderErrorRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.ClassifyProviderErrorResponse:
        """Says whether a provider error is a context-window overflow (spec §10.4) and which
        phrase matched: the decision that starts reactive recovery (`overflow_recovery`)."""
        return await self._call(self._stub.ClassifyProviderError, request, timeout, metadata)

    async def cap_tool_results(
        self,
        request: svc.CapToolResultsRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.CapToolResultsResponse:
        """Applies `max_tool_result_chars` to tool results as they are recorded."""
        return await self._call(self._stub.CapToolResults, request, timeout, metadata)

    def watch_trims(
        self,
        *,
        session_ids: Iterable[str] = (),
        runtime_ids: Iterable[str] = (),
        reasons: Iterable[trim_pb2.TrimReason.ValueType] = (),
        after_cursor: str = "",
        heartbeat_interval: float | None = None,
        include_meter_updates: bool = False,
        backoff: Backoff | None = None,
        on_disconnect: DisconnectHook | None = None,
        metadata: Metadata | None = None,
    ) -> AsyncTrimWatch:
        """Subscribes to TrimEvents; the async iterator reconnects and resumes after disconnects.

        Yields every `TrimEventsResponse` item (event, heartbeat, gap, and with
        `include_meter_updates` a `meter_update` per successful PrepareModelCall, spec §10.5).
        `after_cursor` resumes an earlier subscription (see `AsyncTrimWatch.cursor`); empty
        means a live tail from now.
        """
        request = build_request(
            session_ids=session_ids,
            runtime_ids=runtime_ids,
            reasons=reasons,
            heartbeat_interval=heartbeat_interval,
            include_meter_updates=include_meter_updates,
        )
        return AsyncTrimWatch(
            self._stub,
            CursorState(request, after_cursor),
            backoff or Backoff(),
            on_disconnect,
            (*self._metadata, *(metadata or ())),
            self._timeout,
        )


class AsyncTrimWatch(AsyncIterator[svc.TrimEventsResponse]):
    """A resumable TrimEvents subscription (async iterator).

    On UNAVAILABLE, a feed-side error or the server ending the stream, it waits per `Backoff`
    and resubscribes with `after_cursor` = the last cursor seen, so each event is yielded once.
    Other errors raise `TurnkeeperError`. Use `async with` or `await aclose()` to stop it.
    """

    def __init__(
        self,
        stub: svc_grpc.HistoryServiceStub,
        state: CursorState,
        backoff: Backoff,
        on_disconnect: DisconnectHook | None,
        metadata: MetadataTuple,
        default_timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        # The stub was built on an aio channel; its TrimEvents returns a grpc.aio call.
        self._stub: svc_grpc.HistoryServiceAsyncStub = stub  # type: ignore[assignment]
        self._state = state
        self._backoff = backoff
        self._on_disconnect = on_disconnect
        self._metadata = metadata
        self._default_timeout = default_timeout
        self._closed = asyncio.Event()
        self._call: grpc.aio.UnaryStreamCall[svc.TrimEventsRequest, svc.TrimEventsResponse] | None
        self._call = None
        # The item that answered the subscription, held by wait_subscribed for the iteration,
        # and the cursor from before it: the held item's cursor counts once it is handed out.
        self._first: svc.TrimEventsResponse | None = None
        self._cursor_before_first = ""
        self._items = self._run()

    @property
    def cursor(self) -> str:
        """The last cursor yielded (event or heartbeat); pass it as `after_cursor` to resume."""
        return self._cursor_before_first if self._first is not None else self._state.cursor

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> svc.TrimEventsResponse:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return await self._items.__anext__()

    async def wait_subscribed(self, timeout: Timeout = DEFAULT) -> Self:
        """Waits until the server has answered the subscription: its first heartbeat (or, when
        resuming, its first replayed item), sent once the subscription is registered. A trim
        made after this returns is therefore delivered; without it the stream opens only on the
        first `anext()`. The answering item is kept for that `anext()`; its cursor counts once
        it is handed out. Reconnects per the backoff while waiting. On timeout (default: the
        client's deadline; `None` waits indefinitely) the watch is closed and `TurnkeeperError`
        DEADLINE_EXCEEDED raised; a subscription that gives up first raises its own error.
        Returns the watch: `watch = await aclient.watch_trims(...).wait_subscribed()`.
        """
        if self._first is not None:
            return self
        limit = resolve_timeout(timeout, self._default_timeout)
        self._cursor_before_first = self._state.cursor
        try:
            self._first = await asyncio.wait_for(anext(self._items), limit)
        except TimeoutError:
            await self.aclose()
            raise not_subscribed(limit, expired=True) from None
        except StopAsyncIteration:
            raise not_subscribed(limit, expired=False) from None
        return self

    async def aclose(self) -> None:
        """Ends the subscription and releases its stream."""
        self._closed.set()
        if self._call is not None:
            self._call.cancel()
        # RuntimeError: another task is inside __anext__; the cancel above ends its read.
        with contextlib.suppress(RuntimeError):
            await self._items.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self) -> AsyncGenerator[svc.TrimEventsResponse, None]:
        failures = 0
        while not self._closed.is_set():
            call = self._stub.TrimEvents(self._state.request(), metadata=self._metadata)
            self._call = call
            error: TurnkeeperError | None = None
            try:
                while True:
                    item = await call.read()
                    if item is grpc.aio.EOF:
                        break
                    assert isinstance(item, svc.TrimEventsResponse)
                    failures = 0
                    if self._state.accept(item):
                        yield item
            except grpc.RpcError as raw:
                if self._closed.is_set():
                    return
                error = decode_rpc_error(raw)
                if not is_retryable(error):
                    raise error from raw
            except asyncio.CancelledError:
                # aclose() from another task cancels the pending read: end the iteration there.
                # A cancellation of this task itself must propagate.
                task = asyncio.current_task()
                if self._closed.is_set() and (task is None or task.cancelling() == 0):
                    return
                raise
            finally:
                call.cancel()
                self._call = None
            if self._closed.is_set():
                return
            failures += 1
            if self._backoff.max_attempts is not None and failures > self._backoff.max_attempts:
                if error is not None:
                    raise error
                return
            delay = self._backoff.delay(failures)
            if self._on_disconnect is not None:
                self._on_disconnect(error, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), timeout=delay)
