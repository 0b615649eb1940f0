"""The Redis feed's subscribers: each follows the stream itself (`Reader`), woken by this
replica's one blocked reader of the stream's tail (`watch_tail`)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

from turnkeeper.v1 import events_pb2, history_service_pb2

from . import cursor as cursors
from .common import (
    EVENT_COST,
    Filter,
    Turns,
    batch_limit,
    gap_item,
    heartbeat_interval,
    heartbeat_item,
    invalid_cursor,
)
from .feed import Delivery, FeedItem
from .redis_protocol import (
    Backoff,
    DecodedEntries,
    Failure,
    FeedClosedError,
    Stream,
    events_before,
    text,
)

log = logging.getLogger(__name__)

# What one subscriber's read costs the event loop, in stream messages (common.ITEM_COST_S each):
# the command and its reply, plus each entry parsed (its decoding is shared, see DecodedEntries).
# Paced reads take at most _PACED_READ_COUNT entries (_BATCH_READ_COUNT for a subscriber whose
# batches hold more), so no one read holds the loop long.
_READ_COST = 2
_ENTRY_COST = EVENT_COST
_PACED_READ_COUNT = 16
_BATCH_READ_COUNT = 256

_Opening = history_service_pb2.TrimEventsResponse | None


async def watch_tail(stream: Stream, turns: Turns) -> None:
    """The one blocked read of the stream on this replica: tells the parked subscribers when
    an entry lands (any replica's). Errors and quiet spells wake them too (a wake-up for
    nothing costs one empty read), so a lost or rebuilt stream is never waited on."""
    backoff = Backoff()
    last_id = None
    while not stream.closed:
        try:
            if last_id is None:
                last_id, _ = await stream.last_entry()
            landed = await stream.wait_for_entry(last_id)
            newest, _ = await stream.last_entry()
            if landed or newest != last_id:
                turns.newer()
            last_id = newest
            backoff.reset()
        except FeedClosedError:
            return
        except Failure:
            turns.newer()
            last_id = None
            await backoff.sleep()


class Reader:
    """One subscriber's way through the stream, read at its own pace behind the calls
    (`common.Turns`): where it is (epoch, entry id, `n`), what it sent, and whether Redis failed
    it. Each read's entries become items, gaps where entries were lost or trimmed, batched up to
    the subscriber's `max_batch_events`."""

    def __init__(
        self,
        stream: Stream,
        turns: Turns,
        decoded: DecodedEntries,
        read_count: int,
        request: history_service_pb2.TrimEventsRequest,
    ) -> None:
        self._stream = stream
        self._turns = turns
        self._decoded = decoded
        self._wanted = Filter.of(request)
        self._interval = heartbeat_interval(request)
        self._batch = batch_limit(request)
        self._after_cursor = request.after_cursor
        self._start: cursors.Cursor | None = None
        if request.after_cursor:
            self._start = cursors.decode(request.after_cursor)
            if self._start is None:
                raise invalid_cursor("not a cursor issued by this feed")
        self._count = min(read_count, max(_PACED_READ_COUNT, min(self._batch, _BATCH_READ_COUNT)))
        self._sent_cursor = ""  # the last event sent on this stream, for heartbeats and gaps
        self._dropped = 0
        self._last_sent = time.monotonic()
        self._backoff = Backoff()
        # Where this reader is: the epoch, the id to read after, the `n` of that entry, and
        # whether that `n` was read from Redis rather than claimed by a client's cursor.
        self._epoch = ""
        self._last_id = "0-0"
        self._last_n: int | None = None
        self._trusted = True
        # The epoch this reader already announced a gap for (it forked it itself): its b"f"
        # entry then needs no second notice.
        self._announced = ""
        self._broken = False
        # The Turns generation before the last read, when it found everything read (then the
        # next read waits for something newer), else None.
        self._parked_since: int | None = None
        self._caught_up = False
        # Items read but not yet sent: a batch fills up to `_batch` items, then goes in one turn.
        self._pending: list[FeedItem] = []
        # The entries being taken in, and the index of the one at hand.
        self._entries: list[Any] = []
        self._index = -1
        # Whether this read already skipped ahead to the newest entries.
        self._relocated = False
        # A resume from a client's cursor first reads on from it (a gap for what was trimmed,
        # then every retained entry, as the ring replays); only a reader that falls behind
        # afterwards skips ahead to the newest entries.
        self._replaying = self._start is not None

    async def deliveries(self) -> AsyncGenerator[Delivery]:
        """What this subscriber is sent, until the feed closes."""
        async with contextlib.aclosing(self._open()) as opening:
            async for delivery in opening:
                yield delivery
                self._delivered()
        while not self._stream.closed:
            self._parked_since = self._parked_since if self._caught_up else None
            try:
                if self._broken and (notice := await self._resume()) is not None:
                    yield notice
                    self._delivered()
                if not await self._wait_turn():
                    return
                entries = await self._read()
                while await self._take_in():
                    await self._turns.take()  # its entries were counted with the read
                    yield self._unsent()
                    self._delivered()
                self._replaying = False
                if self._pending:
                    await self._turns.take()
                    yield self._unsent()
                    self._delivered()
            except FeedClosedError:
                return
            except Failure as error:
                if self._pending:  # read before Redis failed: sent, in order, before anything else
                    yield self._unsent()
                    self._delivered()
                if self._broken and self._heartbeat_due():
                    yield self._heartbeat()
                    self._delivered()
                await self._failed(error)
                continue
            if not entries and self._heartbeat_due():
                yield self._heartbeat()
                self._delivered()

    # -- the start -----------------------------------------------------------------------------

    async def _open(self) -> AsyncGenerator[Delivery]:
        """Places this reader, then tells the client that it is subscribed (or that its cursor
        is from a lost stream). Redis may be down when the subscription starts: heartbeats go
        out meanwhile. Ends without a word when the feed closes first (`deliveries` then
        stops too)."""
        while True:
            try:
                opening = await self._position_at_start()
                break
            except FeedClosedError:
                return
            except Failure:
                if self._heartbeat_due():
                    yield self._heartbeat()
                await self._backoff.sleep()
        yield self._opening(opening)

    async def _position_at_start(self) -> _Opening:
        """Places this reader where its subscription starts; returns the opening gap, if any."""
        epoch = await self._stream.epoch()
        start = self._start
        if start is None:
            last_id, last_n = await self._stream.last_entry()
            self._place(epoch, last_id, last_n, trusted=True)
            return None
        if isinstance(start, cursors.RedisCursor):
            if await self._stream.entry_at(start.stream_id) == (start.epoch, start.n):
                # The cursor's own entry is still there (of this epoch, or of one that a fork
                # replaced: reading on reaches the b"f" entry and its gap).
                self._place(start.epoch, start.stream_id, start.n, trusted=True)
                return None
            if start.epoch == epoch:
                last_id, newest_n = await self._stream.last_entry()
                if newest_n is not None and cursors.stream_id_key(last_id) >= start.id_key():
                    # Entries trimmed after the cursor show up as a jump in `n` on the first read.
                    self._place(epoch, start.stream_id, start.n, trusted=False)
                    return None
            # The cursor is ahead of the stream: the stream was lost and rebuilt under the same
            # epoch (deleted by hand, or restored from an older snapshot).
        gap = gap_item(events_pb2.GAP_CAUSE_RESTART, self._after_cursor, "", 0)
        self._place(epoch, await self._stream.epoch_start(), None, trusted=True)
        return gap

    def _place(self, epoch: str, last_id: str, last_n: int | None, *, trusted: bool) -> None:
        self._epoch, self._last_id, self._last_n, self._trusted = epoch, last_id, last_n, trusted

    def _opening(self, gap: _Opening) -> Delivery:
        if gap is not None:
            return [FeedItem(gap)]
        # Tell the client at once that it is subscribed, and where it could resume from.
        if self._after_cursor:
            self._sent_cursor = self._after_cursor
        elif self._last_n is not None:
            self._sent_cursor = cursors.encode_redis(self._epoch, self._last_id, self._last_n)
        return self._heartbeat()

    # -- one read ------------------------------------------------------------------------------

    async def _wait_turn(self) -> bool:
        """Waits for this reader's turn (a parked one for a new entry, or until its heartbeat
        falls due); False when the feed closed meanwhile."""
        wait_s = max(0.001, self._last_sent + self._interval - time.monotonic())
        await self._turns.take(_READ_COST, self._parked_since, wait_s)
        if self._stream.closed:
            return False
        self._parked_since = self._turns.generation
        return True

    async def _read(self) -> list[Any]:
        entries = await self._stream.read(self._last_id, self._count)
        self._turns.pacer.spent(len(entries) * _ENTRY_COST)
        self._caught_up = len(entries) < self._count
        self._entries, self._index, self._relocated = entries, -1, False
        return entries

    async def _take_in(self) -> bool:
        """Turns the entries read into items until a batch is full (True: send it, then call
        again) or none is left to take in (False)."""
        pending, batch = self._pending, self._batch  # the same list until it is sent
        while self._index + 1 < len(self._entries):
            if len(pending) >= batch:
                return True
            self._index += 1
            raw_id, fields = self._entries[self._index]
            entry_id, epoch, kind, n = (
                text(raw_id),
                text(fields[b"e"]),
                fields[b"k"],
                int(fields[b"n"]),
            )
            if epoch != self._epoch:
                if await self._change_epoch(epoch, entry_id, kind, n):
                    continue
                return False
            last_n = self._last_n
            if last_n is None:
                pass
            elif n < last_n or (n == last_n and kind == b"e"):
                await self._number_went_back()
            elif (
                kind == b"e"
                and n > last_n + 1
                and not (self._relocated or self._replaying)
                and await self._skip_ahead(entry_id)
            ):
                continue
            self._take_entry(entry_id, kind, n, fields)
        return False

    def _unsent(self) -> Delivery:
        delivery, self._pending = self._pending, []
        return delivery

    # -- what an entry means -------------------------------------------------------------------

    async def _change_epoch(self, epoch: str, entry_id: str, kind: bytes, n: int) -> bool:
        """An entry of another epoch; False when this read's other entries are to be skipped."""
        if kind == b"f":
            # Redis lost entries of the epoch this reader was in (a failover to a lagging
            # replica, a restore): the new epoch starts here.
            if epoch != self._announced:
                before = self._first_match(self._entries, self._index + 1, epoch)
                self._announce(events_pb2.GAP_CAUSE_RESTART, before)
            self._place(epoch, entry_id, n, trusted=True)
            self._stream.observe_entry(epoch, n)
            return True
        # The stream was lost and rebuilt under this reader: start over at the beginning of its
        # current epoch.
        self._announce(events_pb2.GAP_CAUSE_RESTART)
        self._epoch, self._last_id, self._last_n = epoch, await self._stream.epoch_start(), None
        self._caught_up = False  # read again at once, from there
        return False

    async def _number_went_back(self) -> None:
        """The number went back under one epoch: entries were lost and their numbers issued
        again, before any replica forked the epoch."""
        self._announce(events_pb2.GAP_CAUSE_RESTART)
        if self._trusted and self._last_n is not None:  # never on a number a cursor claimed
            self._announced = await self._stream.fork(self._epoch, self._last_n)
        self._last_n = None

    async def _skip_ahead(self, entry_id: str) -> bool:
        """Entries were trimmed (MAXLEN) before this reader got to them: what is left of its way
        is the oldest retained, next to go. It resumes near the newest instead, so that the gap
        is followed by events, not by another; True when it did."""
        recent = await self._stream.recent()
        self._relocated = True
        if not recent or cursors.stream_id_key(text(recent[0][0])) <= (
            cursors.stream_id_key(entry_id)
        ):
            return False
        before_n = events_before(recent[0][1])
        last_n = self._last_n
        if text(recent[0][1][b"e"]) != self._epoch or last_n is None or before_n <= last_n:
            return False
        missed = before_n - last_n
        self._dropped += missed
        before = self._first_match(recent, 0, self._epoch)
        self._announce(events_pb2.GAP_CAUSE_BUFFER_OVERFLOW, before, missed)
        self._entries, self._index, self._last_n = recent, -1, before_n
        self._caught_up = False
        return True

    def _take_entry(self, entry_id: str, kind: bytes, n: int, fields: dict[bytes, Any]) -> None:
        """An entry of this reader's epoch, in order: an event, a gap marker or a meter update."""
        self._last_id = entry_id
        epoch = self._epoch
        self._stream.observe_entry(epoch, n)
        if kind == b"g":
            marker = events_pb2.Gap.FromString(fields[b"p"])
            before = self._first_match(self._entries, self._index + 1, epoch)
            self._announce(marker.cause, before, marker.missed_events)
            return
        if kind == b"m":
            # `n` of a meter update is the count of events before it: not an event.
            update = self._decoded.meter(fields[b"p"], epoch, entry_id, n)
            if self._wanted.matches_meter(update.message.meter_update):
                self._pending.append(update)
            return
        if kind == b"f":  # it begins this epoch: nothing to send
            return
        last_n = self._last_n
        if last_n is not None and n > last_n + 1:
            # Trimmed before this reader got to them, and the newest entries are no further
            # on: the gap is followed by what this read holds.
            self._dropped += n - last_n - 1
            before = self._first_match(self._entries, self._index, epoch)
            self._announce(events_pb2.GAP_CAUSE_BUFFER_OVERFLOW, before, n - last_n - 1)
        self._last_n, self._trusted = n, True
        item = self._decoded.event(fields[b"p"], epoch, entry_id, n)
        event = item.message.event
        if self._wanted.everything or self._wanted.matches(event.trimmed):
            self._pending.append(item)
            self._sent_cursor = event.cursor

    def _first_match(self, entries: list[Any], start: int, epoch: str) -> str:
        """The cursor of the first event from `entries[start]` on that this subscriber wants,
        under `epoch`: the event a gap announced there is followed by; "" when none is read."""
        for raw_id, fields in entries[start:]:
            if fields[b"k"] == b"f" or text(fields[b"e"]) != epoch:
                return ""
            if fields[b"k"] != b"e":
                continue
            item = self._decoded.event(fields[b"p"], epoch, text(raw_id), int(fields[b"n"]))
            event = item.message.event
            if self._wanted.everything or self._wanted.matches(event.trimmed):
                return event.cursor
        return ""

    # -- notices -------------------------------------------------------------------------------

    def _announce(
        self, cause: events_pb2.GapCause.ValueType, before: str = "", missed: int = 0
    ) -> None:
        """A gap after the last event sent, followed by the event `before`."""
        self._pending.append(FeedItem(gap_item(cause, self._sent_cursor, before, missed)))

    def _delivered(self) -> None:
        """The client took a delivery: its heartbeat falls due an interval from now."""
        self._last_sent = time.monotonic()

    def _heartbeat_due(self) -> bool:
        return time.monotonic() - self._last_sent >= self._interval

    def _heartbeat(self) -> Delivery:
        return [FeedItem(heartbeat_item(self._sent_cursor, self._dropped))]

    # -- Redis failing -------------------------------------------------------------------------

    async def _failed(self, error: BaseException) -> None:
        """Redis failed this reader: it retries at once, and after that with a growing pause."""
        self._caught_up = False  # retry at once once Redis answers, never parked
        if self._broken:
            await self._backoff.sleep()
        else:
            log.info("events: subscriber lost redis: %s", error)
        self._broken = True

    async def _resume(self) -> Delivery | None:
        """Redis answers again: a RESTART gap when the stream was lost meanwhile."""
        current = await self._stream.epoch()
        self._broken = False
        self._backoff.reset()
        if current == self._epoch or await self._stream.epoch_start() != "0-0":
            return None
        # The stream was lost while this reader could not see it. (An epoch forked meanwhile
        # begins with a b"f" entry that this reader reaches from where it is, after the entries
        # it has not read yet.)
        gap = gap_item(events_pb2.GAP_CAUSE_RESTART, self._sent_cursor or self._after_cursor, "", 0)
        self._epoch, self._last_id, self._last_n = current, "0-0", None
        return [FeedItem(gap)]
