"""The ops HTTP port (--http): Prometheus /metrics, /healthz and /readyz, and added routes."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from turnkeeper.server import app
from turnkeeper.server.api.servicer import INLINE_REQUEST_BYTES
from turnkeeper.server.app import Sidecar, StartupError
from turnkeeper.server.config import ServerConfig
from turnkeeper.server.contract.methods import SERVICE_NAME
from turnkeeper.server.engine import default_engine_name
from turnkeeper.server.events.common import messages_of
from turnkeeper.server.events.feed import Delivery, FeedItem, FeedStatus
from turnkeeper.server.events.metered import MeteredFeed
from turnkeeper.server.ops.health import EVENTS_HEALTH_NAME
from turnkeeper.server.ops.http import OpsContext
from turnkeeper.server.telemetry import metrics
from turnkeeper.v1 import events_pb2, history_pb2, history_service_pb2_grpc, profile_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

# Every metric family the README's table lists, by its exposition name.
EXPECTED_FAMILIES = {
    "grpc_server_started",
    "grpc_server_handled",
    "grpc_server_handling_seconds",
    "grpc_server_msg_received",
    "grpc_server_msg_sent",
    "turnkeeper_rpc_request_bytes",
    "turnkeeper_rpc_response_bytes",
    "turnkeeper_capacity_failures",
    "turnkeeper_admission_rejections",
    "turnkeeper_admission_queue_length",
    "turnkeeper_admission_wait_seconds",
    "turnkeeper_connections_shed",
    "turnkeeper_queue_wait_seconds",
    "turnkeeper_trims",
    "turnkeeper_dropped_turns",
    "turnkeeper_dropped_messages",
    "turnkeeper_trim_tokens_before",
    "turnkeeper_trim_tokens_after",
    "turnkeeper_events_published",
    "turnkeeper_events_delivered",
    "turnkeeper_event_subscribers",
    "turnkeeper_event_gaps",
    "turnkeeper_event_feed_healthy",
    "turnkeeper_engine_info",
    "turnkeeper_build_info",
    "python_gc_collections",
}


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tk-ops-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def sidecar() -> AsyncIterator[Sidecar]:
    running = Sidecar(ServerConfig(listen=("127.0.0.1:0",), http="127.0.0.1:0"))
    await running.start()
    try:
        yield running
    finally:
        await running.stop(grace=0)


async def get(sidecar: Sidecar, path: str) -> tuple[int, str, str]:
    """Status, content type and body of GET http://<ops address><path>."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{sidecar.http_address}{path}") as response,
    ):
        return response.status, response.headers["Content-Type"], await response.text()


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def user_turns(count: int) -> history_pb2.History:
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="s")]
    for index in range(count):
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"q{index}"))
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content=f"a{index}"))
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def test_the_ops_port_is_off_by_default() -> None:
    assert ServerConfig().http is None


