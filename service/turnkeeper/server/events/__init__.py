"""The TrimEvents feed: what trims publish and subscribers (TrimEvents, the dashboard) read.

`feed.py` is the `EventFeed` protocol; its backends are `ring.py` (in-process, the default) and
`redis_feed.py` (a Redis Stream shared by a fleet: `redis_protocol.py`, `redis_outbox.py`,
`redis_reader.py`), both on `common.py` and `cursor.py`;
`metered.py` counts what passes through any of them. `create_feed` picks the backend.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlsplit

from turnkeeper.server.events.feed import EventFeed

from .common import CallsInFlight
from .ring import RingFeed


class FeedConfig(Protocol):
    """The settings the feed needs (a subset of the server's `ServerConfig`)."""

    @property
    def events_url(self) -> str | None: ...

    @property
    def ring_size(self) -> int: ...

    @property
    def subscriber_queue(self) -> int: ...


def create_feed(config: FeedConfig, calls: CallsInFlight | None = None) -> EventFeed:
    """The in-process ring buffer by default; a Redis Stream shared by a fleet for `redis://`.
    `calls`: the edge's record of unary calls, which delivery gives way to."""
    url = config.events_url
    if not url:
        return RingFeed(config.ring_size, calls)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from .redis_feed import RedisFeed

        return RedisFeed(url, config.ring_size, config.subscriber_queue, calls=calls)
    raise ValueError(f"unsupported events url {url!r}: expected redis://HOST:PORT")


def describe_events_url(url: str | None) -> str:
    """The backend for the startup line: "memory", or the URL without its credentials."""
    if url is None:
        return "memory"
    parts = urlsplit(url)
    # Never log credentials embedded in the URL.
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


__all__ = ["FeedConfig", "RingFeed", "create_feed", "describe_events_url"]
