"""The asyncio client: `AsyncTurnkeeperClient` (grpc.aio) and its resumable `AsyncTrimWatch`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from types import TracebackType
from typing import Self

import grpc
import grpc.aio
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc as svc_grpc

from ._options import (
    DEFAULT,
    DEFAULT_TIMEOUT,
    MetadataTuple,
    Timeout,
    resolve_timeout,
)
from ._rpcs import AsyncCalls, HistoryServiceMethods
from ._watch import Backoff, CursorState, DisconnectHook, WatchLoop, not_subscribed


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
        self._loop = WatchLoop(state, backoff, on_disconnect)
        self._metadata = metadata
        self._default_timeout = default_timeout
        self._closed = asyncio.Event()
        self._call: grpc.aio.UnaryStreamCall[svc.TrimEventsRequest, svc.TrimEventsResponse] | None
        self._call = None
        self._items = self._run()

    @property
    def cursor(self) -> str:
        """The last cursor yielded (event or heartbeat); pass it as `after_cursor` to resume."""
        return self._loop.cursor

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> svc.TrimEventsResponse:
        held = self._loop.take_held()
        return held if held is not None else await self._items.__anext__()

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
        if self._loop.holding:
            return self
        limit = resolve_timeout(timeout, self._default_timeout)
        self._loop.start_holding()
        try:
            self._loop.hold(await asyncio.wait_for(anext(self._items), limit))
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
        while not self._closed.is_set():
            call = self._stub.TrimEvents(self._loop.request(), metadata=self._metadata)
            self._call = call
            raw: grpc.RpcError | None = None
            try:
                while True:
                    message = await call.read()
                    if message is grpc.aio.EOF:
                        break
                    assert isinstance(message, svc.TrimEventsResponse)
                    for item in self._loop.received(message):
                        yield item
            except grpc.RpcError as error:
                raw = error
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
            # A closed watch ends quietly: the error is the cancellation aclose() caused.
            if self._closed.is_set():
                return
            delay = self._loop.ended(raw)
            if delay is None:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), timeout=delay)


class AsyncTurnkeeperClient(HistoryServiceMethods, AsyncCalls[AsyncTrimWatch]):
    """An asyncio turnkeeper client over one grpc.aio channel.

    Use `AsyncTurnkeeperClient.connect("host:port")` or `.connect(unix_path=...)` inside a
    running event loop, and `async with` (or `await close()`) to release the channel.
    Every unary method raises `TurnkeeperError` with the decoded status details.
    """

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

    def _watch(
        self,
        state: CursorState,
        backoff: Backoff,
        on_disconnect: DisconnectHook | None,
        metadata: MetadataTuple,
    ) -> AsyncTrimWatch:
        return AsyncTrimWatch(self._stub, state, backoff, on_disconnect, metadata, self._timeout)
