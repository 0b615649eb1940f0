"""The Redis feed's publisher: a bounded local outbox drained into the stream by one task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import deque
from typing import Any

from turnkeeper.v1 import events_pb2

from .common import Turns
from .redis_protocol import PUBLISH, SYNC, Backoff, Failure, Stream, connect

log = logging.getLogger(__name__)

_BATCH = 256
_IDLE_PING_S = 1.0  # keeps the connection state current while nothing is published
_CLOSE_FLUSH_S = 2.0


class Outbox:
    """What this replica publishes, queued so that publishing never waits for Redis: one task
    sends it in batches, each written at most once however often it is sent (its marker), and
    pings Redis while idle so `connected` stays current. When full, the oldest event gives way and
    a gap marker announces it."""

    def __init__(self, url: str, stream: Stream, turns: Turns, size: int) -> None:
        self._stream = stream
        self._turns = turns
        self._connection = connect(url, 2)
        self._publish_script = self._connection.register_script(PUBLISH)
        self._sync_script = self._connection.register_script(SYNC)
        # (kind, payload): b"e" events and b"m" meter updates, in publication order.
        self.queue: deque[tuple[bytes, bytes]] = deque(maxlen=size)
        # The batch sent last whose outcome is unknown: (marker key, script args, events in it).
        self.unsettled: tuple[str, list[Any], int] | None = None
        self.closed = False
        self.connected = False
        self.error = "not started"
        self.unpublished_total = 0
        self._unpublished_pending = 0  # not yet announced by a gap marker
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.check_connection()  # the state is accurate from the start; down is not fatal
        self._task = asyncio.create_task(self._run(), name="turnkeeper-events-publisher")

    def close(self) -> None:
        """Accepts nothing more; the task flushes what is queued while Redis answers."""
        self.closed = True
        self._wake.set()

    async def aclose(self) -> None:
        """Waits a bounded while for the queue to be flushed, then closes the connection."""
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=_CLOSE_FLUSH_S)
            if not done:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        await self._connection.aclose()

    def put(self, kind: bytes, payload: bytes) -> None:
        if len(self.queue) == self.queue.maxlen and self.queue[0][0] == b"e":
            # Keep the newest; the evicted oldest event is announced by a gap marker placed
            # before everything still queued, so the order of the stream stays truthful. (An
            # evicted meter update is superseded by the session's next one: no gap.)
            self._unpublished_pending += 1
            self.unpublished_total += 1
        self.queue.append((kind, payload))
        self._notify()

    def _notify(self) -> None:
        loop = self._loop
        if loop is None:
            return  # not started: the task drains the queue once it runs
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake.set()
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake.set)

    async def _run(self) -> None:
        backoff = Backoff()
        while True:
            idle = not self.queue and self.unsettled is None
            if self.closed and (not self.connected or idle):
                self._count_lost()
                return
            if not self.queue and not self._unpublished_pending and self.unsettled is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), _IDLE_PING_S)
                if not self.queue and not self.closed:
                    await self.check_connection()
                continue
            if not self.connected and not await self.check_connection():
                await backoff.sleep()
                continue
            backoff.reset()
            await self._publish_batch()

    def _count_lost(self) -> None:
        queued = sum(1 for kind, _ in self.queue if kind == b"e")
        lost = queued + (self.unsettled[2] if self.unsettled else 0)
        if lost:
            log.warning("events: %d events not published: redis unavailable at shutdown", lost)

    async def check_connection(self) -> bool:
        """Reads the epoch and the counter (forking the epoch when Redis went back): a ping."""
        try:
            reply = await self._sync_script(keys=self._stream.keys, args=self._stream.fork_args())
            self._stream.observe_key(reply)
        except Failure as error:
            self._set_down(error)
            return False
        if not self.connected:
            log.info("events: redis reachable again")
        self.connected = True
        return True

    def _set_down(self, error: BaseException) -> None:
        if self.connected:
            log.warning("events: redis unreachable: %s", error)
        self.connected = False
        self.error = str(error) or type(error).__name__

    def _next_batch(self) -> tuple[str, list[Any], int]:
        """Takes the oldest queued entries (after a gap marker for events it had to drop):
        (marker key, script args, events in it)."""
        batch = [self.queue.popleft() for _ in range(min(_BATCH, len(self.queue)))]
        announced = self._unpublished_pending
        args: list[Any] = []
        if announced:
            gap = events_pb2.Gap(cause=events_pb2.GAP_CAUSE_PUBLISH_FAILED, missed_events=announced)
            args += [b"g", gap.SerializeToString()]
        for kind, payload in batch:
            args += [kind, payload]
        self._unpublished_pending -= announced  # this batch's marker announces them
        marker = f"{self._stream.key}:batch:{secrets.token_hex(12)}"
        return marker, args, sum(1 for kind, _ in batch if kind == b"e")

    async def _publish_batch(self) -> None:
        if self.unsettled is None:
            self.unsettled = self._next_batch()
        marker, args, _ = self.unsettled
        try:
            # What this process saw is read at send time: a retry checks against the latest.
            reply = await self._publish_script(
                keys=[*self._stream.keys, marker], args=[*self._stream.fork_args(), *args]
            )
        except Failure as error:
            # Whether the script ran is unknown: the same batch is sent again once Redis answers,
            # and its marker makes it run at most once. Nothing is counted as lost.
            self._set_down(error)
            return
        self.unsettled = None
        self._stream.observe_key(reply)
        self._turns.newer()  # this replica's own events: no need to wait for the tail reader
