"""Pieces shared by the feed backends: filters, heartbeat interval, response builders, items
encoded once and batches built from their bytes, and the pacer that lets calls go before
delivery."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

import grpc
from google.protobuf import timestamp_pb2

from turnkeeper.server.contract.errors import FieldViolation, RequestError, invalid_argument
from turnkeeper.server.events.feed import Delivery
from turnkeeper.v1 import errors_pb2, events_pb2, history_service_pb2, trim_pb2

DEFAULT_HEARTBEAT_S = 15.0
MIN_HEARTBEAT_S = 1.0
MAX_HEARTBEAT_S = 300.0


def heartbeat_interval(request: history_service_pb2.TrimEventsRequest) -> float:
    """The heartbeat interval in seconds: unset or zero means 15 s; clamped to [1, 300]."""
    if not request.HasField("heartbeat_interval"):
        return DEFAULT_HEARTBEAT_S
    d = request.heartbeat_interval
    seconds = d.seconds + d.nanos / 1e9
    if seconds == 0:
        return DEFAULT_HEARTBEAT_S
    return min(MAX_HEARTBEAT_S, max(MIN_HEARTBEAT_S, seconds))


@dataclass(frozen=True)
class Filter:
    """What a subscriber asked to see; an empty set means everything on that axis."""

    session_ids: frozenset[str]
    runtime_ids: frozenset[str]
    reasons: frozenset[int]
    meter_updates: bool = False

    @classmethod
    def of(cls, request: history_service_pb2.TrimEventsRequest) -> Filter:
        return cls(
            frozenset(request.session_ids),
            frozenset(request.runtime_ids),
            frozenset(int(r) for r in request.reasons),
            request.include_meter_updates,
        )

    def _caller_matches(self, caller: trim_pb2.CallerContext) -> bool:
        if self.session_ids and caller.session_id not in self.session_ids:
            return False
        return not self.runtime_ids or caller.runtime_id in self.runtime_ids

    @property
    def everything(self) -> bool:
        """No filter on trims: every event matches (checked once, not per event)."""
        return not (self.session_ids or self.runtime_ids or self.reasons)

    def matches(self, trimmed: trim_pb2.HistoryTrimmed) -> bool:
        if not self._caller_matches(trimmed.caller):
            return False
        return not self.reasons or int(trimmed.reason) in self.reasons

    def matches_meter(self, update: events_pb2.MeterUpdate) -> bool:
        """Opted-in subscribers whose session and runtime filters match; reasons do not apply."""
        return self.meter_updates and self._caller_matches(update.caller)


def invalid_cursor(description: str) -> RequestError:
    return invalid_argument(
        errors_pb2.ERROR_REASON_INVALID_SUBSCRIPTION,
        [FieldViolation("after_cursor", description)],
    )


def shutting_down() -> RequestError:
    """A subscription that arrives after the feed closed: retryable elsewhere or later."""
    return RequestError(
        grpc.StatusCode.UNAVAILABLE,
        errors_pb2.ERROR_REASON_SHUTTING_DOWN,
        "the sidecar is shutting down; subscribe again (with your last cursor) to another replica "
        "or after it restarts",
    )


def now_timestamp() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    return ts


def event_item(event: events_pb2.TrimEvent) -> history_service_pb2.TrimEventsResponse:
    return history_service_pb2.TrimEventsResponse(event=event)


def gap_item(
    cause: events_pb2.GapCause.ValueType, after: str, before: str, missed: int
) -> history_service_pb2.TrimEventsResponse:
    return history_service_pb2.TrimEventsResponse(
        gap=events_pb2.Gap(
            cause=cause, after_cursor=after, before_cursor=before, missed_events=missed
        )
    )


def heartbeat_item(cursor: str, dropped: int) -> history_service_pb2.TrimEventsResponse:
    return history_service_pb2.TrimEventsResponse(
        heartbeat=events_pb2.Heartbeat(cursor=cursor, time=now_timestamp(), dropped_events=dropped)
    )


MAX_BATCH_EVENTS = 1000
# A batch stops growing once its items hold this many bytes, far below a client's default
# receive limit (a single item larger than that still travels, alone or last).
MAX_BATCH_BYTES = 1 << 20


def batch_limit(request: history_service_pb2.TrimEventsRequest) -> int:
    """How many items one stream message may carry: `max_batch_events`, 1 when unset."""
    return min(MAX_BATCH_EVENTS, max(1, request.max_batch_events))


def resume_margin(retained: int) -> int:
    """How far behind the newest event a subscriber that fell out of the retained window resumes:
    near the head, where its next turns find events still retained, never at the oldest one,
    which the next publication evicts; a little behind, so the events right before it are not
    lost too."""
    return max(1, min(retained // 4, 256))


_LENGTH_DELIMITED = 2
_BATCH_TAG = bytes(
    [history_service_pb2.TrimEventsResponse.BATCH_FIELD_NUMBER << 3 | _LENGTH_DELIMITED]
)
_ITEM_TAG = bytes([history_service_pb2.TrimEventsBatch.ITEMS_FIELD_NUMBER << 3 | _LENGTH_DELIMITED])


def _varint(value: int) -> bytes:
    """Protobuf's base-128 length prefix."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_delivery(delivery: Delivery) -> bytes:
    """The stream message of a delivery: a single item as itself; several as one
    `TrimEventsResponse.batch`, whose bytes are the items' own bytes, each with its field tag and
    length (what serializing the batch message would produce, without encoding any item again)."""
    if len(delivery) == 1:
        return delivery[0].encoded
    parts: list[bytes] = []
    for item in delivery:
        encoded = item.encoded
        parts += (_ITEM_TAG, _varint(len(encoded)), encoded)
    body = b"".join(parts)
    return b"".join((_BATCH_TAG, _varint(len(body)), body))


