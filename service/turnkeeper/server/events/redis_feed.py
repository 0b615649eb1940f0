"""The fleet feed: every replica publishes to one Redis Stream and serves TrimEvents from it.

The stream's entries, epochs and forks are described in `redis_protocol.py`; `redis_outbox.py`
publishes, and each subscriber follows the stream with a `redis_reader.Reader`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator

from turnkeeper.server.events.feed import FeedStatus
from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2

from . import cursor as cursors
from .common import (
    CallsInFlight,
    Pacer,
    Turns,
    heartbeat_item,
    messages_of,
    now_timestamp,
    shutting_down,
)
from .feed import Delivery, FeedItem
from .redis_outbox import Outbox
from .redis_protocol import (
    STREAM_KEY,
    DecodedEntries,
    Failure,
    FeedClosedError,
    Stream,
    events_before,
    text,
)
from .redis_reader import Reader, watch_tail

log = logging.getLogger(__name__)

_ROUND_ITEMS = 16  # the most one turn of the event loop grants, in messages


class RedisFeed:
    """Publishes through a bounded local outbox drained by one background task; each subscriber
    reads the stream itself at its own pace, at most `subscriber_queue_size` entries per read, so
    a stalled subscriber holds back no one and falls behind only itself.

    Reads are paced behind the calls (`common.Turns`): a subscriber that found nothing new parks
    until this replica's one blocked reader of the stream tail (or its own publisher) sees a new
    entry, then reads when granted a turn, so an event does not wake every subscriber at once."""

    def __init__(
        self,
        url: str,
        ring_size: int,
        subscriber_queue_size: int,
        *,
        outbox_size: int | None = None,
        stream_key: str = STREAM_KEY,
        calls: CallsInFlight | None = None,
    ) -> None:
        if ring_size < 1 or subscriber_queue_size < 1:
            raise ValueError("ring_size and subscriber_queue_size must be positive")
        self._read_count = subscriber_queue_size
        self._turns = Turns(Pacer(calls, _ROUND_ITEMS))
        self.stream = Stream(url, stream_key, ring_size)
        self.outbox = Outbox(url, self.stream, self._turns, outbox_size or max(ring_size, 10_000))
        self._decoded = DecodedEntries()
        self._tail: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        await self.outbox.start()

    async def close(self) -> None:
        self.stream.close()
        self.outbox.close()
        self._turns.close()
        if self._tail is not None:
            self._tail.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tail  # its read ends too, before the loop may close
        self.stream.cancel_reads()
        await self.outbox.aclose()  # flushes what is queued while Redis answers, then stops
        await self.stream.aclose()

    def status(self) -> FeedStatus:
        if self.outbox.connected:
            return FeedStatus(healthy=True, detail=f"redis stream {self.stream.key}")
        return FeedStatus(
            healthy=False,
            detail=f"redis unavailable ({self.outbox.error}); "
            f"{self.outbox.unpublished_total} events unpublished",
        )

    # -- publishing ----------------------------------------------------------------------------

    def publish(self, trimmed: trim_pb2.HistoryTrimmed) -> None:
        try:
            if self.outbox.closed:
                return
            payload = events_pb2.TrimEvent(
                time=now_timestamp(), trimmed=trimmed
            ).SerializeToString()
            self.outbox.put(b"e", payload)
        except Exception:  # publish runs on the request path and must never fail it
            log.exception("dropping a trim event")

    def publish_meter(self, update: events_pb2.MeterUpdate) -> None:
        try:
            if self.outbox.closed:
                return
            stamped = events_pb2.MeterUpdate()
            stamped.CopyFrom(update)
            stamped.ClearField("cursor")
            if not stamped.HasField("time"):
                stamped.time.CopyFrom(now_timestamp())
            self.outbox.put(b"m", stamped.SerializeToString())
        except Exception:  # publish_meter runs on the request path and must never fail it
            log.exception("dropping a meter update")

    def wants_meter_updates(self) -> bool:
        # This replica cannot tell whether another's subscribers opted in.
        return not self.outbox.closed

    async def oldest_cursor(self) -> str:
        """The position before the stream's first entry; "" when Redis cannot be read or the
        stream is empty (nothing to replay)."""
        try:
            epoch = await self.stream.epoch()
            fields = await self.stream.first_entry()
        except (*Failure, FeedClosedError):
            return ""
        if fields is None or text(fields[b"e"]) != epoch:
            return ""
        return cursors.encode_redis(epoch, "0-0", events_before(fields))

    def subscribe(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncGenerator[history_service_pb2.TrimEventsResponse]:
        return messages_of(self.deliveries(request))

    async def deliveries(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncGenerator[Delivery]:
        """The messages of `_follow`; when the feed closes it ends with a heartbeat carrying the
        resume cursor (the last event sent, or the position the stream started at)."""
        cursor, dropped = request.after_cursor, 0
        follow = self._follow(request)
        try:
            async for delivery in follow:
                for item in delivery:
                    kind = item.message.WhichOneof("item")
                    if kind == "event":
                        cursor = item.message.event.cursor
                    elif kind == "heartbeat":
                        heartbeat = item.message.heartbeat
                        cursor, dropped = heartbeat.cursor, heartbeat.dropped_events
                yield delivery
        finally:
            await follow.aclose()
        if self.stream.closed:
            yield [FeedItem(heartbeat_item(cursor, dropped))]

    def _follow(self, request: history_service_pb2.TrimEventsRequest) -> AsyncGenerator[Delivery]:
        """One subscriber's deliveries from its own `Reader`; the first starts the tail watcher
        (a feed that only reads is not started)."""
        reader = Reader(self.stream, self._turns, self._decoded, self._read_count, request)
        if self.stream.closed:
            raise shutting_down()
        if self._tail is None:
            self._tail = asyncio.create_task(
                watch_tail(self.stream, self._turns), name="turnkeeper-events-tail"
            )
        return reader.deliveries()
