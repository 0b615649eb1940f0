"""The capacity pre-flight through a real server: spec §3 (budget is a target, not a hard cap)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_status import rpc_status
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc, profile_pb2, trim_pb2


@pytest.fixture(scope="module")
def stub(live_server: Any) -> Iterator[history_service_pb2_grpc.HistoryServiceStub]:
    with grpc.insecure_channel(live_server.address) as channel:
        yield history_service_pb2_grpc.HistoryServiceStub(channel)


def profiles(max_context_tokens: int) -> profile_pb2.Profiles:
    return profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            max_context_tokens=max_context_tokens, default_provider="p"
        ),
        providers=[profile_pb2.ProviderProfile(alias="p", model="m", context_window=300)],
    )


def one_big_turn() -> h.History:
    rows = [
        h.ChatMessage(role=h.ROLE_SYSTEM, content="s"),
        h.ChatMessage(role=h.ROLE_USER, content="x" * 2000),
    ]
    return h.History(chat=h.ChatHistory(messages=rows))


def capacity_report(error: grpc.RpcError) -> trim_pb2.CapacityReport:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    report = trim_pb2.CapacityReport()
    next(d for d in status.details if d.Is(report.DESCRIPTOR)).Unpack(report)
    return report


@pytest.mark.parametrize("max_context_tokens", [0, 100, 1_000_000])
def test_section3_preflight_fails_before_sending_whatever_the_budget(
    stub: history_service_pb2_grpc.HistoryServiceStub, max_context_tokens: int
) -> None:
    """§3: the newest turn is kept over the target, and a request that still exceeds the model's
    capacity fails before it is sent — also with proactive trimming disabled (0), and raising the
    proactive target alone does not make it fit. The same holds for a final summary request,
    which is just another PrepareModelCall."""
    with pytest.raises(grpc.RpcError) as caught:
        stub.PrepareModelCall(
            svc.PrepareModelCallRequest(
                history=one_big_turn(), profiles=profiles(max_context_tokens)
            )
        )
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # type: ignore[attr-defined]
    report = capacity_report(caught.value)
    assert (report.message_tokens, report.capacity.safety_tokens, report.fits) == (
        5 + 504,
        300,
        False,
    )


def test_section3_preflight_counts_hooks_schemas_and_reserved_output(
    stub: history_service_pb2_grpc.HistoryServiceStub,
) -> None:
    """§9 Capacity: hook texts and tool schemas are priced like rows; reserved output counts."""
    history = h.History(
        chat=h.ChatHistory(messages=[h.ChatMessage(role=h.ROLE_USER, content="abcd")])
    )
    request = svc.CheckCapacityRequest(
        history=history,
        profiles=profiles(0),
        hook_texts=["abcde"],  # 6
        tool_schemas=['{"type":"object"}'],  # 17 bytes -> 5 + 4 = 9
        reserved_output_tokens=280,
    )
    report = stub.CheckCapacity(request).report
    assert (report.message_tokens, report.hook_tokens, report.tool_schema_tokens) == (5, 6, 9)
    assert report.total_tokens == 300 and report.fits
    request.reserved_output_tokens = 281
    with pytest.raises(grpc.RpcError) as caught:
        stub.CheckCapacity(request)
    assert capacity_report(caught.value).total_tokens == 301
