"""The in-process ring feed, driven directly (no gRPC)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import duration_pb2
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.events import RingFeed, create_feed
from turnkeeper.server.events import cursor as cursors
from turnkeeper.server.events.common import (
    ITEM_COST_S,
    MAX_BATCH_BYTES,
    SHARE,
    encode_delivery,
    resume_margin,
)
from turnkeeper.server.events.feed import Delivery, FeedItem
from turnkeeper.v1 import errors_pb2, events_pb2, history_service_pb2, trim_pb2

from .feed_items import meter

Item = history_service_pb2.TrimEventsResponse


def trimmed(
    i: int, session: str = "s1", runtime: str = "r1", turn_limit: bool = False
) -> trim_pb2.HistoryTrimmed:
    reason = trim_pb2.TRIM_REASON_TURN_LIMIT if turn_limit else trim_pb2.TRIM_REASON_TOKEN_BUDGET
    return trim_pb2.HistoryTrimmed(
        reason=reason,
        dropped_turns=i,
        caller=trim_pb2.CallerContext(session_id=session, runtime_id=runtime, turn_id=f"t{i}"),
    )


def request(**kwargs: object) -> history_service_pb2.TrimEventsRequest:
    return history_service_pb2.TrimEventsRequest(**kwargs)  # type: ignore[arg-type]


async def take(stream: AsyncIterator[Item], n: int, limit_s: float = 2.0) -> list[Item]:
    async def run() -> list[Item]:
        return [await anext(stream) for _ in range(n)]

    return await asyncio.wait_for(run(), limit_s)


async def started(
    feed: RingFeed, req: history_service_pb2.TrimEventsRequest
) -> AsyncIterator[Item]:
    """A registered subscription: the feed answers a new subscription at once (a heartbeat with
    its resume position, or the first replayed item), so the first item marks registration."""
    stream = feed.subscribe(req)
    try:
        first = await asyncio.wait_for(anext(stream), 2.0)
    except StopAsyncIteration:  # the feed was closed
        first = None

    async def rest() -> AsyncIterator[Item]:
        if first is None:
            return
        if not first.HasField("heartbeat"):
            yield first
        async for item in stream:
            yield item

    return rest()


def turns(items: list[Item]) -> list[int]:
    return [i.event.trimmed.dropped_turns for i in items]


async def test_live_tail_in_order_and_only_after_subscribing() -> None:
    feed = RingFeed(ring_size=100)
    feed.publish(trimmed(0))
    stream = await started(feed, request())
    for i in range(1, 6):
        feed.publish(trimmed(i))
    items = await take(stream, 5)
    assert turns(items) == [1, 2, 3, 4, 5]
    event = items[0].event
    assert event.trimmed.caller.turn_id == "t1"
    assert event.time.seconds > 0
    assert cursors.decode(event.cursor) == cursors.RingCursor(feed.epoch, 2)
    await feed.close()


async def test_filters_apply_to_what_the_subscriber_sees() -> None:
    feed = RingFeed(ring_size=100)
    by_session = await started(feed, request(session_ids=["s2"]))
    by_runtime = await started(feed, request(runtime_ids=["r2", "r3"]))
    by_reason = await started(feed, request(reasons=[trim_pb2.TRIM_REASON_TURN_LIMIT]))
    combined = await started(
        feed, request(session_ids=["s1"], reasons=[trim_pb2.TRIM_REASON_TOKEN_BUDGET])
    )
    feed.publish(trimmed(1, session="s1", runtime="r1"))
    feed.publish(trimmed(2, session="s2", runtime="r2"))
    feed.publish(trimmed(3, session="s1", runtime="r3", turn_limit=True))
    feed.publish(trimmed(4, session="s2", runtime="r1", turn_limit=True))
    feed.publish(trimmed(5, session="s1", runtime="r1"))
    assert turns(await take(by_session, 2)) == [2, 4]
    assert turns(await take(by_runtime, 2)) == [2, 3]
    assert turns(await take(by_reason, 2)) == [3, 4]
    assert turns(await take(combined, 2)) == [1, 5]
    await feed.close()


async def test_resume_replays_every_retained_event_exactly_once_then_live() -> None:
    feed = RingFeed(ring_size=50)
    for i in range(1, 11):
        feed.publish(trimmed(i))
    first = await started(feed, request(after_cursor=""))
    feed.publish(trimmed(11))
    (eleven,) = await take(first, 1)
    assert turns([eleven]) == [11]

    # Resume after event 4: replay 5..11, and publishing while the replay is consumed lands after
    # it without a duplicate or a hole.
    after_four = cursors.encode_ring(feed.epoch, 4)
    resumed = feed.subscribe(request(after_cursor=after_four))
    head = await take(resumed, 3)
    feed.publish(trimmed(12))
    feed.publish(trimmed(13))
    tail = await take(resumed, 6)
    assert turns(head + tail) == list(range(5, 14))
    assert all(i.HasField("event") for i in head + tail)
    # The last event's cursor resumes with nothing.
    last = tail[-1].event.cursor
    again = await started(feed, request(after_cursor=last))
    feed.publish(trimmed(14))
    assert turns(await take(again, 1)) == [14]
    await feed.close()


async def test_resume_with_filters_replays_only_matching() -> None:
    feed = RingFeed(ring_size=50)
    for i in range(1, 7):
        feed.publish(trimmed(i, session="a" if i % 2 else "b"))
    start = cursors.encode_ring(feed.epoch, 1)
    stream = feed.subscribe(request(after_cursor=start, session_ids=["b"]))
    assert turns(await take(stream, 3)) == [2, 4, 6]
    await feed.close()


async def test_cursor_older_than_the_ring_yields_an_overflow_gap_then_the_rest() -> None:
    feed = RingFeed(ring_size=5)
    for i in range(1, 13):
        feed.publish(trimmed(i))
    stream = feed.subscribe(request(after_cursor=cursors.encode_ring(feed.epoch, 3)))
    items = await take(stream, 6)
    gap = items[0].gap
    assert gap.cause == events_pb2.GAP_CAUSE_BUFFER_OVERFLOW
    assert gap.missed_events == 4  # events 4..7 were evicted; the ring holds 8..12
    assert gap.after_cursor == cursors.encode_ring(feed.epoch, 3)
    assert gap.before_cursor == items[1].event.cursor
    assert turns(items[1:]) == [8, 9, 10, 11, 12]
    await feed.close()


async def test_cursor_right_before_the_ring_has_no_gap() -> None:
    feed = RingFeed(ring_size=5)
    for i in range(1, 11):
        feed.publish(trimmed(i))
    stream = feed.subscribe(request(after_cursor=cursors.encode_ring(feed.epoch, 5)))
    assert turns(await take(stream, 5)) == [6, 7, 8, 9, 10]
    await feed.close()


async def test_cursor_of_another_run_yields_a_restart_gap_then_everything_retained() -> None:
    old = RingFeed(ring_size=10)
    old.publish(trimmed(1))
    old_cursor = cursors.encode_ring(old.epoch, 1)
    feed = RingFeed(ring_size=3)
    for i in range(1, 6):
        feed.publish(trimmed(i))
    stream = feed.subscribe(request(after_cursor=old_cursor))
    items = await take(stream, 4)
    assert items[0].gap.cause == events_pb2.GAP_CAUSE_RESTART
    assert items[0].gap.after_cursor == old_cursor
    assert items[0].gap.before_cursor == items[1].event.cursor
    assert turns(items[1:]) == [3, 4, 5]
    await feed.close()


@pytest.mark.parametrize(
    "cursor",
    ["garbage", "tk1.", "tk1.!!!", "tk1.eHx8", cursors.encode_ring("0" * 16, 1)[:-2], "x" * 500],
)
async def test_unreadable_cursor_is_an_invalid_subscription(cursor: str) -> None:
    feed = RingFeed(ring_size=10)
    with pytest.raises(RequestError) as caught:
        await anext(feed.subscribe(request(after_cursor=cursor)))
    error = caught.value
    assert error.reason == errors_pb2.ERROR_REASON_INVALID_SUBSCRIPTION
    assert [v.field for v in error.violations] == ["after_cursor"]
    assert error.code.name == "INVALID_ARGUMENT"


async def test_cursor_ahead_of_everything_published_is_invalid() -> None:
    feed = RingFeed(ring_size=10)
    feed.publish(trimmed(1))
    with pytest.raises(RequestError) as caught:
        await anext(feed.subscribe(request(after_cursor=cursors.encode_ring(feed.epoch, 2))))
    assert caught.value.reason == errors_pb2.ERROR_REASON_INVALID_SUBSCRIPTION


async def test_slow_consumer_gets_a_gap_and_other_subscribers_are_unaffected() -> None:
    """A subscriber reads the ring at its own cursor: it may lag as far as the ring reaches; once
    the ring evicted what it had not read, it gets a SLOW_CONSUMER gap and resumes near the head
    (`common.resume_margin`: one event behind it for this ring)."""
    feed = RingFeed(ring_size=5)
    slow = await started(feed, request())
    fast = await started(feed, request())
    fast_seen: list[int] = []
    for i in range(1, 9):
        feed.publish(trimmed(i))
        fast_seen += turns(await take(fast, 1))  # the fast one keeps up
    assert fast_seen == list(range(1, 9))
    # The ring holds 4..8: 1..3 were evicted before the slow subscriber read them, and it
    # resumes right before the newest, so 4..7 are missed too.
    assert resume_margin(5) == 1
    items = await take(slow, 2)
    gap = items[0].gap
    assert gap.cause == events_pb2.GAP_CAUSE_SLOW_CONSUMER
    assert gap.missed_events == 7
    assert gap.after_cursor == ""  # nothing was delivered to it before
    assert gap.before_cursor == items[1].event.cursor
    assert turns(items[1:]) == [8]
    feed.publish(trimmed(9))
    assert turns(await take(slow, 1)) == [9]
    assert turns(await take(fast, 1)) == [9]
    await feed.close()


async def test_gap_is_delivered_when_no_event_follows_the_drops() -> None:
    feed = RingFeed(ring_size=2)
    slow = await started(feed, request(session_ids=["s1"]))
    feed.publish(trimmed(1, session="s1"))
    for i in range(2, 6):
        feed.publish(trimmed(i, session="s2"))
    (gap,) = await take(slow, 1)
    assert gap.gap.cause == events_pb2.GAP_CAUSE_SLOW_CONSUMER
    # 1..3 were evicted and 4 is behind where it resumes (the count includes skipped ones).
    assert gap.gap.missed_events == 4
    assert gap.gap.before_cursor == ""  # no event of its session is retained yet
    reading = asyncio.ensure_future(take(slow, 1))
    await asyncio.sleep(0.05)  # it reads past 4 and 5 (not its session) and waits at the head
    feed.publish(trimmed(6, session="s1"))
    assert turns(await reading) == [6]
    await feed.close()


async def test_publish_never_waits_for_a_stalled_subscriber() -> None:
    feed = RingFeed(ring_size=1000)
    stalled = await started(feed, request())
    loop = asyncio.get_running_loop()
    began = loop.time()
    for i in range(20_000):
        feed.publish(trimmed(i))
    assert loop.time() - began < 5.0  # no waiting: only work proportional to the events
    # The ring holds the newest 1,000; the stalled subscriber gets one gap, and resumes near the
    # head.
    margin = resume_margin(1000)
    items = await take(stalled, margin + 1)
    assert items[0].gap.cause == events_pb2.GAP_CAUSE_SLOW_CONSUMER
    assert items[0].gap.missed_events == 20_000 - margin
    assert turns(items[1:]) == list(range(20_000 - margin, 20_000))
    await feed.close()


async def test_heartbeat_after_idle_interval_with_last_cursor_and_drop_count() -> None:
    feed = RingFeed(ring_size=1)
    stream = await started(feed, request(heartbeat_interval=duration_pb2.Duration(nanos=1)))
    feed.publish(trimmed(1))
    feed.publish(trimmed(2))  # evicts 1 before the subscriber read it
    items = await take(stream, 2, limit_s=5)
    assert items[0].HasField("gap")
    loop = asyncio.get_running_loop()
    began = loop.time()
    (beat,) = await take(stream, 1, limit_s=5)
    waited = loop.time() - began
    assert beat.HasField("heartbeat")
    assert 0.8 <= waited < 3  # clamped up to the 1 s minimum
    assert beat.heartbeat.cursor == items[1].event.cursor
    assert beat.heartbeat.dropped_events == 1
    assert beat.heartbeat.time.seconds > 0
    await feed.close()


async def test_first_heartbeat_is_immediate_and_carries_the_resume_position() -> None:
    """A new subscription is answered at once, so a client knows it is registered and can resume
    from the feed position even before any event reaches it."""
    feed = RingFeed(ring_size=10)
    feed.publish(trimmed(1))
    stream = feed.subscribe(request(heartbeat_interval=duration_pb2.Duration(seconds=60)))
    (beat,) = await take(stream, 1, limit_s=0.5)
    assert beat.heartbeat.cursor == cursors.encode_ring(feed.epoch, 1)
    assert beat.heartbeat.dropped_events == 0
    feed.publish(trimmed(2))
    resumed = feed.subscribe(request(after_cursor=beat.heartbeat.cursor))
    assert turns(await take(resumed, 1)) == [2]
    await feed.close()


async def test_heartbeat_cursor_of_an_empty_ring_resumes_without_loss() -> None:
    """Before any event the heartbeat carries the position before the run's first event; resuming
    from it replays everything published since, as docs/events.md promises for heartbeat cursors."""
    feed = RingFeed(ring_size=10)
    stream = feed.subscribe(request(heartbeat_interval=duration_pb2.Duration(seconds=60)))
    (beat,) = await take(stream, 1, limit_s=0.5)
    assert beat.heartbeat.cursor == cursors.encode_ring(feed.epoch, 0)
    feed.publish(trimmed(1))
    feed.publish(trimmed(2))
    resumed = feed.subscribe(request(after_cursor=beat.heartbeat.cursor))
    assert turns(await take(resumed, 2)) == [1, 2]
    await feed.close()


async def test_close_delivers_what_was_published_then_ends_each_stream_with_its_cursor() -> None:
    """Issue 9 graceful drain: every stream ends with a final heartbeat carrying its resume cursor,
    after the events published before the close."""
    feed = RingFeed(ring_size=10)
    streams = [await started(feed, request()) for _ in range(3)]

    async def drain(stream: AsyncIterator[Item]) -> list[Item]:
        return [item async for item in stream]

    tasks = [asyncio.ensure_future(drain(s)) for s in streams]
    await asyncio.sleep(0.05)
    feed.publish(trimmed(1))
    await feed.close()
    for items in await asyncio.wait_for(asyncio.gather(*tasks), 1.0):
        assert turns(items[:1]) == [1]
        assert items[1].HasField("heartbeat") and len(items) == 2
        assert items[1].heartbeat.cursor == items[0].event.cursor
    feed.publish(trimmed(2))  # publishing after close is a no-op, never an error


async def test_publish_from_another_thread_wakes_the_subscriber() -> None:
    feed = RingFeed(ring_size=10)
    stream = await started(feed, request())
    worker = threading.Thread(target=feed.publish, args=(trimmed(7),))
    worker.start()
    worker.join()
    assert turns(await take(stream, 1)) == [7]
    await feed.close()


async def test_an_event_is_built_and_encoded_once_and_only_when_read() -> None:
    """publish keeps the payload (nothing built on the request path); the first read builds the
    response, and every subscriber is sent that one item, encoded once (held by the event)."""
    feed = RingFeed(ring_size=10)
    await feed.start()
    before = await feed.oldest_cursor()
    for i in (1, 2):
        feed.publish(trimmed(i))
    assert [feed._events[i]._item for i in (1, 2)] == [None, None]

    async def read(n: int) -> list[FeedItem]:
        stream = feed.deliveries(request(after_cursor=before))
        items = [item for _ in range(n) for item in await asyncio.wait_for(anext(stream), 2)]
        await stream.aclose()
        return items

    first, second = await read(2), await read(2)
    assert turns([item.message for item in first]) == [1, 2]
    assert [a is b for a, b in zip(first, second, strict=True)] == [True, True]
    assert first[0].encoded is second[0].encoded
    assert first[0].message.event.time.ToNanoseconds() > 0
    await feed.close()


def test_create_feed_picks_the_backend() -> None:
    class Config:
        def __init__(self, url: str | None) -> None:
            self.events_url = url
            self.ring_size = 10
            self.subscriber_queue = 5

    assert isinstance(create_feed(Config(None)), RingFeed)
    assert type(create_feed(Config("redis://127.0.0.1:1"))).__name__ == "RedisFeed"
    with pytest.raises(ValueError):
        create_feed(Config("kafka://x"))


async def test_subscribing_after_close_is_unavailable_shutting_down() -> None:
    """Shutdown ends open streams cleanly and turns new subscriptions away with a retryable
    UNAVAILABLE (reason SHUTTING_DOWN), so clients resubscribe elsewhere with their cursor."""
    feed = RingFeed(ring_size=10)
    await feed.close()
    with pytest.raises(RequestError) as caught:
        await anext(feed.subscribe(request()))
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    assert caught.value.reason == errors_pb2.ERROR_REASON_SHUTTING_DOWN


async def test_meter_updates_go_live_to_opted_in_subscribers_only() -> None:
    """spec §10.5: an opt-in meter update per prepared call. Session and runtime filters apply,
    the reason filter does not; the cursor is the position of the trims before it."""
    feed = RingFeed(ring_size=10)
    opted = await started(feed, request(include_meter_updates=True))
    s2_only = await started(
        feed,
        request(
            include_meter_updates=True,
            session_ids=["s2"],
            reasons=[trim_pb2.TRIM_REASON_TURN_LIMIT],
        ),
    )
    plain = await started(feed, request())
    feed.publish(trimmed(1))
    feed.publish_meter(meter("s1", 700))
    feed.publish_meter(meter("s2", 800))
    feed.publish(trimmed(2))
    got = await take(opted, 4)
    assert [i.WhichOneof("item") for i in got] == ["event", "meter_update", "meter_update", "event"]
    assert [i.meter_update.meter.used_tokens for i in got[1:3]] == [700, 800]
    assert got[1].meter_update.cursor == got[0].event.cursor
    assert got[1].meter_update.HasField("time")
    (only,) = await take(s2_only, 1)
    assert only.meter_update.caller.session_id == "s2"
    assert turns(await take(plain, 2)) == [1, 2]
    await feed.close()


async def test_meter_updates_are_wanted_only_while_a_subscriber_opted_in() -> None:
    """The servicer builds a prepared call's meter update only when the feed wants one."""
    feed = RingFeed(ring_size=10)
    assert not feed.wants_meter_updates()
    plain = feed.subscribe(request())
    await anext(plain)
    assert not feed.wants_meter_updates()
    opted = feed.subscribe(request(include_meter_updates=True))
    await anext(opted)
    assert feed.wants_meter_updates()
    await opted.aclose()
    assert not feed.wants_meter_updates()
    opted = feed.subscribe(request(include_meter_updates=True))
    await anext(opted)
    await feed.close()
    assert not feed.wants_meter_updates()
    await plain.aclose()
    await opted.aclose()