async def test_metrics_expose_every_family_in_prometheus_text(sidecar: Sidecar) -> None:
    status, content_type, body = await get(sidecar, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    families = {family.name for family in text_string_to_metric_families(body)}
    assert families >= EXPECTED_FAMILIES, EXPECTED_FAMILIES - families
    assert (
        f'turnkeeper_engine_info{{engine="{sidecar.config.engine or default_engine_name()}"}} 1.0'
        in body
    )
    assert "turnkeeper_build_info{" in body and 'python="3.' in body
    assert "turnkeeper_event_feed_healthy 1.0" in body


async def test_rpcs_are_counted_by_method_and_code_with_latency(sidecar: Sidecar) -> None:
    method = {"grpc_service": SERVICE_NAME, "grpc_method": "EstimateTokens"}
    unary = {**method, "grpc_type": "unary"}
    before_ok = sample("grpc_server_handled_total", **unary, grpc_code="OK")
    before_bad = sample("grpc_server_handled_total", **unary, grpc_code="INVALID_ARGUMENT")
    before_count = sample("grpc_server_handling_seconds_count", **unary)
    request = svc.EstimateTokensRequest(history=user_turns(2))
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        await stub.EstimateTokens(request, timeout=5)
        bad = history_pb2.History(
            chat=history_pb2.ChatHistory(messages=[history_pb2.ChatMessage(role=99)])
        )
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.EstimateTokens(svc.EstimateTokensRequest(history=bad), timeout=5)
    assert sample("grpc_server_handled_total", **unary, grpc_code="OK") == before_ok + 1
    # grpc sends an abort's status at once, before the handler has unwound to the edge that
    # counts it: the count may come a moment after the client has its error.
    for _ in range(100):
        bad_count = sample("grpc_server_handled_total", **unary, grpc_code="INVALID_ARGUMENT")
        if bad_count > before_bad:
            break
        await asyncio.sleep(0.01)
    assert bad_count == before_bad + 1
    assert sample("grpc_server_handling_seconds_count", **unary) == before_count + 2
    _, _, body = await get(sidecar, "/metrics")
    assert 'grpc_server_handled_total{grpc_code="OK",grpc_method="EstimateTokens"' in body


async def test_trims_are_counted_by_reason_and_path_with_token_histograms(
    sidecar: Sidecar,
) -> None:
    agent = {"reason": "turn_limit", "caller_path": "agent"}
    legacy = {"reason": "turn_limit", "caller_path": "legacy_loop"}
    before = {
        "agent": sample("turnkeeper_trims_total", **agent),
        "legacy": sample("turnkeeper_trims_total", **legacy),
        "turns": sample("turnkeeper_dropped_turns_total", **agent),
        "messages": sample("turnkeeper_dropped_messages_total", **agent),
        "tokens": sample("turnkeeper_trim_tokens_before_count", reason="turn_limit"),
        "published": sample("turnkeeper_events_published_total"),
    }
    limits = svc.ExplicitLimits(max_history_messages=1)
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        agent_trim = await stub.TrimHistory(
            svc.TrimHistoryRequest(
                history=user_turns(4), mode=trim_pb2.TRIM_MODE_TURN_COUNT, explicit_limits=limits
            ),
            timeout=5,
        )
        await stub.TrimHistory(
            svc.TrimHistoryRequest(
                history=user_turns(3),
                mode=trim_pb2.TRIM_MODE_TURN_COUNT,
                explicit_limits=limits,
                caller_path=trim_pb2.CALLER_PATH_LEGACY_LOOP,
            ),
            timeout=5,
        )
    outcome = agent_trim.outcome
    assert outcome.dropped_turns == 3
    assert sample("turnkeeper_trims_total", **agent) == before["agent"] + 1
    assert sample("turnkeeper_trims_total", **legacy) == before["legacy"] + 1
    assert sample("turnkeeper_dropped_turns_total", **agent) == before["turns"] + 3
    assert (
        sample("turnkeeper_dropped_messages_total", **agent)
        == before["messages"] + outcome.dropped_messages
    )
    assert (
        sample("turnkeeper_trim_tokens_before_count", reason="turn_limit") == before["tokens"] + 2
    )
    # Only the agent path publishes (§7).
    assert sample("turnkeeper_events_published_total") == before["published"] + 1


async def test_trims_on_engine_workers_are_counted_exactly(
    sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request over the inline limit is trimmed on an engine worker thread, which records the
    trim into its own metric cells: the scrape sums them with the loop's."""
    threads: list[str] = []
    observe = metrics.observe_trim

    def spy(*args: Any, **kwargs: Any) -> None:
        threads.append(threading.current_thread().name)
        observe(*args, **kwargs)

    monkeypatch.setattr(metrics, "observe_trim", spy)
    agent = {"reason": "turn_limit", "caller_path": "agent"}
    before = {
        "trims": sample("turnkeeper_trims_total", **agent),
        "turns": sample("turnkeeper_dropped_turns_total", **agent),
        "count": sample("turnkeeper_trim_tokens_after_count", reason="turn_limit"),
        "sum": sample("turnkeeper_trim_tokens_after_sum", reason="turn_limit"),
    }
    big = user_turns(400)
    for row in big.chat.messages[1:]:
        row.content = row.content * 1500
    request = svc.TrimHistoryRequest(
        history=big,
        mode=trim_pb2.TRIM_MODE_TURN_COUNT,
        explicit_limits=svc.ExplicitLimits(max_history_messages=3),
    )
    assert request.ByteSize() > max(INLINE_REQUEST_BYTES.values())
    small = svc.TrimHistoryRequest(
        history=user_turns(4),
        mode=trim_pb2.TRIM_MODE_TURN_COUNT,
        explicit_limits=svc.ExplicitLimits(max_history_messages=1),
    )
    async with grpc.aio.insecure_channel(
        sidecar.tcp_addresses[0], options=[("grpc.max_send_message_length", 64 << 20)]
    ) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        replies = [await stub.TrimHistory(request, timeout=30) for _ in range(3)]
        replies.append(await stub.TrimHistory(small, timeout=5))
    assert any(name.startswith("engine") for name in threads), threads
    assert any(not name.startswith("engine") for name in threads), threads
    outcomes = [reply.outcome for reply in replies]
    assert sample("turnkeeper_trims_total", **agent) == before["trims"] + 4
    assert sample("turnkeeper_dropped_turns_total", **agent) == before["turns"] + sum(
        outcome.dropped_turns for outcome in outcomes
    )
    assert sample("turnkeeper_trim_tokens_after_count", reason="turn_limit") == before["count"] + 4
    assert sample("turnkeeper_trim_tokens_after_sum", reason="turn_limit") == before["sum"] + sum(
        outcome.tokens_after for outcome in outcomes
    )


async def test_capacity_failures_are_counted(sidecar: Sidecar) -> None:
    before = sample("turnkeeper_capacity_failures_total", grpc_method="CheckCapacity")
    profiles = profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(default_provider="p"),
        providers=[profile_pb2.ProviderProfile(alias="p", model="m", context_window=10)],
    )
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.CheckCapacity(
                svc.CheckCapacityRequest(history=user_turns(20), profiles=profiles), timeout=5
            )
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert sample("turnkeeper_capacity_failures_total", grpc_method="CheckCapacity") == before + 1


async def test_subscribers_are_a_gauge_and_delivered_events_are_counted(sidecar: Sidecar) -> None:
    before_subscribers = sample("turnkeeper_event_subscribers")
    before_delivered = sample("turnkeeper_events_delivered_total")
    async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        stream = stub.TrimEvents(svc.TrimEventsRequest())
        first = await stream.read()  # the immediate heartbeat: the subscription is open
        assert first.WhichOneof("item") == "heartbeat"
        assert sample("turnkeeper_event_subscribers") == before_subscribers + 1
        await stub.TrimHistory(
            svc.TrimHistoryRequest(
                history=user_turns(3),
                mode=trim_pb2.TRIM_MODE_TURN_COUNT,
                explicit_limits=svc.ExplicitLimits(max_history_messages=1),
            ),
            timeout=5,
        )
        item = await asyncio.wait_for(stream.read(), 5)
        while item.WhichOneof("item") != "event":
            item = await asyncio.wait_for(stream.read(), 5)
        assert sample("turnkeeper_events_delivered_total") == before_delivered + 1
        stream.cancel()
    for _ in range(100):  # the server notices the cancellation asynchronously
        if sample("turnkeeper_event_subscribers") == before_subscribers:
            break
        await asyncio.sleep(0.02)
    assert sample("turnkeeper_event_subscribers") == before_subscribers


class ScriptedFeed:
    """An EventFeed that serves fixed items to every subscriber and reports a fixed health."""

    def __init__(self, items: tuple[svc.TrimEventsResponse, ...] = (), healthy: bool = True):
        self.items = items
        self.healthy = healthy

    def publish(self, trimmed: trim_pb2.HistoryTrimmed) -> None:
        pass

    def publish_meter(self, update: events_pb2.MeterUpdate) -> None:
        pass

    def wants_meter_updates(self) -> bool:
        return False

    async def deliveries(self, request: svc.TrimEventsRequest) -> AsyncGenerator[Delivery]:
        for item in self.items:
            yield [FeedItem(item)]

    def subscribe(self, request: svc.TrimEventsRequest) -> AsyncGenerator[svc.TrimEventsResponse]:
        return messages_of(self.deliveries(request))

    async def oldest_cursor(self) -> str:
        return ""

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def status(self) -> FeedStatus:
        return FeedStatus(healthy=self.healthy, detail="" if self.healthy else "scripted")


async def test_gaps_are_counted_by_cause() -> None:
    before = sample("turnkeeper_event_gaps_total", cause="restart")
    gap = svc.TrimEventsResponse(gap=events_pb2.Gap(cause=events_pb2.GAP_CAUSE_RESTART))
    feed = MeteredFeed(ScriptedFeed(items=(gap,)))
    items = [item async for item in feed.subscribe(svc.TrimEventsRequest())]
    assert [item.WhichOneof("item") for item in items] == ["gap"]
    assert sample("turnkeeper_event_gaps_total", cause="restart") == before + 1


async def test_healthz_and_readyz_mirror_grpc_health(sidecar: Sidecar) -> None:
    status, _, body = await get(sidecar, "/healthz")
    assert (status, json.loads(body)) == (200, {"service": "", "status": "SERVING"})
    status, _, body = await get(sidecar, "/readyz")
    assert (status, json.loads(body)) == (200, {"service": SERVICE_NAME, "status": "SERVING"})
    status, _, _ = await get(sidecar, f"/readyz?service={EVENTS_HEALTH_NAME}")
    assert status == 200
    status, _, body = await get(sidecar, "/readyz?service=no.such.Service")
    assert (status, json.loads(body)["status"]) == (404, "SERVICE_UNKNOWN")
    # Shutdown turns every status NOT_SERVING: probes fail for the whole drain.
    await sidecar.health.enter_graceful_shutdown()
    for path in ("/healthz", "/readyz"):
        status, _, body = await get(sidecar, path)
        assert (status, json.loads(body)["status"]) == (503, "NOT_SERVING")


async def test_a_degraded_feed_fails_only_the_events_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app, "create_feed", lambda config, calls: ScriptedFeed(healthy=False))
    running = Sidecar(ServerConfig(listen=("127.0.0.1:0",), http="127.0.0.1:0"))
    await running.start()
    try:
        assert (await get(running, "/readyz"))[0] == 200
        assert (await get(running, f"/readyz?service={EVENTS_HEALTH_NAME}"))[0] == 503
        assert "turnkeeper_event_feed_healthy 0.0" in (await get(running, "/metrics"))[2]
    finally:
        await running.stop(grace=0)


