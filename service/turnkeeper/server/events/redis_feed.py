"""The fleet feed: every replica publishes to one Redis Stream and serves TrimEvents from it.

Stream entries carry four fields: `k` (b"e" an event, b"g" a gap marker, b"m" a meter update,
b"f" the first entry of an epoch that replaced a rewritten one, see below), `n`, `e` and `p`.
- `n` numbers events globally (a Redis counter incremented in the same script as the XADD), so the
  numbers are contiguous across replicas: a reader that sees `n` jump knows how many events it
  missed (trimmed by MAXLEN before it read them); a gap marker carries the current count.
- `e` is the stream's epoch when the entry was written (see below).
- `p` is a serialized TrimEvent without its cursor (event), or a Gap (marker).
An epoch key next to the stream holds a random value set once (SET NX); when Redis loses the stream
(restart without persistence) the key goes with it and the next replica sets a new one, so cursors
and readers from before recognize entries (and cursors) of a new run by their epoch.

Redis can also lose the newest entries but keep the keys: a failover to a replica that lagged, a
restore from an older snapshot. The counter then goes back, and without care the numbers (and the
positions readers held) would be issued again. Every replica remembers the highest `n` it saw
under the current epoch (published, read, or polled once a second), and the scripts compare it
with the counter: a counter behind it means entries were lost, so the script that notices starts a
new epoch (the key is replaced, compare-and-set, so the fleet forks once) with a b"f" entry that
every reader turns into a RESTART gap, and records where the epoch began (`<stream>:epoch:start`).
A reader that sees the number go back under one epoch before any replica noticed announces a gap
itself and forks the epoch the same way. A plain restart keeps the counter: nothing is announced.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from turnkeeper.server.events.feed import FeedStatus
from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2

from . import cursor as cursors
from .common import (
    EVENT_COST,
    CallsInFlight,
    Filter,
    Pacer,
    Turns,
    batch_limit,
    event_item,
    gap_item,
    heartbeat_interval,
    heartbeat_item,
    invalid_cursor,
    messages_of,
    meter_item,
    now_timestamp,
    resume_margin,
    shutting_down,
)
from .feed import Delivery, FeedItem

log = logging.getLogger(__name__)

STREAM_KEY = "turnkeeper:events"

# KEYS: stream, counter, epoch, epoch start. ARGV: maxlen, new epoch, the epoch and the highest `n`
# the caller saw under it, the payload of the b"f" entry. When the counter is behind what the caller
# saw under the same epoch, entries were lost: a new epoch begins with a b"f" entry. Sets `epoch`,
# `n` (the counter) and `forked`.
_FORK_IF_BEHIND = """
local epoch = redis.call('GET', KEYS[3])
local n = tonumber(redis.call('GET', KEYS[2]) or '0')
local forked = 0
if epoch and epoch == ARGV[3] and n < tonumber(ARGV[4]) then
  epoch = ARGV[2]
  redis.call('SET', KEYS[3], epoch)
  local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
                        'k', 'f', 'n', n, 'e', epoch, 'p', ARGV[5])
  redis.call('SET', KEYS[4], id)
  forked = 1
end
"""
# The same keys and arguments: the epoch and the counter (forking first when behind); doubles as
# the publisher's liveness check.
_SYNC = (
    _FORK_IF_BEHIND
    + """
return {epoch or '', tostring(n), forked}
"""
)
# KEYS: stream, counter, epoch, epoch start, batch marker. ARGV: as _FORK_IF_BEHIND's (the new epoch
# is also the candidate for a stream that has none), then (kind, payload) pairs. Atomic, so the
# entry order in the stream is the order of `n`. Idempotent: the marker (unique per batch, kept an
# hour) makes a retried batch that already ran a no-op, so a batch whose reply was lost (Redis
# stalled past the socket timeout) is retried, never lost or doubled.
_PUBLISH = (
    _FORK_IF_BEHIND
    + """
if not redis.call('SET', KEYS[5], '1', 'NX', 'EX', 3600) then
  return {redis.call('GET', KEYS[3]) or '', redis.call('GET', KEYS[2]) or '0', forked}
end
redis.call('SET', KEYS[3], ARGV[2], 'NX')
epoch = redis.call('GET', KEYS[3])
for i = 6, #ARGV, 2 do
  local n
  if ARGV[i] == 'e' then
    n = redis.call('INCR', KEYS[2])
  else
    n = tonumber(redis.call('GET', KEYS[2]) or '0')
  end
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
             'k', ARGV[i], 'n', n, 'e', epoch, 'p', ARGV[i + 1])
