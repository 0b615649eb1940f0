"""TrimEvents against a real sidecar process (ring-buffer feed), through the generated stubs."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from turnkeeper.v1 import events_pb2, history_pb2, history_service_pb2_grpc, profile_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

Item = svc.TrimEventsResponse
Stub = history_service_pb2_grpc.HistoryServiceStub


def history(turns: int, size: int = 400) -> history_pb2.History:
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="system")]
    for i in range(turns):
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"q{i} " * size))
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content="answer"))
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def caller(session: str, runtime: str = "rt-1", turn: str = "turn-1") -> trim_pb2.CallerContext:
    return trim_pb2.CallerContext(
        session_id=session, runtime_id=runtime, agent_id="agent-7", turn_id=turn
    )


def budget_trim(who: trim_pb2.CallerContext, budget: int = 1500) -> svc.TrimHistoryRequest:
    return svc.TrimHistoryRequest(
        history=history(6),
        mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
        caller_path=trim_pb2.CALLER_PATH_AGENT,
        explicit_limits=svc.ExplicitLimits(budget_tokens=budget),
        caller=who,
    )


def turn_trim(
    who: trim_pb2.CallerContext, limit: int = 2, path: int = trim_pb2.CALLER_PATH_AGENT
) -> svc.TrimHistoryRequest:
    return svc.TrimHistoryRequest(
        history=history(6, size=2),
        mode=trim_pb2.TRIM_MODE_TURN_COUNT,
        caller_path=path,  # type: ignore[arg-type]
        explicit_limits=svc.ExplicitLimits(max_history_messages=limit),
        caller=who,
    )


def session() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


class Watch:
    """A TrimEvents call pumped into a queue by a task, so waits with a timeout never cancel the
    call itself (cancelling a pending read of a grpc.aio stream ends the stream)."""

    def __init__(self, stub: Stub, request: svc.TrimEventsRequest, *, pump: bool = True) -> None:
        self.call = stub.TrimEvents(request)
        self.items: asyncio.Queue[Item | BaseException] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        if pump:
            self.start()

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        try:
            async for item in self.call:
                self.items.put_nowait(item)
        except BaseException as error:  # surfaced by take()
            self.items.put_nowait(error)
            raise

    async def take(
        self, n: int, limit_s: float = 10.0, heartbeats: bool = False, markers: bool = False
    ) -> list[Item]:
        """The next n items (heartbeats and Watch.open markers skipped unless asked for)."""

        async def run() -> list[Item]:
            got: list[Item] = []
            while len(got) < n:
                item = await self.items.get()
                if isinstance(item, BaseException):
                    raise item
                if item.HasField("heartbeat") and not heartbeats:
                    continue
                if item.event.trimmed.caller.turn_id == "marker" and not markers:
                    continue
                got.append(item)
            return got

        return await asyncio.wait_for(run(), limit_s)

    @classmethod
    async def open(cls, stub: Stub, **fields: Any) -> tuple[Watch, Item]:
        """A subscription known to be live: a live tail starts "from now" on the server, which
        the client cannot observe, so trim with a marker (turn id "marker", matching the
        filters) until one arrives. take() skips markers."""
        request = svc.TrimEventsRequest(**fields)
        watch = cls(stub, request)
        who = caller(
            request.session_ids[0] if request.session_ids else "marker-session",
            request.runtime_ids[0] if request.runtime_ids else "rt-1",
            turn="marker",
        )
        reasons = set(request.reasons)
        marker = (
            turn_trim(who)
            if reasons and trim_pb2.TRIM_REASON_TOKEN_BUDGET not in reasons
            else budget_trim(who)
        )
        deadline = time.monotonic() + 10
        while True:
            await stub.TrimHistory(marker)
            try:
                (first,) = await watch.take(1, limit_s=0.5, markers=True)
                return watch, first
            except TimeoutError:
                assert time.monotonic() < deadline, "subscription never went live"

    async def close(self) -> None:
        self.call.cancel()
        if self.task is not None:
            with contextlib.suppress(BaseException):
                await self.task


@pytest.fixture
async def stub(live_server: Any) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(live_server.address) as channel:
        yield history_service_pb2_grpc.HistoryServiceStub(channel)


async def test_budget_trim_event_carries_what_the_caller_got(stub: Stub) -> None:
    s = session()
    watch, _ = await Watch.open(stub, session_ids=[s])
    before = time.time()
    response = await stub.TrimHistory(budget_trim(caller(s, turn="t-42")))
    (item,) = await watch.take(1)
    event = item.event
    assert response.history_trimmed.dropped_turns > 0
    assert event.trimmed == response.history_trimmed
    t = event.trimmed
    assert t.reason == trim_pb2.TRIM_REASON_TOKEN_BUDGET
    assert not t.overflow_recovery
    assert t.caller == caller(s, turn="t-42")
    assert t.budget_tokens == 1500 and t.target_tokens == 1500
    assert (t.dropped_messages, t.dropped_turns, t.kept_turns) == (
        response.outcome.dropped_messages,
        response.outcome.dropped_turns,
        response.outcome.kept_turns,
    )
    assert t.tokens_before == response.outcome.tokens_before > t.tokens_after
    assert t.breadcrumb_inserted
    assert event.cursor
    assert before - 1 <= event.time.seconds + event.time.nanos / 1e9 <= time.time() + 1
    await watch.close()


async def test_turn_limit_and_overflow_recovery_events(stub: Stub) -> None:
    s = session()
    watch, _ = await Watch.open(stub, session_ids=[s])
    count = await stub.TrimHistory(turn_trim(caller(s, turn="count"), limit=2))
    recovery = await stub.TrimHistory(
        svc.TrimHistoryRequest(
            history=history(6),
            mode=trim_pb2.TRIM_MODE_OVERFLOW_RECOVERY,
            caller_path=trim_pb2.CALLER_PATH_AGENT,
            explicit_limits=svc.ExplicitLimits(),
            caller=caller(s, turn="recovery"),
        )
    )
    first, second = (i.event.trimmed for i in await watch.take(2))
    assert first == count.history_trimmed
    assert first.reason == trim_pb2.TRIM_REASON_TURN_LIMIT
    assert first.turn_limit == 2 and first.kept_turns == 2 and first.dropped_turns == 4
    assert second == recovery.history_trimmed
    assert second.reason == trim_pb2.TRIM_REASON_TOKEN_BUDGET
    assert second.overflow_recovery
    assert second.target_tokens == second.tokens_before * 2 // 3
    await watch.close()


async def test_event_with_profiles_carries_route_capacity_and_budget(stub: Stub) -> None:
    s = session()
    watch, _ = await Watch.open(stub, session_ids=[s])
    profiles = profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(max_context_tokens=1200, default_provider="acme"),
        providers=[profile_pb2.ProviderProfile(alias="acme", model="m-1", context_window=8000)],
    )
    response = await stub.TrimHistory(
        svc.TrimHistoryRequest(
            history=history(6),
            mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
            caller_path=trim_pb2.CALLER_PATH_AGENT,
            profiles=profiles,
            caller=caller(s),
        )
    )
    (item,) = await watch.take(1)
    t = item.event.trimmed
    assert t == response.history_trimmed
    assert (t.route.provider, t.route.model) == ("acme", "m-1")
    assert t.capacity.HasField("model_context_window") or t.capacity.safety_tokens > 0
    assert t.budget_tokens == 1200
    await watch.close()


async def test_no_event_for_untrimmed_calls_or_the_legacy_path(stub: Stub) -> None:
    s = session()
    watch, _ = await Watch.open(stub, session_ids=[s])
    untrimmed = await stub.TrimHistory(turn_trim(caller(s, turn="untrimmed"), limit=50))
    legacy = await stub.TrimHistory(
        turn_trim(caller(s, turn="legacy"), limit=1, path=trim_pb2.CALLER_PATH_LEGACY_LOOP)
    )
    budget_zero = await stub.TrimHistory(budget_trim(caller(s, turn="zero"), budget=0))
    assert not untrimmed.outcome.trimmed and not budget_zero.outcome.trimmed
    assert legacy.outcome.trimmed and not legacy.HasField("history_trimmed")
    await stub.TrimHistory(budget_trim(caller(s, turn="sentinel")))
    (item,) = await watch.take(1)
    assert item.event.trimmed.caller.turn_id == "sentinel"
    await watch.close()


async def test_filters_by_session_runtime_and_reason(stub: Stub) -> None:
    s = session()
    by_runtime, _ = await Watch.open(stub, runtime_ids=["rt-b"])
    by_reason, _ = await Watch.open(
        stub, session_ids=[s], reasons=[trim_pb2.TRIM_REASON_TURN_LIMIT]
    )
    await stub.TrimHistory(budget_trim(caller(s, runtime="rt-a", turn="1")))
    await stub.TrimHistory(turn_trim(caller(s, runtime="rt-b", turn="2")))
    await stub.TrimHistory(budget_trim(caller(s, runtime="rt-b", turn="3")))
    await stub.TrimHistory(turn_trim(caller(f"{s}-other", runtime="rt-a", turn="4")))
    await stub.TrimHistory(turn_trim(caller(s, runtime="rt-a", turn="5")))
    got_runtime = [i.event.trimmed.caller.turn_id for i in await by_runtime.take(2)]
    got_reason = [i.event.trimmed.caller.turn_id for i in await by_reason.take(2)]
    assert got_runtime == ["2", "3"]
    assert got_reason == ["2", "5"]
    await by_runtime.close()
    await by_reason.close()


async def test_resume_from_a_cursor_loses_and_repeats_nothing(stub: Stub) -> None:
    s = session()
    watch, _ = await Watch.open(stub, session_ids=[s])
    for i in range(5):
        await stub.TrimHistory(budget_trim(caller(s, turn=str(i))))
    items = await watch.take(5)
    assert [i.event.trimmed.caller.turn_id for i in items] == ["0", "1", "2", "3", "4"]
    await watch.close()  # the consumer disconnects after event 1 ...
    resume_after = items[1].event.cursor
    for i in range(5, 8):  # ... events keep coming while it is away
        await stub.TrimHistory(budget_trim(caller(s, turn=str(i))))
    resumed = Watch(stub, svc.TrimEventsRequest(session_ids=[s], after_cursor=resume_after))
    replay = await resumed.take(6)
    await stub.TrimHistory(budget_trim(caller(s, turn="8")))
    (live,) = await resumed.take(1)
    turns = [i.event.trimmed.caller.turn_id for i in [*replay, live]]
    assert turns == ["2", "3", "4", "5", "6", "7", "8"]
    assert [i.event.cursor for i in replay[:3]] == [i.event.cursor for i in items[2:]]
    await resumed.close()


async def test_invalid_cursor_is_a_rich_invalid_argument(stub: Stub) -> None:
    call = stub.TrimEvents(svc.TrimEventsRequest(after_cursor="not-a-cursor"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await anext(aiter(call))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    bad = error_details_pb2.BadRequest()
    for packed in status.details:
        if packed.Is(info.DESCRIPTOR):
            packed.Unpack(info)
        elif packed.Is(bad.DESCRIPTOR):
            packed.Unpack(bad)
    assert info.reason == "ERROR_REASON_INVALID_SUBSCRIPTION"
    assert [v.field for v in bad.field_violations] == ["after_cursor"]


async def test_heartbeat_on_an_idle_stream(stub: Stub) -> None:
    watch = Watch(
        stub,
        svc.TrimEventsRequest(
            session_ids=[session()], heartbeat_interval=duration_pb2.Duration(seconds=1)
        ),
    )
    began = time.monotonic()
    (first,) = await watch.take(1, limit_s=5, heartbeats=True)
    # Answered at once with the resume position, so a client knows it is subscribed.
    assert first.HasField("heartbeat") and time.monotonic() - began < 0.8
    assert first.heartbeat.cursor and first.heartbeat.time.seconds > 0
    (item,) = await watch.take(1, limit_s=5, heartbeats=True)
    assert 0.8 < time.monotonic() - began < 4
    assert item.HasField("heartbeat")
    assert item.heartbeat.cursor == first.heartbeat.cursor
    await watch.close()


async def test_gap_notice_after_a_ring_overflow(server_factory: Callable[..., Any]) -> None:
    server = server_factory("--ring-size", "5", unix=False)
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        s = session()
        watch, marker = await Watch.open(stub, session_ids=[s])
        for i in range(12):
            await stub.TrimHistory(budget_trim(caller(s, turn=str(i))))
        await watch.take(12)
        await watch.close()
        # Resume after the marker: 12 newer events were published, the ring kept the last 5.
        call = Watch(stub, svc.TrimEventsRequest(after_cursor=marker.event.cursor))
        items = await call.take(6)
        gap = items[0].gap
        assert gap.cause == events_pb2.GAP_CAUSE_BUFFER_OVERFLOW
        assert gap.missed_events == 7
        assert gap.after_cursor == marker.event.cursor
        assert gap.before_cursor == items[1].event.cursor
        assert [i.event.trimmed.caller.turn_id for i in items[1:]] == ["7", "8", "9", "10", "11"]
        await call.close()


async def test_stalled_subscriber_gets_a_gap_others_get_everything_trims_keep_answering(
    server_factory: Callable[..., Any],
) -> None:
    # A subscriber lags as far as the ring reaches: with 100 retained, the stalled one falls out.
    server = server_factory("--ring-size", "100", unix=False)
    s = session()
    total = 300
    # Large events (ids near their 256-byte limit) fill the stalled client's HTTP/2 window quickly.
    big, runtime = "x" * 240, "r" * 256
    async with (
        grpc.aio.insecure_channel(server.address) as channel,
        # Its own connection, without BDP window growth, so the transport absorbs little.
        grpc.aio.insecure_channel(server.address, options=[("grpc.http2.bdp_probe", 0)]) as slow,
    ):
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        watch, marker = await Watch.open(stub, session_ids=[s])
        stalled = Watch(
            history_service_pb2_grpc.HistoryServiceStub(slow),
            svc.TrimEventsRequest(session_ids=[s], after_cursor=marker.event.cursor),
            pump=False,  # never reads until the load is over
        )
        slowest = 0.0
        for i in range(total):
            began = time.monotonic()
            response = await stub.TrimHistory(
                budget_trim(caller(s, runtime=runtime, turn=f"{i}:{big}"))
            )
            slowest = max(slowest, time.monotonic() - began)
            assert response.history_trimmed.dropped_turns > 0
        assert slowest < 2.0
        everything = await watch.take(total, limit_s=30)
        assert [i.event.trimmed.caller.turn_id.split(":")[0] for i in everything] == [
            str(i) for i in range(total)
        ]
        # Now the stalled subscriber reads: what it got, plus the gap's count, is everything.
        stalled.start()
        delivered: list[str] = []
        gaps: list[events_pb2.Gap] = []
        while len(delivered) + sum(g.missed_events for g in gaps) < total:
            (item,) = await stalled.take(1)
            if item.HasField("gap"):
                gaps.append(item.gap)
            else:
                delivered.append(item.event.trimmed.caller.turn_id.split(":")[0])
        assert gaps and all(g.cause == events_pb2.GAP_CAUSE_SLOW_CONSUMER for g in gaps)
        assert len(delivered) < total
        assert delivered == sorted(delivered, key=int)  # in order, no repeats
        assert len(set(delivered)) == len(delivered)
        # After the gap the stream carries on with new events.
        await stub.TrimHistory(budget_trim(caller(s, turn="after")))
        (last,) = await stalled.take(1)
        assert last.event.trimmed.caller.turn_id == "after"
        await stalled.close()
        await watch.close()


async def test_prepare_model_call_publishes_each_trim_and_nothing_when_preflight_fails(
    stub: Stub,
) -> None:
    """§7: every HistoryTrimmed of PrepareModelCall reaches subscribers; §3: a request that fails
    the capacity pre-flight is never sent, so none of its trims is published. The channel sender
    cache (§6) publishes nothing either."""
    s = session()
    watch, _ = await Watch.open(stub, session_ids=[s])
    profiles = profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            max_context_tokens=800, max_history_messages=4, default_provider="acme"
        ),
        providers=[profile_pb2.ProviderProfile(alias="acme", model="m", context_window=2000)],
    )
    too_small = profile_pb2.Profiles()
    too_small.CopyFrom(profiles)
    too_small.providers[0].context_window = 100
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await stub.PrepareModelCall(
            svc.PrepareModelCallRequest(
                history=history(6), profiles=too_small, caller=caller(s, turn="too-big")
            )
        )
    assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    await stub.TrimHistory(
        svc.TrimHistoryRequest(
            history=history(6),
            mode=trim_pb2.TRIM_MODE_ROW_COUNT,
            caller_path=trim_pb2.CALLER_PATH_CHANNEL_SENDER_CACHE,
            explicit_limits=svc.ExplicitLimits(max_history_messages=2),
            caller=caller(s, turn="channel"),
        )
    )
    prepared = await stub.PrepareModelCall(
        svc.PrepareModelCallRequest(
            history=history(6), profiles=profiles, caller=caller(s, turn="prepared")
        )
    )
    assert [t.reason for t in prepared.trims] == [
        trim_pb2.TRIM_REASON_TURN_LIMIT,
        trim_pb2.TRIM_REASON_TOKEN_BUDGET,
    ]
    items = await watch.take(2)
    assert [i.event.trimmed for i in items] == list(prepared.trims)
    assert all(i.event.trimmed.caller.turn_id == "prepared" for i in items)
    await watch.close()


def meter_profiles(known: bool) -> profile_pb2.Profiles:
    provider = profile_pb2.ProviderProfile(alias="main", model="m-1")
    if known:
        provider.context_window = 128_000
    return profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(max_context_tokens=6_000, default_provider="main"),
        providers=[provider],
    )


async def test_section10_5_prepared_calls_publish_their_meter_to_opted_in_subscribers(
    stub: Stub,
) -> None:
    """spec §10.5: a subscriber that opts in gets, per successful PrepareModelCall, the session,
    the resolved route and the meter the caller got; the capacity only when known."""
    s = session()
    watch, _ = await Watch.open(stub, session_ids=[s], include_meter_updates=True)
    known = await stub.PrepareModelCall(
        svc.PrepareModelCallRequest(
            history=history(2, size=50), profiles=meter_profiles(True), caller=caller(s)
        )
    )
    unknown = await stub.PrepareModelCall(
        svc.PrepareModelCallRequest(
            history=history(2, size=50), profiles=meter_profiles(False), caller=caller(s)
        )
    )
    first, second = await watch.take(2)
    assert first.meter_update.meter == known.context_meter
    assert first.meter_update.route == known.resolution.route
    assert first.meter_update.caller == caller(s)
    assert first.meter_update.meter.capacity_tokens == 128_000
    assert first.meter_update.cursor
    assert second.meter_update.meter == unknown.context_meter
    assert not second.meter_update.meter.HasField("capacity_tokens")
    assert not second.meter_update.meter.HasField("capacity_fraction")
    await watch.close()


@pytest.fixture
async def engine_stub(engine_server: Any) -> AsyncIterator[Stub]:
    """A stub on each engine's session server in turn."""
    async with grpc.aio.insecure_channel(engine_server.address) as channel:
        yield history_service_pb2_grpc.HistoryServiceStub(channel)


