"""The blocking client: `TurnkeeperClient` and its resumable `TrimWatch`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Self

import grpc
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc as svc_grpc

from ._options import (
    DEFAULT,
    DEFAULT_TIMEOUT,
    MetadataTuple,
    Timeout,
    resolve_timeout,
)
from ._rpcs import BlockingCalls, HistoryServiceMethods
from ._watch import Backoff, CursorState, DisconnectHook, WatchLoop, not_subscribed


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
        self._loop = WatchLoop(state, backoff, on_disconnect)
        self._metadata = metadata
        self._default_timeout = default_timeout
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._call: grpc.Call | None = None
        self._items = self._run()

    @property
    def cursor(self) -> str:
        """The last cursor yielded (event or heartbeat); pass it as `after_cursor` to resume."""
        return self._loop.cursor

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> svc.TrimEventsResponse:
        held = self._loop.take_held()
        return held if held is not None else next(self._items)

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
        if self._loop.holding:
            return self
        limit = resolve_timeout(timeout, self._default_timeout)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.close()

        self._loop.start_holding()
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
        self._loop.hold(first)
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
        while not self._closed.is_set():
            stream = self._stub.TrimEvents(self._loop.request(), metadata=self._metadata)
            with self._lock:
                self._call = stream
            if self._closed.is_set():
                stream.cancel()
            raw: grpc.RpcError | None = None
            try:
                for message in stream:
                    yield from self._loop.received(message)
            except grpc.RpcError as error:
                raw = error
            finally:
                stream.cancel()
                with self._lock:
                    self._call = None
            # A closed watch ends quietly: the error is the cancellation close() caused.
            if self._closed.is_set():
                return
            delay = self._loop.ended(raw)
            if delay is None:
                return
            self._closed.wait(delay)


class TurnkeeperClient(HistoryServiceMethods, BlockingCalls[TrimWatch]):
    """A blocking turnkeeper client over one gRPC channel.

    Use `TurnkeeperClient.connect("host:port")` or `TurnkeeperClient.connect(unix_path=...)`;
    pass an existing channel to the constructor for custom credentials or interceptors.
    Every unary method raises `TurnkeeperError` with the decoded status details.
    """

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

    def _watch(
        self,
        state: CursorState,
        backoff: Backoff,
        on_disconnect: DisconnectHook | None,
        metadata: MetadataTuple,
    ) -> TrimWatch:
        return TrimWatch(self._stub, state, backoff, on_disconnect, metadata, self._timeout)
