"""The seam between trimming RPCs and the TrimEvents feed."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Protocol

from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2


class FeedItem:
    """One feed item and its wire bytes, encoded once however many streams send it: an event
    keeps its FeedItem for as long as the feed retains it."""

    __slots__ = ("_encoded", "message")

    def __init__(self, message: history_service_pb2.TrimEventsResponse) -> None:
        self.message = message
        self._encoded: bytes | None = None

    @property
    def encoded(self) -> bytes:
        encoded = self._encoded
        if encoded is None:
            encoded = self._encoded = self.message.SerializeToString()
        return encoded


# What one stream message carries: one item, or the items of a batch in stream order.
Delivery = Sequence[FeedItem]


@dataclass(frozen=True)
class FeedStatus:
    """Whether the feed can publish and serve right now, and why not."""

    healthy: bool
    detail: str = ""


class EventFeed(Protocol):
    """Publishes HistoryTrimmed payloads (and meter updates) and serves TrimEvents subscriptions.

    `publish` and `publish_meter` are called on the request path: they must never block, await a
    subscriber or raise. A backend may keep the message it is given: the caller does not change
    it once published.
    """

    def publish(self, trimmed: trim_pb2.HistoryTrimmed) -> None: ...

    def publish_meter(self, update: events_pb2.MeterUpdate) -> None:
        """Offers a prepared call's context meter to the subscribers that opted in (spec §10.5).

        Like `publish`, it never blocks or raises. A meter update is not a trim: it is delivered
        live only, never retained for replay, never counted in heartbeats or gaps, and skipped for
        a subscriber that fell so far behind that newer ones replaced it (the session's next
        meter update supersedes it). Its cursor is the feed position of the trims before it.
        """
        ...

    def wants_meter_updates(self) -> bool:
        """Whether `publish_meter` would offer an update to anyone now; when not, the caller
        need not build one. Like `publish`, it never blocks or raises."""
        ...

    def deliveries(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncGenerator[Delivery]:
        """Yields what each stream message carries (see `common.encode_delivery`) until the feed
        closes: one item, or up to the request's `max_batch_events` items in stream order (never a
        heartbeat among several). Raises RequestError for a bad subscription. Closing the
        generator (`aclose`) ends the subscription."""
        ...

    def subscribe(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncGenerator[history_service_pb2.TrimEventsResponse]:
        """The items of `deliveries`, one by one (`common.messages_of`)."""
        ...

    async def oldest_cursor(self) -> str:
        """A cursor to subscribe after that replays every event the feed still retains (the
        position just before its oldest one); "" when it cannot tell, which means a live tail."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None:
        """Ends every open subscription cleanly."""
        ...

    def status(self) -> FeedStatus: ...
