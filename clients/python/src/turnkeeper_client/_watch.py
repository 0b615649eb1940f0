"""The TrimEvents watch logic, free of I/O: the sync and async watchers only move bytes.

`WatchLoop` holds what both faces must agree on (the resume cursor, a batch handed out item by
item, redeliveries dropped, which failures are retried and for how long, the item held by
`wait_subscribed`), so a fix to it cannot reach one face and miss the other.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import grpc
from google.protobuf import duration_pb2
from turnkeeper.v1 import history_service_pb2, trim_pb2

from .errors import TurnkeeperError, decode_rpc_error

# Reasons the server uses when the feed (not the request) is the problem; worth retrying.
_RETRYABLE_REASONS = frozenset({"ERROR_REASON_SHUTTING_DOWN"})
# How many recent event cursors to remember to drop redelivered events after a resume.
_SEEN_LIMIT = 4096

# Called before each reconnect with the error that ended the stream (None for a clean end)
# and the delay before the next attempt, in seconds.
DisconnectHook = Callable[[TurnkeeperError | None, float], None]


@dataclass(frozen=True)
class Backoff:
    """Exponential reconnect backoff with jitter; `max_attempts` counts consecutive failures."""

    initial: float = 0.1
    maximum: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2
    max_attempts: int | None = None

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.multiplier ** max(0, attempt - 1))
        return max(0.0, base * (1.0 + random.uniform(-self.jitter, self.jitter)))


def is_retryable(error: TurnkeeperError) -> bool:
    return error.code == grpc.StatusCode.UNAVAILABLE or error.reason in _RETRYABLE_REASONS


# Batches let a subscriber keep up with a loaded server.
DEFAULT_MAX_BATCH_EVENTS = 100


def build_request(
    *,
    session_ids: Iterable[str],
    runtime_ids: Iterable[str],
    reasons: Iterable[trim_pb2.TrimReason.ValueType],
    heartbeat_interval: float | None,
    include_meter_updates: bool,
    max_batch_events: int = 0,
) -> history_service_pb2.TrimEventsRequest:
    """The subscription; `max_batch_events` 0 asks for DEFAULT_MAX_BATCH_EVENTS (1: one item per
    stream message). The watch helpers hand a batch's items out one by one either way."""
    request = history_service_pb2.TrimEventsRequest(
        session_ids=list(session_ids),
        runtime_ids=list(runtime_ids),
        reasons=list(reasons),
        include_meter_updates=include_meter_updates,
        max_batch_events=max_batch_events or DEFAULT_MAX_BATCH_EVENTS,
    )
    if heartbeat_interval is not None:
        request.heartbeat_interval.CopyFrom(_duration(heartbeat_interval))
    return request


def unpacked(
    message: history_service_pb2.TrimEventsResponse,
) -> Iterable[history_service_pb2.TrimEventsResponse]:
    """The items of one stream message: a batch's, in order, or the message itself."""
    if message.WhichOneof("item") == "batch":
        return message.batch.items
    return (message,)


def not_subscribed(timeout: float | None, *, expired: bool) -> TurnkeeperError:
    """The error of a subscription closed before the server answered it: by its `timeout`
    (DEADLINE_EXCEEDED) or by the caller (CANCELLED)."""
    if not expired:
        return TurnkeeperError(
            code=grpc.StatusCode.CANCELLED,
            message="the TrimEvents subscription was closed before the server answered it",
        )
    return TurnkeeperError(
        code=grpc.StatusCode.DEADLINE_EXCEEDED,
        message=f"the server did not answer the TrimEvents subscription within {timeout:g} s",
    )


def _duration(seconds: float) -> duration_pb2.Duration:
    whole = int(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


class CursorState:
    """Remembers the last cursor seen so a new stream resumes right after it.

    Event and meter-update cursors and non-empty heartbeat cursors advance the position. A gap
    does not: its `before_cursor` names the next event to be delivered, which must not be skipped.
    """

    def __init__(self, base: history_service_pb2.TrimEventsRequest, after_cursor: str) -> None:
        self._base = base
        self.cursor = after_cursor
        self._seen: OrderedDict[str, None] = OrderedDict()

    def request(self) -> history_service_pb2.TrimEventsRequest:
        request = history_service_pb2.TrimEventsRequest()
        request.CopyFrom(self._base)
        request.after_cursor = self.cursor
        return request

    def accept(self, item: history_service_pb2.TrimEventsResponse) -> bool:
        """Records the item's position; False for an event already delivered (a redelivery)."""
        kind = item.WhichOneof("item")
        if kind == "meter_update":
            # Its cursor is the feed position of the trims before it, shared by every update
            # until the next trim: it moves the resume point but names no item to deduplicate.
            self.cursor = item.meter_update.cursor
        elif kind == "event":
            cursor = item.event.cursor
            if cursor in self._seen:
                return False
            self._seen[cursor] = None
            if len(self._seen) > _SEEN_LIMIT:
                self._seen.popitem(last=False)
            self.cursor = cursor
        elif kind == "heartbeat" and item.heartbeat.cursor:
            self.cursor = item.heartbeat.cursor
        return True


class WatchLoop:
    """One resumable subscription's decisions; its face opens streams, reads and sleeps.

    Per stream: subscribe with `request()`, pass each message read to `received` and hand out
    what it yields, then report the end to `ended`, which says how long to wait before
    subscribing again (or raises, or returns None to stop).
    """

    def __init__(
        self, state: CursorState, backoff: Backoff, on_disconnect: DisconnectHook | None
    ) -> None:
        self._state = state
        self._backoff = backoff
        self._on_disconnect = on_disconnect
        self._failures = 0
        # The item that answered the subscription, held by wait_subscribed for the iteration,
        # and the cursor from before it: the held item's cursor counts once it is handed out.
        self._held: history_service_pb2.TrimEventsResponse | None = None
        self._cursor_before_held = ""

    @property
    def cursor(self) -> str:
        return self._cursor_before_held if self._held is not None else self._state.cursor

    def request(self) -> history_service_pb2.TrimEventsRequest:
        return self._state.request()

    def received(
        self, message: history_service_pb2.TrimEventsResponse
    ) -> Iterator[history_service_pb2.TrimEventsResponse]:
        """The new items of one message. Lazy: an item's cursor counts only once the consumer
        asks for it, so a resume from the middle of a batch does not skip its rest."""
        self._failures = 0
        for item in unpacked(message):
            if self._state.accept(item):
                yield item

    def ended(self, raw: grpc.RpcError | None) -> float | None:
        """After a stream ended, with its error (None: the server closed it): the delay before
        subscribing again, or None once the attempts ran out after a clean end. Raises the
        decoded error when it is not worth retrying or the attempts ran out."""
        error = decode_rpc_error(raw) if raw is not None else None
        if error is not None and not is_retryable(error):
            raise error from raw
        self._failures += 1
        if self._backoff.max_attempts is not None and self._failures > self._backoff.max_attempts:
            if error is not None:
                raise error from raw
            return None
        delay = self._backoff.delay(self._failures)
        if self._on_disconnect is not None:
            self._on_disconnect(error, delay)
        return delay

    @property
    def holding(self) -> bool:
        return self._held is not None

    def start_holding(self) -> None:
        """Called as wait_subscribed starts reading: the cursor to report while an item is held."""
        self._cursor_before_held = self._state.cursor

    def hold(self, item: history_service_pb2.TrimEventsResponse) -> None:
        self._held = item

    def take_held(self) -> history_service_pb2.TrimEventsResponse | None:
        held, self._held = self._held, None
        return held