async def test_meter_updates_are_not_replayed_and_never_make_a_gap() -> None:
    """A meter update is not a trim: resuming after one continues with the next trim, one that a
    lagging subscriber had not read when newer ones replaced it is skipped without a gap or a drop
    count, and the ring does not keep it for a resume."""
    feed = RingFeed(ring_size=1)
    stream = await started(feed, request(include_meter_updates=True))
    feed.publish_meter(meter("s1", 1))
    feed.publish_meter(meter("s1", 2))  # the subscriber has not read 1: 2 replaces it
    (first,) = await take(stream, 1)
    assert first.meter_update.meter.used_tokens == 2
    feed.publish(trimmed(1))
    (event,) = await take(stream, 1)
    assert turns([event]) == [1]
    resumed = feed.subscribe(
        request(after_cursor=first.meter_update.cursor, include_meter_updates=True)
    )
    assert turns(await take(resumed, 1)) == [1]  # the trim after it, and no meter replayed
    beat = feed.subscribe(request(after_cursor=event.event.cursor))
    (heartbeat,) = await take(beat, 1)
    assert heartbeat.heartbeat.dropped_events == 0
    await feed.close()


async def test_the_oldest_cursor_replays_everything_retained_without_a_gap() -> None:
    feed = RingFeed(ring_size=5)
    empty = await feed.oldest_cursor()
    assert empty == cursors.encode_ring(feed.epoch, 0)  # the head of an empty ring
    for i in range(1, 9):
        feed.publish(trimmed(i))
    stream = feed.subscribe(request(after_cursor=await feed.oldest_cursor()))
    # Events 1..3 were evicted before anyone asked: the backfill starts at what is retained.
    assert turns(await take(stream, 5)) == [4, 5, 6, 7, 8]
    feed.publish(trimmed(9))
    assert turns(await take(stream, 1)) == [9]
    await feed.close()