def tool_history(turns: int, result_bytes: int = 400) -> history_pb2.History:
    """A system row, then `turns` turns of a prompt, one tool call, its result and a reply; the
    last turn is running (no reply)."""
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="system")]
    for i in range(turns):
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"q{i}"))
        for j in range(3 if i == turns - 1 else 1):
            call_id = f"c{i}-{j}"
            rows.append(
                history_pb2.ChatMessage(
                    role=history_pb2.ROLE_ASSISTANT,
                    tool_calls=[history_pb2.ToolCall(id=call_id, name="f", arguments="{}")],
                )
            )
            rows.append(
                history_pb2.ChatMessage(
                    role=history_pb2.ROLE_TOOL, content="r" * result_bytes, tool_call_id=call_id
                )
            )
        if i < turns - 1:
            rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content="done"))
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


async def test_section13_subscribers_see_the_collapse_and_the_clearing(engine_stub: Stub) -> None:
    """spec §13.3: every HistoryTrimmed of a preparation and its meter update carry the collapse
    counts; §13.4: a clearing is published as its own event, reason tool results cleared."""
    s = session()
    watch, _ = await Watch.open(engine_stub, session_ids=[s], include_meter_updates=True)
    # Five turns, K = 0: the four completed turns collapse; the budget then keeps only the
    # running turn, whose three 400-byte results exceed it, so R = 1 clears the older two.
    profiles = profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            max_context_tokens=250, keep_tool_context_turns=0, keep_running_turn_tool_results=1
        )
    )
    prepared = await engine_stub.PrepareModelCall(
        svc.PrepareModelCallRequest(history=tool_history(5), profiles=profiles, caller=caller(s))
    )
    assert prepared.collapse.collapsed_turns == 4
    assert prepared.clearing.results_cleared == 2
    assert [t.reason for t in prepared.trims] == [
        trim_pb2.TRIM_REASON_TOKEN_BUDGET,
        trim_pb2.TRIM_REASON_TOOL_RESULTS_CLEARED,
    ]
    items = await watch.take(3)
    events = [i.event.trimmed for i in items if i.HasField("event")]
    meters = [i.meter_update for i in items if i.HasField("meter_update")]
    assert events == list(prepared.trims)
    assert all(e.collapse == prepared.collapse for e in events)
    assert events[1].clearing == prepared.clearing
    assert [m.collapse for m in meters] == [prepared.collapse]
    await watch.close()
    # The reason filter names the clearing like the other reasons (the turn limit only lets the
    # subscription's markers through: this preparation drops no turn by its turn limit).
    only, _ = await Watch.open(
        engine_stub,
        session_ids=[s],
        reasons=[trim_pb2.TRIM_REASON_TOOL_RESULTS_CLEARED, trim_pb2.TRIM_REASON_TURN_LIMIT],
    )
    again = await engine_stub.PrepareModelCall(
        svc.PrepareModelCallRequest(history=tool_history(5), profiles=profiles, caller=caller(s))
    )
    (item,) = await only.take(1)
    assert item.event.trimmed == again.trims[-1]
    await only.close()


