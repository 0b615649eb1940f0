"""The Redis feed's stream: its keys, scripts and entries, and this replica's reads of it.

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
import functools
import logging
import secrets
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from turnkeeper.v1 import events_pb2

from . import cursor as cursors
from .common import event_item, meter_item, resume_margin
from .feed import FeedItem

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
SYNC = (
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
PUBLISH = (
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

_FORCE_FORK = 2**53  # above any counter: _FORK_IF_BEHIND then forks whenever the epoch is unchanged
_MAX_BLOCK_S = 5.0  # bounds a blocked XREAD so a silently dead connection is noticed
_BACKOFF_MIN_S = 0.05
_BACKOFF_MAX_S = 1.0
# Entries decoded into the items subscribers are sent, kept for the other subscribers of this
# replica that read the same entries: one decoding and one encoding per entry, not per stream.
_DECODED_ENTRIES = 4096

Failure = (RedisError, OSError)


class FeedClosedError(Exception):
    """The feed closed while a subscriber waited on Redis."""


def connect(url: str, socket_timeout: float) -> Redis:
    """A connection that never retries a command itself: a retried script could publish a batch
    twice."""
    return Redis.from_url(
        url,
        protocol=2,
        socket_connect_timeout=1,
        socket_timeout=socket_timeout,
        retry=Retry(NoBackoff(), 0),
    )


def new_epoch() -> str:
    return secrets.token_hex(8)


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def events_before(fields: dict[bytes, Any]) -> int:
    """The count of events before an entry: an event entry carries its own number, gap markers
    and meter updates the count before them."""
    n = int(fields[b"n"])
    return n - 1 if fields[b"k"] == b"e" else n


def _event_item(payload: bytes, epoch: str, entry_id: str, n: int) -> FeedItem:
    """The item of an event entry (`p`: a TrimEvent without its cursor)."""
    event = events_pb2.TrimEvent.FromString(payload)
    event.cursor = cursors.encode_redis(epoch, entry_id, n)
    return FeedItem(event_item(event))


def _meter_item(payload: bytes, epoch: str, entry_id: str, n: int) -> FeedItem:
    """The item of a meter update entry (`n`: the count of events before it)."""
    update = events_pb2.MeterUpdate.FromString(payload)
    return FeedItem(meter_item(update, cursors.encode_redis(epoch, entry_id, n)))


class DecodedEntries:
    """The items of entries already decoded, shared by the subscribers of one feed:
    `event(payload, epoch, entry id, n)` and `meter(...)` decode each entry once."""

    def __init__(self) -> None:
        self.event = functools.lru_cache(maxsize=_DECODED_ENTRIES)(_event_item)
        self.meter = functools.lru_cache(maxsize=_DECODED_ENTRIES)(_meter_item)


class Backoff:
    """The pause between attempts while Redis fails: doubling from short to a bound."""

    def __init__(self) -> None:
        self.delay = _BACKOFF_MIN_S

    def reset(self) -> None:
        self.delay = _BACKOFF_MIN_S

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, _BACKOFF_MAX_S)


class Stream:
    """One replica's side of the stream: its keys, the commands of its reading connection (each a
    task that cancel_reads() ends), and the epoch with the highest `n` seen under it."""

    def __init__(self, url: str, stream_key: str, maxlen: int) -> None:
        self.key = stream_key
        self.maxlen = maxlen
        # The keys of the scripts: stream, counter, epoch, epoch start.
        self.keys = [
            stream_key,
            f"{stream_key}:n",
            f"{stream_key}:epoch",
            f"{stream_key}:epoch:start",
        ]
        self.closed = False
        self._connection = connect(url, _MAX_BLOCK_S + 5)
        self._fork_script = self._connection.register_script(SYNC)
        self._epoch_script = self._connection.register_script(_EPOCH)
        self._reads: set[asyncio.Task[Any]] = set()
        # The current epoch as last read from Redis, and the highest `n` seen under it (by the
        # publisher or any reader of this process): what a counter that went back is caught by.
        self._known: tuple[str, int] | None = None

    def close(self) -> None:
        """No command starts from now on."""
        self.closed = True

    def cancel_reads(self) -> None:
        for task in list(self._reads):
            task.cancel()

    async def aclose(self) -> None:
        await self._connection.aclose()

    # -- what this process saw -----------------------------------------------------------------

    def fork_args(self) -> list[Any]:
        """_FORK_IF_BEHIND's arguments: a fresh epoch, what this process saw, the marker."""
        epoch, n = self._known or ("", 0)
        marker = events_pb2.Gap(cause=events_pb2.GAP_CAUSE_RESTART).SerializeToString()
        return [self.maxlen, new_epoch(), epoch, n, marker]

    def observe_key(self, reply: list[Any]) -> str:
        """Takes in a script's {epoch, counter, forked}; returns the epoch."""
        epoch, n, forked = text(reply[0]), int(reply[1]), int(reply[2])
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

    def observe_entry(self, epoch: str, n: int) -> None:
        if self._known is not None and self._known[0] == epoch and n > self._known[1]:
            self._known = (epoch, n)

    # -- reads ---------------------------------------------------------------------------------

    async def _call(self, coro: Any) -> Any:
        """Runs one command as a task that cancel_reads() ends (then raises FeedClosedError)."""
        if self.closed:
            coro.close()
            raise FeedClosedError
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._reads.add(task)
        try:
            await asyncio.wait({task})
        finally:
            if not task.done():  # this subscriber itself was cancelled: let that propagate
                task.cancel()
            self._reads.discard(task)
        if task.cancelled():
            raise FeedClosedError
        return task.result()

    async def epoch(self) -> str:
        return text(await self._call(self._epoch_script(keys=[self.keys[2]], args=[new_epoch()])))

    async def epoch_start(self) -> str:
        """The id of the b"f" entry that began the current epoch; "0-0" for a stream's first."""
        start = await self._call(self._connection.get(self.keys[3]))
        return text(start) if start else "0-0"

    async def fork(self, epoch: str, n: int) -> str:
        """A reader saw `n` under `epoch` and then a lower number: forks the epoch unless another
        replica already did; returns the epoch now current."""
        self.observe_entry(epoch, n)
        args = self.fork_args()
        # Whatever the counter says now: numbers were issued twice under `epoch`.
        args[2:4] = [epoch, _FORCE_FORK]
        return self.observe_key(await self._call(self._fork_script(keys=self.keys, args=args)))

    async def entry_at(self, stream_id: str) -> tuple[str, int] | None:
        """The epoch and `n` of the entry with this id, when the stream still holds it."""
        entries = await self._call(self._connection.xrange(self.key, stream_id, stream_id))
        if not entries:
            return None
        fields = entries[0][1]
        return text(fields[b"e"]), int(fields[b"n"])

    async def first_entry(self) -> dict[bytes, Any] | None:
        """The fields of the oldest entry, or None for an empty or missing stream."""
        entries = await self._call(self._connection.xrange(self.key, "-", "+", count=1))
        return entries[0][1] if entries else None

    async def last_entry(self) -> tuple[str, int | None]:
        """The id and `n` of the newest entry, or ("0-0", None) for an empty or missing stream."""
        entries = await self._call(self._connection.xrevrange(self.key, "+", "-", count=1))
        if not entries:
            return "0-0", None
        entry_id, fields = entries[0]
        return text(entry_id), int(fields[b"n"])

    async def recent(self) -> list[Any]:
        """The newest entries, oldest first: where a reader the stream was trimmed past
        resumes (`common.resume_margin`)."""
        count = resume_margin(self.maxlen)
        entries = await self._call(self._connection.xrevrange(self.key, "+", "-", count=count))
        return list(reversed(entries))

    async def read(self, after: str, count: int) -> list[Any]:
        """Up to `count` entries after the id `after`, oldest first."""
        reply = await self._call(self._connection.xread({self.key: after}, count=count))
        return reply[0][1] if reply else []

    async def wait_for_entry(self, after: str) -> bool:
        """Blocks until an entry after the id `after` lands (True), or for a bounded while."""
        reply = await self._call(
            self._connection.xread({self.key: after}, count=1, block=int(_MAX_BLOCK_S * 1000))
        )
        return bool(reply)
