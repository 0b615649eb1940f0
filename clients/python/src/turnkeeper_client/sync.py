"""The blocking client: `TurnkeeperClient` and its resumable `TrimWatch`."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Self, TypeVar

import grpc
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


class TurnkeeperClient:
    """A blocking turnkeeper client over one gRPC channel.

    Use `TurnkeeperClient.connect("host:port")` or `TurnkeeperClient.connect(unix_path=...)`;
    pass an existing channel to the constructor for custom credentials or interceptors.
    Every unary method raises `TurnkeeperError` with the decoded status details.
    """

    def __init__(
        self,
        channel: grpc.Channel,
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
            grpc.secure_channel(where, credentials, options=opts)
            if credentials is not None
            else grpc.insecure_channel(where, options=opts)
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
    def channel(self) -> grpc.Channel:
        return self._channel

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(
        self,
        method: grpc.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        timeout: Timeout,
        metadata: Metadata | None,
    ) -> Resp:
        try:
            return method(
                request,
                timeout=resolve_timeout(timeout, self._timeout),
                metadata=(*self._metadata, *(metadata or ())),
                wait_for_ready=self._wait_for_ready,
            )
        except grpc.RpcError as error:
            raise decode_rpc_error(error, self._transport) from error

    def estimate_tokens(
        self,
        request: svc.EstimateTokensRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.EstimateTokensResponse:
        """Prices a history: the total, each row, the turn count and the image part."""
        return self._call(self._stub.EstimateTokens, request, timeout, metadata)

    def resolve_budget(
        self,
        request: svc.ResolveBudgetRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.ResolveBudgetResponse:
        """Resolves the route, its capacity, the token budget and the turn limit."""
        return self._call(self._stub.ResolveBudget, request, timeout, metadata)

    def trim_history(
        self,
        request: svc.TrimHistoryRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.TrimHistoryResponse:
        """Applies one trimming operation; `history_trimmed` is set when turns were dropped."""
        return self._call(self._stub.TrimHistory, request, timeout, metadata)

    def prepare_model_call(
        self,
        request: svc.PrepareModelCallRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.PrepareModelCallResponse:
        """Resolve, sweep, trim and pre-flight in one call; raises FAILED_PRECONDITION when it
        does not fit (the `TurnkeeperError.capacity_report` says by how much)."""
        return self._call(self._stub.PrepareModelCall, request, timeout, metadata)

    def check_capacity(
        self,
        request: svc.CheckCapacityRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.CheckCapacityResponse:
        """The capacity pre-flight alone; raises FAILED_PRECONDITION when it does not fit."""
        return self._call(self._stub.CheckCapacity, request, timeout, metadata)

    def sweep_orphans(
        self,
        request: svc.SweepOrphansRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.SweepOrphansResponse:
        """Removes tool results without a call and tool calls without a result."""
        return self._call(self._stub.SweepOrphans, request, timeout, metadata)

    def classify_provider_error(
        self,
        request: svc.ClassifyProviderErrorRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.ClassifyProviderErrorResponse:
        """Says whether a provider error is a context-window overflow (spec §10.4) and which
        phrase matched: the decision that starts reactive recovery (`overflow_recovery`)."""
        return self._call(self._stub.ClassifyProviderError, request, timeout, metadata)

    def cap_tool_results(
        self,
        request: svc.CapToolResultsRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> svc.CapToolResultsResponse:
        """Applies `max_tool_result_chars` to tool results as they are recorded."""
        return self._call(self._stub.CapToolResults, request, timeout, metadata)

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
    ) -> TrimWatch:
        """Subscribes to TrimEvents; the iterator reconnects and resumes after disconnects.

        Yields every `TrimEventsResponse` item (event, heartbeat, gap, and with
        `include_meter_updates` a `meter_update` per successful PrepareModelCall, spec §10.5).
        `after_cursor` resumes an earlier subscription (see `TrimWatch.cursor`); empty means a live
        tail from now.
        """
        request = build_request(
            session_ids=session_ids,
            runtime_ids=runtime_ids,
            reasons=reasons,
            heartbeat_interval=heartbeat_interval,
            include_meter_updates=include_meter_updates,
        )
        return TrimWatch(
            self._stub,
            CursorState(request, after_cursor),
            backoff or Backoff(),
            on_disconnect,
            (*self._metadata, *(metadata or ())),
            self._timeout,
        )


class TrimWatch(Iterator[svc.TrimEventsResponse]):
    """A resumable TrimEvents subscription (blocking iterator).

    On UNAVAILABLE, a feed-side error or the server ending the stream, it waits per `Backoff`
    and resubscribes with `after_cursor` = the last cursor seen, so each event is yielded once.
    Other errors raise `TurnkeeperError`. `close()` may be called from another thread.
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
        self._stub = stub
        self._state = state
        self._backoff = backoff
        self._on_disconnect = on_disconnect
        self._metadata = metadata
        self._default_timeout = default_timeout
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._call: grpc.Call | None = None
        # The item that answered the subscription, held by wait_subscribed for the iteration,
        # and the cursor from before it: the held item's cursor counts once it is handed out.
        self._first: svc.TrimEventsResponse | None = None
        self._cursor_before_first = ""
        self._items = self._run()

    @property
    def cursor(self) -> str:
        """The last cursor yielded (event or heartbeat); pass it as `after_cursor` to resume."""
        return self._cursor_before_first if self._first is not None else self._state.cursor

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> svc.TrimEventsResponse:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return next(self._items)

    def wait_subscribed(self, timeout: Timeout = DEFAULT) -> Self:
        """Blocks until the server has answered the subscription: its first heartbeat (or, when
        resuming, its first replayed item), sent once the subscription is registered. A trim
        made after this returns is therefore delivered; without it the stream opens only on the
        first `next()`. The answering item is kept for that `next()`; its cursor counts once it
        is handed out. Reconnects per the backoff while waiting. On timeout (default: the
        client's deadline; `None` waits indefinitely) the watch is closed and `TurnkeeperError`
        DEADLINE_EXCEEDED raised; a subscription that gives up first raises its own error.
        Returns the watch: `with client.watch_trims(...).wait_subscribed() as watch:`.
        """
        if self._first is not None:
            return self
        limit = resolve_timeout(timeout, self._default_timeout)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.close()

        self._cursor_before_first = self._state.cursor
        guard = threading.Timer(limit, expire) if limit is not None else None
        if guard is not None:
            guard.start()
        try:
            first = next(self._items, None)
        finally:
            if guard is not None:
                guard.cancel()
        if first is None or expired.is_set():
            self.close()
            raise not_subscribed(limit, expired=expired.is_set())
        self._first = first
        return self

    def close(self) -> None:
        """Ends the subscription; a blocked `next()` returns (StopIteration) promptly."""
        self._closed.set()
        with self._lock:
            if self._call is not None:
                self._call.cancel()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self) -> Iterator[svc.TrimEventsResponse]:
        failures = 0
        while not self._closed.is_set():
            stream = self._stub.TrimEvents(self._state.request(), metadata=self._metadata)
            with self._lock:
                self._call = stream
            if self._closed.is_set():
                stream.cancel()
            error: TurnkeeperError | None = None
            try:
                for item in stream:
                    failures = 0
                    if self._state.accept(item):
                        yield item
            except grpc.RpcError as raw:
                if self._closed.is_set():
                    return
                error = decode_rpc_error(raw)
                if not is_retryable(error):
                    raise error from raw
            finally:
                stream.cancel()
                with self._lock:
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
            self._closed.wait(delay)
