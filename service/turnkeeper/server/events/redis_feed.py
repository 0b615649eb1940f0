"""The fleet feed: every replica publishes to one Redis Stream and serves TrimEvents from it.

Stream entries carry four fields: `k` (b"e" an event, b"g" a gap marker, b"m" a meter update),
`n`, `e` and `p`.
- `n` numbers events globally (a Redis counter incremented in the same script as the XADD), so the
  numbers are contiguous across replicas: a reader that sees `n` jump knows how many events it
  missed (trimmed by MAXLEN before it read them); a gap marker carries the current count.
- `e` is the stream's epoch when the entry was written (see below).
- `p` is a serialized TrimEvent without its cursor (event), or a Gap (marker).
An epoch key next to the stream holds a random value set once (SET NX); when Redis loses the stream
(restart without persistence) the key goes with it and the next replica sets a new one, so cursors
and readers from before recognize entries (and cursors) of a new run by their epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from turnkeeper.server.events.feed import FeedStatus
from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2

from . import cursor as cursors
from .common import (
    Filter,
    event_item,
    gap_item,
    heartbeat_interval,
    heartbeat_item,
    invalid_cursor,
    meter_item,
    now_timestamp,
    shutting_down,
)

log = logging.getLogger(__name__)

STREAM_KEY = "turnkeeper:events"

# KEYS: stream, counter, epoch, batch marker. ARGV: maxlen, candidate epoch, then (kind, payload)
# pairs. Atomic, so the entry order in the stream is the order of `n`. Idempotent: the marker
# (unique per batch, kept an hour) makes a retried batch that already ran a no-op, so a batch
# whose reply was lost (Redis stalled past the socket timeout) is retried, never lost or doubled.
_PUBLISH = """
if not redis.call('SET', KEYS[4], '1', 'NX', 'EX', 3600) then
  return redis.call('GET', KEYS[3])
end
redis.call('SET', KEYS[3], ARGV[2], 'NX')
local epoch = redis.call('GET', KEYS[3])
for i = 3, #ARGV, 2 do
  local n
  if ARGV[i] == 'e' then
    n = redis.call('INCR', KEYS[2])
  else
    n = tonumber(redis.call('GET', KEYS[2]) or '0')
  end
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
             'k', ARGV[i], 'n', n, 'e', epoch, 'p', ARGV[i + 1])
end
return epoch
"""
# KEYS: epoch. ARGV: candidate epoch. The stream's epoch, created when missing.
_EPOCH = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"""

_BATCH = 256
_MAX_BLOCK_S = 5.0  # bounds a blocked XREAD so a silently dead connection is noticed
_BACKOFF_MIN_S = 0.05
_BACKOFF_MAX_S = 1.0
_IDLE_PING_S = 1.0  # keeps status() current while nothing is published
_CLOSE_FLUSH_S = 2.0

_Failure = (RedisError, OSError)


class _FeedClosedError(Exception):
    """The feed closed while a subscriber waited on Redis."""


