"""The request-item limit (contract/limits.py): what counts as an item, the refusal, and the Rust
counter agreeing with the Python one."""

from __future__ import annotations

import random
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.descriptor import FieldDescriptor
from harness.expansion import amplifications
from turnkeeper.server.contract import limits
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2, trim_pb2


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


# The native engine's history RPCs count the history inside the scan that reads it, and the
# other top-level fields while the top level is split: the tests below hold that scan to the
# Python counter, which is what the Python engine refuses by.

HISTORY_REQUESTS = (
    svc.EstimateTokensRequest,
    svc.TrimHistoryRequest,
    svc.PrepareModelCallRequest,
    svc.CheckCapacityRequest,
    svc.SweepOrphansRequest,
)
MAX_FILL_DEPTH = 9
"""Deep enough for a passthrough Value inside a tool result of a conversation row."""


def _filled(message: Any, choice: int, depth: int = 0) -> Any:
    """`message` with every field set (two elements in each repeated field, two map entries),
    from the descriptors alone, so a repeated field added to a proto is in it too; in each oneof
    the member `choice` picks, and nothing deeper than MAX_FILL_DEPTH (Struct and Value nest)."""
    for field in message.DESCRIPTOR.fields:
        if field.containing_oneof is not None:
            members = field.containing_oneof.fields
            if members[choice % len(members)] is not field:
                continue
        value = getattr(message, field.name)
        child = field.message_type
        if child is not None and child.GetOptions().map_entry:
            for key in ("a", "b"):
                entry = child.fields_by_name["value"]
                if entry.message_type is None:
                    value[key] = _scalar(entry)
                elif depth < MAX_FILL_DEPTH:
                    _filled(value[key], choice, depth + 1)
        elif field.is_repeated:
            if child is None:
                value.extend([_scalar(field)] * 2)
            elif depth < MAX_FILL_DEPTH:
                for _ in range(2):
                    _filled(value.add(), choice, depth + 1)
        elif child is not None:
            if depth < MAX_FILL_DEPTH:
                _filled(value, choice, depth + 1)
                value.SetInParent()
        else:
            setattr(message, field.name, _scalar(field))
    return message


def _scalar(field: Any) -> Any:
    kinds = {
        FieldDescriptor.TYPE_STRING: "x",
        FieldDescriptor.TYPE_BYTES: b"x",
        FieldDescriptor.TYPE_BOOL: True,
        FieldDescriptor.TYPE_DOUBLE: 1.5,
        FieldDescriptor.TYPE_FLOAT: 1.5,
    }
    return kinds.get(field.type, 1)


def _every_field(request_type: Any) -> bytes:
    """A request with every counted field, each oneof member in turn: the occurrences follow one
    another on the wire, so the members a later one replaces are there to count too."""
    return b"".join(_filled(request_type(), choice).SerializeToString() for choice in range(6))


def _split(raw: bytes) -> tuple[bytes, bytes]:
    """The top-level history occurrences' bytes and the other fields' bytes."""
    history, rest = bytearray(), bytearray()
    pos = 0
    while pos < len(raw):
        start = pos
        pos = limits._next_top_field(raw, pos, len(raw))
        (history if raw[start] == 0x0A else rest).extend(raw[start:pos])
    return bytes(history), bytes(rest)


def _native_outcome(raw: bytes, request_type: Any, limit: int) -> tuple[str, int | None]:
    from turnkeeper import _native
    from turnkeeper.server.engine.native import CONVENTIONS, ITEM_ROOTS, ITEM_SCHEMA

    root = ITEM_ROOTS[request_type.DESCRIPTOR.full_name]
    scanned = _native.scan(raw, 10**6, CONVENTIONS, (ITEM_SCHEMA, root, limit))
    if isinstance(scanned, _native.TooManyItems):
        return "refused", scanned.field
    return ("malformed" if scanned is None else "scanned"), None


def _expected_outcome(raw: bytes, request_type: Any, limit: int) -> tuple[str, int | None]:
    from turnkeeper import _native
    from turnkeeper.server.engine.native import CONVENTIONS

    number = limits.crossing_field(raw, request_type, limit)
    if number is not None:
        return "refused", number
    return ("malformed" if _native.scan(raw, 10**6, CONVENTIONS) is None else "scanned"), None


