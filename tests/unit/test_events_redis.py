"""The Redis Streams feed against a real redis-server on a free loopback port (no persistence)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import duration_pb2
from redis.asyncio import Redis
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.events import cursor as cursors
from turnkeeper.server.events.common import resume_margin
from turnkeeper.server.events.feed import Delivery
from turnkeeper.server.events.redis_feed import RedisFeed
from turnkeeper.server.events.redis_protocol import text
from turnkeeper.v1 import errors_pb2, events_pb2, history_service_pb2, trim_pb2

from .feed_items import meter

Item = history_service_pb2.TrimEventsResponse


def _load_procs() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "fleet" / "procs.py"
    spec = importlib.util.spec_from_file_location("turnkeeper_tests_procs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


procs = _load_procs()

if procs.find_binary("redis-server") is None and not os.environ.get("CI"):
    pytest.skip("redis-server missing (run scripts/system-deps.sh)", allow_module_level=True)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[object]:
    server = procs.start_redis()
    yield server
    server.stop()


@pytest.fixture
def url(redis_server: object) -> str:
    address: str = redis_server.url  # type: ignore[attr-defined]
    return address


@pytest.fixture
def key() -> str:
    return f"tk-test:{uuid.uuid4().hex}"


def trimmed(i: int, session: str = "s1") -> trim_pb2.HistoryTrimmed:
    return trim_pb2.HistoryTrimmed(
        reason=trim_pb2.TRIM_REASON_TOKEN_BUDGET,
        dropped_turns=i,
        caller=trim_pb2.CallerContext(session_id=session, turn_id=f"t{i}"),
    )


def request(**kwargs: object) -> history_service_pb2.TrimEventsRequest:
    return history_service_pb2.TrimEventsRequest(**kwargs)  # type: ignore[arg-type]


async def take(stream: AsyncIterator[Item], n: int, limit_s: float = 5.0) -> list[Item]:
    async def run() -> list[Item]:
        return [await anext(stream) for _ in range(n)]

    return await asyncio.wait_for(run(), limit_s)


def turns(items: list[Item]) -> list[int]:
    return [i.event.trimmed.dropped_turns for i in items]


async def feed(url: str, key: str, ring: int = 1000, **kwargs: int) -> RedisFeed:
    f = RedisFeed(url, ring, 100, stream_key=key, **kwargs)
    await f.start()
    return f


async def live(f: RedisFeed, req: history_service_pb2.TrimEventsRequest) -> AsyncIterator[Item]:
    """A registered subscription: the feed answers at once with a heartbeat carrying its start
    position, taken before the test publishes."""
    stream = f.subscribe(req)
    (first,) = await take(stream, 1)
    assert first.HasField("heartbeat")
    return stream


async def test_every_replica_serves_every_event_in_one_order(url: str, key: str) -> None:
    a, b, c = [await feed(url, key) for _ in range(3)]
    on_a = await live(a, request())
    on_c = await live(c, request(session_ids=["s2"]))
    for i in range(1, 21):
        (a if i % 2 else b).publish(trimmed(i, session="s2" if i % 5 == 0 else "s1"))
    got_a = await take(on_a, 20)
    assert sorted(turns(got_a)) == list(range(1, 21))
    # One global order: numbers are contiguous, cursors strictly increase.
    decoded = [cursors.decode(i.event.cursor) for i in got_a]
    assert all(isinstance(d, cursors.RedisCursor) for d in decoded)
    ns = [d.n for d in decoded if isinstance(d, cursors.RedisCursor)]
    assert ns == list(range(ns[0], ns[0] + 20))
    # A filtered consumer on another replica sees the same events with the same cursors.
    got_c = await take(on_c, 4)
    assert [i.event.cursor for i in got_c] == [
        i.event.cursor for i in got_a if i.event.trimmed.caller.session_id == "s2"
    ]
    for f in (a, b, c):
        await f.close()


async def test_resume_from_a_cursor_on_another_replica_exactly_once(url: str, key: str) -> None:
    a, b = await feed(url, key), await feed(url, key)
    for i in range(1, 11):
        a.publish(trimmed(i))
    first = await live(a, request())
    a.publish(trimmed(11))
    (eleven,) = await take(first, 1)
    replay = b.subscribe(request(after_cursor=eleven.event.cursor))
    (beat,) = await take(replay, 1)
    assert beat.heartbeat.cursor == eleven.event.cursor  # the resume position, at once
    none_yet = asyncio.ensure_future(take(replay, 1, limit_s=0.5))
    a.publish(trimmed(12))
    assert turns(await none_yet) == [12]
    # From the start of the stream (a cursor before its first entry): 1..12 exactly once.
    decoded = cursors.decode(eleven.event.cursor)
    assert isinstance(decoded, cursors.RedisCursor)
    stream = b.subscribe(request(after_cursor=cursors.encode_redis(decoded.epoch, "0-1", 0)))
    items = await take(stream, 13)
    assert items[0].HasField("heartbeat")
    assert turns(items[1:]) == list(range(1, 13))
    await a.close()
    await b.close()


async def test_cursor_older_than_the_stream_yields_an_overflow_gap(url: str, key: str) -> None:
    # MAXLEN ~ trims whole stream nodes (100 entries), so publish well past the limit.
    a = await feed(url, key, ring=10)
    first = await live(a, request())
    a.publish(trimmed(1))
    (one,) = await take(first, 1)
    for i in range(2, 401):
        a.publish(trimmed(i))
    await asyncio.sleep(0.5)
    stream = a.subscribe(request(after_cursor=one.event.cursor))
    beat, *items = await take(stream, 3)
    assert beat.heartbeat.cursor == one.event.cursor
    gap = items[0].gap
    assert gap.cause == events_pb2.GAP_CAUSE_BUFFER_OVERFLOW
    first_kept = items[1].event.trimmed.dropped_turns
    assert first_kept > 2
    assert gap.missed_events == first_kept - 2
    assert gap.before_cursor == items[1].event.cursor
    await a.close()


async def test_invalid_cursor_and_foreign_cursor(url: str, key: str) -> None:
    a = await feed(url, key)
    with pytest.raises(RequestError) as caught:
        await anext(a.subscribe(request(after_cursor="nope")))
    assert caught.value.reason == errors_pb2.ERROR_REASON_INVALID_SUBSCRIPTION
    assert [v.field for v in caught.value.violations] == ["after_cursor"]
    a.publish(trimmed(1))
    a.publish(trimmed(2))
    await asyncio.sleep(0.3)
    foreign = cursors.encode_ring("0123456789abcdef", 5)
    items = await take(a.subscribe(request(after_cursor=foreign)), 3)
    assert items[0].gap.cause == events_pb2.GAP_CAUSE_RESTART
    assert items[0].gap.after_cursor == foreign
    assert turns(items[1:]) == [1, 2]
    await a.close()


async def test_heartbeat_and_close_end_blocked_readers(url: str, key: str) -> None:
    a = await feed(url, key)
    stream = a.subscribe(request(heartbeat_interval=duration_pb2.Duration(seconds=1)))
    (beat,) = await take(stream, 1, limit_s=4)
    assert beat.heartbeat.cursor == ""
    assert beat.heartbeat.time.seconds > 0
    blocked = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.2)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await a.close()
    final = await asyncio.wait_for(blocked, 3)  # issue 9: the stream ends with its resume cursor
    assert final.HasField("heartbeat") and final.heartbeat.cursor == beat.heartbeat.cursor
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(stream), 3)
    assert loop.time() - began < 3


async def test_redis_outage_keeps_publish_non_blocking_and_reports_the_loss(
    tmp_path: Path,
) -> None:
    server = procs.start_redis(tmp_path)
    try:
        a = RedisFeed(server.url, 1000, 100, outbox_size=3)
        await a.start()
        watcher = await live(a, request())
        a.publish(trimmed(1))
        (one,) = await take(watcher, 1)
        server.kill()
        await asyncio.sleep(1.5)
        assert not a.status().healthy
        loop = asyncio.get_running_loop()
        began = loop.time()
        for i in range(2, 8):  # 6 events, the outbox keeps the newest 3
            a.publish(trimmed(i))
        assert loop.time() - began < 0.1
        server.start()  # empty: the old stream is gone
        items = await take(watcher, 5, limit_s=10)
        assert a.status().healthy
        restart, lost = items[0].gap, items[1].gap
        assert restart.cause == events_pb2.GAP_CAUSE_RESTART
        assert restart.after_cursor == one.event.cursor
        assert lost.cause == events_pb2.GAP_CAUSE_PUBLISH_FAILED
        assert lost.missed_events == 3
        assert turns(items[2:]) == [5, 6, 7]
        assert a.outbox.unpublished_total == 3
        # A cursor from before the restart belongs to the lost stream.
        resumed = await take(a.subscribe(request(after_cursor=one.event.cursor)), 2)
        assert resumed[0].gap.cause == events_pb2.GAP_CAUSE_RESTART
        assert resumed[1].gap.cause == events_pb2.GAP_CAUSE_PUBLISH_FAILED
        await a.close()
    finally:
        server.stop()


async def test_start_and_subscribe_while_redis_is_down(tmp_path: Path) -> None:
    server = procs.RedisServer(procs.free_port(), tmp_path)
    a = RedisFeed(server.url, 1000, 100)
    await a.start()  # never fails: the feed is degraded until Redis answers
    assert not a.status().healthy
    stream = a.subscribe(request(heartbeat_interval=duration_pb2.Duration(seconds=1)))
    pending = asyncio.ensure_future(anext(stream))
    a.publish(trimmed(1))  # held in the outbox
    await asyncio.sleep(0.3)
    server.start()
    try:
        seen = [await asyncio.wait_for(pending, 10)]  # a heartbeat while waiting, or event 1
        for _ in range(50):
            if a.status().healthy:
                break
            await asyncio.sleep(0.1)
        assert a.status().healthy
        a.publish(trimmed(2))
        while not (seen[-1].HasField("event") and seen[-1].event.trimmed.dropped_turns == 2):
            seen += await take(stream, 1, limit_s=10)
        assert not any(item.HasField("gap") for item in seen)
        await a.close()
    finally:
        server.stop()


async def test_meter_updates_are_wanted_while_the_feed_is_open(url: str, key: str) -> None:
    """A replica cannot tell whether another one's subscribers opted in: it takes every meter
    update until it is closed."""
    a = await feed(url, key)
    assert a.wants_meter_updates()
    await a.close()
    assert not a.wants_meter_updates()


async def test_meter_updates_reach_opted_in_subscribers_on_every_replica_and_count_as_no_event(
    url: str, key: str
) -> None:
    """spec §10.5: a meter update per prepared call for subscribers that opt in; the session
    filter applies, the reason filter does not; `n` counts trims only, so no false gap."""
    a, b = await feed(url, key), await feed(url, key)
    opted = await live(b, request(include_meter_updates=True))
    by_reason = await live(
        b,
        request(include_meter_updates=True, reasons=[trim_pb2.TRIM_REASON_TURN_LIMIT]),
    )
    plain = await live(b, request())
    a.publish(trimmed(1))
    a.publish_meter(meter("s1", 700))
    a.publish_meter(meter("s2", 800))
    a.publish(trimmed(2))
    got = await take(opted, 4)
    assert [i.WhichOneof("item") for i in got] == ["event", "meter_update", "meter_update", "event"]
    assert [i.meter_update.meter.used_tokens for i in got[1:3]] == [700, 800]
    one, two = (cursors.decode(i.event.cursor) for i in (got[0], got[3]))
    assert isinstance(one, cursors.RedisCursor) and isinstance(two, cursors.RedisCursor)
    assert two.n == one.n + 1
    # Resuming after a meter update's cursor continues with the next trim, without a gap.
    resumed = b.subscribe(request(after_cursor=got[2].meter_update.cursor))
    (beat, after) = await take(resumed, 2)
    assert beat.HasField("heartbeat") and turns([after]) == [2]
    assert [i.WhichOneof("item") for i in await take(by_reason, 2)] == [
        "meter_update",
        "meter_update",
    ]
    assert turns(await take(plain, 2)) == [1, 2]
    for f in (a, b):
        await f.close()


async def test_a_restore_that_loses_the_newest_entries_forks_the_epoch(url: str, key: str) -> None:
    """Issue 17 (5): the counter going back (a restore from an older snapshot, a failover to a
    lagging replica) is a RESTART gap for every reader and a new epoch: no number is reused."""
    a = await feed(url, key)
    watcher = await live(a, request())
    for i in range(1, 6):
        a.publish(trimmed(i))
    before = await take(watcher, 5)
    raw = Redis.from_url(url)
    try:
        # What a snapshot taken after event 3 holds: entries 1-3, the counter at 3, the epoch.
        for item in before[3:]:
            position = cursors.decode(item.event.cursor)
            assert isinstance(position, cursors.RedisCursor)
            await raw.xdel(key, position.stream_id)
        await raw.set(f"{key}:n", 3)
        # The publisher notices on its next poll (once a second), without a publish.
        (gap,) = await take(watcher, 1, limit_s=5)
        assert gap.gap.cause == events_pb2.GAP_CAUSE_RESTART
        a.publish(trimmed(6))
        (six,) = await take(watcher, 1)
    finally:
        await raw.aclose()
    old, new = (cursors.decode(i.event.cursor) for i in (before[3], six))
    assert isinstance(old, cursors.RedisCursor) and isinstance(new, cursors.RedisCursor)
    assert new.n == 4 and new.epoch != old.epoch  # (epoch, 4) names one event only
    # A cursor of a lost event: the gap, then the new epoch's events (not the old ones again).
    resumed = await take(a.subscribe(request(after_cursor=before[4].event.cursor)), 2)
    assert resumed[0].gap.cause == events_pb2.GAP_CAUSE_RESTART
    assert turns(resumed[1:]) == [6]
    # A cursor of a kept event of the old epoch resumes exactly, then crosses the fork's gap.
    kept = await take(a.subscribe(request(after_cursor=before[1].event.cursor)), 4)
    assert [i.WhichOneof("item") for i in kept] == ["heartbeat", "event", "gap", "event"]
    assert turns([kept[1], kept[3]]) == [3, 6]
    await a.close()


async def test_a_reader_that_sees_a_number_again_announces_it_and_forks(url: str, key: str) -> None:
    """A replica that knew nothing of the lost entries published first: the reader sees the
    number go back, announces a gap and forks the epoch; later entries need no second notice."""
    writer = await feed(url, key)
    reader = RedisFeed(url, 1000, 100, stream_key=key)  # never started: it only reads
    watcher = await live(reader, request())
    for i in range(1, 4):
        writer.publish(trimmed(i))
    got = await take(watcher, 3)
    await writer.close()
    epoch = cursors.decode(got[0].event.cursor)
    assert isinstance(epoch, cursors.RedisCursor)
    raw = Redis.from_url(url)
    try:
        await raw.set(f"{key}:n", 1)  # a lagging replica: events 2 and 3 are gone
        payload = events_pb2.TrimEvent(trimmed=trimmed(4)).SerializeToString()
        await raw.xadd(key, {"k": "e", "n": 2, "e": epoch.epoch, "p": payload})
        gap, four = await take(watcher, 2)
        assert gap.gap.cause == events_pb2.GAP_CAUSE_RESTART and turns([four]) == [4]
        assert text(await raw.get(f"{key}:epoch")) != epoch.epoch
    finally:
        await raw.aclose()
    late = await feed(url, key)
    late.publish(trimmed(5))
    (five,) = await take(watcher, 1)
    assert turns([five]) == [5]
    position = cursors.decode(five.event.cursor)
    assert isinstance(position, cursors.RedisCursor) and position.epoch != epoch.epoch
    for f in (late, reader):
        await f.close()


async def test_a_restart_with_its_data_stays_exact(tmp_path: Path) -> None:
    """A restart that keeps the data (AOF) is no gap: same epoch, same counter."""
    server = procs.RedisServer(procs.free_port(), tmp_path, extra_args=("--appendonly", "yes"))
    server.start()
    try:
        a = RedisFeed(server.url, 1000, 100)
        await a.start()
        watcher = await live(a, request())
        for i in range(1, 4):
            a.publish(trimmed(i))
        got = await take(watcher, 3)
        server.stop()
        server.start()
        for i in range(4, 6):
            a.publish(trimmed(i))
        got += await take(watcher, 2, limit_s=10)
        assert turns(got) == [1, 2, 3, 4, 5]
        resumed = await take(a.subscribe(request(after_cursor=got[2].event.cursor)), 3)
        assert resumed[0].HasField("heartbeat") and turns(resumed[1:]) == [4, 5]
        await a.close()
    finally:
        server.stop()


async def test_a_cursor_that_claims_a_higher_number_forks_nothing(url: str, key: str) -> None:
    """Cursors come from clients: one claiming a number the stream never reached gets its own
    RESTART gap, while the epoch (every other reader's position) stays as it is."""
    a = await feed(url, key)
    watcher = await live(a, request())
    for i in range(1, 4):
        a.publish(trimmed(i))
    got = await take(watcher, 3)
    first = cursors.decode(got[0].event.cursor)
    assert isinstance(first, cursors.RedisCursor)
    forged = cursors.encode_redis(first.epoch, first.stream_id, 10**9)
    resumed = a.subscribe(request(after_cursor=forged))
    beat, gap, *rest = await take(resumed, 4)
    assert beat.HasField("heartbeat") and gap.gap.cause == events_pb2.GAP_CAUSE_RESTART
    assert turns(rest) == [2, 3]
    raw = Redis.from_url(url)
    try:
        assert text(await raw.get(f"{key}:epoch")) == first.epoch
    finally:
        await raw.aclose()
    a.publish(trimmed(4))
    (four,) = await take(watcher, 1)  # no gap for the others
    assert turns([four]) == [4]
    await a.close()


async def test_the_oldest_cursor_replays_the_whole_stream_without_a_gap(url: str, key: str) -> None:
    a = await feed(url, key, ring=10)
    assert await a.oldest_cursor() == ""  # nothing published yet: a live tail
    first = await live(a, request())
    a.publish(trimmed(1))
    await take(first, 1)
    for i in range(2, 401):
        a.publish(trimmed(i))
    await asyncio.sleep(0.5)
    stream = a.subscribe(request(after_cursor=await a.oldest_cursor()))
    beat, *items = await take(stream, 3)
    assert beat.HasField("heartbeat")
    # MAXLEN evicted the oldest entries; the backfill starts at the oldest kept one, no gap.
    assert all(i.HasField("event") for i in items)
    kept = turns(items)
    assert kept[0] > 1 and kept[1] == kept[0] + 1
    await a.close()


async def test_the_oldest_cursor_counts_a_leading_meter_update_right(url: str, key: str) -> None:
    a = await feed(url, key)
    a.publish_meter(meter("s1", 100))
    a.publish(trimmed(1))
    await asyncio.sleep(0.3)
    stream = a.subscribe(request(after_cursor=await a.oldest_cursor(), include_meter_updates=True))
    beat, update, event = await take(stream, 3)
    assert beat.HasField("heartbeat") and update.HasField("meter_update")
    assert turns([event]) == [1]  # no gap between the meter update and the event
    await a.close()


@pytest.fixture
async def small_nodes(url: str) -> AsyncIterator[None]:
    """Stream nodes of 10 entries, so that MAXLEN ~ trims close to the limit."""
    admin = Redis.from_url(url)
    await admin.config_set("stream-node-max-entries", 10)
    try:
        yield
    finally:
        await admin.config_set("stream-node-max-entries", 100)
        await admin.aclose()


async def test_a_lapped_reader_gets_one_gap_then_events_it_can_still_receive(
    url: str, key: str, small_nodes: None
) -> None:
    """A reader the stream was trimmed past resumes near the newest entries: while it then reads
    one event per two published, it gets events, never another gap (resuming at the oldest
    retained entries, the next trim takes its next ones)."""
    a = await feed(url, key, ring=100)
    slow = await live(a, request())
    a.publish(trimmed(1))
    assert turns(await take(slow, 1)) == [1]  # its position is known: what follows is counted
    published = 1
    for _ in range(299):
        published += 1
        a.publish(trimmed(published))
    await asyncio.sleep(0.5)  # all in the stream, trimmed to about 100
    gap, first = await take(slow, 2)
    assert gap.gap.cause == events_pb2.GAP_CAUSE_BUFFER_OVERFLOW
    assert gap.gap.before_cursor == first.event.cursor
    assert turns([first]) == [published - resume_margin(100) + 1]
    assert gap.gap.missed_events == published - resume_margin(100) - 1  # all but the first
    kinds = []
    for _ in range(60):
        for _ in range(2):
            published += 1
            a.publish(trimmed(published))
        (item,) = await take(slow, 1)
        kinds.append(item.WhichOneof("item"))
    assert kinds == ["event"] * 60
    await a.close()


async def test_before_cursor_is_the_next_event_the_filtered_reader_is_sent(
    url: str, key: str, small_nodes: None
) -> None:
    a = await feed(url, key, ring=100)
    slow = await live(a, request(session_ids=["s1"]))
    a.publish(trimmed(0, session="s1"))
    assert turns(await take(slow, 1)) == [0]
    for i in range(1, 301):
        a.publish(trimmed(i, session="s1" if i % 7 == 0 else "s2"))
    await asyncio.sleep(0.5)
    gap, after = await take(slow, 2)
    assert gap.gap.cause == events_pb2.GAP_CAUSE_BUFFER_OVERFLOW
    assert after.event.trimmed.caller.session_id == "s1"
    assert gap.gap.before_cursor == after.event.cursor
    await a.close()


async def test_batches_carry_the_same_items_in_the_same_order_as_single_items(
    url: str, key: str
) -> None:
    a = await feed(url, key)
    before = await a.oldest_cursor()
    for i in range(1, 301):
        a.publish(trimmed(i, session="s1" if i % 4 else "s2"))
    await asyncio.sleep(0.5)
    before = before or cursors.encode_redis((await a.stream.epoch()), "0-0", 0)

    async def read(batch: int) -> list[Delivery]:
        stream = a.deliveries(
            request(after_cursor=before, session_ids=["s1"], max_batch_events=batch)
        )
        got: list[Delivery] = []
        while sum(len(d) for d in got) < 226:  # the opening heartbeat and 225 events
            got.append(await asyncio.wait_for(anext(stream), 5))
        await stream.aclose()
        return got

    singles, batches = await read(1), await read(64)
    assert {len(d) for d in singles} == {1}
    assert max(len(d) for d in batches) > 1

    def events(deliveries: list[Delivery]) -> list[Item]:
        return [i.message for d in deliveries for i in d if i.message.HasField("event")]

    assert len(events(singles)) == 225
    assert events(batches) == events(singles)
    await a.close()