async def test_added_routes_are_served_with_the_ops_context() -> None:
    seen: list[OpsContext] = []

    def add_hello(ops_app: web.Application, context: OpsContext) -> None:
        seen.append(context)

        async def hello(request: web.Request) -> web.Response:
            return web.Response(text=f"ready service {context.ready_service}")

        ops_app.router.add_get("/hello", hello)

    running = Sidecar(
        ServerConfig(listen=("127.0.0.1:0",), http="127.0.0.1:0"), ops_routes=[add_hello]
    )
    await running.start()
    try:
        assert await get(running, "/hello") == (
            200,
            "text/plain; charset=utf-8",
            f"ready service {SERVICE_NAME}",
        )
        assert seen[0].health.get("") is not None
    finally:
        await running.stop(grace=0)


async def test_the_ready_file_names_the_ops_address_and_stop_closes_it(workdir: Path) -> None:
    ready = workdir / "ready.json"
    running = Sidecar(
        ServerConfig(listen=("127.0.0.1:0",), http="127.0.0.1:0", ready_file=str(ready))
    )
    await running.start()
    address = running.http_address
    assert address is not None and json.loads(ready.read_text())["http"] == address
    await running.stop(grace=0)
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as session:
            await session.get(f"http://{address}/healthz")


async def test_an_ops_port_in_use_is_a_startup_error(sidecar: Sidecar) -> None:
    assert sidecar.http_address is not None
    second = Sidecar(ServerConfig(listen=("127.0.0.1:0",), http=sidecar.http_address))
    with pytest.raises(StartupError, match="http"):
        await second.start()