class Busy:
    """Unary calls that never pause (the edge's admission, as the feed sees it)."""

    def quiet_for(self) -> float:
        return 0.0

    async def wait_quiet(self, quiet: float, limit: float) -> None:
        await asyncio.sleep(limit)


async def test_while_calls_keep_coming_delivery_progresses_within_its_share() -> None:
    """Delivery gives way to calls but is never starved: under calls that never pause, each
    subscriber still gets every event, in order, at the pace of the share (issue 19)."""
    feed = RingFeed(ring_size=1000, calls=Busy())
    streams = [await started(feed, request()) for _ in range(5)]
    for i in range(100):
        feed.publish(trimmed(i))
    loop = asyncio.get_running_loop()
    began = loop.time()
    for stream in streams:
        assert turns(await take(stream, 100, limit_s=20)) == list(range(100))
    # 500 items at SHARE / ITEM_COST_S items per second, after the first round's burst.
    floor = (500 - 8) * ITEM_COST_S / SHARE
    assert loop.time() - began >= floor * 0.9
    await feed.close()


async def test_an_idle_subscriber_gets_its_heartbeat_while_others_lag() -> None:
    feed = RingFeed(ring_size=1000, calls=Busy())
    idle = await started(
        feed, request(session_ids=["quiet"], heartbeat_interval=duration_pb2.Duration(seconds=1))
    )
    lagging = [await started(feed, request()) for _ in range(20)]
    for i in range(200):  # 4,000 items: two seconds of the share
        feed.publish(trimmed(i))
    (beat,) = await take(idle, 1, limit_s=1.8)
    assert beat.HasField("heartbeat")
    for stream in lagging:
        assert turns(await take(stream, 200, limit_s=20)) == list(range(200))
    await feed.close()


