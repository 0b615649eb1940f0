"""The seam between trimming RPCs and the TrimEvents feed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from turnkeeper.v1 import history_service_pb2, trim_pb2


@dataclass(frozen=True)
class FeedStatus:
    """Whether the feed can publish and serve right now, and why not."""

    healthy: bool
    detail: str = ""


class EventFeed(Protocol):
    """Publishes HistoryTrimmed payloads and serves TrimEvents subscriptions.

    `publish` is called on the request path: it must never block, await a subscriber or raise.
    """

    def publish(self, trimmed: trim_pb2.HistoryTrimmed) -> None: ...

    def subscribe(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncIterator[history_service_pb2.TrimEventsResponse]:
        """Yields feed items until the feed closes; raises RequestError for a bad subscription."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None:
        """Ends every open subscription cleanly."""
        ...

    def status(self) -> FeedStatus: ...