@pytest.fixture
async def python_stub(python_engine_server: Any) -> AsyncIterator[Stub]:
    """A stub on the Python engine's session server (the native engine has no §15 yet)."""
    async with grpc.aio.insecure_channel(python_engine_server.address) as channel:
        yield history_service_pb2_grpc.HistoryServiceStub(channel)


async def test_section15_subscribers_see_the_pinned_turns(python_stub: Stub) -> None:
    """spec §15.1: the HistoryTrimmed of a preparation reports the pinned turns of its output and
    their tokens, and the meter update the pinned tokens of the prepared request."""
    s = session()
    watch, _ = await Watch.open(python_stub, session_ids=[s], include_meter_updates=True)
    rows = history(4, size=50)
    rows.chat.messages[1].pinned = True  # the first turn's user row
    prepared = await python_stub.PrepareModelCall(
        svc.PrepareModelCallRequest(
            history=rows,
            profiles=profile_pb2.Profiles(
                runtime=profile_pb2.RuntimeProfile(max_context_tokens=150)
            ),
            caller=caller(s),
        )
    )
    # "system" 6, each turn "qN " x 50 (150 B: 42) and "answer" (6 B: 6), 48: 198. The budget
    # trim keeps the pinned first turn and drops turns 2 and 3: 198 - 96 + 17 = 119 <= 150.
    assert [t.pinned_turns for t in prepared.trims] == [1]
    assert [t.pinned_tokens for t in prepared.trims] == [48]
    assert prepared.history.chat.messages[1].pinned
    items = await watch.take(2)
    meters = [i.meter_update for i in items if i.HasField("meter_update")]
    assert [m.pinned_tokens for m in meters] == [48]
    await watch.close()