async def read_deliveries(stream: AsyncIterator[Delivery], n: int) -> list[Delivery]:
    return [await asyncio.wait_for(anext(stream), 2.0) for _ in range(n)]


async def test_a_lapped_subscriber_gets_one_gap_then_events_it_can_still_receive() -> None:
    """A subscriber the ring laps resumes near the head: while it then reads one event per two
    published, it gets events, never another gap, until it has fallen behind by a whole ring
    again (resuming at the oldest retained event, the next publication evicts its next event)."""
    feed = RingFeed(ring_size=100)
    slow = await started(feed, request())
    published = 0
    for _ in range(300):
        published += 1
        feed.publish(trimmed(published))
    (gap, first) = await take(slow, 2)
    assert gap.gap.cause == events_pb2.GAP_CAUSE_SLOW_CONSUMER
    assert gap.gap.before_cursor == first.event.cursor
    assert turns([first]) == [published - resume_margin(100) + 1]
    kinds = []
    for _ in range(60):
        for _ in range(2):
            published += 1
            feed.publish(trimmed(published))
        (item,) = await take(slow, 1)
        kinds.append(item.WhichOneof("item"))
    assert kinds == ["event"] * 60
    await feed.close()


async def test_before_cursor_is_the_next_event_delivered_even_if_the_ring_evicts_it() -> None:
    """The event a gap names is the next one sent, with filters, even when the ring evicts it
    before the subscriber reads on."""
    feed = RingFeed(ring_size=8)
    slow = await started(feed, request(session_ids=["s1"]))
    for i in range(1, 20):
        feed.publish(trimmed(i, session="s1" if i % 3 == 0 else "s2"))
    (gap,) = await take(slow, 1)
    named = gap.gap.before_cursor
    assert named
    for i in range(20, 40):  # evicts the event the gap named
        feed.publish(trimmed(i, session="s2"))
    (after,) = await take(slow, 1)
    assert after.HasField("event") and after.event.cursor == named
    assert after.event.trimmed.caller.session_id == "s1"
    await feed.close()


