"""Differential test of the two engines (issue 8): the native engine answers every request with
the Python engine's bytes, and fails every bad request with the Python engine's status.

Random requests for every history RPC, in both shapes (tool exchanges, markers, attachments,
carriers, breadcrumbs, orphans, passthrough structs, unknown fields), then often damaged on the
wire: truncated, a byte changed, a string made invalid UTF-8, a huge length, a wrong wire type.
A response may differ in bytes only where the request itself is not protobuf's canonical
encoding (the native engine copies kept rows as sent): then both must parse to equal messages.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turnkeeper.core.recovery import plan_recovery
from turnkeeper.core.trimming import TrimPlan
from turnkeeper.server.api import rpcs
from turnkeeper.server.api.responses import Reply
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.contract.limits import DEFAULT_MAX_REQUEST_ITEMS
from turnkeeper.server.contract.wire import encode_varint
from turnkeeper.server.engine import native_available
from turnkeeper.server.engine.python import PythonEngine
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2, trim_pb2

from .test_properties import as_conversation
from .test_properties import histories as valid_histories

if not native_available():
    if shutil.which("cargo") is None:
        pytest.skip("the native engine is not built (no cargo)", allow_module_level=True)
    pytest.fail("the native engine is not built although cargo is here: run `make venv`")

from turnkeeper.server.engine.native import NativeEngine

MAX_ROWS = 40
RPCS: dict[type[Any], Callable[..., Reply]] = {
    svc.EstimateTokensRequest: rpcs.estimate_tokens,
    svc.TrimHistoryRequest: rpcs.trim_history,
    svc.PrepareModelCallRequest: rpcs.prepare_model_call,
    svc.CheckCapacityRequest: rpcs.check_capacity_rpc,
    svc.SweepOrphansRequest: rpcs.sweep_orphans,
}
RESPONSES: dict[type[Any], type[Any]] = {
    svc.EstimateTokensRequest: svc.EstimateTokensResponse,
    svc.TrimHistoryRequest: svc.TrimHistoryResponse,
    svc.PrepareModelCallRequest: svc.PrepareModelCallResponse,
    svc.CheckCapacityRequest: svc.CheckCapacityResponse,
    svc.SweepOrphansRequest: svc.SweepOrphansResponse,
}

texts = st.lists(
    st.sampled_from(["a", "b", " ", "é", "🦀", "[IMAGE:/x.png]", "[IMAGE:rel]", "]", "\n"]),
    max_size=8,
).map("".join)
ids = st.sampled_from(["", "c1", "c2", "c3"])
# §11 low-water fractions: ignored ones (NaN, 0, negative, above 1, infinities), 1, values just
# below 1 and tiny ones, and ordinary grids.
low_waters = st.one_of(
    st.sampled_from(
        [math.nan, 0.0, -0.5, 1.0, 1.5, math.inf, -math.inf, 0.9999999999999999, 5e-324, 1e-300]
    ),
    st.floats(0.01, 0.99),
)
NEAR_2_64 = [2**64 - 1, 2**64 - 2, 2**64 - 2049, 2**63 + 1, 2**53 + 1]
budgets = st.one_of(st.integers(0, 300), st.sampled_from(NEAR_2_64))


@st.composite
def calls(draw: st.DrawFn) -> list[h.ToolCall]:
    return [
        h.ToolCall(id=draw(ids), name=draw(st.sampled_from(["", "f"])), arguments=draw(texts))
        for _ in range(draw(st.integers(0, 2)))
    ]


@st.composite
def passthrough(draw: st.DrawFn, message: Any) -> None:
    if draw(st.integers(0, 4)) == 0:
        message.passthrough.update({"k": draw(texts), "n": draw(st.integers(0, 3))})


@st.composite
def chat_rows(draw: st.DrawFn) -> h.ChatMessage:
    role = draw(st.sampled_from([1, 2, 2, 3, 3, 4, 4, 0, 7]))
    content = draw(st.one_of(texts, texts.map(lambda t: "[Tool results]" + t)))
    row = h.ChatMessage(role=role, content=content)  # type: ignore[arg-type]
    if role == 4 or draw(st.integers(0, 5)) == 0:
        row.tool_call_id = draw(ids)
    if role == 3 or draw(st.integers(0, 8)) == 0:
        row.tool_calls.extend(draw(calls()))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        row.attachments.add(uri="/a.png")
    row.breadcrumb = draw(st.integers(0, 6)) == 0
    row.tool_exchange_summary = draw(st.integers(0, 6)) == 0  # valid on plain assistant rows
    row.pinned = draw(st.integers(0, 5)) == 0  # valid on real user rows (§15.1)
    row.summary = draw(st.integers(0, 8)) == 0  # valid right after the system rows (§15.2)
    draw(passthrough(row))
    return row


@st.composite
def conversation_rows(draw: st.DrawFn) -> h.ConversationMessage:
    kind = draw(st.sampled_from(["chat", "chat", "calls", "results", "empty"]))
    if kind == "chat":
        return h.ConversationMessage(chat=draw(chat_rows()))
    if kind == "calls":
        step = h.AssistantToolCalls(text=draw(texts), tool_calls=draw(calls()))
        if draw(st.booleans()):
            step.reasoning = draw(texts)
        draw(passthrough(step))
        return h.ConversationMessage(assistant_tool_calls=step)
    if kind == "results":
        results = h.ToolResults()
        for _ in range(draw(st.integers(0, 3))):
            result = results.results.add(tool_call_id=draw(ids), content=draw(texts))
            result.tool_name = draw(st.sampled_from(["", "f"]))
            for _ in range(draw(st.sampled_from([0, 0, 1]))):
                result.attachments.add(data=b"\x89PNG")
            draw(passthrough(result))
        return h.ConversationMessage(tool_results=results)
    return h.ConversationMessage()


@st.composite
def histories(draw: st.DrawFn) -> h.History:
    """Half valid tool-heavy histories (trims, breadcrumbs, events; some built for §13's
    projection and clearing, some with §15's pins and summary row), half anything goes."""
    if draw(st.integers(0, 5)) == 0:
        return draw(tool_histories())
    if draw(st.integers(0, 4)) == 0:
        return draw(pinned_histories())
    if draw(st.booleans()):
        valid = draw(valid_histories())
        rows = valid.chat.messages
        if rows and draw(st.booleans()):  # a lost row leaves orphans for the sweep
            del rows[draw(st.integers(0, len(rows) - 1))]
        return as_conversation(valid) if draw(st.booleans()) else valid
    return draw(loose_histories())


@st.composite
def loose_histories(draw: st.DrawFn) -> h.History:
    leading = [h.ChatMessage(role=h.ROLE_SYSTEM, content=draw(texts))] * draw(st.integers(0, 2))
    if draw(st.booleans()):
        rows = leading + draw(st.lists(chat_rows(), max_size=24))
        return h.History(chat=h.ChatHistory(messages=rows))
    conv = [h.ConversationMessage(chat=r) for r in leading]
    conv += draw(st.lists(conversation_rows(), max_size=24))
    return h.History(conversation=h.ConversationHistory(messages=conv))


@st.composite
def profiles(draw: st.DrawFn) -> profile_pb2.Profiles:
    runtime = profile_pb2.RuntimeProfile(
        default_provider="p",
        breadcrumb_text=draw(st.sampled_from(["", "[older turns cut]"])),
    )
    if draw(st.booleans()):
        runtime.max_context_tokens = draw(st.sampled_from([0, 20, 60, 200, 5000, *NEAR_2_64]))
    if draw(st.booleans()):
        runtime.max_history_messages = draw(st.integers(0, 4))
    if draw(st.booleans()):
        runtime.history_trim_low_water = draw(low_waters)
    if draw(st.booleans()):  # §13.1 K
        runtime.keep_tool_context_turns = draw(st.integers(0, 3))
    if draw(st.booleans()):  # §13.4 R
        runtime.keep_running_turn_tool_results = draw(st.integers(0, 3))
    provider = profile_pb2.ProviderProfile(
        alias=draw(st.sampled_from(["p", "p", "p", ""])), model="m"
    )
    if draw(st.booleans()):
        provider.context_window = draw(st.sampled_from([50, 300, 100_000]))
    return profile_pb2.Profiles(runtime=runtime, providers=[provider])


@st.composite
def usages(draw: st.DrawFn) -> trim_pb2.ReportedUsage:
    return trim_pb2.ReportedUsage(
        reported_input_tokens=draw(st.one_of(st.integers(0, 400), st.sampled_from(NEAR_2_64))),
        estimated_input_tokens=draw(st.one_of(st.integers(20, 400), st.just(0))),
        tool_schema_tokens=draw(st.integers(0, 20)),
    )


@st.composite
def requests(draw: st.DrawFn) -> Any:
    history = draw(histories())
    kind = draw(st.sampled_from(sorted(RPCS, key=lambda t: t.DESCRIPTOR.name)))
    if kind is svc.TrimHistoryRequest:
        request = svc.TrimHistoryRequest(
            history=history,
            mode=draw(st.sampled_from([0, 1, 1, 1, 2, 2, 3, 3, 4, 5, 5, 6])),  # type: ignore[arg-type]
            caller_path=draw(st.sampled_from([0, 1, 1, 1, 2, 3])),  # type: ignore[arg-type]
        )
        if request.mode == trim_pb2.TRIM_MODE_ROW_COUNT and draw(st.booleans()):
            request.caller_path = trim_pb2.CALLER_PATH_CHANNEL_SENDER_CACHE
        if draw(st.booleans()):
            explicit = request.explicit_limits
            if draw(st.integers(0, 4)) > 0:
                explicit.budget_tokens = draw(budgets)
            if draw(st.booleans()):
                explicit.max_history_messages = draw(st.integers(0, 4))
            if draw(st.booleans()):
                explicit.history_trim_low_water = draw(low_waters)
            explicit.breadcrumb_text = draw(st.sampled_from(["", "[cut]"]))
        elif draw(st.booleans()):
            request.profiles.CopyFrom(draw(profiles()))
        if request.mode == trim_pb2.TRIM_MODE_REPORTED_USAGE or draw(st.integers(0, 9)) == 0:
            request.reported_usage.CopyFrom(draw(usages()))
        return request
    if kind is svc.PrepareModelCallRequest:
        request = svc.PrepareModelCallRequest(
            history=history,
            profiles=draw(profiles()),
            overflow_recovery=draw(st.booleans()),
            hook_texts=draw(st.lists(texts, max_size=2)),
            tool_schemas=draw(st.lists(texts, max_size=2)),
            reserved_output_tokens=draw(st.sampled_from([0, 10, 40, 150, 1000, 2**64 - 1])),
        )
        if draw(st.integers(0, 3)) == 0:
            request.reported_usage.CopyFrom(draw(usages()))
        return request
    if kind is svc.CheckCapacityRequest:
        return svc.CheckCapacityRequest(history=history, profiles=draw(profiles()))
    return kind(history=history)


@st.composite
def damaged(draw: st.DrawFn, raw: bytes) -> bytes:
    """The request's bytes, often damaged the ways a broken or hostile client damages them."""
    how = draw(st.sampled_from(["none"] * 6 + ["truncate", "byte", "utf8", "huge", "unknown"]))
    if how == "none" or not raw:
        return raw
    at = draw(st.integers(0, len(raw) - 1))
    if how == "truncate":
        return raw[:at]
    if how == "byte":
        return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    if how == "utf8":
        index = raw.find(b"a", at)
        return raw if index < 0 else raw[:index] + b"\xff" + raw[index + 1 :]
    if how == "huge":
        return raw[:at] + b"\x12\xff\xff\xff\xff\x0f" + raw[at:]
    # An unknown field (a varint, a length-delimited or a wire-type-mismatched known number).
    extra = draw(
        st.sampled_from([b"\xf8\x06\x01", encode_varint(99 << 3 | 2) + b"\x01z", b"\x10\x05"])
    )
    return raw[:at] + extra + raw[at:]


def answer(
    engine: Any, request_type: type[Any], raw: bytes, max_items: int = DEFAULT_MAX_REQUEST_ITEMS
) -> tuple[str, Any]:
    try:
        reply = RPCS[request_type](*engine.read(raw, request_type, MAX_ROWS, max_items))
    except RequestError as error:
        status = error.to_status()
        return "error", (status.code, status.details, tuple(status.trailing_metadata))
    return "ok", reply


PYTHON, NATIVE = PythonEngine(), NativeEngine()


@settings(
    max_examples=int(os.environ.get("TURNKEEPER_DIFFERENTIAL_EXAMPLES", "600")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.data())
def test_native_engine_answers_exactly_as_the_python_engine(data: st.DataObject) -> None:
    """Byte-identical responses, identical events, identical error statuses and details."""
    request = data.draw(requests())
    raw = data.draw(damaged(request.SerializeToString()))
    # Often a request-item limit these small requests pass, in the history or elsewhere.
    max_items = data.draw(st.sampled_from([DEFAULT_MAX_REQUEST_ITEMS] * 4 + [1, 2, 4, 8, 16]))
    request_type = type(request)
    expected = answer(PYTHON, request_type, raw, max_items)
    actual = answer(NATIVE, request_type, raw, max_items)
    assert actual[0] == expected[0], (expected, actual)
    if expected[0] == "error":
        assert actual[1] == expected[1]
        return
    want, got = expected[1], actual[1]
    assert got.events == want.events and got.meter == want.meter
    if got.body != want.body:
        # Only a request protobuf would encode differently may come back differently encoded.
        assert request_type.FromString(raw).SerializeToString() != raw
        response_type = RESPONSES[request_type]
        assert response_type.FromString(got.body) == response_type.FromString(want.body)


def test_kept_rows_are_the_request_bytes_unknown_fields_included() -> None:
    """A row's unknown fields (a newer client's) come back untouched: rows are copied as sent."""
    row = h.ChatMessage(role=h.ROLE_USER, content="hi").SerializeToString() + b"\xf8\x06\x07"
    history = b"\x0a" + encode_varint(len(row) + 2) + b"\x0a" + encode_varint(len(row)) + row
    raw = b"\x0a" + encode_varint(len(history)) + history
    reply = answer(NATIVE, svc.SweepOrphansRequest, raw)[1]
    assert row in reply.body
    assert reply.body == answer(PYTHON, svc.SweepOrphansRequest, raw)[1].body


def _same(request: Any) -> trim_pb2.HistoryTrimmed | None:
    """Both engines' replies to a valid request are identical; returns the last event, if any."""
    raw = request.SerializeToString()
    expected = answer(PYTHON, type(request), raw)
    actual = answer(NATIVE, type(request), raw)
    assert actual == expected
    return expected[1].events[-1] if expected[0] == "ok" and expected[1].events else None


def _grid_history(turns: int, conversation: bool) -> h.History:
    rows = [h.ChatMessage(role=h.ROLE_SYSTEM, content="s" * 400)]
    for i in range(turns):
        rows.append(h.ChatMessage(role=h.ROLE_USER, content=f"{i:03d}" + "u" * (40 * (i % 5))))
        rows.append(h.ChatMessage(role=h.ROLE_ASSISTANT, content="a" * (13 * i)))
    history = h.History(chat=h.ChatHistory(messages=rows))
    return as_conversation(history) if conversation else history


@pytest.mark.parametrize("conversation", [False, True])
@pytest.mark.parametrize(
    "fraction", [0.7, 0.5, 0.9999999999999999, 5e-324, 1e-300, 0.13, 1.0, math.nan]
)
def test_low_water_grid_cuts_identically(conversation: bool, fraction: float) -> None:
    """§11 in both engines over a sweep of budgets, turn limits and reported usages (near 2^64 too)."""
    history = _grid_history(18, conversation)  # 37 rows, within MAX_ROWS
    grids = 0
    for budget in [150, 400, 700, 950, 1200, 2**64 - 1]:
        limits = svc.ExplicitLimits(budget_tokens=budget, history_trim_low_water=fraction)
        for mode in (trim_pb2.TRIM_MODE_TOKEN_BUDGET, trim_pb2.TRIM_MODE_REPORTED_USAGE):
            request = svc.TrimHistoryRequest(history=history, mode=mode, explicit_limits=limits)
            if mode == trim_pb2.TRIM_MODE_REPORTED_USAGE:
                request.reported_usage.reported_input_tokens = 2**64 - 1
                request.reported_usage.estimated_input_tokens = 2**63 // 9000 * (1 + budget % 7)
            event = _same(request)
            grids += event is not None and event.cut_step > 0
        for limit in [0, 1, 7, 17]:
            turns = svc.ExplicitLimits(max_history_messages=limit, history_trim_low_water=fraction)
            request = svc.TrimHistoryRequest(
                history=history, mode=trim_pb2.TRIM_MODE_TURN_COUNT, explicit_limits=turns
            )
            event = _same(request)
            grids += event is not None and event.cut_step > 0
        runtime = profile_pb2.RuntimeProfile(
            default_provider="p",
            max_context_tokens=budget,
            max_history_messages=12,
            history_trim_low_water=fraction,
        )
        for reserved, schemas in ((0, []), (300, ['{"name":"f"}']), (2**64 - 1, [])):
            # §12: the room beside reserved output and tool schemas, on the safety window.
            prepare = svc.PrepareModelCallRequest(
                history=history,
                profiles=profile_pb2.Profiles(runtime=runtime),
                reserved_output_tokens=reserved,
                tool_schemas=schemas,
            )
            _same(prepare)
            for reported, estimated in ((2**64 - 1, 2**63 // 4000), (budget, 900), (1, 0)):
                prepare.reported_usage.reported_input_tokens = reported
                prepare.reported_usage.estimated_input_tokens = estimated
                _same(prepare)
    assert (grids > 0) == (0.0 < fraction < 1.0)


def _tiny_history(turns: int, conversation: bool) -> h.History:
    """Turns of two one-byte rows (10 tokens a turn): dropping one saves less than the
    breadcrumb (17) costs, so the trims of §16.1 have a history they would grow."""
    rows = [h.ChatMessage(role=h.ROLE_SYSTEM, content="s")]
    for _ in range(turns):
        rows.append(h.ChatMessage(role=h.ROLE_USER, content="u"))
        rows.append(h.ChatMessage(role=h.ROLE_ASSISTANT, content="a"))
    history = h.History(chat=h.ChatHistory(messages=rows))
    return as_conversation(history) if conversation else history


@pytest.mark.parametrize("conversation", [False, True], ids=["chat", "conversation"])
def test_a_trim_that_would_grow_the_history_is_refused_identically(conversation: bool) -> None:
    """§16.1 and §16.2 in both engines: every caller path and preparation (grid, room, reported
    usage of a grown history, recovery's no saving) over histories whose cheapest cut grows them."""
    refused = 0
    for turns in (2, 3, 4):
        history = _tiny_history(turns, conversation)
        for budget in (1, 10, 20, 24, 25, 30, 45):
            for fraction in (1.0, 0.5):
                limits = svc.ExplicitLimits(budget_tokens=budget, history_trim_low_water=fraction)
                request = svc.TrimHistoryRequest(
                    history=history, mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET, explicit_limits=limits
                )
                _same(request)
                reply = answer(PYTHON, svc.TrimHistoryRequest, request.SerializeToString())[1]
                outcome = svc.TrimHistoryResponse.FromString(reply.body).outcome
                refused += not outcome.trimmed and outcome.tokens_before > budget
                request.mode = trim_pb2.TRIM_MODE_OVERFLOW_RECOVERY
                _same(request)
                request.mode = trim_pb2.TRIM_MODE_REPORTED_USAGE
                # Counted requests smaller than the history (it grew), equal to it, and zeros.
                for reported, estimated in ((60, 12), (9, 9), (100, 300), (0, 9), (9, 0), (1, 1)):
                    request.reported_usage.reported_input_tokens = reported
                    request.reported_usage.estimated_input_tokens = estimated
                    _same(request)
            runtime = profile_pb2.RuntimeProfile(
                default_provider="p", max_context_tokens=budget, history_trim_low_water=0.5
            )
            for reserved in (0, 5, budget - 1):
                prepare = svc.PrepareModelCallRequest(
                    history=history,
                    profiles=profile_pb2.Profiles(runtime=runtime),
                    reserved_output_tokens=reserved,
                    overflow_recovery=reserved == 5,
                )
                _same(prepare)
                prepare.reported_usage.reported_input_tokens = 60
                prepare.reported_usage.estimated_input_tokens = 12
                _same(prepare)
    assert refused > 0


@pytest.mark.parametrize("conversation", [False, True], ids=["chat", "conversation"])
@pytest.mark.parametrize("rpc", ["sweep", "trim"])
def test_unknown_fields_of_the_history_and_its_list_survive_a_rewrite(
    conversation: bool, rpc: str
) -> None:
    """A history that is rewritten (rows swept or trimmed) keeps the unknown fields of the History
    and of its message list, in both engines: nothing the caller sent is silently lost."""
    chat = h.History(
        chat=h.ChatHistory(
            messages=[
                h.ChatMessage(role=h.ROLE_SYSTEM, content="s"),
                h.ChatMessage(role=h.ROLE_USER, content="u1"),
                h.ChatMessage(role=h.ROLE_TOOL, tool_call_id="orphan", content="r"),
                h.ChatMessage(role=h.ROLE_USER, content="u2"),
            ]
        )
    )
    history = as_conversation(chat) if conversation else chat
    list_unknown, history_unknown = b"\xfd\x07abcd", b"\xf8\x06\x07"
    shape = 2 if conversation else 1
    rows = getattr(history, "conversation" if conversation else "chat").SerializeToString()
    rows += list_unknown
    body = b"\x0a" if shape == 1 else b"\x12"
    history_bytes = body + encode_varint(len(rows)) + rows + history_unknown
    if rpc == "sweep":
        request_type: type[Any] = svc.SweepOrphansRequest
        tail = b""
    else:
        request_type = svc.TrimHistoryRequest
        tail = svc.TrimHistoryRequest(
            mode=trim_pb2.TRIM_MODE_TURN_COUNT,
            explicit_limits=svc.ExplicitLimits(max_history_messages=1),
        ).SerializeToString()
    raw = b"\x0a" + encode_varint(len(history_bytes)) + history_bytes + tail
    python, native = answer(PYTHON, request_type, raw), answer(NATIVE, request_type, raw)
    assert python[0] == native[0] == "ok", (python, native)
    assert native[1].body == python[1].body
    assert list_unknown in python[1].body and history_unknown in python[1].body
    response = RESPONSES[request_type].FromString(python[1].body)
    assert response.history != history  # the rows were rewritten


# §13: the projection and the clearing, on tool-heavy histories built for them.
PARSE_ERROR = "[Tool call parse error] bad json"
CLEARED = "[Tool result cleared to fit the context window: 7 characters]"
contents = st.one_of(texts, st.sampled_from(["", "x" * 40, "é" * 9, CLEARED]))


@st.composite
def tool_exchange(draw: st.DrawFn, calls: int) -> list[h.ChatMessage]:
    """An assistant row with `calls` calls (their text maybe empty), then a result for each:
    tool rows or one `[Tool results]` carrier, sometimes with attachments."""
    ids = [f"c{draw(st.integers(0, 99))}" for _ in range(calls)]
    rows = [
        h.ChatMessage(
            role=h.ROLE_ASSISTANT,
            content=draw(texts),
            tool_calls=[h.ToolCall(id=i, name="f", arguments=draw(texts)) for i in ids],
        )
    ]
    if draw(st.integers(0, 4)) == 0:
        carrier = h.ChatMessage(role=h.ROLE_USER, content="[Tool results]" + draw(contents))
        if draw(st.booleans()):
            carrier.content = "[Tool results]\n" + CLEARED
        carrier.attachments.add(uri="/a.png")
        return [*rows, carrier]
    for i in ids:
        if draw(st.integers(0, 6)) == 0:
            continue  # an unanswered call, for the sweep to repair its row
        result = h.ChatMessage(role=h.ROLE_TOOL, tool_call_id=i, content=draw(contents))
        for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
            result.attachments.add(uri="/a.png")
        rows.append(result)
    return rows


@st.composite
def retention_turn(draw: st.DrawFn) -> list[h.ChatMessage]:
    """A prompt, then tool exchanges, parse-error feedback, system rows, an earlier
    preparation's summary, maybe a closing reply; sometimes no tool activity at all."""
    rows = [h.ChatMessage(role=h.ROLE_USER, content=draw(texts) or "u")]
    for _ in range(draw(st.integers(0, 3))):
        part = draw(st.sampled_from(["exchange", "exchange", "parse", "system", "summary", "say"]))
        if part == "exchange":
            rows += draw(tool_exchange(draw(st.integers(0, 3))))
        elif part == "parse":
            rows.append(h.ChatMessage(role=h.ROLE_USER, content=PARSE_ERROR))
        elif part == "system":
            rows.append(h.ChatMessage(role=h.ROLE_SYSTEM, content=draw(texts)))
        elif part == "summary":
            n = draw(st.integers(1, 3))
            rows.append(
                h.ChatMessage(
                    role=h.ROLE_ASSISTANT,
                    content=f"[Tool exchange: {n} tool call(s) \u2014 results collapsed]",
                    tool_exchange_summary=True,
                )
            )
        else:
            rows.append(h.ChatMessage(role=h.ROLE_ASSISTANT, content=draw(texts)))
    if draw(st.booleans()):
        rows.append(h.ChatMessage(role=h.ROLE_ASSISTANT, content=draw(texts)))
    return rows


def _structured(rows: list[h.ChatMessage], merge: bool) -> h.History:
    """The rows in the ConversationMessage shape: calls become steps, tool rows results, a run of
    tool rows one `ToolResults` row when `merge`."""
    out: list[h.ConversationMessage] = []
    for m in rows:
        if m.role == h.ROLE_ASSISTANT and m.tool_calls:
            step = h.AssistantToolCalls(text=m.content, tool_calls=m.tool_calls)
            out.append(h.ConversationMessage(assistant_tool_calls=step))
        elif m.role == h.ROLE_TOOL:
            result = h.ToolResult(
                tool_call_id=m.tool_call_id, content=m.content, attachments=m.attachments
            )
            if merge and out and out[-1].WhichOneof("message") == "tool_results":
                out[-1].tool_results.results.append(result)
            else:
                results = h.ToolResults(results=[result])
                out.append(h.ConversationMessage(tool_results=results))
        else:
            out.append(h.ConversationMessage(chat=m))
    return h.History(conversation=h.ConversationHistory(messages=out))


@st.composite
def tool_histories(draw: st.DrawFn) -> h.History:
    rows = [h.ChatMessage(role=h.ROLE_SYSTEM, content=draw(texts))] * draw(st.integers(0, 2))
    if draw(st.integers(0, 3)) == 0:
        rows.append(h.ChatMessage(role=h.ROLE_USER, content="[cut]", breadcrumb=True))
    if draw(st.integers(0, 4)) == 0:  # rows before the first prompt
        rows += draw(tool_exchange(1))
    for _ in range(draw(st.integers(0, 6))):
        rows += draw(retention_turn())
    shape = draw(st.sampled_from(["chat", "conversation", "merged"]))
    if shape == "chat":
        return h.History(chat=h.ChatHistory(messages=rows))
    return _structured(rows, shape == "merged")


def _views(history: h.History) -> tuple[Any, Any]:
    raw = svc.EstimateTokensRequest(history=history).SerializeToString()
    python = PYTHON.read(raw, svc.EstimateTokensRequest, 10_000)[1]
    native = NATIVE.read(raw, svc.EstimateTokensRequest, 10_000)[1]
    assert hasattr(python, "project") and hasattr(native, "project"), (python, native)
    return python, native


def _same_view(python: Any, native: Any) -> None:
    assert native.history_field(b"tail") == python.history_field(b"tail")
    assert (native.rows, native.system_rows) == (python.rows, python.system_rows)
    assert (native.total_tokens, native.image_tokens, native.turns) == (
        python.total_tokens,
        python.image_tokens,
        python.turns,
    )
    assert native.estimates_field() == python.estimates_field()
    for index in (*range(-1, python.rows + 1), 2**64):
        assert native.tokens_through(index) == python.tokens_through(index)


@settings(
    max_examples=int(os.environ.get("TURNKEEPER_DIFFERENTIAL_EXAMPLES", "600")) // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    tool_histories(),
    st.sampled_from([0, 1, 2, 3, 50, 2**64 - 1]),
    st.sampled_from([0, 1, 2, 5, 2**64]),
    st.one_of(st.integers(0, 400), st.just(2**64 - 1)),
    st.booleans(),
)
def test_projection_and_clearing_are_identical(
    history: h.History, keep_turns: int, keep_newest: int, stop: int, sweep: bool
) -> None:
    """§13.1 and §13.4 in both engines: the same rows, bytes, prices and reports, then the same
    clearing of what the projection sends (and of the history as given)."""
    python, native = _views(history)
    if sweep:  # rows the sweep wrote, projected and cleared in their turn
        (python, _), (native, _) = python.sweep(), native.sweep()
    projected_python, projection_python = python.project(keep_turns)
    projected_native, projection_native = native.project(keep_turns)
    assert tuple(projection_native.collapsed) == tuple(projection_python.collapsed)
    assert projection_native.rows_left_out == projection_python.rows_left_out
    if projection_native.collapsed:  # read from the end, as the breakpoints do
        assert projection_native.collapsed[-1] == projection_python.collapsed[-1]
    assert (projected_native is native) == (projected_python is python)
    _same_view(projected_python, projected_native)
    # Collapsing again changes nothing: a projection sent back is its own projection.
    again_python, again = projected_python.project(keep_turns)
    assert again == projected_native.project(keep_turns)[1]
    assert again_python is projected_python
    for p, n in ((python, native), (projected_python, projected_native)):
        cleared_python, count_python = p.clear_tool_results(keep_newest, stop)
        cleared_native, count_native = n.clear_tool_results(keep_newest, stop)
        assert count_native == count_python
        assert (cleared_native is n) == (cleared_python is p)
        _same_view(cleared_python, cleared_native)


def test_collapsing_and_clearing_happen_in_the_drawn_histories() -> None:
    """The strategy above reaches the interesting cases (so the test can fail)."""
    seen = {"collapsed": 0, "cleared": 0}

    @settings(max_examples=150, deadline=None, database=None)
    @given(tool_histories())
    def probe(history: h.History) -> None:
        python, _ = _views(history)
        projected, projection = python.project(0)
        seen["collapsed"] += bool(projection.collapsed)
        seen["cleared"] += projected.clear_tool_results(0, 0)[1] > 0

    probe()
    assert seen["collapsed"] > 0 and seen["cleared"] > 0


# §15: pinned turns, the summary row and the fixed prefix, on histories built for them.
PIN_PATTERNS = ["none", "first", "several", "all but the newest"]


@st.composite
def pinned_histories(draw: st.DrawFn) -> h.History:
    """Valid histories with pins (none, the first turn, several, every turn but the newest),
    maybe a summary row after the system rows, maybe a breadcrumb right after the head or after
    the leading pinned turns (a trimmed history sent back), in every shape."""
    rows = [h.ChatMessage(role=h.ROLE_SYSTEM, content=draw(texts))] * draw(st.integers(0, 2))
    if draw(st.booleans()):
        rows.append(h.ChatMessage(role=h.ROLE_USER, content=draw(contents), summary=True))
    turns = [draw(retention_turn()) for _ in range(draw(st.integers(1, 7)))]
    pattern = draw(st.sampled_from(PIN_PATTERNS))
    for t, turn in enumerate(turns):
        pinned = {
            "none": False,
            "first": t == 0,
            "several": draw(st.booleans()),
            "all but the newest": t < len(turns) - 1,
        }[pattern]
        # The parse-error feedback inside a turn is a turn boundary of its own (§9): pinned with
        # its prompt, so a breadcrumb after the turn stays valid.
        for row in turn:
            row.pinned = pinned and row.role == h.ROLE_USER and not row.attachments
    lead = next((t for t, turn in enumerate(turns) if not turn[0].pinned), len(turns))
    crumb_before = draw(st.sampled_from([None, 0, lead]))
    for t, turn in enumerate(turns):
        if t == crumb_before:
            rows.append(h.ChatMessage(role=h.ROLE_USER, content="[cut]", breadcrumb=True))
        rows += turn
    shape = draw(st.sampled_from(["chat", "conversation", "merged"]))
    if shape == "chat":
        return h.History(chat=h.ChatHistory(messages=rows))
    return _structured(rows, shape == "merged")


def _plan_fields(plan: TrimPlan) -> tuple[Any, ...]:
    """Every field of a plan, ranges as (start, stop): two empty ranges are equal as ranges."""
    return tuple(
        (v.start, v.stop)
        if isinstance(v, range)
        else tuple((r.start, r.stop) for r in v)
        if isinstance(v, tuple)
        else v
        for v in dataclasses.astuple(plan)
    )


def _same_plans(python: Any, native: Any, plan_python: TrimPlan, plan_native: TrimPlan) -> None:
    """The same plan, and the same history after it (a new breadcrumb's text included)."""
    assert _plan_fields(plan_native) == _plan_fields(plan_python)
    assert plan_native.dropped_messages == plan_python.dropped_messages
    _same_view(python.apply(plan_python, "[cut]"), native.apply(plan_native, "[cut]"))


@settings(
    max_examples=int(os.environ.get("TURNKEEPER_DIFFERENTIAL_EXAMPLES", "600")) // 4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(pinned_histories(), st.sampled_from([1.0, 0.5, 0.9, 0.13]), st.sampled_from([None, 17]))
def test_pinned_trims_are_identical(
    history: h.History, low_water: float, breadcrumb_cost: int | None
) -> None:
    """§15.1 and §15.2 in both engines: every planner's plan and output over budgets around each
    cut, the turn and row limits, recovery, the fixed floor, the pinned tokens and every summary
    request."""
    python, native = _views(history)
    _same_view(python, native)
    assert native.pinned_tokens == python.pinned_tokens
    assert native.fixed_floor_tokens == python.fixed_floor_tokens
    assert native.system_floor_tokens == python.system_floor_tokens
    total = python.total_tokens
    # Budgets around each cut: the estimate left after each row, a token either side, and with
    # room for the breadcrumb.
    budgets = {0, 1, total, 2**64 - 1}
    for index in range(python.rows):
        kept = total - python.tokens_through(index)
        budgets |= {max(kept + d, 0) for d in (-1, 0, 1, 17)}
    for budget in sorted(budgets):
        for allow_growth in (False, True):
            _same_plans(
                python,
                native,
                python.plan_token_budget(budget, breadcrumb_cost, low_water, None, allow_growth),
                native.plan_token_budget(budget, breadcrumb_cost, low_water, None, allow_growth),
            )
    for limit in range(python.turns + 2):
        _same_plans(
            python,
            native,
            python.plan_turn_count(limit, breadcrumb_cost, low_water),
            native.plan_turn_count(limit, breadcrumb_cost, low_water),
        )
    for limit in range(python.rows + 1):
        _same_plans(python, native, python.plan_row_count(limit), native.plan_row_count(limit))
    recovered_python = plan_recovery(python, breadcrumb_cost, budget_tokens=total // 2)
    recovered_native = plan_recovery(native, breadcrumb_cost, budget_tokens=total // 2)
    assert recovered_native.report == recovered_python.report
    _same_plans(python, native, recovered_python.plan, recovered_native.plan)
    # The summary request is asked of the projected history (§15.3), whose summaries the
    # engine wrote: over it too.
    (projected_python, _), (projected_native, _) = python.project(0), native.project(0)
    for p, n in ((python, native), (projected_python, projected_native)):
        assert (n.pinned_tokens, n.fixed_floor_tokens) == (p.pinned_tokens, p.fixed_floor_tokens)
        for stop in range(p.rows + 1):
            for instruction in ("", "Summarize [IMAGE:/x.png] é"):
                _same_view(
                    p.summary_request(stop, instruction), n.summary_request(stop, instruction)
                )


def test_pins_move_and_keep_turns_in_the_drawn_histories() -> None:
    """The strategy above reaches the interesting cases (so the test can fail): pinned turns
    kept inside a drop, a moved breadcrumb, a trim left unchanged by its pins."""
    seen = {"kept": 0, "moved": 0, "all pinned": 0}

    @settings(max_examples=200, deadline=None, database=None)
    @given(pinned_histories())
    def probe(history: h.History) -> None:
        python, _ = _views(history)
        for limit in range(python.turns):
            plan = python.plan_turn_count(limit, 17)
            seen["kept"] += bool(plan.kept_in_drop)
            seen["moved"] += plan.breadcrumb_from is not None
            seen["all pinned"] += not plan.trimmed and python.turns > max(limit, 1)

    probe()
    assert all(seen.values()), seen
