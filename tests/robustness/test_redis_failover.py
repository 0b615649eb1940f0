"""Issue 17 (5): a Redis failover to a lagging replica loses no event silently.

A primary and a replica on loopback, two feeds (two sidecar replicas) reaching Redis through a
TCP forwarder (what a Sentinel-aware proxy or a moved DNS name does), 20 subscribers, half of them
slow. The replica stops replicating before the last writes (`REPLICAOF NO ONE`: a replica that
lagged), the primary is killed (SIGKILL) and the forwarder moves to the promoted replica. Every
event a subscriber misses must be announced by a gap before the next event it gets, and no event
number may be issued twice under one epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from robustness_support import load_procs
from turnkeeper.server.events import cursor as cursors
from turnkeeper.server.events.redis_feed import RedisFeed
from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2

procs = load_procs()
SUBSCRIBERS = 20
REPLICATED, UNREPLICATED, AFTER = 60, 40, 40  # events before the lag, during it, after failover
KEY = "tk-failover"


class Forwarder:
    """A TCP forwarder on a loopback port; `move` points it elsewhere and cuts every connection
    (as a failover does)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    def move(self, target: int) -> None:
        self.target = target
        for writer in list(self._writers):
            writer.close()

    async def stop(self) -> None:
        self.move(0)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def trimmed(i: int) -> trim_pb2.HistoryTrimmed:
    return trim_pb2.HistoryTrimmed(
        reason=trim_pb2.TRIM_REASON_TOKEN_BUDGET,
        dropped_turns=i,
        caller=trim_pb2.CallerContext(session_id="s", turn_id=f"t{i}"),
    )


async def settled(feed: RedisFeed, limit_s: float = 10.0) -> None:
    """Until everything `feed` was given is in Redis (its outbox empty and no batch unsettled)."""
    deadline = time.monotonic() + limit_s
    while feed.outbox.queue or feed.outbox.unsettled is not None:  # the feed's own state
        assert time.monotonic() < deadline, "the feed did not publish"
        await asyncio.sleep(0.002)


async def replicated(replica: Redis, n: int) -> None:
    for _ in range(500):
        if int(await replica.get(f"{KEY}:n") or 0) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the replica never reached event {n}")


@pytest.fixture
def pair(tmp_path: Path) -> Any:
    if procs.find_binary("redis-server") is None:
        pytest.skip("redis-server missing (run scripts/system-deps.sh)")
    primary = procs.start_redis(tmp_path / "primary")
    replica = procs.RedisServer(
        procs.free_port(),
        tmp_path / "replica",
        extra_args=("--replicaof", "127.0.0.1", str(primary.port)),
    )
    replica.start()
    yield primary, replica
    replica.stop()
    primary.stop()


async def test_a_failover_to_a_lagging_replica_announces_every_lost_event(
    pair: Any, figures: Any
) -> None:
    primary, replica = pair
    forwarder = Forwarder(primary.port)
    await forwarder.start()
    url = f"redis://127.0.0.1:{forwarder.port}"
    # A read count of 2: a slow subscriber's position in Redis lags too, as in production.
    feeds = [RedisFeed(url, 10_000, 2, stream_key=KEY) for _ in range(2)]
    for feed in feeds:
        await feed.start()
    direct = Redis.from_url(replica.url)
    total = REPLICATED + UNREPLICATED + AFTER
    seen: list[list[history_service_pb2.TrimEventsResponse]] = [[] for _ in range(SUBSCRIBERS)]
    subscribed = [asyncio.Event() for _ in range(SUBSCRIBERS)]

    async def subscribe(index: int) -> None:
        stream: AsyncIterator[history_service_pb2.TrimEventsResponse] = feeds[index % 2].subscribe(
            history_service_pb2.TrimEventsRequest()
        )
        async for item in stream:
            seen[index].append(item)
            subscribed[index].set()
            if item.HasField("event") and item.event.trimmed.dropped_turns == total:
                return
            if index >= SUBSCRIBERS // 2:  # the slow half
                await asyncio.sleep(0.02)

    readers = [asyncio.ensure_future(subscribe(i)) for i in range(SUBSCRIBERS)]
    try:
        # Every subscriber holds its opening heartbeat.
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in subscribed)), 10)

        async def publish(first: int, last: int) -> None:
            # One at a time, each in Redis before the next: the stream order is the order of i.
            for i in range(first, last + 1):
                feeds[i % 2].publish(trimmed(i))
                await settled(feeds[i % 2])

        await publish(1, REPLICATED)
        await replicated(direct, REPLICATED)
        await direct.execute_command("REPLICAOF", "NO", "ONE")  # it lags from here on
        await publish(REPLICATED + 1, REPLICATED + UNREPLICATED)
        await asyncio.sleep(0.2)  # the fast subscribers read them; the slow ones are behind
        primary.kill()
        forwarder.move(replica.port)
        began = time.monotonic()
        await publish(REPLICATED + UNREPLICATED + 1, total)
        figures.add(
            "first event after the failover published in", f"{time.monotonic() - began:.2f} s"
        )
        await asyncio.wait_for(asyncio.gather(*readers), 60)
    finally:
        for task in readers:
            task.cancel()
        for feed in feeds:
            await feed.close()
        await direct.aclose()
        await forwarder.stop()

    silent = announced = 0
    numbers: dict[tuple[str, int], int] = {}
    reused: set[tuple[str, int]] = set()
    for items in seen:
        expected, gap_since_last = 1, False
        for item in items:
            if item.HasField("gap"):
                gap_since_last = True
                continue
            if not item.HasField("event"):
                continue
            i = item.event.trimmed.dropped_turns
            if i > expected:
                if gap_since_last:
                    announced += i - expected
                else:
                    silent += i - expected
            expected, gap_since_last = max(expected, i + 1), False
            position = cursors.decode(item.event.cursor)
            assert isinstance(position, cursors.RedisCursor)
            # One number under one epoch is one event, on every subscriber.
            if numbers.setdefault((position.epoch, position.n), i) != i:
                reused.add((position.epoch, position.n))
    gaps = [g.gap.cause for items in seen for g in items if g.HasField("gap")]
    figures.add("events lost silently (20 subscribers)", silent)
    figures.add("events lost and announced by a gap", announced)
    figures.add("gap notices", len(gaps))
    figures.add("event numbers issued twice under one epoch", len(reused))
    assert silent == 0
    assert not reused
    assert announced > 0, "the slow subscribers were not behind: the test proves nothing"
    assert set(gaps) == {events_pb2.GAP_CAUSE_RESTART}
    # Every subscriber was told, fast ones included: what they had is gone from Redis.
    assert all(any(i.HasField("gap") for i in items) for items in seen)
