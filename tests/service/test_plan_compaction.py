"""PlanCompaction (spec §15.3) through a real server, on each engine: it answers, its plan reaches subscribers of meter updates as a compaction update, and a
runtime token acts for its own runtime only, as with PrepareModelCall."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from turnkeeper.server.app import Sidecar
from turnkeeper.server.config import ServerConfig
from turnkeeper.v1 import history_pb2, history_service_pb2_grpc, profile_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

TOKENS = {
    "a": ("a-9f1c2e7b5d3a4068b1e2c3d4f5a6b7c8", "runtime-a", ""),
    "fleet": ("f-7a2b9c4d1e6f4830b5a6c7d8e9f0a1b2", "dashboards", "read_all_runtimes = true\n"),
}
ROW = "x" * 400  # 104 tokens


def bearer(who: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {TOKENS[who][0]}"),)


@pytest.fixture(params=["native", "python"])
async def stub(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[history_service_pb2_grpc.HistoryServiceStub]:
    path = tmp_path / "tokens.toml"
    path.write_text(
        "".join(
            f'[[tokens]]\ntoken = "{token}"\nruntime_id = "{runtime}"\n{extra}'
            for token, runtime, extra in TOKENS.values()
        )
    )
    config = ServerConfig(listen=("127.0.0.1:0",), auth_tokens=str(path), engine=request.param)
    sidecar = Sidecar(config)
    await sidecar.start()
    try:
        async with grpc.aio.insecure_channel(sidecar.tcp_addresses[0]) as channel:
            yield history_service_pb2_grpc.HistoryServiceStub(channel)
    finally:
        await sidecar.stop(grace=0)


def plan_request(runtime_id: str) -> svc.PlanCompactionRequest:
    """§11's history (a 104-token system row, ten turns of two 104-token rows), budget 2,000:
    the budget trim drops one turn, which the plan condenses."""
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content=ROW)]
    for _ in range(10):
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=ROW))
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content=ROW))
    profiles = profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(max_context_tokens=2_000, default_provider="p"),
        providers=[profile_pb2.ProviderProfile(alias="p", model="m", context_window=8_000)],
    )
    return svc.PlanCompactionRequest(
        history=history_pb2.History(chat=history_pb2.ChatHistory(messages=rows)),
        profiles=profiles,
        caller=trim_pb2.CallerContext(runtime_id=runtime_id, session_id="s-1"),
        summary_output_tokens=8,
    )


async def test_a_plan_reaches_meter_subscribers_as_a_compaction_update(
    stub: history_service_pb2_grpc.HistoryServiceStub,
) -> None:
    meters = stub.TrimEvents(
        svc.TrimEventsRequest(include_meter_updates=True), metadata=bearer("fleet")
    )
    assert (await meters.read()).WhichOneof("item") == "heartbeat"
    response = await stub.PlanCompaction(plan_request(""), metadata=bearer("a"), timeout=5)
    plan = response.plan
    assert [(r.start, r.end) for r in plan.condensed_rows] == [(1, 3)]
    assert (plan.condensed_turns, plan.saved_tokens) == (1, 208 - 8)
    assert response.resolution.route.provider == "p"
    while (item := await asyncio.wait_for(meters.read(), 5)).WhichOneof("item") != ("meter_update"):
        pass
    update = item.meter_update
    assert not update.HasField("meter")
    assert (update.compaction.condensed_turns, update.compaction.saved_tokens) == (1, 200)
    assert update.compaction.summary_request_tokens == plan.summary_request_tokens
    assert (update.caller.runtime_id, update.caller.session_id) == ("runtime-a", "s-1")
    assert update.route == response.resolution.route
    meters.cancel()


async def test_a_runtime_token_cannot_plan_for_another_runtime(
    stub: history_service_pb2_grpc.HistoryServiceStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.PlanCompaction(plan_request("someone-else"), metadata=bearer("a"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as unauthenticated:
        await stub.PlanCompaction(plan_request("runtime-a"), timeout=5)
    assert unauthenticated.value.code() == grpc.StatusCode.UNAUTHENTICATED
