"""The TrimEvents feed backends and the factory the server app uses."""

from __future__ import annotations

from typing import Protocol

from turnkeeper.server.events.feed import EventFeed

from .ring import RingFeed


class FeedConfig(Protocol):
    """The settings the feed needs (a subset of the server's `ServerConfig`)."""

    @property
    def events_url(self) -> str | None: ...

    @property
    def ring_size(self) -> int: ...

    @property
    def subscriber_queue(self) -> int: ...


def create_feed(config: FeedConfig) -> EventFeed:
    """The in-process ring buffer by default; a Redis Stream shared by a fleet for `redis://`."""
    url = config.events_url
    if not url:
        return RingFeed(config.ring_size, config.subscriber_queue)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from .redis_feed import RedisFeed

        return RedisFeed(url, config.ring_size, config.subscriber_queue)
    raise ValueError(f"unsupported events url {url!r}: expected redis://HOST:PORT")


__all__ = ["FeedConfig", "RingFeed", "create_feed"]