def delivery_size(delivery: Delivery) -> int:
    return sum(len(item.encoded) for item in delivery)


async def messages_of(
    deliveries: AsyncGenerator[Delivery],
) -> AsyncGenerator[history_service_pb2.TrimEventsResponse]:
    """The items of a stream of deliveries, one by one (what `EventFeed.subscribe` yields)."""
    try:
        async for delivery in deliveries:
            for item in delivery:
                yield item.message
    finally:
        await deliveries.aclose()  # unregisters the subscriber now, not when collected


class CallsInFlight(Protocol):
    """The edge's record of unary calls (`edge.admission.Admission`), which fan-out gives way
    to."""

    def quiet_for(self) -> float:
        """Seconds since a call last started or ended."""
        ...

    async def wait_quiet(self, quiet: float, limit: float) -> None:
        """Returns once no call has started or ended for `quiet` seconds, or after `limit`."""
        ...


# Delivery runs freely once no call has started or ended for this long. Calls sent back to back
# (the next as soon as the last answer arrived) leave gaps of a millisecond or so between them,
# which delivery must not fill, or every call would wait behind it; on a loaded machine a client
# waiting for a CPU leaves gaps of several milliseconds, so the quiet time must be longer than
# those too.
QUIET_S = 0.02
# While calls keep coming, delivery gets this share of the event loop, so subscribers keep up
# under sustained load (batched ones; one message per event cannot, see docs/events.md) ...
SHARE = 0.25
# ... counting this much loop time per stream message handed out (the write, its completion and
# the subscriber's step; docs/benchmarks.md has the measurement) ...
ITEM_COST_S = 100e-6
# ... and this much per item inside a batch (its filter check and its bytes joined), in units of
# messages: what the pacer's tokens count.
EVENT_COST = 0.03


def delivery_cost(items: int) -> float:
    """What handing out one stream message of `items` items costs the loop, in messages."""
    return 1 + (items - 1) * EVENT_COST


