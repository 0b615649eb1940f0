"""PlanCompaction (spec §15.3) on the Python engine: §11's history (a 104-token system row, ten
turns of two 104-token rows), budget 2,000, the first turn pinned."""

from __future__ import annotations

import grpc
import pytest
from turnkeeper.core.compaction import DEFAULT_SUMMARY_INSTRUCTION
from turnkeeper.server.api.compaction import plan_compaction
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.engine.python import python_history_source
from turnkeeper.v1 import events_pb2, profile_pb2
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc

ROW = "x" * 400  # 104 tokens


def history(pinned_first: bool = True) -> h.History:
    rows = [h.ChatMessage(role=h.ROLE_SYSTEM, content=ROW)]
    for turn in range(10):
        rows.append(h.ChatMessage(role=h.ROLE_USER, content=ROW, pinned=pinned_first and not turn))
        rows.append(h.ChatMessage(role=h.ROLE_ASSISTANT, content=ROW))
    return h.History(chat=h.ChatHistory(messages=rows))


def request(
    budget: int = 2_000, window: int = 8_000, **fields: object
) -> svc.PlanCompactionRequest:
    profiles = profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(max_context_tokens=budget, default_provider="p"),
        providers=[profile_pb2.ProviderProfile(alias="p", model="m", context_window=window)],
    )
    return svc.PlanCompactionRequest(profiles=profiles, **fields)  # type: ignore[arg-type]


def answer(
    call: svc.PlanCompactionRequest, chat: h.History | None = None
) -> tuple[svc.PlanCompactionResponse, object]:
    reply = plan_compaction(call, python_history_source(chat or history(), 10_000))
    return svc.PlanCompactionResponse.FromString(reply.body), reply.meter


def test_plan_condenses_the_dropped_turn_and_keeps_the_pinned_one_out() -> None:
    response, meter = answer(request(summary_output_tokens=100))
    plan = response.plan
    assert [(r.start, r.end) for r in plan.condensed_rows] == [(3, 5)]
    assert [(r.start, r.end) for r in plan.pinned_turns] == [(1, 3)]
    assert plan.condensed_turns == 1
    assert plan.saved_tokens == 208 - 100
    rows = plan.summary_request.chat.messages
    assert len(rows) == 6 and rows[-1].content == DEFAULT_SUMMARY_INSTRUCTION
    assert response.resolution.budget_tokens == 2_000
    assert meter is not None
    assert isinstance(meter[2], events_pb2.CompactionPlanned)  # type: ignore[index]


def test_nothing_to_condense_when_no_trim_drops_a_turn() -> None:
    response, meter = answer(request(budget=100_000, window=200_000))
    assert response.refusal.reason == svc.COMPACTION_REFUSAL_REASON_NOTHING_TO_CONDENSE
    assert meter is None


def test_no_saving_below_the_minimum() -> None:
    response, _ = answer(request(min_saved_tokens=1))  # 208 - 2,000 reserved: 0
    refusal = response.refusal
    assert (refusal.reason, refusal.saved_tokens, refusal.min_saved_tokens) == (
        svc.COMPACTION_REFUSAL_REASON_NO_SAVING,
        0,
        1,
    )


def test_too_large_with_the_sizes() -> None:
    response, _ = answer(request(window=2_100))
    refusal = response.refusal
    assert refusal.reason == svc.COMPACTION_REFUSAL_REASON_TOO_LARGE
    assert refusal.capacity_tokens == 2_100
    assert refusal.request_tokens > 2_100


def test_a_profile_instruction_ends_the_request() -> None:
    call = request()
    call.profiles.runtime.summary_instruction = "sum up"
    response, _ = answer(call)
    assert response.plan.summary_request.chat.messages[-1].content == "sum up"


def test_a_session_switch_without_a_provider_is_invalid() -> None:
    call = request()
    call.summarizer_selection.session_switch.model = "m"
    with pytest.raises(RequestError) as caught:
        answer(call)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "summarizer_selection.session_switch.provider" in str(caught.value.to_status())
