"""Requests shared by the live tests."""

from __future__ import annotations

from turnkeeper.v1 import history_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc


def three_turns() -> history_pb2.History:
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="be brief")]
    for turn in range(3):
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"q{turn} " * 40))
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content="a" * 160))
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def budget_trim(session_id: str, budget: int = 60) -> svc.TrimHistoryRequest:
    """A token-budget trim on the agent path that drops turns, so it publishes an event."""
    return svc.TrimHistoryRequest(
        history=three_turns(),
        mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
        caller_path=trim_pb2.CALLER_PATH_AGENT,
        explicit_limits=svc.ExplicitLimits(budget_tokens=budget),
        caller=trim_pb2.CallerContext(session_id=session_id, runtime_id="pytest"),
    )