async def test_batches_carry_the_same_items_in_the_same_order_as_single_items() -> None:
    feed = RingFeed(ring_size=1000)
    await feed.start()
    before = await feed.oldest_cursor()
    for i in range(1, 301):
        feed.publish(trimmed(i, session="s1" if i % 4 else "s2"))
    singles = feed.deliveries(request(after_cursor=before, session_ids=["s1"]))
    batched = feed.deliveries(request(after_cursor=before, session_ids=["s1"], max_batch_events=64))
    one_by_one = await read_deliveries(singles, 225)
    assert {len(d) for d in one_by_one} == {1}
    batches: list[Delivery] = []
    while sum(len(d) for d in batches) < 225:
        batches += await read_deliveries(batched, 1)
    assert max(len(d) for d in batches) == 64
    assert [item.message for d in batches for item in d] == [d[0].message for d in one_by_one]
    # On the wire, a batch is the message holding the same items, without encoding them again.
    wire = history_service_pb2.TrimEventsResponse.FromString(encode_delivery(batches[0]))
    assert list(wire.batch.items) == [item.message for item in batches[0]]
    await singles.aclose()
    await batched.aclose()
    await feed.close()


async def test_a_batch_holds_the_gap_and_the_event_it_names() -> None:
    feed = RingFeed(ring_size=100)
    stream = feed.deliveries(request(max_batch_events=1000))
    (opening,) = await read_deliveries(stream, 1)
    assert opening[0].message.HasField("heartbeat")
    for i in range(1, 1001):
        feed.publish(trimmed(i))
    (delivery,) = await read_deliveries(stream, 1)
    messages = [item.message for item in delivery]
    assert messages[0].gap.before_cursor == messages[1].event.cursor
    assert turns(messages[1:]) == list(range(1001 - resume_margin(100), 1001))
    await stream.aclose()
    await feed.close()


async def test_a_batch_stops_growing_once_it_holds_a_mebibyte() -> None:
    feed = RingFeed(ring_size=1000)
    await feed.start()
    before = await feed.oldest_cursor()
    for i in range(300):
        big = trimmed(i)
        big.caller.turn_id = f"{i}:" + "x" * 8000
        feed.publish(big)
    stream = feed.deliveries(request(after_cursor=before, max_batch_events=1000))
    (first,) = await read_deliveries(stream, 1)
    sizes = [len(item.encoded) for item in first]
    assert 1 < len(first) < 300
    assert sum(sizes[:-1]) < MAX_BATCH_BYTES <= sum(sizes)  # the item that crossed it is the last
    wire = history_service_pb2.TrimEventsResponse.FromString(encode_delivery(first))
    assert turns(list(wire.batch.items)) == list(range(len(first)))
    await stream.aclose()
    await feed.close()
