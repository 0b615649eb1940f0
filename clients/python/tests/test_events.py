"""TrimEvents through watch_trims: live tail, resume from a cursor, automatic reconnect."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import grpc
import pytest
from turnkeeper.v1 import history_service_pb2 as svc

from turnkeeper_client import (
    AsyncTurnkeeperClient,
    Backoff,
    TrimWatch,
    TurnkeeperClient,
    TurnkeeperError,
)

from .conftest import Endpoints
from .helpers import budget_trim
from .proxy import CuttableProxy

FAST = Backoff(initial=0.05, maximum=0.5)


def _kind(item: svc.TrimEventsResponse) -> str | None:
    return item.WhichOneof("item")


def test_subscribe_then_resume_after_disconnect(client: TurnkeeperClient) -> None:
    session = uuid.uuid4().hex
    watch = client.watch_trims(session_ids=[session], heartbeat_interval=1.0)
    # The heartbeat that answers a new subscription proves it is registered: no event is missed.
    assert _kind(next(watch)) == "heartbeat"
    first = client.trim_history(budget_trim(session))
    assert first.outcome.trimmed and first.HasField("history_trimmed")
    item = next(watch)
    assert _kind(item) == "event"
    assert item.event.trimmed == first.history_trimmed
    assert watch.cursor == item.event.cursor
    cursor = watch.cursor
    watch.close()
    assert list(watch) == []

    second = client.trim_history(budget_trim(session, budget=200))
    with client.watch_trims(
        session_ids=[session], after_cursor=cursor, heartbeat_interval=1.0
    ) as resumed:
        item = next(resumed)
        assert _kind(item) == "event"
        assert item.event.trimmed == second.history_trimmed
        assert item.event.cursor != cursor
        # Exactly the new event: what follows is an idle heartbeat naming it.
        after = next(resumed)
        assert _kind(after) == "heartbeat"
        assert after.heartbeat.cursor == item.event.cursor


async def test_async_subscribe_then_resume(unix_aclient: AsyncTurnkeeperClient) -> None:
    session = uuid.uuid4().hex
    async with unix_aclient.watch_trims(session_ids=[session], heartbeat_interval=1.0) as watch:
        assert _kind(await anext(watch)) == "heartbeat"
        first = await unix_aclient.trim_history(budget_trim(session))
        item = await anext(watch)
        assert item.event.trimmed == first.history_trimmed
        cursor = watch.cursor
    second = await unix_aclient.trim_history(budget_trim(session, budget=200))
    async with unix_aclient.watch_trims(
        session_ids=[session], after_cursor=cursor, heartbeat_interval=1.0
    ) as resumed:
        item = await anext(resumed)
        assert item.event.trimmed == second.history_trimmed
        assert _kind(await anext(resumed)) == "heartbeat"


def _events_until_idle(watch: TrimWatch, beats: int = 2) -> list[svc.TrimEventsResponse]:
    """The events read before `beats` idle heartbeats in a row (a 10 s guard closes the watch)."""
    guard = threading.Timer(10.0, watch.close)
    guard.start()
    events: list[svc.TrimEventsResponse] = []
    idle = 0
    try:
        for item in watch:
            if _kind(item) == "event":
                events.append(item)
                idle = 0
            else:
                idle += 1
                if idle >= beats:
                    break
    finally:
        guard.cancel()
    return events


def test_wait_subscribed_then_trim_at_once_never_misses_the_trim(client: TurnkeeperClient) -> None:
    """docs/events.md: the server answers a subscription once it is registered; wait_subscribed
    returns only after that answer, so a trim made right after it (no sleep) is delivered."""
    for _ in range(5):
        session = uuid.uuid4().hex
        with client.watch_trims(
            session_ids=[session], heartbeat_interval=1.0
        ).wait_subscribed() as watch:
            trimmed = client.trim_history(budget_trim(session))
            # The held answer's cursor counts only once it is handed out.
            assert watch.cursor == ""
            first = next(watch)
            assert _kind(first) == "heartbeat"  # the answer that proved the registration
            assert first.heartbeat.cursor and watch.cursor == first.heartbeat.cursor
            events = _events_until_idle(watch, beats=1)
        assert [e.event.trimmed for e in events] == [trimmed.history_trimmed]


async def test_async_wait_subscribed_then_trim_at_once_never_misses_the_trim(
    aclient: AsyncTurnkeeperClient,
) -> None:
    """docs/events.md: the async wait_subscribed returns once the server registered the
    subscription; a trim right after it (no sleep) is delivered."""
    for _ in range(5):
        session = uuid.uuid4().hex
        watch = await aclient.watch_trims(
            session_ids=[session], heartbeat_interval=1.0
        ).wait_subscribed()
        async with watch:
            trimmed = await aclient.trim_history(budget_trim(session))
            assert _kind(await asyncio.wait_for(anext(watch), 5)) == "heartbeat"
            item = await asyncio.wait_for(anext(watch), 5)
            assert _kind(item) == "event"
            assert item.event.trimmed == trimmed.history_trimmed


def test_wait_subscribed_resuming_yields_the_owed_event_first(client: TurnkeeperClient) -> None:
    """A resumed subscription is answered by its replay: the owed event is the first item."""
    session = uuid.uuid4().hex
    with client.watch_trims(
        session_ids=[session], heartbeat_interval=1.0
    ).wait_subscribed() as watch:
        assert _kind(next(watch)) == "heartbeat"
        cursor = watch.cursor
    owed = client.trim_history(budget_trim(session))
    with client.watch_trims(
        session_ids=[session], after_cursor=cursor, heartbeat_interval=1.0
    ).wait_subscribed() as resumed:
        # Persisting the cursor now must not skip the held event.
        assert resumed.cursor == cursor
        first = next(resumed)
        assert _kind(first) == "event"
        assert first.event.trimmed == owed.history_trimmed
        assert resumed.cursor == first.event.cursor


def test_wait_subscribed_times_out_when_the_server_never_answers(endpoints: Endpoints) -> None:
    with (
        CuttableProxy(endpoints.address) as proxy,
        TurnkeeperClient.connect(proxy.address) as via_proxy,
    ):
        proxy.cut()
        began = time.monotonic()
        with pytest.raises(TurnkeeperError) as caught:
            via_proxy.watch_trims(backoff=FAST).wait_subscribed(timeout=0.5)
        assert time.monotonic() - began < 5
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_async_wait_subscribed_times_out_when_the_server_never_answers(
    endpoints: Endpoints,
) -> None:
    with CuttableProxy(endpoints.address) as proxy:
        proxy.cut()
        async with AsyncTurnkeeperClient.connect(proxy.address) as via_proxy:
            with pytest.raises(TurnkeeperError) as caught:
                await via_proxy.watch_trims(backoff=FAST).wait_subscribed(timeout=0.5)
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_wait_subscribed_raises_the_subscription_error(client: TurnkeeperClient) -> None:
    with pytest.raises(TurnkeeperError) as caught:
        client.watch_trims(after_cursor="not-a-cursor").wait_subscribed()
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.fields == {"after_cursor"}


def test_reconnects_and_resumes_after_the_connection_drops(
    endpoints: Endpoints, client: TurnkeeperClient
) -> None:
    session = uuid.uuid4().hex
    disconnects: list[TurnkeeperError | None] = []
    with (
        CuttableProxy(endpoints.address) as proxy,
        TurnkeeperClient.connect(proxy.address) as via_proxy,
    ):
        watch = via_proxy.watch_trims(
            session_ids=[session],
            heartbeat_interval=1.0,
            backoff=FAST,
            on_disconnect=lambda error, _delay: disconnects.append(error),
        )
        assert _kind(next(watch)) == "heartbeat"
        first = client.trim_history(budget_trim(session))
        assert next(watch).event.trimmed == first.history_trimmed

        # Published while the watcher is cut off: it must arrive after the reconnect.
        proxy.cut()
        second = client.trim_history(budget_trim(session, budget=200))
        threading.Timer(0.5, proxy.restore).start()
        items = [next(watch), next(watch)]
        watch.close()
    assert [_kind(i) for i in items] == ["event", "heartbeat"]
    assert items[0].event.trimmed == second.history_trimmed
    assert disconnects, "the watcher never saw the disconnect"
    assert all(e is None or e.code == grpc.StatusCode.UNAVAILABLE for e in disconnects)


async def test_async_reconnects_after_the_connection_drops(
    endpoints: Endpoints, client: TurnkeeperClient
) -> None:
    session = uuid.uuid4().hex
    with CuttableProxy(endpoints.address) as proxy:
        async with (
            AsyncTurnkeeperClient.connect(proxy.address) as via_proxy,
            via_proxy.watch_trims(
                session_ids=[session], heartbeat_interval=1.0, backoff=FAST
            ) as watch,
        ):
            assert _kind(await anext(watch)) == "heartbeat"
            first = client.trim_history(budget_trim(session))
            assert (await anext(watch)).event.trimmed == first.history_trimmed
            proxy.cut()
            second = client.trim_history(budget_trim(session, budget=200))
            threading.Timer(0.5, proxy.restore).start()
            item = await anext(watch)
            assert item.event.trimmed == second.history_trimmed
            assert _kind(await anext(watch)) == "heartbeat"


def test_gives_up_after_max_attempts(endpoints: Endpoints) -> None:
    with (
        CuttableProxy(endpoints.address) as proxy,
        TurnkeeperClient.connect(proxy.address) as via_proxy,
    ):
        proxy.cut()
        watch = via_proxy.watch_trims(backoff=Backoff(initial=0.01, max_attempts=2))
        with pytest.raises(TurnkeeperError) as caught:
            next(watch)
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE


def test_bad_cursor_is_not_retried(client: TurnkeeperClient) -> None:
    watch = client.watch_trims(after_cursor="not-a-cursor", backoff=FAST)
    with pytest.raises(TurnkeeperError) as caught:
        next(watch)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.reason == "ERROR_REASON_INVALID_SUBSCRIPTION"
    assert caught.value.fields == {"after_cursor"}


def test_live_tail_resumes_from_the_immediate_heartbeat_after_a_disconnect(
    endpoints: Endpoints, client: TurnkeeperClient
) -> None:
    """A live tail is answered at once with a heartbeat naming its resume position, so a
    disconnect before any event still resumes without loss (and without repeats)."""
    session = uuid.uuid4().hex
    with (
        CuttableProxy(endpoints.address) as proxy,
        TurnkeeperClient.connect(proxy.address) as via_proxy,
    ):
        watch = via_proxy.watch_trims(session_ids=[session], heartbeat_interval=1.0, backoff=FAST)
        began = time.monotonic()
        beat = next(watch)
        assert _kind(beat) == "heartbeat"
        assert time.monotonic() - began < 0.8  # at once, not after the interval
        assert beat.heartbeat.cursor and watch.cursor == beat.heartbeat.cursor

        proxy.cut()  # before any event reached the watcher
        trimmed = client.trim_history(budget_trim(session))
        threading.Timer(0.5, proxy.restore).start()
        items = [next(watch), next(watch)]
        watch.close()
    assert [_kind(i) for i in items] == ["event", "heartbeat"]
    assert items[0].event.trimmed == trimmed.history_trimmed
    # Exactly once: what follows the event is an idle heartbeat naming it.
    assert items[1].heartbeat.cursor == items[0].event.cursor


def _first_heartbeat(watch: TrimWatch) -> svc.TrimEventsResponse:
    """The heartbeat that answers a new subscription; a 5 s guard closes the watch otherwise."""
    guard = threading.Timer(5.0, watch.close)
    guard.start()
    try:
        first = next(watch, None)
    finally:
        guard.cancel()
    assert first is not None and _kind(first) == "heartbeat", "no immediate heartbeat"
    return first


def test_close_from_another_thread_ends_a_blocked_iteration(client: TurnkeeperClient) -> None:
    watch = client.watch_trims(session_ids=[uuid.uuid4().hex], heartbeat_interval=300.0)
    _first_heartbeat(watch)
    # Nothing else is owed for 300 s: the next read blocks until close() ends it.
    threading.Timer(0.3, watch.close).start()
    assert list(watch) == []


async def test_async_aclose_from_another_task_ends_iteration(
    aclient: AsyncTurnkeeperClient,
) -> None:
    watch = aclient.watch_trims(session_ids=[uuid.uuid4().hex], heartbeat_interval=300.0)
    assert _kind(await asyncio.wait_for(anext(watch), 5)) == "heartbeat"

    async def consume() -> list[svc.TrimEventsResponse]:
        return [item async for item in watch]

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0.3)
    await watch.aclose()
    assert await asyncio.wait_for(consumer, 5) == []


async def test_cancelling_the_consumer_propagates(aclient: AsyncTurnkeeperClient) -> None:
    watch = aclient.watch_trims(session_ids=[uuid.uuid4().hex], heartbeat_interval=300.0)
    assert _kind(await asyncio.wait_for(anext(watch), 5)) == "heartbeat"
    consumer = asyncio.create_task(anext(watch))  # blocks: nothing else is owed for 300 s
    await asyncio.sleep(0.3)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    await watch.aclose()


def test_batched_subscription_yields_the_same_single_items(client: TurnkeeperClient) -> None:
    """With `max_batch_events`, the server may send several items in one message; the watch
    unpacks them, so its user sees the items one by one, as without batches."""
    session = uuid.uuid4().hex
    with client.watch_trims(session_ids=[session]) as first:
        opening = next(first)
    start = opening.heartbeat.cursor
    trims = [client.trim_history(budget_trim(session, budget=100 + i)) for i in range(20)]
    with client.watch_trims(
        session_ids=[session], after_cursor=start, max_batch_events=50, heartbeat_interval=1.0
    ) as watch:
        items = []
        for item in watch:
            assert _kind(item) in ("event", "heartbeat")
            if _kind(item) == "heartbeat":
                break
            items.append(item)
    assert [item.event.trimmed for item in items] == [t.history_trimmed for t in trims]
    assert watch.cursor == items[-1].event.cursor


async def test_async_batched_subscription_yields_the_same_single_items(
    unix_aclient: AsyncTurnkeeperClient,
) -> None:
    session = uuid.uuid4().hex
    async with unix_aclient.watch_trims(session_ids=[session]) as first:
        start = (await anext(first)).heartbeat.cursor
    trims = [
        await unix_aclient.trim_history(budget_trim(session, budget=100 + i)) for i in range(20)
    ]
    async with unix_aclient.watch_trims(
        session_ids=[session], after_cursor=start, max_batch_events=50, heartbeat_interval=1.0
    ) as watch:
        items = []
        async for item in watch:
            if _kind(item) != "event":
                break
            items.append(item)
    assert [item.event.trimmed for item in items] == [t.history_trimmed for t in trims]
