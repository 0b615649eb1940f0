"""The embedded feed: an in-process ring buffer that every subscriber reads at its own cursor.

`publish` only appends the payload and its time to the ring (O(1), on the request path); the
response a subscriber is sent is built from them the first time one reads it, and encoded once for
every subscriber (the event's `FeedItem`): with nobody reading, an event costs no protobuf work.
The feed's dispatcher task hands subscribers their next message (one item, or a batch of what is
ready for a subscriber that opted in), a few per turn of the event loop, within the share of the
loop the calls leave it (`common.Pacer`): a call that arrives waits for one small round of
delivery, never for a whole fan-out. A subscriber that falls behind catches up from the ring, in
order; one the ring laps gets a SLOW_CONSUMER gap and resumes near the head
(`common.resume_margin`), where its next turns still find the events it is sent next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from turnkeeper.server.events.feed import FeedStatus
from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2

from . import cursor as cursors
from .common import (
    MAX_BATCH_BYTES,
    CallsInFlight,
    Filter,
    Pacer,
    batch_limit,
    delivery_cost,
    gap_item,
    heartbeat_interval,
    heartbeat_item,
    invalid_cursor,
    messages_of,
    meter_item,
    resume_margin,
    shutting_down,
)
from .feed import Delivery, FeedItem

log = logging.getLogger(__name__)

_Item = history_service_pb2.TrimEventsResponse
T = TypeVar("T")

# One round of delivery: at most this many messages handed out, this many subscribers looked at,
# and this many retained events scanned past a subscriber's filter (per message). A call arriving
# during a round waits for it, so a round stays well under a millisecond.
_ROUND_ITEMS = 8
_ROUND_LOOKS = 64
_SCAN_LIMIT = 256
# Heartbeats owed by idle subscribers are looked for at most this often.
_BEAT_GRAIN_S = 0.1

# `_take`'s answer when it scanned _SCAN_LIMIT events past a filter without reaching the head,
# and `_step`'s when it moved past an event or meter update the filter skips (compared by
# identity; never sent).
_BEHIND: list[FeedItem] = []
_SKIPPED = FeedItem(history_service_pb2.TrimEventsResponse())

# A subscriber's place: waiting for its turn, waiting for something to send, writing, gone.
_READY, _PARKED, _BUSY, _DONE = range(4)


class _Window(Generic[T]):
    """The newest `size` items of the sequence 1, 2, 3, ... by number, in a fixed list."""

    def __init__(self, size: int) -> None:
        self._slots: list[T | None] = [None] * size
        self.size = size
        self.last = 0  # the number of the newest item; 0 before the first

    @property
    def first(self) -> int:
        """The number of the oldest item retained (last + 1 when empty)."""
        return max(1, self.last - self.size + 1)

    def append(self, item: T) -> T | None:
        """Adds the next item; returns the one it evicted."""
        self.last += 1
        index = self.last % self.size
        evicted = self._slots[index]
        self._slots[index] = item
        return evicted

    def __getitem__(self, number: int) -> T:
        item = self._slots[number % self.size]
        assert item is not None and self.first <= number <= self.last
        return item


@dataclass(slots=True)
class _Event:
    """A published trim as the ring retains it; its response is built when first read."""

    trimmed: trim_pb2.HistoryTrimmed
    time_ns: int
    epoch: str
    seq: int
    _cursor: str = ""
    _item: FeedItem | None = None

    @property
    def cursor(self) -> str:
        cursor = self._cursor
        if not cursor:
            cursor = self._cursor = cursors.encode_ring(self.epoch, self.seq)
        return cursor

    @property
    def item(self) -> FeedItem:
        """The response, shared by every subscriber (encoded once); built under the feed's
        lock."""
        item = self._item
        if item is None:
            message = history_service_pb2.TrimEventsResponse()
            event = message.event
            event.cursor = self.cursor
            event.time.FromNanoseconds(self.time_ns)
            event.trimmed.CopyFrom(self.trimmed)
            item = self._item = FeedItem(message)
        return item


@dataclass(eq=False, slots=True)  # identity semantics: a dict key
class _Subscriber:
    filter: Filter
    interval: float
    batch: int  # the most items one message carries
    seq: int  # the last trim handed out or skipped by the filter
    meter: int  # the last meter update handed out or skipped
    position: str  # the feed position at subscription: the heartbeat cursor before any event
    after: str  # the resume cursor asked for (a gap's after_cursor before any event)
    last_sent: float
    sent_cursor: str = ""  # the cursor of the last event handed out
    dropped: int = 0
    # The event a gap named as the next one delivered (`before_cursor`): sent next even if the
    # ring evicts it meanwhile. `seq` is the trim before it until then.
    owed: _Event | None = None
    everything: bool = False  # no filter on trims
    state: int = _BUSY
    waiter: asyncio.Future[Delivery] | None = None
    greeted: bool = False  # has sent something (an opening heartbeat is owed otherwise)
    final: bool = False  # the item handed out ends the stream


@dataclass
class _Parked:
    """Subscribers with nothing to send, by what wakes them."""

    trims: dict[_Subscriber, None] = field(default_factory=dict)
    meters: dict[_Subscriber, None] = field(default_factory=dict)  # opted in to meter updates

    def all(self) -> list[_Subscriber]:
        return [*self.trims, *self.meters]


class RingFeed:
    """Retains the newest `ring_size` events; cursors are valid for this process only.

    `calls` is what delivery gives way to (the edge's admission count); without it, delivery
    only yields to the loop between rounds.
    """

    def __init__(self, ring_size: int, calls: CallsInFlight | None = None) -> None:
        if ring_size < 1:
            raise ValueError("ring_size must be positive")
        self.epoch = secrets.token_hex(8)
        self._events: _Window[_Event] = _Window(ring_size)
        # Live only (never replayed): each with the number of the last trim before it.
        self._meters: _Window[tuple[int, FeedItem]] = _Window(ring_size)
        self._pacer = Pacer(calls, _ROUND_ITEMS)
        # publish() may run on a worker thread: the two windows and the flags below are guarded
        # by this lock. Subscribers, the ready queue and the parked sets are touched on the loop.
        self._lock = threading.Lock()
        self._closed = False
        self._fresh_events = False
        self._fresh_meters = False
        self._meter_subscribers = 0
        self._live = 0
        self._ready: deque[_Subscriber] = deque()
        self._parked = _Parked()
        self._next_beat = math.inf
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()

    async def start(self) -> None:
        self._start_dispatcher()

    def _start_dispatcher(self) -> None:
        if self._dispatcher is None:
            self._loop = asyncio.get_running_loop()
            self._dispatcher = asyncio.create_task(self._dispatch(), name="turnkeeper-ring-fanout")

    async def close(self) -> None:
        """Stops publishing; each stream gets what was published, then a final heartbeat with its
        resume cursor, and ends."""
        with self._lock:
            self._closed = True
        self._wake()

    def status(self) -> FeedStatus:
        return FeedStatus(healthy=True, detail="in-process ring buffer")

    @property
    def subscribers(self) -> int:
        """The subscriptions open now."""
        return self._live

    async def oldest_cursor(self) -> str:
        with self._lock:
            return cursors.encode_ring(self.epoch, self._events.first - 1)

    def publish(self, trimmed: trim_pb2.HistoryTrimmed) -> None:
        """O(1) whatever the number of subscribers: the dispatcher task does the fan-out. The ring
        keeps `trimmed` itself (the caller does not change it once published, see feed.py)."""
        try:
            with self._lock:
                if self._closed:
                    return
                entry = _Event(trimmed, time.time_ns(), self.epoch, self._events.last + 1)
                self._events.append(entry)
                self._fresh_events = True
            # Only a parked subscriber needs a wake-up: without one, the dispatcher sleeps with
            # nobody to serve, or is busy and sees `_fresh_events` before it sleeps (and every
            # stream that comes back for its next item wakes it).
            if self._parked.trims or self._parked.meters:
                self._wake()
        except Exception:  # publish runs on the request path and must never fail it
            log.exception("dropping a trim event")

    def publish_meter(self, update: events_pb2.MeterUpdate) -> None:
        """Live only: meter updates are not replayed (see feed.EventFeed)."""
        try:
            with self._lock:
                if self._closed or not self._meter_subscribers:
                    return
                last = self._events.last
                item = FeedItem(meter_item(update, cursors.encode_ring(self.epoch, last)))
                self._meters.append((last, item))
                self._fresh_meters = True
            self._wake()
        except Exception:  # publish_meter runs on the request path and must never fail it
            log.exception("dropping a meter update")

    def wants_meter_updates(self) -> bool:
        # Read without the lock, like `publish_meter`'s answer it may be a moment old: a
        # subscriber that opts in meanwhile gets the next update.
        return bool(self._meter_subscribers) and not self._closed

    def _wake(self) -> None:
        loop = self._loop
        if loop is None:
            return  # not started: the first subscription starts it
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wakeup.set()
        else:  # publish() called from a worker thread
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self._wakeup.set)

    # -- delivery ------------------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Hands out items round by round while subscribers are ready; sleeps otherwise. Ends once
        the feed is closed and every stream has ended."""
        loop = asyncio.get_running_loop()
        while True:
            self._unpark()
            if self._ready:
                allowed = await self._pacer.round()
                self._unpark()
                self._pacer.spent(self._round(loop.time(), allowed))
                self._sweep_heartbeats(loop.time())  # idle ones are owed theirs meanwhile too
                continue
            if self._closed and not self._live:
                return
            self._wakeup.clear()
            if self._fresh_events or self._fresh_meters:
                continue  # published since _unpark looked
            wait = self._next_beat - loop.time()
            if wait > 0:
                # Not wait_for: on 3.11 it can swallow a cancellation that meets a wake-up.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(wait, 3600.0)):
                        await self._wakeup.wait()
            self._sweep_heartbeats(loop.time())

    def _unpark(self) -> None:
        """Parked subscribers go back to the ready queue when something new may be theirs."""
        parked = self._parked
        with self._lock:
            closed, events, meters = self._closed, self._fresh_events, self._fresh_meters
            self._fresh_events = self._fresh_meters = False
        groups = []
        if events or closed:
            groups.append(parked.trims)
        if events or meters or closed:
            groups.append(parked.meters)
        for group in groups:
            for sub in group:
                sub.state = _READY
            self._ready.extend(group)
            group.clear()

    def _round(self, now: float, allowed: int) -> float:
        """Hands out up to `allowed` messages; returns what they cost (`delivery_cost`)."""
        handed = looked = 0
        cost = 0.0
        ready = self._ready
        while ready and handed < allowed and looked < _ROUND_LOOKS:
            sub = ready.popleft()
            if sub.state != _READY:
                continue
            looked += 1
            waiter = sub.waiter
            if waiter is None or waiter.done():  # cancelled: its stream is ending
                continue
            out = self._take(sub)
            if out is _BEHIND:
                ready.append(sub)  # more to scan past its filter: next round
                continue
            if not out:
                if self._closed:
                    sub.final = True
                elif sub.greeted and now - sub.last_sent < sub.interval:
                    self._park(sub)
                    continue
                out = [FeedItem(heartbeat_item(sub.sent_cursor or sub.position, sub.dropped))]
            sub.state = _BUSY
            sub.waiter = None
            sub.greeted = True
            waiter.set_result(out)
            handed += 1
            cost += delivery_cost(len(out))
        return cost

    def _park(self, sub: _Subscriber) -> None:
        sub.state = _PARKED
        group = self._parked.meters if sub.filter.meter_updates else self._parked.trims
        group[sub] = None
        self._next_beat = min(self._next_beat, sub.last_sent + sub.interval)

    def _sweep_heartbeats(self, now: float) -> None:
        """Parked subscribers that owe a heartbeat go to the ready queue."""
        if now < self._next_beat:
            return
        earliest = math.inf
        for group in (self._parked.trims, self._parked.meters):
            due = []
            for sub in group:
                at = sub.last_sent + sub.interval
                if at <= now:
                    due.append(sub)
                else:
                    earliest = min(earliest, at)
            for sub in due:
                del group[sub]
                sub.state = _READY
                self._ready.append(sub)
        self._next_beat = max(earliest, now + _BEAT_GRAIN_S) if earliest < math.inf else math.inf

    def _take(self, sub: _Subscriber) -> list[FeedItem]:
        """The subscriber's next message from the ring (advancing its cursor): up to its batch
        of items (and MAX_BATCH_BYTES), [] when it has nothing more, or _BEHIND when a scan past
        its filter was cut short before anything was found."""
        items: list[FeedItem] = []
        size = scanned = 0
        with self._lock:
            while len(items) < sub.batch and size < MAX_BATCH_BYTES:
                item = self._step(sub)
                if item is None:
                    break
                if item is _SKIPPED:
                    scanned += 1
                    if scanned < _SCAN_LIMIT:
                        continue
                    return items or _BEHIND
                items.append(item)
                if sub.batch > 1:
                    size += len(item.encoded)
        return items

    def _step(self, sub: _Subscriber) -> FeedItem | None:
        """The subscriber's next item, _SKIPPED when it moved past one its filter skips, None when
        it has nothing more. Caller holds the lock."""
        events, meters = self._events, self._meters
        wanted = sub.filter
        owed = sub.owed
        if owed is None and sub.seq < events.first - 1:
            return self._lapped(sub)
        opted = wanted.meter_updates
        if opted:
            if sub.meter < meters.first - 1:
                sub.meter = meters.first - 1  # evicted before it got to them: no gap, no count
            if sub.meter < meters.last:
                before, update = meters[sub.meter + 1]
                if before <= sub.seq:  # it came before the subscriber's next trim
                    sub.meter += 1
                    return update if wanted.matches_meter(update.message.meter_update) else _SKIPPED
        if owed is not None:
            sub.owed = None
            entry = owed
        elif sub.seq >= events.last:
            return None
        else:
            entry = events[sub.seq + 1]
        sub.seq = entry.seq
        if sub.everything or wanted.matches(entry.trimmed):
            sub.sent_cursor = entry.cursor
            return entry.item
        return _SKIPPED

    def _lapped(self, sub: _Subscriber) -> FeedItem:
        """The gap of a subscriber the ring evicted unread events of. It resumes near the head,
        not at the oldest retained event (which the next publication evicts, so that every turn
        would be another gap); the events it skips to get there count as missed, as do the
        evicted ones, including those its filters would have skipped. Caller holds the lock."""
        events, meters = self._events, self._meters
        resume = max(events.first - 1, events.last - resume_margin(events.size))
        missed = resume - sub.seq
        sub.dropped += missed
        after = sub.sent_cursor or sub.after
        sub.seq = resume
        sub.meter = max(sub.meter, meters.first - 1)
        while sub.meter < meters.last and meters[sub.meter + 1][0] < resume:
            sub.meter += 1  # superseded by the meter updates after `resume`
        return FeedItem(
            gap_item(events_pb2.GAP_CAUSE_SLOW_CONSUMER, after, self._owe_next(sub, resume), missed)
        )

    def _owe_next(self, sub: _Subscriber, seq: int) -> str:
        """The cursor of the first event after `seq` that the subscriber's filters match, looked
        for among the next _SCAN_LIMIT, which becomes the next event it is sent; "" (not known
        yet) when there is none. Caller holds the lock."""
        events = self._events
        wanted = sub.filter
        for number in range(max(seq + 1, events.first), min(events.last, seq + _SCAN_LIMIT) + 1):
            entry = events[number]
            if sub.everything or wanted.matches(entry.trimmed):
                sub.owed = entry
                sub.seq = number - 1
                return entry.cursor
        return ""

    async def _turn(self, sub: _Subscriber) -> Delivery:
        """Waits until the dispatcher hands this subscriber its next message."""
        assert self._loop is not None
        waiter: asyncio.Future[Delivery] = self._loop.create_future()
        sub.waiter = waiter
        sub.state = _READY
        self._ready.append(sub)
        self._wakeup.set()
        return await waiter

    def _leave(self, sub: _Subscriber) -> None:
        sub.state = _DONE
        self._parked.trims.pop(sub, None)
        self._parked.meters.pop(sub, None)
        self._live -= 1
        if sub.filter.meter_updates:
            self._meter_subscribers -= 1
        with contextlib.suppress(RuntimeError):  # a stream finalized after its loop closed
            if sub.waiter is not None:
                sub.waiter.cancel()
            self._wakeup.set()  # a closed feed's dispatcher ends with the last stream

    # -- subscribing ---------------------------------------------------------------------------

    def subscribe(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncGenerator[history_service_pb2.TrimEventsResponse]:
        return messages_of(self.deliveries(request))

    async def deliveries(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncGenerator[Delivery]:
        wanted = Filter.of(request)
        interval = heartbeat_interval(request)
        start: cursors.Cursor | None = None
        if request.after_cursor:
            start = cursors.decode(request.after_cursor)
            if start is None:
                raise invalid_cursor("not a cursor issued by this feed")

        self._start_dispatcher()
        with self._lock:
            if self._closed:
                raise shutting_down()
            head = self._events.last
            sub = _Subscriber(
                wanted,
                interval,
                batch_limit(request),
                seq=head,
                meter=self._meters.last,
                position=cursors.encode_ring(self.epoch, head),
                after=request.after_cursor,
                last_sent=0.0,
                everything=wanted.everything,
            )
            opening = self._start_at(sub, start)
            self._live += 1
            if wanted.meter_updates:
                self._meter_subscribers += 1
        try:
            if opening is not None:
                yield [FeedItem(opening)]
                sub.greeted = True
            elif sub.seq == head:
                # Tell the client at once that it is subscribed, and where it could resume from.
                yield [FeedItem(heartbeat_item(sub.position, 0))]
                sub.greeted = True
            sub.last_sent = time.monotonic()
            while True:
                delivery = await self._turn(sub)
                yield delivery
                if sub.final:
                    return
                sub.last_sent = time.monotonic()
        finally:
            self._leave(sub)

    def _start_at(self, sub: _Subscriber, start: cursors.Cursor | None) -> _Item | None:
        """Places a new subscriber (`seq`: the trim before its first) and returns the gap it is
        owed first when some events after its cursor are gone. Caller holds the lock."""
        events = self._events
        first = events.first
        if start is None:
            return None
        if isinstance(start, cursors.RingCursor) and start.epoch == self.epoch:
            if start.seq > events.last:
                raise invalid_cursor("the cursor is ahead of every event this feed published")
            if start.seq >= first - 1:
                sub.seq = start.seq
                return None
            # Everything between the cursor and the oldest retained event was evicted; the count
            # includes events this subscriber's filters would have skipped.
            missed = first - 1 - start.seq
            sub.seq = first - 1
            before = self._owe_next(sub, first - 1)
            return gap_item(events_pb2.GAP_CAUSE_BUFFER_OVERFLOW, sub.after, before, missed)
        # A cursor from an earlier run (or another backend): what happened since is unknown.
        sub.seq = first - 1
        before = self._owe_next(sub, first - 1)
        return gap_item(events_pb2.GAP_CAUSE_RESTART, sub.after, before, 0)
