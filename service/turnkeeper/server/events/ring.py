"""The embedded feed: an in-process ring buffer and per-subscriber bounded queues.

`publish` only appends to the ring and an inbox (it runs on the request path); the feed's own
dispatcher task fans each event out to the subscribers, sharing one response object (encoded once,
see `common.share`) among them and yielding to the loop every few hundred subscribers, so a trim's
latency does not grow with the number of subscribers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from turnkeeper.server.events.feed import FeedStatus
from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2

from . import cursor as cursors
from .common import (
    Filter,
    gap_item,
    heartbeat_interval,
    heartbeat_item,
    invalid_cursor,
    meter_item,
    now_timestamp,
    share,
    shutting_down,
)

log = logging.getLogger(__name__)


@dataclass
class _Drop:
    """Events dropped for one subscriber in a row; delivered as one SLOW_CONSUMER gap."""

    after_cursor: str
    missed: int = 0
    before_cursor: str = ""
    closed: bool = False


# A live event: one TrimEventsResponse shared by every subscriber it goes to.
_Event = history_service_pb2.TrimEventsResponse
_Item = _Event | _Drop
# Offers the dispatcher makes between two yields to the event loop.
_FANOUT_SLICE = 256


@dataclass(eq=False)  # identity semantics: kept in a set
class _Subscriber:
    filter: Filter
    capacity: int
    loop: asyncio.AbstractEventLoop
    items: deque[_Item] = field(default_factory=deque)
    queued_events: int = 0
    dropped: int = 0
    # The cursor of the newest event handed to this subscriber (queued or replayed): a drop's
    # after_cursor.
    last_cursor: str = ""
    # Events up to this sequence number were replayed or precede the subscription.
    start_seq: int = 0
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, item: _Event) -> None:
        """Queues without waiting; a full queue drops the event for this subscriber only."""
        tail = self.items[-1] if self.items else None
        if self.queued_events >= self.capacity:
            self.dropped += 1
            if isinstance(tail, _Drop) and not tail.closed:
                tail.missed += 1
            else:
                self.items.append(_Drop(after_cursor=self.last_cursor, missed=1))
            return
        if isinstance(tail, _Drop) and not tail.closed:
            tail.before_cursor = item.event.cursor
            tail.closed = True
        self.items.append(item)
        self.queued_events += 1
        self.last_cursor = item.event.cursor
        self.wake()

    def offer_meter(self, item: _Event) -> None:
        """Queues a meter update when there is room; never a drop, never a gap (feed.py)."""
        tail = self.items[-1] if self.items else None
        if self.queued_events >= self.capacity or (isinstance(tail, _Drop) and not tail.closed):
            return
        self.items.append(item)
        self.queued_events += 1
        self.wake()

    def take(self) -> _Item | None:
        if not self.items:
            return None
        item = self.items.popleft()
        if isinstance(item, _Drop):
            item.closed = True  # later drops start a new gap after whatever comes next
        else:
            self.queued_events -= 1
        return item

    def wake(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self.wakeup.set()
        else:  # publish() called from a worker thread
            with contextlib.suppress(RuntimeError):  # the loop is closing; nobody is waiting
                self.loop.call_soon_threadsafe(self.wakeup.set)


class RingFeed:
    """Retains the newest `ring_size` events; cursors are valid for this process only."""

    def __init__(self, ring_size: int, subscriber_queue_size: int) -> None:
        if ring_size < 1 or subscriber_queue_size < 1:
            raise ValueError("ring_size and subscriber_queue_size must be positive")
        self.epoch = secrets.token_hex(8)
        self._ring: deque[tuple[int, _Event]] = deque(maxlen=ring_size)
        self._queue_size = subscriber_queue_size
        self._seq = 0
        self._subscribers: set[_Subscriber] = set()
        # Published, not yet fanned out; drained by the dispatcher task on the event loop.
        self._inbox: deque[tuple[int, _Event]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._inbox_ready = asyncio.Event()
        # publish() may run on a worker thread; the ring, the sequence, the inbox and the
        # subscriber set are guarded by this lock. Subscriber queues are touched on the loop only.
        self._lock = threading.Lock()
        self._closed = False

    async def start(self) -> None:
        self._start_dispatcher()

    def _start_dispatcher(self) -> None:
        if self._dispatcher is None:
            self._loop = asyncio.get_running_loop()
            self._dispatcher = asyncio.create_task(self._dispatch(), name="turnkeeper-ring-fanout")

    async def close(self) -> None:
        """Stops publishing, delivers what was published, then ends every stream with a final
        heartbeat carrying its resume cursor."""
        with self._lock:
            self._closed = True
        if self._dispatcher is not None:
            self._inbox_ready.set()
            await self._dispatcher
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            sub.wake()

    def status(self) -> FeedStatus:
        return FeedStatus(healthy=True, detail="in-process ring buffer")

    async def oldest_cursor(self) -> str:
        with self._lock:
            first_seq = self._ring[0][0] if self._ring else self._seq + 1
            return cursors.encode_ring(self.epoch, first_seq - 1)

    def publish(self, trimmed: trim_pb2.HistoryTrimmed) -> None:
        """O(1) whatever the number of subscribers: the dispatcher task does the fan-out."""
        try:
            with self._lock:
                if self._closed:
                    return
                self._seq += 1
                # The constructor copies `trimmed`, so later changes by the caller do not leak in.
                event = events_pb2.TrimEvent(
                    cursor=cursors.encode_ring(self.epoch, self._seq),
                    time=now_timestamp(),
                    trimmed=trimmed,
                )
                entry = (self._seq, history_service_pb2.TrimEventsResponse(event=event))
                self._ring.append(entry)
                if not self._subscribers:
                    return
                self._inbox.append(entry)
            self._wake_dispatcher()
        except Exception:  # publish runs on the request path and must never fail it
            log.exception("dropping a trim event")

    def publish_meter(self, update: events_pb2.MeterUpdate) -> None:
        """Live only: meter updates are not retained in the ring (see feed.EventFeed)."""
        try:
            with self._lock:
                if self._closed or not self._subscribers:
                    return
                cursor = cursors.encode_ring(self.epoch, self._seq)
                self._inbox.append((self._seq, meter_item(update, cursor)))
            self._wake_dispatcher()
        except Exception:  # publish_meter runs on the request path and must never fail it
            log.exception("dropping a meter update")

    def _wake_dispatcher(self) -> None:
        loop = self._loop
        if loop is None:
            return  # not started: the first subscription starts it and drains the inbox
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._inbox_ready.set()
        else:  # publish() called from a worker thread
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self._inbox_ready.set)

    async def _dispatch(self) -> None:
        """Fans each published event (and meter update) out to the matching subscribers, in
        publication order."""
        offered = 0
        while True:
            await self._inbox_ready.wait()
            self._inbox_ready.clear()
            while True:
                with self._lock:
                    if not self._inbox:
                        break
                    seq, item = self._inbox.popleft()
                    subscribers = list(self._subscribers)
                share(item)
                meter = item.meter_update if item.HasField("meter_update") else None
                for sub in subscribers:
                    if meter is not None:
                        # Cut at the trims before it, so a subscriber registered since gets it.
                        if seq >= sub.start_seq and sub.filter.matches_meter(meter):
                            sub.offer_meter(item)
                    elif seq > sub.start_seq and sub.filter.matches(item.event.trimmed):
                        sub.offer(item)
                    offered += 1
                    if offered >= _FANOUT_SLICE:
                        offered = 0
                        await asyncio.sleep(0)  # let calls waiting on the loop run
            if self._closed:
                return

    async def subscribe(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncIterator[history_service_pb2.TrimEventsResponse]:
        wanted = Filter.of(request)
        interval = heartbeat_interval(request)
        start: cursors.Cursor | None = None
        if request.after_cursor:
            start = cursors.decode(request.after_cursor)
            if start is None:
                raise invalid_cursor("not a cursor issued by this feed")

        self._start_dispatcher()
        sub = _Subscriber(wanted, self._queue_size, asyncio.get_running_loop())
        backlog: deque[history_service_pb2.TrimEventsResponse] = deque()
        # Snapshot the replay and register for live events under one lock hold, so every event
        # lands either in the replay or in the live queue: none twice, none missing.
        with self._lock:
            if self._closed:
                raise shutting_down()
            if start is not None:
                backlog.extend(self._replay(start, wanted, request.after_cursor))
                replayed = [i.event.cursor for i in backlog if i.HasField("event")]
                if replayed:
                    sub.last_cursor = replayed[-1]
            self._subscribers.add(sub)
            sub.start_seq = self._seq
            # The stream's resume position: everything up to the head is replayed or skipped.
            sent_cursor = cursors.encode_ring(self.epoch, self._seq)
        try:
            last_sent = time.monotonic()
            if not backlog:
                # Tell the client at once that it is subscribed, and where it could resume from.
                yield heartbeat_item(sent_cursor, 0)
            while True:
                sub.wakeup.clear()
                out: history_service_pb2.TrimEventsResponse | None = None
                if backlog:
                    out = backlog.popleft()
                else:
                    item = sub.take()
                    if isinstance(item, _Drop):
                        out = gap_item(
                            events_pb2.GAP_CAUSE_SLOW_CONSUMER,
                            item.after_cursor,
                            item.before_cursor,
                            item.missed,
                        )
                    else:
                        out = item
                if out is None and self._closed:
                    # Everything queued was delivered: tell the client where to resume.
                    yield heartbeat_item(sent_cursor, sub.dropped)
                    return
                if out is None:
                    remaining = last_sent + interval - time.monotonic()
                    if remaining > 0:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(sub.wakeup.wait(), remaining)
                        continue
                    out = heartbeat_item(sent_cursor, sub.dropped)
                elif out.HasField("event"):
                    sent_cursor = out.event.cursor
                yield out
                last_sent = time.monotonic()
        finally:
            with self._lock:
                self._subscribers.discard(sub)

    def _replay(
        self, start: cursors.Cursor, wanted: Filter, after: str
    ) -> list[history_service_pb2.TrimEventsResponse]:
        """The items owed to a subscriber resuming after `start`: a gap when some are gone, then
        every retained matching event after it. Caller holds the lock."""
        first_seq = self._ring[0][0] if self._ring else self._seq + 1
        if isinstance(start, cursors.RingCursor) and start.epoch == self.epoch:
            if start.seq > self._seq:
                raise invalid_cursor("the cursor is ahead of every event this feed published")
            items = [
                e for seq, e in self._ring if seq > start.seq and wanted.matches(e.event.trimmed)
            ]
            if start.seq < first_seq - 1:
                # Everything between the cursor and the oldest retained event was evicted; the
                # count includes events this subscriber's filters would have skipped.
                before = items[0].event.cursor if items else ""
                missed = first_seq - 1 - start.seq
                gap = gap_item(events_pb2.GAP_CAUSE_BUFFER_OVERFLOW, after, before, missed)
                items.insert(0, gap)
            return items
        # A cursor from an earlier run (or another backend): what happened since is unknown.
        items = [e for _, e in self._ring if wanted.matches(e.event.trimmed)]
        before = items[0].event.cursor if items else ""
        return [gap_item(events_pb2.GAP_CAUSE_RESTART, after, before, 0), *items]
