"""What PrepareModelCall reports of its projection (spec §13.3), on both engines, where the spec
leaves the figure open: a summary can cost more than the short exchange it stands for."""

from __future__ import annotations

import pytest
from turnkeeper.server.api import rpcs
from turnkeeper.server.engine import create_engine, native_available
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2 as p

ENGINES = ["python", "native"] if native_available() else ["python"]


def _turn(prompt: str, call_id: str) -> list[h.ChatMessage]:
    call = h.ToolCall(id=call_id, name="f", arguments="{}")
    return [
        h.ChatMessage(role=h.ROLE_USER, content=prompt),
        h.ChatMessage(role=h.ROLE_ASSISTANT, tool_calls=[call]),
        h.ChatMessage(role=h.ROLE_TOOL, tool_call_id=call_id, content="ok"),
        h.ChatMessage(role=h.ROLE_ASSISTANT, content="done"),
    ]


def _prepare(engine_name: str, keep: int) -> svc.PrepareModelCallResponse:
    rows = [*_turn("a", "c1"), *_turn("b", "c2"), h.ChatMessage(role=h.ROLE_USER, content="c")]
    request = svc.PrepareModelCallRequest(
        history=h.History(chat=h.ChatHistory(messages=rows)),
        profiles=p.Profiles(runtime=p.RuntimeProfile(keep_tool_context_turns=keep)),
    )
    engine = create_engine(engine_name)
    message, source = engine.read(request.SerializeToString(), svc.PrepareModelCallRequest, 1000)
    return svc.PrepareModelCallResponse.FromString(rpcs.prepare_model_call(message, source).body)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_collapse_that_costs_more_reports_no_saving(engine: str) -> None:
    response = _prepare(engine, keep=0)
    assert response.collapse.collapsed_turns == 2
    assert response.collapse.rows_left_out == 4
    summaries = [m for m in response.history.chat.messages if m.tool_exchange_summary]
    assert len(summaries) == 2
    # The two short exchanges cost less than their two summaries: the request grew.
    assert response.context_meter.used_tokens > response.tokens_before
    assert response.collapse.saved_tokens == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_nothing_collapsed_reports_no_collapse(engine: str) -> None:
    response = _prepare(engine, keep=2)
    assert not response.HasField("collapse")
    assert len(response.history.chat.messages) == 9