def _new_epoch() -> str:
    return secrets.token_hex(8)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisFeed:
    """Publishes through a bounded local outbox drained by one background task; each subscriber
    reads the stream itself (XREAD BLOCK) at its own pace, at most `subscriber_queue_size` entries
    per read, so a stalled subscriber holds back no one and falls behind only itself."""

    def __init__(
        self,
        url: str,
        ring_size: int,
        subscriber_queue_size: int,
        *,
        outbox_size: int | None = None,
        stream_key: str = STREAM_KEY,
    ) -> None:
        if ring_size < 1 or subscriber_queue_size < 1:
            raise ValueError("ring_size and subscriber_queue_size must be positive")
        self._url = url
        self._maxlen = ring_size
        self._read_count = subscriber_queue_size
        self._keys = [stream_key, f"{stream_key}:n", f"{stream_key}:epoch"]
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
        self._epoch_script = self._reader.register_script(_EPOCH)
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

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._check_connection()  # status() is accurate from the start; down is not fatal
        self._task = asyncio.create_task(self._run_publisher(), name="turnkeeper-events-publisher")

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
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

    async def _check_connection(self) -> bool:
        try:
            await self._writer.ping()
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
            args: list[Any] = [self._maxlen, _new_epoch()]
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
            await self._publish_script(keys=[*self._keys, marker], args=args)
        except _Failure as error:
            # Whether the script ran is unknown: the same batch is sent again once Redis answers,
            # and its marker makes it run at most once. Nothing is counted as lost.
            self._set_down(error)
            return
        self._unsettled = None

    # -- subscribing ---------------------------------------------------------------------------

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

    async def subscribe(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncIterator[history_service_pb2.TrimEventsResponse]:
        """The stream of `_follow`; when the feed closes it ends with a heartbeat carrying the
        resume cursor (the last event sent, or the position the stream started at)."""
        cursor, dropped = request.after_cursor, 0
        async for item in self._follow(request):
            kind = item.WhichOneof("item")
            if kind == "event":
                cursor = item.event.cursor
            elif kind == "heartbeat":
                cursor, dropped = item.heartbeat.cursor, item.heartbeat.dropped_events
            yield item
        if self._closed:
            yield heartbeat_item(cursor, dropped)

    async def _follow(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncIterator[history_service_pb2.TrimEventsResponse]:
        wanted = Filter.of(request)
        interval = heartbeat_interval(request)
        start: cursors.Cursor | None = None
        if request.after_cursor:
            start = cursors.decode(request.after_cursor)
            if start is None:
                raise invalid_cursor("not a cursor issued by this feed")
        if self._closed:
            raise shutting_down()

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
                    yield heartbeat_item(sent_cursor, dropped)
                    last_sent = time.monotonic()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
        epoch, last_id, last_n, opening = position
        if opening is not None:
            yield opening
        else:
            # Tell the client at once that it is subscribed, and where it could resume from.
            if request.after_cursor:
                sent_cursor = request.after_cursor
            elif last_n is not None:
                sent_cursor = cursors.encode_redis(epoch, last_id, last_n)
            yield heartbeat_item(sent_cursor, dropped)
        last_sent = time.monotonic()

        broken = False
        while not self._closed:
            if broken:
                try:
                    current = await self._epoch()
                except _FeedClosedError:
                    return
                except _Failure:
                    current = None
                if current is None:
                    if time.monotonic() - last_sent >= interval:
                        yield heartbeat_item(sent_cursor, dropped)
                        last_sent = time.monotonic()
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX_S)
                    continue
                broken, backoff = False, _BACKOFF_MIN_S
                if current != epoch:
                    # The stream was lost while this reader could not see it.
                    after = sent_cursor or request.after_cursor
                    yield gap_item(events_pb2.GAP_CAUSE_RESTART, after, "", 0)
                    last_sent = time.monotonic()
                    epoch, last_id, last_n = current, "0-0", None
            block_s = min(_MAX_BLOCK_S, max(0.001, last_sent + interval - time.monotonic()))
            try:
                reply = await self._call(
                    self._reader.xread(
                        {self._keys[0]: last_id},
                        count=self._read_count,
                        block=max(1, int(block_s * 1000)),
                    )
                )
            except _FeedClosedError:
                return
            except _Failure as error:
                log.info("events: subscriber lost redis: %s", error)
                broken = True
                continue
            entries = reply[0][1] if reply else []
            for raw_id, fields in entries:
                entry_id = _text(raw_id)
                entry_epoch = _text(fields[b"e"])
                if entry_epoch != epoch:
                    # The stream was lost and rebuilt under this reader: start over at its
                    # beginning (this entry included).
                    yield gap_item(events_pb2.GAP_CAUSE_RESTART, sent_cursor, "", 0)
                    last_sent = time.monotonic()
                    epoch, last_id, last_n = entry_epoch, "0-0", None
                    break
                last_id = entry_id
                n = int(fields[b"n"])
                if fields[b"k"] == b"g":
                    marker = events_pb2.Gap.FromString(fields[b"p"])
                    yield gap_item(marker.cause, sent_cursor, "", marker.missed_events)
                    last_sent = time.monotonic()
                    continue
                if fields[b"k"] == b"m":
                    # `n` of a meter update is the count of events before it: not an event.
                    update = events_pb2.MeterUpdate.FromString(fields[b"p"])
                    if wanted.matches_meter(update):
                        yield meter_item(update, cursors.encode_redis(epoch, entry_id, n))
                        last_sent = time.monotonic()
                    continue
                cursor = cursors.encode_redis(epoch, entry_id, n)
                if last_n is not None and n > last_n + 1:
                    # Entries were trimmed (MAXLEN) before this reader got to them.
                    dropped += n - last_n - 1
                    yield gap_item(
                        events_pb2.GAP_CAUSE_BUFFER_OVERFLOW, sent_cursor, cursor, n - last_n - 1
                    )
                    last_sent = time.monotonic()
                last_n = n
                event = events_pb2.TrimEvent.FromString(fields[b"p"])
                if not wanted.matches(event.trimmed):
                    continue
                event.cursor = cursor
                yield event_item(event)
                sent_cursor = cursor
                last_sent = time.monotonic()
            if not entries and time.monotonic() - last_sent >= interval:
                yield heartbeat_item(sent_cursor, dropped)
                last_sent = time.monotonic()

    async def _start_position(
        self, start: cursors.Cursor | None, after: str
    ) -> tuple[str, str, int | None, history_service_pb2.TrimEventsResponse | None]:
        """(epoch, id to read after, `n` of that entry, an opening gap) for a new subscription."""
        epoch = await self._epoch()
        if start is None:
            last_id, last_n = await self._last_entry()
            return epoch, last_id, last_n, None
        if isinstance(start, cursors.RedisCursor) and start.epoch == epoch:
            last_id, newest_n = await self._last_entry()
            if newest_n is not None and cursors.stream_id_key(last_id) >= start.id_key():
                # Entries trimmed after the cursor show up as a jump in `n` on the first read.
                return epoch, start.stream_id, start.n, None
            # The cursor is ahead of the stream: the stream was lost and rebuilt under the same
            # epoch (deleted by hand, or restored from an older snapshot).
        gap = gap_item(events_pb2.GAP_CAUSE_RESTART, after, "", 0)
        return epoch, "0-0", None, gap
