"""The metered decorator of any EventFeed: counts publications, subscribers, deliveries, gaps.

The app wraps whichever backend `create_feed` chose, so every backend is counted alike.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from turnkeeper.server.events.common import messages_of
from turnkeeper.server.events.feed import Delivery, EventFeed, FeedStatus
from turnkeeper.server.telemetry.metrics import (
    EVENT_GAPS,
    EVENT_SUBSCRIBERS,
    EVENTS_DELIVERED,
    EVENTS_PUBLISHED,
    enum_label,
)
from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2


class MeteredFeed:
    """An EventFeed that counts what passes through it, around any backend."""

    def __init__(self, inner: EventFeed) -> None:
        self.inner = inner

    def publish(self, trimmed: trim_pb2.HistoryTrimmed) -> None:
        EVENTS_PUBLISHED.inc()
        self.inner.publish(trimmed)

    def publish_meter(self, update: events_pb2.MeterUpdate) -> None:
        self.inner.publish_meter(update)  # not a trim event: not counted as one

    def wants_meter_updates(self) -> bool:
        return self.inner.wants_meter_updates()

    async def deliveries(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncGenerator[Delivery]:
        EVENT_SUBSCRIBERS.inc()
        stream = self.inner.deliveries(request)
        try:
            async for delivery in stream:
                for item in delivery:
                    kind = item.message.WhichOneof("item")
                    if kind == "event":
                        EVENTS_DELIVERED.inc()
                    elif kind == "gap":
                        cause = events_pb2.GapCause.Name(item.message.gap.cause)
                        EVENT_GAPS.labels(enum_label(cause, "GAP_CAUSE_")).inc()
                yield delivery
        finally:
            EVENT_SUBSCRIBERS.dec()
            # Close the backend's generator now (its cleanup unregisters the subscriber),
            # not whenever the garbage collector finalizes it.
            await stream.aclose()

    def subscribe(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncGenerator[history_service_pb2.TrimEventsResponse]:
        return messages_of(self.deliveries(request))

    async def oldest_cursor(self) -> str:
        return await self.inner.oldest_cursor()

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    def status(self) -> FeedStatus:
        return self.inner.status()
