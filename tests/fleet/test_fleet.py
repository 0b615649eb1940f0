"""Three sidecars sharing one Redis Stream, behind nginx as a gRPC load balancer.

Every consumer (one per replica, connected directly) receives every published event exactly once
and in one order; killing a replica loses nothing for consumers on the others; restarting Redis
(without persistence) resumes the feed with a gap notice for what was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest
from redis import Redis
from turnkeeper.v1 import events_pb2, history_pb2, history_service_pb2_grpc, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

pytestmark = pytest.mark.fleet

Item = svc.TrimEventsResponse


def _load_procs() -> ModuleType:
    path = Path(__file__).resolve().parent / "procs.py"
    spec = importlib.util.spec_from_file_location("turnkeeper_tests_procs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


procs = _load_procs()

_missing = [b for b in ("redis-server", "nginx") if procs.find_binary(b) is None]
if _missing and not os.environ.get("CI"):
    pytest.skip(
        f"{', '.join(_missing)} missing (run scripts/system-deps.sh)", allow_module_level=True
    )


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Any]:
    server = procs.start_redis(tmp_path / "redis")
    yield server
    server.stop()


def trim_request(turn: str) -> svc.TrimHistoryRequest:
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="system")]
    for i in range(4):
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"question {i}"))
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content="answer"))
    return svc.TrimHistoryRequest(
        history=history_pb2.History(chat=history_pb2.ChatHistory(messages=rows)),
        mode=trim_pb2.TRIM_MODE_TURN_COUNT,
        caller_path=trim_pb2.CALLER_PATH_AGENT,
        explicit_limits=svc.ExplicitLimits(max_history_messages=1),
        caller=trim_pb2.CallerContext(session_id="fleet", runtime_id="load", turn_id=turn),
    )


class Consumer:
    """One TrimEvents stream on one replica, pumped into a list by a task."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        stub = history_service_pb2_grpc.HistoryServiceStub(self.channel)
        self.call = stub.TrimEvents(svc.TrimEventsRequest(session_ids=["fleet"]))
        self.items: list[Item] = []
        self.error: BaseException | None = None
        self.task = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        try:
            async for item in self.call:
                if not item.HasField("heartbeat"):
                    self.items.append(item)
        except grpc.aio.AioRpcError as error:
            self.error = error

    def turns(self) -> list[str]:
        return [i.event.trimmed.caller.turn_id for i in self.items if i.HasField("event")]

    def gaps(self) -> list[events_pb2.Gap]:
        return [i.gap for i in self.items if i.HasField("gap")]

    async def close(self) -> None:
        self.call.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        await self.channel.close()


async def wait_until(check: Callable[[], bool], limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def settled_stream(url: str) -> list[str]:
    """The turn ids in the Redis stream once it stops growing (outboxes drain in moments)."""
    with Redis.from_url(url) as direct:
        length, stable_since = -1, time.monotonic()
        deadline = time.monotonic() + 10
        while time.monotonic() - stable_since < 0.5:
            assert time.monotonic() < deadline, "the stream never settled"
            current = direct.xlen("turnkeeper:events")
            if current != length:
                length, stable_since = current, time.monotonic()
            await asyncio.sleep(0.05)
        entries = direct.xrange("turnkeeper:events")
    return [
        events_pb2.TrimEvent.FromString(fields[b"p"]).trimmed.caller.turn_id
        for _, fields in entries
        if fields[b"k"] == b"e"
    ]


class Load:
    """TrimHistory calls through nginx; every attempt has its own turn id, so an event
    published twice would show up as a repeated id."""

    def __init__(self, stub: history_service_pb2_grpc.HistoryServiceStub) -> None:
        self.stub = stub
        self.acked: dict[str, float] = {}  # turn id -> when the response arrived
        self.failed: list[str] = []
        self.attempt = 0

    async def one(self, label: str) -> None:
        for _ in range(5):
            self.attempt += 1
            turn = f"{label}#{self.attempt}"
            try:
                response = await self.stub.TrimHistory(trim_request(turn), timeout=5)
            except grpc.aio.AioRpcError as error:
                assert error.code() in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.INTERNAL,
                    grpc.StatusCode.UNKNOWN,
                ), error
                self.failed.append(turn)  # a replica died under it: retry with a new id
                continue
            assert response.history_trimmed.dropped_turns == 3
            self.acked[turn] = time.monotonic()
            return
        raise AssertionError(f"{label}: no replica answered")

    async def run(self, prefix: str, count: int, concurrency: int = 6) -> None:
        gate = asyncio.Semaphore(concurrency)

        async def bounded(i: int) -> None:
            async with gate:
                await self.one(f"{prefix}{i}")

        await asyncio.gather(*(bounded(i) for i in range(count)))