def _bodies(request_type: Any) -> list[bytes]:
    raw = _every_field(request_type)
    history, rest = _split(raw)
    assert history and _items(history, request_type) > 0
    # The history first (as protobuf writes it), last, between the other fields, alone, twice.
    cut = limits._next_top_field(rest, 0, len(rest)) if rest else 0
    return [raw, rest + history, rest[:cut] + history + rest[cut:], history, history + history]


@pytest.mark.parametrize("request_type", HISTORY_REQUESTS, ids=lambda t: t.__name__)
def test_the_native_scan_refuses_exactly_where_the_python_counter_does(request_type: Any) -> None:
    """At every allowance from nothing to the whole count, the history and the other fields in
    every order: the same refusal, naming the same field, and a scan when it passes."""
    pytest.importorskip("turnkeeper._native")
    for body in _bodies(request_type):
        total = _items(body, request_type)
        for limit in range(total + 2):
            expected = _expected_outcome(body, request_type, limit)
            assert _native_outcome(body, request_type, limit) == expected, (body, limit)
        assert _expected_outcome(body, request_type, total) == ("scanned", None)


@pytest.mark.parametrize("request_type", HISTORY_REQUESTS, ids=lambda t: t.__name__)
def test_the_native_scan_agrees_on_damaged_requests(request_type: Any) -> None:
    """Broken framing, bad UTF-8 or depth before or after the allowance is passed: refused
    where the Python counter passes it first, left to the decoder otherwise, on both sides."""
    pytest.importorskip("turnkeeper._native")
    rng = random.Random(request_type.__name__)
    for body in _bodies(request_type):
        total = _items(body, request_type)
        damaged = [body[:cut] for cut in range(0, len(body), max(1, len(body) // 40))]
        for _ in range(60):
            changed = bytearray(body)
            for _ in range(rng.randint(1, 3)):
                changed[rng.randrange(len(changed))] = rng.choice([0xFF, 0x80, 0x00, 0x0A, 0x12])
            damaged.append(bytes(changed))
        for raw in damaged:
            for limit in {0, 1, total // 3, total // 2, total - 1, total, 10**9}:
                expected = _expected_outcome(raw, request_type, limit)
                assert _native_outcome(raw, request_type, limit) == expected, (raw, limit)


def _prepare(rows: int, hooks: int, history_first: bool = True) -> bytes:
    """A PrepareModelCall of `rows` empty chat rows and `hooks` empty hook texts (two bytes an
    item, so a small allowance is passed), the history first or after the hook texts."""
    history = h.History(chat=h.ChatHistory(messages=[h.ChatMessage()] * rows))
    history_bytes = svc.PrepareModelCallRequest(history=history).SerializeToString()
    hook_bytes = svc.PrepareModelCallRequest(hook_texts=[""] * hooks).SerializeToString()
    return history_bytes + hook_bytes if history_first else hook_bytes + history_bytes


@pytest.mark.parametrize(
    ("rows", "hooks", "history_first", "field"),
    [
        (3_000, 10, True, "history"),  # inside the history
        (10, 3_000, True, "hook_texts"),  # inside the other fields
        (3_000, 3_000, True, "history"),  # both over: the first in wire order
        (3_000, 3_000, False, "hook_texts"),
        (1_200, 1_200, True, "hook_texts"),  # neither alone, both together
        (1_200, 1_200, False, "history"),
    ],
)
def test_both_engines_refuse_with_the_same_error(
    rows: int, hooks: int, history_first: bool, field: str
) -> None:
    pytest.importorskip("turnkeeper._native")
    from turnkeeper.server.engine.native import NativeEngine
    from turnkeeper.server.engine.python import PythonEngine

    raw = _prepare(rows, hooks, history_first)
    max_items = 2_000 - len(raw) // limits.BYTES_PER_EXTRA_ITEM
    statuses = []
    for engine in (PythonEngine(), NativeEngine()):
        with pytest.raises(RequestError) as raised:
            engine.read(raw, svc.PrepareModelCallRequest, 10**6, max_items)
        assert [v.field for v in raised.value.violations] == [field]
        assert raised.value.metadata["items_allowed"] == "2000"
        status = raised.value.to_status()
        statuses.append((status.code, status.details, tuple(status.trailing_metadata)))
    assert statuses[0] == statuses[1]
    # An allowance of every item passes on both.
    at_the_limit = rows + hooks - len(raw) // limits.BYTES_PER_EXTRA_ITEM
    for engine in (PythonEngine(), NativeEngine()):
        engine.read(raw, svc.PrepareModelCallRequest, 10**6, at_the_limit)
