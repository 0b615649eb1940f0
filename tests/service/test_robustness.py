"""Bad input never crashes the sidecar: random, often invalid requests get a documented status.

Hypothesis builds requests the contract allows on the wire (unknown enum numbers, misplaced
breadcrumbs, attachments anywhere, NaN ratios, zero windows, empty oneofs) and sends them to a
real server. Every answer is OK, INVALID_ARGUMENT with ErrorInfo + BadRequest, or
FAILED_PRECONDITION with a CapacityReport — never INTERNAL or UNKNOWN — and the server keeps serving.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc, profile_pb2

texts = st.text(alphabet=st.sampled_from("ab é🦀 [IMAGE:/x.png]\n[Tool results]"), max_size=24)
ids = st.sampled_from(["", "c1", "c2", "c3"])
enum_numbers = st.integers(min_value=0, max_value=6)


@st.composite
def chat_messages(draw: st.DrawFn) -> h.ChatMessage:
    return h.ChatMessage(
        role=draw(enum_numbers),  # type: ignore[arg-type]
        content=draw(texts),
        tool_call_id=draw(ids),
        tool_calls=[
            h.ToolCall(id=draw(ids), name=draw(st.sampled_from(["", "f"])), arguments=draw(texts))
            for _ in range(draw(st.integers(0, 2)))
        ],
        attachments=[h.Attachment(uri="/a.png")] * draw(st.integers(0, 2)),
        breadcrumb=draw(st.booleans()),
    )


@st.composite
def conversation_messages(draw: st.DrawFn) -> h.ConversationMessage:
    kind = draw(st.sampled_from(["chat", "calls", "results", "empty"]))
    if kind == "chat":
        return h.ConversationMessage(chat=draw(chat_messages()))
    if kind == "calls":
        calls = [h.ToolCall(id=draw(ids), name="f") for _ in range(draw(st.integers(0, 2)))]
        return h.ConversationMessage(
            assistant_tool_calls=h.AssistantToolCalls(text=draw(texts), tool_calls=calls)
        )
    if kind == "results":
        results = [
            h.ToolResult(tool_call_id=draw(ids), content=draw(texts))
            for _ in range(draw(st.integers(0, 2)))
        ]
        return h.ConversationMessage(tool_results=h.ToolResults(results=results))
    return h.ConversationMessage()


@st.composite
def histories(draw: st.DrawFn) -> h.History:
    shape = draw(st.sampled_from(["chat", "conversation", "none"]))
    if shape == "chat":
        return h.History(chat=h.ChatHistory(messages=draw(st.lists(chat_messages(), max_size=8))))
    if shape == "conversation":
        rows = draw(st.lists(conversation_messages(), max_size=8))
        return h.History(conversation=h.ConversationHistory(messages=rows))
    return h.History()


@st.composite
def profiles(draw: st.DrawFn) -> profile_pb2.Profiles:
    runtime = profile_pb2.RuntimeProfile(default_provider=draw(st.sampled_from(["", "a", "b"])))
    if draw(st.booleans()):
        runtime.max_context_tokens = draw(st.integers(0, 5000))
    if draw(st.booleans()):
        runtime.context_compact_ratio = draw(
            st.sampled_from([0.5, 0.0, -1.0, 1.5, 1e-9, math.nan, math.inf])
        )
    if draw(st.booleans()):
        runtime.max_history_messages = draw(st.integers(0, 3))
    runtime.history_pruning.enabled = draw(st.booleans())
    runtime.history_pruning.max_tokens = draw(st.integers(0, 3000))
    providers = []
    for alias in draw(st.lists(st.sampled_from(["", "a", "b"]), max_size=3)):
        provider = profile_pb2.ProviderProfile(alias=alias, model=draw(st.sampled_from(["", "m"])))
        if draw(st.booleans()):
            provider.context_window = draw(st.integers(0, 5000))
        providers.append(provider)
    return profile_pb2.Profiles(runtime=runtime, providers=providers)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, Any]:
    rpc = draw(
        st.sampled_from(
            ["EstimateTokens", "TrimHistory", "PrepareModelCall", "CheckCapacity", "SweepOrphans"]
        )
    )
    history = draw(histories())
    if rpc == "EstimateTokens":
        return rpc, svc.EstimateTokensRequest(history=history)
    if rpc == "SweepOrphans":
        return rpc, svc.SweepOrphansRequest(history=history)
    if rpc == "CheckCapacity":
        return rpc, svc.CheckCapacityRequest(history=history, profiles=draw(profiles()))
    if rpc == "PrepareModelCall":
        return rpc, svc.PrepareModelCallRequest(
            history=history,
            profiles=draw(profiles()),
            overflow_recovery=draw(st.booleans()),
            hook_texts=draw(st.lists(texts, max_size=2)),
        )
    request = svc.TrimHistoryRequest(
        history=history, mode=draw(enum_numbers), caller_path=draw(enum_numbers)
    )
    if draw(st.booleans()):
        request.profiles.CopyFrom(draw(profiles()))
    else:
        limits = svc.ExplicitLimits()
        if draw(st.booleans()):
            limits.budget_tokens = draw(st.integers(0, 3000))
        if draw(st.booleans()):
            limits.max_history_messages = draw(st.integers(0, 3))
        request.explicit_limits.CopyFrom(limits)
    return rpc, request


@pytest.fixture(scope="module")
def stub(live_server: Any) -> Iterator[history_service_pb2_grpc.HistoryServiceStub]:
    with grpc.insecure_channel(live_server.address) as channel:
        yield history_service_pb2_grpc.HistoryServiceStub(channel)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(requests())
def test_random_requests_get_a_documented_status(
    stub: history_service_pb2_grpc.HistoryServiceStub, call: tuple[str, Any]
) -> None:
    rpc, request = call
    try:
        getattr(stub, rpc)(request, timeout=10)
        return
    except grpc.RpcError as error:
        code = error.code()  # type: ignore[attr-defined]
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION), code
    assert status is not None
    kinds = {detail.TypeName() for detail in status.details}
    assert "google.rpc.ErrorInfo" in kinds
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        bad = error_details_pb2.BadRequest()
        next(d for d in status.details if d.Is(bad.DESCRIPTOR)).Unpack(bad)
        assert bad.field_violations
    else:
        assert "turnkeeper.v1.CapacityReport" in kinds
    assert rpc in {
        "TrimHistory",
        "EstimateTokens",
        "PrepareModelCall",
        "CheckCapacity",
        "SweepOrphans",
    }


def test_server_still_serves_after_the_fuzzing(
    stub: history_service_pb2_grpc.HistoryServiceStub,
) -> None:
    reply = stub.EstimateTokens(
        svc.EstimateTokensRequest(history=h.History(chat=h.ChatHistory())), timeout=5
    )
    assert reply.total_tokens == 0