async def test_fleet_every_consumer_gets_every_event_once(
    redis_server: Any, server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    began = time.monotonic()
    replicas = [
        server_factory("--events", redis_server.url, "--ring-size", "100000", unix=False)
        for _ in range(3)
    ]
    nginx = procs.start_nginx([r.address for r in replicas], tmp_path / "nginx")
    consumers = [Consumer(r.address) for r in replicas]
    channel = grpc.aio.insecure_channel(nginx.address)
    try:
        load = Load(history_service_pb2_grpc.HistoryServiceStub(channel))

        # Live tails start "from now": trim until every consumer has seen a warm-up event.
        deadline = time.monotonic() + 15
        while not all(c.turns() for c in consumers):
            assert time.monotonic() < deadline, "consumers never went live"
            await load.one("warmup")
            await asyncio.sleep(0.1)

        # Phase 1: load through nginx, one replica killed (SIGKILL) a third of the way in.
        victim = replicas[2]
        run = asyncio.ensure_future(load.run("p1-", 240))
        await wait_until(lambda: len(load.acked) >= 80, 20, "a third of the load")
        killed_at = time.monotonic()
        victim.process.send_signal(signal.SIGKILL)
        await run
        assert not victim.alive()
        survivors = consumers[:2]
        acked_1 = dict(load.acked)
        published = await settled_stream(redis_server.url)
        # Only the killed replica can lose events (those still in its outbox when it died), so
        # every call answered after the kill reached the stream.
        lost = set(acked_1) - set(published)
        assert all(acked_1[t] <= killed_at + 0.5 for t in lost), "a survivor lost an event"
        assert len(lost) < len(acked_1) // 2

        def complete(c: Consumer) -> bool:
            turns = c.turns()
            return (
                bool(turns)
                and turns[0] in published
                and (turns == published[published.index(turns[0]) :])
            )

        await wait_until(lambda: all(complete(c) for c in survivors), 15, "phase-1 events")
        await asyncio.sleep(0.3)  # let stragglers arrive so duplicates would show
        for c in survivors:
            turns = c.turns()
            assert len(turns) == len(set(turns)), "an event was delivered twice"
            # Every event published since the consumer went live, exactly once, in stream order.
            assert turns == published[published.index(turns[0]) :]
            assert not c.gaps()
            assert set(turns) <= set(acked_1) | set(load.failed)
        # One global order: both saw the same cursors in the same sequence (one may have gone
        # live a warm-up event earlier).
        cursors = [[i.event.cursor for i in c.items if i.HasField("event")] for c in survivors]
        late, early = sorted(cursors, key=len)
        assert early[early.index(late[0]) :] == late
        assert consumers[2].error is not None  # the victim's stream ended with its replica

        # Phase 2: restart Redis (no persistence: the stream is lost). Trims keep answering.
        seen_before = [len(c.items) for c in survivors]
        redis_server.kill()
        await load.run("down-", 20)
        redis_server.start()
        await asyncio.sleep(1.5)  # replicas reconnect with backoff (at most 1 s apart)
        before_after = dict(load.acked)
        await load.run("p2-", 60)
        after = {t for t in load.acked if t not in before_after}

        def resumed(c: Consumer) -> bool:
            return after <= set(c.turns())

        await wait_until(lambda: all(resumed(c) for c in survivors), 15, "phase-2 events")
        for c, start in zip(survivors, seen_before, strict=True):
            new = c.items[start:]
            gaps = [i.gap for i in new if i.HasField("gap")]
            assert gaps, "no gap notice after the Redis restart"
            assert gaps[0].cause in (
                events_pb2.GAP_CAUSE_RESTART,
                events_pb2.GAP_CAUSE_PUBLISH_FAILED,
            )
            assert any(g.cause == events_pb2.GAP_CAUSE_RESTART for g in gaps)
            first_gap = next(n for n, i in enumerate(new) if i.HasField("gap"))
            # The gap comes before any event of the new stream.
            assert not any(
                i.event.trimmed.caller.turn_id in after
                for i in new[:first_gap]
                if i.HasField("event")
            )
            turns = c.turns()
            assert len(turns) == len(set(turns))
        assert time.monotonic() - began < 60
    finally:
        await channel.close()
        for c in consumers:
            await c.close()
        nginx.stop()