end
return {epoch, redis.call('GET', KEYS[2]) or '0', forked}
"""
)
# KEYS: epoch. ARGV: candidate epoch. The stream's epoch, created when missing.
_EPOCH = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"""

_BATCH = 256
_FORCE_FORK = 2**53  # above any counter: _FORK_IF_BEHIND then forks whenever the epoch is unchanged
_MAX_BLOCK_S = 5.0  # bounds a blocked XREAD so a silently dead connection is noticed
_BACKOFF_MIN_S = 0.05
_BACKOFF_MAX_S = 1.0
_IDLE_PING_S = 1.0  # keeps status() current while nothing is published
_CLOSE_FLUSH_S = 2.0
# What one subscriber's read costs the event loop, in stream messages (common.ITEM_COST_S each):
# the command and its reply, plus each entry parsed (its decoding is shared, see _DECODED_ENTRIES).
# Paced reads take at most _PACED_READ_COUNT entries (_BATCH_READ_COUNT for a subscriber whose
# batches hold more), so no one read holds the loop long.
_READ_COST = 2
_ENTRY_COST = EVENT_COST
_PACED_READ_COUNT = 16
_BATCH_READ_COUNT = 256
_ROUND_ITEMS = 16  # the most one turn of the event loop grants, in messages
# Entries decoded into the items subscribers are sent, kept for the other subscribers of this
# replica that read the same entries: one decoding and one encoding per entry, not per stream.
_DECODED_ENTRIES = 4096

_Failure = (RedisError, OSError)


class _FeedClosedError(Exception):
    """The feed closed while a subscriber waited on Redis."""


def _new_epoch() -> str:
    return secrets.token_hex(8)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _event_item(payload: bytes, epoch: str, entry_id: str, n: int) -> FeedItem:
    """The item of an event entry (`p`: a TrimEvent without its cursor)."""
    event = events_pb2.TrimEvent.FromString(payload)
    event.cursor = cursors.encode_redis(epoch, entry_id, n)
    return FeedItem(event_item(event))


