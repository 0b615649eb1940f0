"""The request-item limit (api/limits.py): what counts as an item, the refusal, and the Rust
counter agreeing with the Python one."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2
from turnkeeper.server.api import limits
from turnkeeper.server.api.errors import RequestError
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2, trim_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robustness"))
from expansion_cases import amplifications


def _items(raw: bytes, request_type: type[svc.TrimHistoryRequest]) -> int:
    """The exact item count, by bisecting the limit."""
    low, high = 0, len(raw)
    while low < high:
        middle = (low + high) // 2
        if limits.crossing_field(raw, request_type, middle) is None:
            high = middle
        else:
            low = middle + 1
    return low


def test_every_repeated_field_at_every_depth_counts() -> None:
    passthrough = struct_pb2.Struct()
    passthrough.update({"a": [1, 2], "b": "x"})  # 2 entries, 2 list values
    call = h.ToolCall(id="c", name="f")
    attachment = h.Attachment(uri="u")
    rows = [
        h.ConversationMessage(chat=h.ChatMessage(role=h.ROLE_USER, passthrough=passthrough)),
        h.ConversationMessage(assistant_tool_calls=h.AssistantToolCalls(tool_calls=[call, call])),
        h.ConversationMessage(
            tool_results=h.ToolResults(
                results=[h.ToolResult(tool_call_id="c", attachments=[attachment] * 3)]
            )
        ),
    ]
    profiles = profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            classifier_routes=[profile_pb2.ClassifierRoute(hint="h", provider="p")]
        ),
        providers=[profile_pb2.ProviderProfile(alias="a"), profile_pb2.ProviderProfile(alias="b")],
    )
    request = svc.PrepareModelCallRequest(
        history=h.History(conversation=h.ConversationHistory(messages=rows)),
        profiles=profiles,
        hook_texts=["", ""],
        tool_schemas=["s"],
    )
    # rows 3, struct 4, calls 2, results 1, attachments 3, routes 1, providers 2, hooks 2, schemas 1
    assert _items(request.SerializeToString(), svc.PrepareModelCallRequest) == 19


def test_packed_elements_count_one_each() -> None:
    request = svc.TrimEventsRequest(
        reasons=[trim_pb2.TRIM_REASON_TOKEN_BUDGET] * 7, session_ids=["s"]
    )
    assert _items(request.SerializeToString(), svc.TrimEventsRequest) == 8


def test_a_request_over_its_allowance_is_refused_naming_the_field_and_the_limit() -> None:
    raw = svc.CapToolResultsRequest(
        contents=[""] * 300, max_tool_result_chars=5
    ).SerializeToString()
    with pytest.raises(RequestError) as raised:
        limits.check_items(raw, svc.CapToolResultsRequest, 100)
    error = raised.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in error.violations] == ["contents"]
    assert error.metadata == {
        "limit": "max_request_items",
        "max_request_items": "100",
        "items_allowed": str(limits.items_allowed(len(raw), 100)),
    }
    limits.check_items(raw, svc.CapToolResultsRequest, 300)


def test_a_history_at_the_row_limit_with_tool_calls_passes_the_default() -> None:
    rows = []
    for i in range(50_000):
        rows.append(h.ChatMessage(role=h.ROLE_USER, content=f"question {i}"))
        call = h.ToolCall(id=f"call-{i}", name="lookup", arguments="{}")
        rows.append(h.ChatMessage(role=h.ROLE_ASSISTANT, tool_calls=[call]))
    request = svc.TrimHistoryRequest(history=h.History(chat=h.ChatHistory(messages=rows)))
    limits.check_items(
        request.SerializeToString(), svc.TrimHistoryRequest, limits.DEFAULT_MAX_REQUEST_ITEMS
    )


def test_broken_framing_is_left_to_the_decoder() -> None:
    raw = b"\x0a\x00" * 10 + b"\x0a\x7f"
    assert limits.crossing_field(raw, svc.CapToolResultsRequest, 5) == 1
    assert limits.crossing_field(raw, svc.CapToolResultsRequest, 10) is None


def test_the_rust_counter_agrees_with_the_python_one() -> None:
    pytest.importorskip("turnkeeper._native")
    crossing = limits._native_counter()
    assert crossing is not None
    rng = random.Random(26)
    request_types = {"CapToolResults": svc.CapToolResultsRequest}
    for case in amplifications(scale=0.001):
        request_type = request_types.get(case.method) or getattr(svc, f"{case.method}Request")
        bodies = [case.body, case.body[: len(case.body) // 2]]
        for _ in range(20):  # random damage: both must stop, or count, at the same place
            damaged = bytearray(case.body)
            for _ in range(3):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            bodies.append(bytes(damaged))
        for body in bodies:
            for limit in (0, 1, 500, 1_000, 3_000, 10**9):
                expected = limits.crossing_field(body, request_type, limit)
                assert crossing(body, request_type, limit) == expected, (case.name, limit)
