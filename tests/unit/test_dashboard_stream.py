"""The dashboard's SSE stream and routes on a plain aiohttp app over the in-process ring feed."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from turnkeeper.server.config import parse_config
from turnkeeper.server.edge.auth import TokenGrant, load_tokens
from turnkeeper.server.events import RingFeed
from turnkeeper.server.events import cursor as cursors
from turnkeeper.server.ops.dashboard import STATIC_DIR, add_dashboard_routes
from turnkeeper.server.ops.dashboard.access import COOKIE, DashboardAccess
from turnkeeper.server.ops.dashboard.routes import dashboard_routes_for, needs_login
from turnkeeper.server.ops.dashboard.stream import to_message
from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2


@dataclass
class Sse:
    event: str
    data: dict[str, object]
    id: str | None


async def read_messages(
    response: aiohttp.ClientResponse, n: int, limit_s: float = 3.0
) -> list[Sse]:
    """The next `n` SSE messages (comment lines such as pings skipped)."""

    async def run() -> list[Sse]:
        out: list[Sse] = []
        fields: dict[str, str] = {}
        while len(out) < n:
            raw = await response.content.readline()
            if not raw:
                raise AssertionError(f"stream ended after {len(out)} messages")
            line = raw.decode().rstrip("\r\n")
            if not line:
                if "data" in fields:
                    out.append(
                        Sse(
                            fields.get("event", "message"),
                            json.loads(fields["data"]),
                            fields.get("id"),
                        )
                    )
                fields = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                fields[key] = value
        return out

    return await asyncio.wait_for(run(), limit_s)


def trimmed(turns: int, session: str = "s1") -> trim_pb2.HistoryTrimmed:
    return trim_pb2.HistoryTrimmed(
        reason=trim_pb2.TRIM_REASON_TOKEN_BUDGET,
        dropped_turns=turns,
        dropped_messages=2 * turns,
        tokens_before=9000,
        tokens_after=4000,
        caller=trim_pb2.CallerContext(session_id=session, runtime_id="rt"),
    )


@pytest.fixture
async def feed() -> AsyncIterator[RingFeed]:
    ring = RingFeed(ring_size=100)
    yield ring
    await ring.close()


@pytest.fixture
async def client(feed: RingFeed) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = web.Application()
    add_dashboard_routes(app, feed)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


def test_each_feed_item_becomes_one_named_message_with_the_cursor_as_id() -> None:
    event = history_service_pb2.TrimEventsResponse(
        event=events_pb2.TrimEvent(cursor="tk1.abc", trimmed=trimmed(3))
    )
    message = to_message(event)
    assert (message.event, message.id) == ("trim", "tk1.abc")
    data = json.loads(message.data)
    assert data["trimmed"]["droppedTurns"] == 3
    assert data["trimmed"]["tokensBefore"] == "9000"  # uint64: a JSON string (protobuf JSON)
    beat = to_message(
        history_service_pb2.TrimEventsResponse(heartbeat=events_pb2.Heartbeat(cursor="tk1.h"))
    )
    assert (beat.event, beat.id) == ("heartbeat", "tk1.h")
    # An empty heartbeat cursor must not reset the browser's resume position.
    empty = to_message(history_service_pb2.TrimEventsResponse(heartbeat=events_pb2.Heartbeat()))
    assert empty.id is None
    gap = to_message(
        history_service_pb2.TrimEventsResponse(
            gap=events_pb2.Gap(cause=events_pb2.GAP_CAUSE_RESTART, after_cursor="tk1.x")
        )
    )
    meter = to_message(
        history_service_pb2.TrimEventsResponse(
            meter_update=events_pb2.MeterUpdate(
                cursor="tk1.m",
                caller=trim_pb2.CallerContext(session_id="s9"),
                meter=trim_pb2.ContextMeter(used_tokens=1200, budget_tokens=3000),
            )
        )
    )
    assert (meter.event, meter.id) == ("meter", "tk1.m")
    # spec §10.5: no capacity field at all when the capacity is unknown.
    assert json.loads(meter.data)["meter"] == {"usedTokens": "1200", "budgetTokens": "3000"}
    assert (gap.event, gap.id) == ("gap", None)
    assert json.loads(gap.data) == {"cause": "GAP_CAUSE_RESTART", "afterCursor": "tk1.x"}


async def test_stream_opens_with_a_heartbeat_then_carries_live_trims(
    client: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    async with client.get("/dashboard/events") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        (opening,) = await read_messages(response, 1)
        assert opening.event == "heartbeat"
        assert opening.id == cursors.encode_ring(feed.epoch, 0)
        feed.publish(trimmed(1))
        feed.publish(trimmed(2))
        first, second = await read_messages(response, 2)
    assert [m.event for m in (first, second)] == ["trim", "trim"]
    assert first.id == cursors.encode_ring(feed.epoch, 1)
    assert second.data["trimmed"]["droppedTurns"] == 2  # type: ignore[index]


async def test_last_event_id_resumes_after_the_cursor_without_loss(
    client: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    for turns in (1, 2, 3):
        feed.publish(trimmed(turns))
    after_first = cursors.encode_ring(feed.epoch, 1)
    async with client.get("/dashboard/events", headers={"Last-Event-ID": after_first}) as response:
        replayed = await read_messages(response, 2)
    assert [m.data["trimmed"]["droppedTurns"] for m in replayed] == [2, 3]  # type: ignore[index]
    assert replayed[-1].id == cursors.encode_ring(feed.epoch, 3)


async def test_the_browsers_last_event_id_wins_over_the_after_parameter(
    client: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    for turns in (1, 2, 3):
        feed.publish(trimmed(turns))
    url = f"/dashboard/events?after={cursors.encode_ring(feed.epoch, 1)}"
    async with client.get(url) as response:
        by_query = await read_messages(response, 1)
    headers = {"Last-Event-ID": cursors.encode_ring(feed.epoch, 2)}
    async with client.get(url, headers=headers) as response:
        by_header = await read_messages(response, 1)
    assert by_query[0].data["trimmed"]["droppedTurns"] == 2  # type: ignore[index]
    assert by_header[0].data["trimmed"]["droppedTurns"] == 3  # type: ignore[index]


async def test_cursor_of_an_earlier_run_shows_a_restart_gap_then_what_is_retained(
    client: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    feed.publish(trimmed(7))
    earlier = cursors.encode_ring("0123456789abcdef", 41)
    async with client.get("/dashboard/events", headers={"Last-Event-ID": earlier}) as response:
        gap, event = await read_messages(response, 2)
    assert gap.event == "gap"
    assert gap.data == {
        "cause": "GAP_CAUSE_RESTART",
        "afterCursor": earlier,
        "beforeCursor": event.id,
    }
    assert event.data["trimmed"]["droppedTurns"] == 7  # type: ignore[index]


async def test_unreadable_cursor_is_shown_as_a_gap_of_unknown_size_then_a_live_tail(
    client: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    feed.publish(trimmed(1))  # before the subscription: not replayed, the position is unknown
    async with client.get("/dashboard/events?after=garbage") as response:
        assert response.status == 200
        gap, beat = await read_messages(response, 2)
        feed.publish(trimmed(2))
        (live,) = await read_messages(response, 1)
    assert gap.event == "gap" and gap.data == {
        "cause": "GAP_CAUSE_RESTART",
        "afterCursor": "garbage",
    }
    assert beat.event == "heartbeat"
    assert live.data["trimmed"]["droppedTurns"] == 2  # type: ignore[index]


async def test_closing_the_feed_ends_the_stream_and_new_streams_are_refused(
    client: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    async with client.get("/dashboard/events") as response:
        await read_messages(response, 1)
        await feed.close()
        rest = await asyncio.wait_for(response.content.read(), 2.0)
        assert b"event: trim" not in rest
    async with client.get("/dashboard/events") as refused:
        assert refused.status == 503


async def test_a_page_that_leaves_unregisters_its_subscription(
    client: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    async with client.get("/dashboard/events") as response:
        await read_messages(response, 1)
        assert feed.subscribers == 1
    # The next write (a trim here; an idle stream's heartbeat within 5 s) notices the closed socket.
    deadline = asyncio.get_running_loop().time() + 3.0
    while feed.subscribers and asyncio.get_running_loop().time() < deadline:
        feed.publish(trimmed(1))
        await asyncio.sleep(0.05)
    assert not feed.subscribers


async def test_page_and_assets_are_served_with_a_strict_content_security_policy(
    client: TestClient[web.Request, web.Application],
) -> None:
    async with client.get("/") as page:
        assert page.status == 200
        assert page.content_type == "text/html"
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
        html = await page.text()
    assert 'src="dashboard/static/vendor/chart.umd.min.js"' in html
    for asset in (
        "dashboard.js",
        "dashboard.css",
        "vendor/chart.umd.min.js",
        "vendor/chart.js.LICENSE.md",
    ):
        async with client.get(f"/dashboard/static/{asset}") as response:
            assert response.status == 200, asset
            assert await response.read() == (STATIC_DIR / asset).read_bytes()


TOKENS = {
    "watcher": TokenGrant(
        token="w-f6970cd7033b3127607c969b21cccf68", runtime_id="*", read_all_runtimes=True
    ),
    "runtime": TokenGrant(
        token="r-18a2fbc930028b3aa483a16994deb255", runtime_id="rt-1", trim_events=False
    ),
    "reader": TokenGrant(token="o-5c1e0a9b7d3f42e6a8b1c9d0e7f6a5b4", runtime_id="rt-2"),
}


@pytest.fixture
async def guarded(
    feed: RingFeed, tmp_path: Path
) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    token_file = tmp_path / "tokens.toml"
    token_file.write_text(
        "".join(
            f'[[tokens]]\ntoken = "{g.token}"\nruntime_id = "{g.runtime_id}"\n'
            f"trim_events = {str(g.trim_events).lower()}\n"
            f"read_all_runtimes = {str(g.read_all_runtimes).lower()}\n"
            for g in TOKENS.values()
        )
    )
    app = web.Application()
    add_dashboard_routes(app, feed, DashboardAccess(load_tokens(str(token_file))))
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def test_without_token_auth_the_stream_needs_no_login(
    client: TestClient[web.Request, web.Application],
) -> None:
    async with client.get("/dashboard/session") as response:
        assert await response.json() == {"loginRequired": False, "signedIn": True, "runtime": None}


async def test_with_token_auth_the_stream_needs_a_session_opened_with_a_trim_events_token(
    guarded: TestClient[web.Request, web.Application],
) -> None:
    async with guarded.get("/dashboard/session") as response:
        assert await response.json() == {"loginRequired": True, "signedIn": False, "runtime": None}
    async with guarded.get("/dashboard/events") as response:
        assert response.status == 401
    bearer = {"Authorization": "Bearer " + "x" * 24}
    async with guarded.post("/dashboard/session", headers=bearer) as response:
        assert response.status == 401
    bearer = {"Authorization": f"Bearer {TOKENS['runtime'].token}"}
    async with guarded.post("/dashboard/session", headers=bearer) as response:
        assert response.status == 403  # the same rule as gRPC TrimEvents: trim_events = false
    async with guarded.get("/dashboard/events") as response:
        assert response.status == 401
    bearer = {"Authorization": f"Bearer {TOKENS['watcher'].token}"}
    async with guarded.post("/dashboard/session", headers=bearer) as response:
        assert response.status == 204
        cookie = response.cookies[COOKIE]
        assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["secure"]
        assert TOKENS["watcher"].token not in cookie.value
    # What a browser sends back (aiohttp's client keeps Secure cookies for https only).
    session = {"Cookie": f"{COOKIE}={cookie.value}"}
    async with guarded.get("/dashboard/session", headers=session) as response:
        assert await response.json() == {"loginRequired": True, "signedIn": True, "runtime": None}
    async with guarded.get("/dashboard/events", headers=session) as response:
        assert response.status == 200
        (opening,) = await read_messages(response, 1)
        assert opening.event == "heartbeat"


async def test_a_session_sees_only_what_its_token_may_read(
    guarded: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    """A token bound to rt-2 opens a session that streams rt-2's items only; the fleet-wide
    reader's session streams every runtime's."""

    def of(runtime: str, turns: int) -> trim_pb2.HistoryTrimmed:
        item = trimmed(turns)
        item.caller.runtime_id = runtime
        return item

    streams = {}
    for name in ("reader", "watcher"):
        bearer = {"Authorization": f"Bearer {TOKENS[name].token}"}
        async with guarded.post("/dashboard/session", headers=bearer) as response:
            assert response.status == 204
            session = {"Cookie": f"{COOKIE}={response.cookies[COOKIE].value}"}
        async with guarded.get("/dashboard/session", headers=session) as response:
            assert (await response.json())["runtime"] == ("rt-2" if name == "reader" else None)
        response = await guarded.get("/dashboard/events", headers=session)
        assert (await read_messages(response, 1))[0].event == "heartbeat"
        streams[name] = response
    try:
        feed.publish(of("rt-1", 1))
        feed.publish(of("rt-2", 2))
        feed.publish(of("rt-1", 3))
        feed.publish(of("rt-2", 4))
        seen = {
            name: [m.data["trimmed"]["droppedTurns"] for m in await read_messages(r, n)]  # type: ignore[index]
            for (name, r), n in zip(streams.items(), (2, 4), strict=True)
        }
    finally:
        for response in streams.values():
            response.close()
    assert seen == {"reader": [2, 4], "watcher": [1, 2, 3, 4]}


def test_login_is_required_only_off_loopback_and_with_token_auth(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = str(tmp_path / "tokens.toml")
    assert not needs_login(parse_config(["--http", "127.0.0.1:0", "--auth-tokens", tokens]))
    assert not needs_login(parse_config(["--http", "[::1]:0", "--auth-tokens", tokens]))
    assert not needs_login(parse_config(["--http", "localhost:0", "--auth-tokens", tokens]))
    assert needs_login(parse_config(["--http", "0.0.0.0:0", "--auth-tokens", tokens]))
    exposed = parse_config(["--http", "0.0.0.0:0"])
    assert not needs_login(exposed)
    with caplog.at_level(logging.WARNING):
        dashboard_routes_for(exposed)
    assert "set --auth-tokens" in caplog.text


async def test_a_page_that_opens_is_backfilled_from_the_ring_then_follows_live(
    client: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    for turns in (1, 2, 3):
        feed.publish(trimmed(turns))
    async with client.get("/dashboard/events") as response:
        backfill = await read_messages(response, 3)
        feed.publish(trimmed(4))
        (live,) = await read_messages(response, 1)
    # One subscription from just before the oldest retained event: nothing lost, nothing twice.
    assert [m.event for m in backfill] == ["trim"] * 3
    assert [m.id for m in [*backfill, live]] == [
        cursors.encode_ring(feed.epoch, n) for n in (1, 2, 3, 4)
    ]
    # Each trim carries the session's state, counted over the backfill too: these trims were of
    # a history that already had a breadcrumb, so each dropped turns on top of the last.
    state = live.data["dashboard"]["session"]  # type: ignore[index]
    assert state["trimEvents"] == 4 and state["droppedTurns"] == 10  # type: ignore[index]


async def test_a_backfill_starts_at_the_oldest_event_the_ring_still_holds() -> None:
    ring = RingFeed(ring_size=2)
    app = web.Application()
    add_dashboard_routes(app, ring)
    try:
        for turns in (1, 2, 3):
            ring.publish(trimmed(turns))
        async with (
            TestClient(TestServer(app)) as test_client,
            test_client.get("/dashboard/events") as response,
        ):
            first, second = await read_messages(response, 2)
        # The evicted event is older than the page: no gap is shown for it.
        assert (first.event, second.event) == ("trim", "trim")
        assert first.data["trimmed"]["droppedTurns"] == 2  # type: ignore[index]
    finally:
        await ring.close()


async def test_a_resumed_page_keeps_its_counts_without_being_sent_the_events_again(
    client: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    full = trimmed(5)
    full.breadcrumb_inserted = True
    for _ in range(3):  # a resent history trimmed at the same row, three calls in a row
        feed.publish(full)
    resume = cursors.encode_ring(feed.epoch, 2)
    async with client.get("/dashboard/events", headers={"Last-Event-ID": resume}) as response:
        (third,) = await read_messages(response, 1)
    assert third.id == cursors.encode_ring(feed.epoch, 3)
    state = third.data["dashboard"]["session"]  # type: ignore[index]
    assert state["trimEvents"] == 3  # the two before the cursor were read, not sent
    assert state["cutMoves"] == 1 and state["droppedTurns"] == 5  # type: ignore[index]


async def test_meter_messages_carry_the_sessions_recent_calls(
    client: TestClient[web.Request, web.Application], feed: RingFeed
) -> None:
    async with client.get("/dashboard/events") as response:
        await read_messages(response, 1)  # the opening heartbeat
        feed.publish(trimmed(2, session="m"))
        feed.publish_meter(events_pb2.MeterUpdate(caller=trim_pb2.CallerContext(session_id="m")))
        _, meter = await read_messages(response, 2)
    assert meter.event == "meter"
    state = meter.data["dashboard"]["session"]  # type: ignore[index]
    assert (state["recentCalls"], state["recentCutMoves"]) == (1, 1)  # type: ignore[index]