def _meter_item(payload: bytes, epoch: str, entry_id: str, n: int) -> FeedItem:
    """The item of a meter update entry (`n`: the count of events before it)."""
    update = events_pb2.MeterUpdate.FromString(payload)
    return FeedItem(meter_item(update, cursors.encode_redis(epoch, entry_id, n)))


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
        self._url = url
        self._maxlen = ring_size
        self._read_count = subscriber_queue_size
        self._keys = [
            stream_key,
            f"{stream_key}:n",
            f"{stream_key}:epoch",
            f"{stream_key}:epoch:start",
        ]
        no_retry = Retry(NoBackoff(), 0)  # a retried script could publish a batch twice
        self._writer: Redis = Redis.from_url(
            url, protocol=2, socket_connect_timeout=1, socket_timeout=2, retry=no_retry
        )
        self._reader: Redis = Redis.from_url(
            url,
            protocol=2,
            socket_connect_timeout=1,
            socket_timeout=_MAX_BLOCK_S + 5,
            retry=no_retry,
        )
        self._publish_script = self._writer.register_script(_PUBLISH)
        self._sync_script = self._writer.register_script(_SYNC)
        self._fork_script = self._reader.register_script(_SYNC)
        self._epoch_script = self._reader.register_script(_EPOCH)
        # The current epoch as last read from Redis, and the highest `n` seen under it (by the
        # publisher or any reader of this process): what a counter that went back is caught by.
        self._known: tuple[str, int] | None = None
        # (kind, payload): b"e" events and b"m" meter updates, in publication order.
        self._outbox: deque[tuple[bytes, bytes]] = deque(
            maxlen=outbox_size or max(ring_size, 10_000)
        )
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._reads: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._connected = False
        self._error = "not started"
        self._unpublished_pending = 0  # not yet announced by a gap marker
        self.unpublished_total = 0
        # The batch sent last whose outcome is unknown: (marker key, script args, events in it).
        self._unsettled: tuple[str, list[Any], int] | None = None
        self._turns = Turns(Pacer(calls, _ROUND_ITEMS))
        self._event_item = functools.lru_cache(maxsize=_DECODED_ENTRIES)(_event_item)
        self._meter_item = functools.lru_cache(maxsize=_DECODED_ENTRIES)(_meter_item)
        self._tail: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._check_connection()  # status() is accurate from the start; down is not fatal
        self._task = asyncio.create_task(self._run_publisher(), name="turnkeeper-events-publisher")

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._turns.close()
        if self._tail is not None:
            self._tail.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tail  # its read ends too, before the loop may close
        for task in list(self._reads):
            task.cancel()
        if self._task is not None:
            # The publisher flushes what is queued while Redis answers, then stops.
            done, _ = await asyncio.wait({self._task}, timeout=_CLOSE_FLUSH_S)
            if not done:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        await self._writer.aclose()
        await self._reader.aclose()

    def status(self) -> FeedStatus:
        if self._connected:
            return FeedStatus(healthy=True, detail=f"redis stream {self._keys[0]}")
        return FeedStatus(
            healthy=False,
            detail=f"redis unavailable ({self._error}); "
            f"{self.unpublished_total} events unpublished",
        )

    # -- publishing ----------------------------------------------------------------------------

    def publish(self, trimmed: trim_pb2.HistoryTrimmed) -> None:
        try:
            if self._closed:
                return
            payload = events_pb2.TrimEvent(
                time=now_timestamp(), trimmed=trimmed
            ).SerializeToString()
            self._queue(b"e", payload)
        except Exception:  # publish runs on the request path and must never fail it
            log.exception("dropping a trim event")

    def publish_meter(self, update: events_pb2.MeterUpdate) -> None:
        try:
            if self._closed:
                return
            stamped = events_pb2.MeterUpdate()
            stamped.CopyFrom(update)
            stamped.ClearField("cursor")
            if not stamped.HasField("time"):
                stamped.time.CopyFrom(now_timestamp())
            self._queue(b"m", stamped.SerializeToString())
        except Exception:  # publish_meter runs on the request path and must never fail it
            log.exception("dropping a meter update")

    def wants_meter_updates(self) -> bool:
        return not self._closed  # this replica cannot tell whether another's subscribers opted in

    def _queue(self, kind: bytes, payload: bytes) -> None:
        if len(self._outbox) == self._outbox.maxlen and self._outbox[0][0] == b"e":
            # Keep the newest; the evicted oldest event is announced by a gap marker placed
            # before everything still queued, so the order of the stream stays truthful. (An
            # evicted meter update is superseded by the session's next one: no gap.)
            self._unpublished_pending += 1
            self.unpublished_total += 1
        self._outbox.append((kind, payload))
        self._notify()

    def _notify(self) -> None:
        loop = self._loop
        if loop is None:
            return  # not started: the publisher drains the outbox once it runs
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake.set()
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake.set)

    async def _run_publisher(self) -> None:
        backoff = _BACKOFF_MIN_S
        while True:
            idle = not self._outbox and self._unsettled is None
            if self._closed and (not self._connected or idle):
                queued = sum(1 for kind, _ in self._outbox if kind == b"e")
                lost = queued + (self._unsettled[2] if self._unsettled else 0)
                if lost:
                    log.warning(
                        "events: %d events not published: redis unavailable at shutdown", lost
                    )
                return
            if not self._outbox and not self._unpublished_pending and self._unsettled is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), _IDLE_PING_S)
                if not self._outbox and not self._closed:
                    await self._check_connection()
                continue
            if not self._connected and not await self._check_connection():
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
                continue
            backoff = _BACKOFF_MIN_S
            await self._publish_batch()

    def _fork_args(self) -> list[Any]:
        """_FORK_IF_BEHIND's arguments: a fresh epoch, what this process saw, the marker."""
        epoch, n = self._known or ("", 0)
        marker = events_pb2.Gap(cause=events_pb2.GAP_CAUSE_RESTART).SerializeToString()
        return [self._maxlen, _new_epoch(), epoch, n, marker]

    def _observe_key(self, reply: list[Any]) -> str:
        """Takes in a script's {epoch, counter, forked}; returns the epoch."""
        epoch, n, forked = _text(reply[0]), int(reply[1]), int(reply[2])
        if forked and self._known is not None:
            log.warning(
                "events: redis lost entries (the event number went back from %d to %d: a "
                "failover to a lagging replica, or a restore); new epoch %s, every reader gets "
                "a RESTART gap",
                self._known[1],
                n,
                epoch,
            )
        if epoch and (self._known is None or self._known[0] != epoch or n > self._known[1]):
            self._known = (epoch, n)
        return epoch

    def _observe_entry(self, epoch: str, n: int) -> None:
        if self._known is not None and self._known[0] == epoch and n > self._known[1]:
            self._known = (epoch, n)

    async def _check_connection(self) -> bool:
        """Reads the epoch and the counter (forking the epoch when Redis went back): a ping."""
        try:
            self._observe_key(await self._sync_script(keys=self._keys, args=self._fork_args()))
        except _Failure as error:
            self._set_down(error)
            return False
        if not self._connected:
            log.info("events: redis reachable again")
        self._connected = True
        return True

    def _set_down(self, error: BaseException) -> None:
        if self._connected:
            log.warning("events: redis unreachable: %s", error)
        self._connected = False
        self._error = str(error) or type(error).__name__

    async def _publish_batch(self) -> None:
        if self._unsettled is None:
            batch = [self._outbox.popleft() for _ in range(min(_BATCH, len(self._outbox)))]
            announced = self._unpublished_pending
            args: list[Any] = []
            if announced:
                gap = events_pb2.Gap(
                    cause=events_pb2.GAP_CAUSE_PUBLISH_FAILED, missed_events=announced
                )
                args += [b"g", gap.SerializeToString()]
            for kind, payload in batch:
                args += [kind, payload]
            self._unpublished_pending -= announced  # this batch's marker announces them
            marker = f"{self._keys[0]}:batch:{secrets.token_hex(12)}"
            self._unsettled = (marker, args, sum(1 for kind, _ in batch if kind == b"e"))
        marker, args, _ = self._unsettled
        try:
            # What this process saw is read at send time: a retry checks against the latest.
            reply = await self._publish_script(
                keys=[*self._keys, marker], args=[*self._fork_args(), *args]
            )
        except _Failure as error:
            # Whether the script ran is unknown: the same batch is sent again once Redis answers,
            # and its marker makes it run at most once. Nothing is counted as lost.
            self._set_down(error)
            return
        self._unsettled = None
        self._observe_key(reply)
        self._turns.newer()  # this replica's own events: no need to wait for the tail reader

    # -- subscribing ---------------------------------------------------------------------------

    async def _watch_tail(self) -> None:
        """The one blocked read of the stream on this replica: tells the parked subscribers when
        an entry lands (any replica's). Errors and quiet spells wake them too (a wake-up for
        nothing costs one empty read), so a lost or rebuilt stream is never waited on."""
        backoff = _BACKOFF_MIN_S
        last_id = None
        while not self._closed:
            try:
                if last_id is None:
                    last_id, _ = await self._last_entry()
                reply = await self._call(
                    self._reader.xread(
                        {self._keys[0]: last_id}, count=1, block=int(_MAX_BLOCK_S * 1000)
                    )
                )
                newest, _ = await self._last_entry()
                if reply or newest != last_id:
                    self._turns.newer()
                last_id, backoff = newest, _BACKOFF_MIN_S
            except _FeedClosedError:
                return
            except _Failure:
                self._turns.newer()
                last_id = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)

    async def _call(self, coro: Any) -> Any:
        """Runs one reader command as a task that close() cancels (then raises _FeedClosedError)."""
        if self._closed:
            coro.close()
            raise _FeedClosedError
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._reads.add(task)
        try:
            await asyncio.wait({task})
        finally:
            if not task.done():  # this subscriber itself was cancelled: let that propagate
                task.cancel()
            self._reads.discard(task)
        if task.cancelled():
            raise _FeedClosedError
        return task.result()

    async def _epoch(self) -> str:
        return _text(
            await self._call(self._epoch_script(keys=[self._keys[2]], args=[_new_epoch()]))
        )

    async def _epoch_start(self) -> str:
        """The id of the b"f" entry that began the current epoch; "0-0" for a stream's first."""
        start = await self._call(self._reader.get(self._keys[3]))
        return _text(start) if start else "0-0"

    async def _fork(self, epoch: str, n: int) -> str:
        """A reader saw `n` under `epoch` and then a lower number: forks the epoch unless another
        replica already did; returns the epoch now current."""
        self._observe_entry(epoch, n)
        args = self._fork_args()
        # Whatever the counter says now: numbers were issued twice under `epoch`.
        args[2:4] = [epoch, _FORCE_FORK]
        return self._observe_key(await self._call(self._fork_script(keys=self._keys, args=args)))

    async def _entry_at(self, stream_id: str) -> tuple[str, int] | None:
        """The epoch and `n` of the entry with this id, when the stream still holds it."""
        entries = await self._call(self._reader.xrange(self._keys[0], stream_id, stream_id))
        if not entries:
            return None
        fields = entries[0][1]
        return _text(fields[b"e"]), int(fields[b"n"])

    async def _last_entry(self) -> tuple[str, int | None]:
        """The id and `n` of the newest entry, or ("0-0", None) for an empty or missing stream."""
        entries = await self._call(self._reader.xrevrange(self._keys[0], "+", "-", count=1))
        if not entries:
            return "0-0", None
        entry_id, fields = entries[0]
        return _text(entry_id), int(fields[b"n"])

    async def oldest_cursor(self) -> str:
        """The position before the stream's first entry; "" when Redis cannot be read or the
        stream is empty (nothing to replay)."""
        try:
            epoch = await self._epoch()
            entries = await self._call(self._reader.xrange(self._keys[0], "-", "+", count=1))
        except (*_Failure, _FeedClosedError):
            return ""
        if not entries:
            return ""
        _, fields = entries[0]
        if _text(fields[b"e"]) != epoch:
            return ""
        n = int(fields[b"n"])
        # An event entry carries its own number; gap markers and meter updates the count before.
        before = n - 1 if fields[b"k"] == b"e" else n
        return cursors.encode_redis(epoch, "0-0", before)

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
        if self._closed:
            yield [FeedItem(heartbeat_item(cursor, dropped))]

    def _first_match(self, entries: list[Any], start: int, epoch: str, wanted: Filter) -> str:
        """The cursor of the first event from `entries[start]` on that `wanted` matches, under
        `epoch`: the event a gap announced there is followed by; "" when this read holds none."""
        for raw_id, fields in entries[start:]:
            if fields[b"k"] == b"f" or _text(fields[b"e"]) != epoch:
                return ""
            if fields[b"k"] != b"e":
                continue
            item = self._event_item(fields[b"p"], epoch, _text(raw_id), int(fields[b"n"]))
            event = item.message.event
            if wanted.everything or wanted.matches(event.trimmed):
                return event.cursor
        return ""

    async def _recent(self) -> list[Any]:
        """The newest entries, oldest first: where a reader the stream was trimmed past
        resumes (`common.resume_margin`)."""
        count = resume_margin(self._maxlen)
        entries = await self._call(self._reader.xrevrange(self._keys[0], "+", "-", count=count))
        return list(reversed(entries))

    async def _follow(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncGenerator[Delivery]:
        wanted = Filter.of(request)
        interval = heartbeat_interval(request)
        batch = batch_limit(request)
        start: cursors.Cursor | None = None
        if request.after_cursor:
            start = cursors.decode(request.after_cursor)
            if start is None:
                raise invalid_cursor("not a cursor issued by this feed")
        if self._closed:
            raise shutting_down()
        if self._tail is None:  # with the first subscriber (a feed that only reads is not started)
            self._tail = asyncio.create_task(self._watch_tail(), name="turnkeeper-events-tail")

        sent_cursor = ""  # the last event sent on this stream, for heartbeats and gaps
        dropped = 0
        last_sent = time.monotonic()
        backoff = _BACKOFF_MIN_S
        position = None
        while position is None:  # Redis may be down when the subscription starts
            try:
                position = await self._start_position(start, request.after_cursor)
            except _FeedClosedError:
                return
            except _Failure:
                if time.monotonic() - last_sent >= interval:
                    yield [FeedItem(heartbeat_item(sent_cursor, dropped))]
                    last_sent = time.monotonic()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
        epoch, last_id, last_n, trusted, opening = position
        if opening is not None:
            yield [FeedItem(opening)]
        else:
            # Tell the client at once that it is subscribed, and where it could resume from.
            if request.after_cursor:
                sent_cursor = request.after_cursor
            elif last_n is not None:
                sent_cursor = cursors.encode_redis(epoch, last_id, last_n)
            yield [FeedItem(heartbeat_item(sent_cursor, dropped))]
        last_sent = time.monotonic()
        # The epoch this reader already announced a gap for (it forked it itself): its b"f"
        # entry then needs no second notice.
        announced = ""

        broken = False
        # The Turns generation before the last read, when it found everything read (then the
        # next read waits for something newer), else None.
        parked_since: int | None = None
        caught_up = False
        # Items read but not yet sent: a batch fills up to `batch` items, then goes in one turn.
        pending: list[FeedItem] = []
        count = min(self._read_count, max(_PACED_READ_COUNT, min(batch, _BATCH_READ_COUNT)))
        # A resume from a client's cursor first reads on from it (a gap for what was trimmed,
        # then every retained entry, as the ring replays); only a reader that falls behind
        # afterwards skips ahead to the newest entries.
        replaying = start is not None
        while not self._closed:
            parked_since = parked_since if caught_up else None
            entries: list[Any] = []
            try:
                if broken:
                    current = await self._epoch()
                    broken, backoff = False, _BACKOFF_MIN_S
                    if current != epoch and await self._epoch_start() == "0-0":
                        # The stream was lost while this reader could not see it. (An epoch
                        # forked meanwhile begins with a b"f" entry that this reader reaches
                        # from where it is, after the entries it has not read yet.)
                        after = sent_cursor or request.after_cursor
                        gap = gap_item(events_pb2.GAP_CAUSE_RESTART, after, "", 0)
                        yield [FeedItem(gap)]
                        last_sent = time.monotonic()
                        epoch, last_id, last_n = current, "0-0", None
                # A parked reader wakes for a new entry, or when its heartbeat falls due.
                wait_s = max(0.001, last_sent + interval - time.monotonic())
                await self._turns.take(_READ_COST, parked_since, wait_s)
                if self._closed:
                    return
                parked_since = self._turns.generation
                reply = await self._call(self._reader.xread({self._keys[0]: last_id}, count=count))
                entries = reply[0][1] if reply else []
                self._turns.pacer.spent(len(entries) * _ENTRY_COST)
                caught_up = len(entries) < count
                relocated = False
                index = -1
                while index + 1 < len(entries):
                    if len(pending) >= batch:
                        await self._turns.take()  # its entries were counted with the read
                        yield pending
                        pending = []
                        last_sent = time.monotonic()
                    index += 1
                    raw_id, fields = entries[index]
                    entry_id = _text(raw_id)
                    entry_epoch = _text(fields[b"e"])
                    kind = fields[b"k"]
                    n = int(fields[b"n"])
                    if entry_epoch != epoch:
                        if kind == b"f":
                            # Redis lost entries of the epoch this reader was in (a failover
                            # to a lagging replica, a restore): the new epoch starts here.
                            if entry_epoch != announced:
                                before = self._first_match(entries, index + 1, entry_epoch, wanted)
                                gap = gap_item(events_pb2.GAP_CAUSE_RESTART, sent_cursor, before, 0)
                                pending.append(FeedItem(gap))
                            epoch, last_id, last_n, trusted = entry_epoch, entry_id, n, True
                            self._observe_entry(epoch, n)
                            continue
                        # The stream was lost and rebuilt under this reader: start over at the
                        # beginning of its current epoch.
                        pending.append(
                            FeedItem(gap_item(events_pb2.GAP_CAUSE_RESTART, sent_cursor, "", 0))
                        )
                        epoch, last_id, last_n = entry_epoch, await self._epoch_start(), None
                        caught_up = False  # read again at once, from there
                        break
                    if last_n is not None and (n < last_n or (n == last_n and kind == b"e")):
                        # The number went back under one epoch: entries were lost and their
                        # numbers issued again, before any replica forked the epoch.
                        pending.append(
                            FeedItem(gap_item(events_pb2.GAP_CAUSE_RESTART, sent_cursor, "", 0))
                        )
                        if trusted:  # never on a number a client's cursor claimed
                            announced = await self._fork(epoch, last_n)
                        last_n = None
                    fresh = relocated or replaying
                    if kind == b"e" and last_n is not None and n > last_n + 1 and not fresh:
                        # Entries were trimmed (MAXLEN) before this reader got to them: what is
                        # left of its way is the oldest retained, next to go. It resumes near the
                        # newest instead, so that the gap is followed by events, not by another.
                        recent = await self._recent()
                        relocated = True
                        if recent and cursors.stream_id_key(_text(recent[0][0])) > (
                            cursors.stream_id_key(entry_id)
                        ):
                            first_n, first_kind = int(recent[0][1][b"n"]), recent[0][1][b"k"]
                            before_n = first_n - 1 if first_kind == b"e" else first_n
                            if _text(recent[0][1][b"e"]) == epoch and before_n > last_n:
                                missed = before_n - last_n
                                dropped += missed
                                before = self._first_match(recent, 0, epoch, wanted)
                                gap = gap_item(
                                    events_pb2.GAP_CAUSE_BUFFER_OVERFLOW,
                                    sent_cursor,
                                    before,
                                    missed,
                                )
                                pending.append(FeedItem(gap))
                                entries, index, last_n = recent, -1, before_n
                                caught_up = False
                                continue
                    last_id = entry_id
                    self._observe_entry(epoch, n)
                    if kind in (b"g", b"f"):
                        if kind == b"g":
                            marker = events_pb2.Gap.FromString(fields[b"p"])
                            before = self._first_match(entries, index + 1, epoch, wanted)
                            gap = gap_item(marker.cause, sent_cursor, before, marker.missed_events)
                            pending.append(FeedItem(gap))
                        continue
                    if kind == b"m":
                        # `n` of a meter update is the count of events before it: not an event.
                        update = self._meter_item(fields[b"p"], epoch, entry_id, n)
                        if wanted.matches_meter(update.message.meter_update):
                            pending.append(update)
                        continue
                    if last_n is not None and n > last_n + 1:
                        # Trimmed before this reader got to them, and the newest entries are
                        # no further on: the gap is followed by what this read holds.
                        dropped += n - last_n - 1
                        before = self._first_match(entries, index, epoch, wanted)
                        gap = gap_item(
                            events_pb2.GAP_CAUSE_BUFFER_OVERFLOW,
                            sent_cursor,
                            before,
                            n - last_n - 1,
                        )
                        pending.append(FeedItem(gap))
                    last_n, trusted = n, True
                    item = self._event_item(fields[b"p"], epoch, entry_id, n)
                    event = item.message.event
                    if not (wanted.everything or wanted.matches(event.trimmed)):
                        continue
                    pending.append(item)
                    sent_cursor = event.cursor
                replaying = False
                if pending:
                    await self._turns.take()  # its entries were counted with the read
                    yield pending
                    pending = []
                    last_sent = time.monotonic()
            except _FeedClosedError:
                return
            except _Failure as error:
                if pending:  # read before Redis failed: sent, in order, before anything else
                    yield pending
                    pending = []
                    last_sent = time.monotonic()
                caught_up = False  # retry at once once Redis answers, never parked
                if not broken:
                    log.info("events: subscriber lost redis: %s", error)
                if broken and time.monotonic() - last_sent >= interval:
                    yield [FeedItem(heartbeat_item(sent_cursor, dropped))]
                    last_sent = time.monotonic()
                if broken:
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX_S)
                broken = True
                continue
            if not entries and time.monotonic() - last_sent >= interval:
                yield [FeedItem(heartbeat_item(sent_cursor, dropped))]
                last_sent = time.monotonic()

    async def _start_position(
        self, start: cursors.Cursor | None, after: str
    ) -> tuple[str, str, int | None, bool, history_service_pb2.TrimEventsResponse | None]:
        """(epoch, id to read after, `n` of that entry, whether that `n` was read from Redis
        rather than claimed by a cursor, an opening gap) for a new subscription."""
        epoch = await self._epoch()
        if start is None:
            last_id, last_n = await self._last_entry()
            return epoch, last_id, last_n, True, None
        if isinstance(start, cursors.RedisCursor):
            if await self._entry_at(start.stream_id) == (start.epoch, start.n):
                # The cursor's own entry is still there (of this epoch, or of one that a fork
                # replaced: reading on reaches the b"f" entry and its gap).
                return start.epoch, start.stream_id, start.n, True, None
            if start.epoch == epoch:
                last_id, newest_n = await self._last_entry()
                if newest_n is not None and cursors.stream_id_key(last_id) >= start.id_key():
                    # Entries trimmed after the cursor show up as a jump in `n` on the first read.
                    return epoch, start.stream_id, start.n, False, None
            # The cursor is ahead of the stream: the stream was lost and rebuilt under the same
            # epoch (deleted by hand, or restored from an older snapshot).
        gap = gap_item(events_pb2.GAP_CAUSE_RESTART, after, "", 0)
        return epoch, await self._epoch_start(), None, True, gap