class Pacer:
    """How many items delivery may hand out now, on the event loop it shares with the calls: as
    many as are ready once the calls are quiet; while they are not, at most SHARE of the loop's
    time, in rounds of at most `burst` items. A call that arrives during a round waits for that
    round, never for a whole fan-out."""

    def __init__(self, calls: CallsInFlight | None, burst: int) -> None:
        self.calls = calls
        self._burst = burst
        self._tokens = float(burst)
        self._refilled = time.monotonic()

    async def round(self) -> int:
        """Waits until delivery may run; returns how many items it may hand out (then `spent`)."""
        await asyncio.sleep(0)  # let whatever is ready on the loop (a call arriving) run first
        calls = self.calls
        if calls is None or calls.quiet_for() >= QUIET_S:
            self._tokens = float(self._burst)
            return self._burst
        rate = SHARE / ITEM_COST_S
        while True:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._refilled) * rate)
            self._refilled = now
            if self._tokens >= 1:
                break
            await calls.wait_quiet(QUIET_S, (1 - self._tokens) / rate)
            if calls.quiet_for() >= QUIET_S:
                self._tokens = float(self._burst)
                return self._burst
        return int(self._tokens)

    def spent(self, cost: float) -> None:
        """Counts what was handed out (in messages, see `delivery_cost`); more than `round`
        allowed is a debt the share pays back."""
        self._tokens -= cost


class Turns:
    """Turns to use the event loop, for subscribers that each read their own source (the Redis
    backend): a read, or one message handed to the stream, granted in FIFO order through a
    `Pacer`, each costing what it costs the loop (in messages of ITEM_COST_S). A subscriber that
    found nothing new parks until `newer` says the source has more (or its heartbeat falls due),
    without a task step per subscriber: only those granted a turn wake."""

    def __init__(self, pacer: Pacer) -> None:
        self.pacer = pacer
        self.generation = 0  # counts `newer` calls: what a subscriber read before it parks
        self._waiting: deque[tuple[asyncio.Future[None], float]] = deque()
        self._parked: dict[asyncio.Future[None], float] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def take(
        self, cost: float = 1, parked_since: int | None = None, limit: float | None = None
    ) -> None:
        """Waits for a turn worth `cost` items. With `parked_since` (the generation seen before
        the last read, which found nothing), first waits for something newer, or for `limit`
        seconds (a heartbeat falls due), then for its turn like everyone else."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._grant(), name="turnkeeper-events-turns")
        turn: asyncio.Future[None] = loop.create_future()
        if parked_since is not None and parked_since == self.generation:
            self._parked[turn] = cost
            handle = loop.call_later(limit, self._unpark, turn) if limit is not None else None
            try:
                await turn
            finally:
                self._parked.pop(turn, None)
                if handle is not None:
                    handle.cancel()
            return
        self._waiting.append((turn, cost))
        self._wakeup.set()
        await turn  # a cancelled one is skipped by _grant

    def _unpark(self, turn: asyncio.Future[None]) -> None:
        """A parked subscriber's heartbeat is due: it waits for a turn now."""
        cost = self._parked.pop(turn, None)
        if cost is not None:
            self._waiting.append((turn, cost))
            self._wakeup.set()

    def newer(self) -> None:
        """The source has entries the parked subscribers have not read."""
        self.generation += 1
        if self._parked:
            self._waiting.extend(self._parked.items())
            self._parked.clear()
            self._wakeup.set()

    async def _grant(self) -> None:
        waiting = self._waiting
        while True:
            while waiting and waiting[0][0].done():
                waiting.popleft()
            if not waiting:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            allowed = await self.pacer.round()
            granted = 0.0
            while waiting and granted < allowed:
                turn, cost = waiting.popleft()
                if not turn.done():
                    turn.set_result(None)
                    granted += cost
            self.pacer.spent(granted)

    def close(self) -> None:
        """Every waiting and parked subscriber goes ahead; turns taken from now on are free."""
        self._closed = True
        for turn in [*(t for t, _ in self._waiting), *self._parked]:
            if not turn.done():
                turn.set_result(None)
        self._waiting.clear()
        self._parked.clear()
        if self._task is not None:
            self._task.cancel()


def meter_item(
    update: events_pb2.MeterUpdate, cursor: str
) -> history_service_pb2.TrimEventsResponse:
    """A meter update stamped with its feed position (the caller's message is not changed)."""
    item = history_service_pb2.TrimEventsResponse(meter_update=update)
    item.meter_update.cursor = cursor
    if not item.meter_update.HasField("time"):
        item.meter_update.time.CopyFrom(now_timestamp())
    return item
