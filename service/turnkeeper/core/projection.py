"""Tool context retention: the request-time projection of spec §13.1.

Every turn older than the newest `K + 1` retention turns is sent as its prompt, one tool-exchange
summary in place of its tool calls and results, and its closing reply. A turn collapses as a unit,
so no call or result is ever separated from its partner, and a collapsed turn sent back projects
to the same rows (the projection is idempotent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import NamedTuple

from turnkeeper.core.rows import (
    PARSE_ERROR_PREFIX,
    TOOL_EXCHANGE_SUMMARY,
    Pricing,
    Row,
    RowKind,
    chat_row,
    classify_chat,
    conversation_row,
    row_estimate,
    with_chat_messages,
    with_conversation_messages,
)
from turnkeeper.core.working import WorkingHistory
from turnkeeper.v1 import history_pb2

Message = history_pb2.ChatMessage | history_pb2.ConversationMessage

SUMMARY_SOURCE = -1
"""The source of a projected row that is a new tool-exchange summary (it has no input row)."""


class CollapsedTurn(NamedTuple):
    """One turn the §13.1 projection collapsed, in the history it was given and in the projection:
    its prompt row starts both ranges, which run to one past the turn's last row. A NamedTuple,
    like `rows.Row`: a long history collapses a turn for every few rows."""

    input_start: int
    input_stop: int
    output_start: int
    output_stop: int


@dataclass(frozen=True, slots=True)
class Projected:
    """A projection: the history to send, the turns collapsed (oldest first), the rows left out
    (every drained row of a collapsed turn), and for each projected row the index of the input
    row it copies, or `SUMMARY_SOURCE`. Nothing collapsed: the input history itself."""

    history: history_pb2.History
    collapsed: tuple[CollapsedTurn, ...]
    rows_left_out: int
    sources: list[int]


class _Step(NamedTuple):
    """What the projection needs of one row."""

    kind: RowKind
    boundary: bool
    """A retention boundary of §13.1."""
    reply: bool
    """Could close a turn: a chat assistant row without tool calls."""
    assistant: bool
    """An assistant row of any form (a summary takes the place of the first drained one)."""
    calls: int
    results: int
    """Tool results it holds: a tool row or a carrier holds one, a `ToolResults` row each of its."""

    @property
    def tool_activity(self) -> bool:
        return self.calls > 0 or self.results > 0


def is_retention_boundary(message: Message) -> bool:
    """A §0 turn boundary (a real user row) that is not the loop's parse-error feedback (§13.1)."""
    if isinstance(message, history_pb2.ChatMessage):
        return _chat_step(message).boundary
    return _conversation_step(message).boundary


def _chat_step(message: history_pb2.ChatMessage) -> _Step:
    kind = classify_chat(message)
    if kind is RowKind.ASSISTANT:
        calls = len(message.tool_calls)
        return _Step(kind, False, calls == 0, True, calls, 0)
    boundary = kind is RowKind.USER and not message.content.startswith(PARSE_ERROR_PREFIX)
    results = 1 if kind in (RowKind.TOOL, RowKind.CARRIER) else 0
    return _Step(kind, boundary, False, False, 0, results)


def _conversation_step(message: history_pb2.ConversationMessage) -> _Step:
    which = message.WhichOneof("message")
    if which == "assistant_tool_calls":
        calls = len(message.assistant_tool_calls.tool_calls)
        # Never a closing reply, even without calls: the reply of this shape is a chat row.
        return _Step(RowKind.ASSISTANT, False, False, True, calls, 0)
    if which == "tool_results":
        results = len(message.tool_results.results)
        return _Step(RowKind.TOOL, False, False, False, 0, results)
    return _chat_step(message.chat)


def summary_message(calls: int) -> history_pb2.ChatMessage:
    """The tool-exchange summary of a turn whose drained rows hold `calls` tool calls (§13.1)."""
    content = f"{TOOL_EXCHANGE_SUMMARY[0]}{calls}{TOOL_EXCHANGE_SUMMARY[1]}"
    return history_pb2.ChatMessage(
        role=history_pb2.ROLE_ASSISTANT, content=content, tool_exchange_summary=True
    )


def project(history: history_pb2.History, keep_turns: int) -> Projected:
    """The §13.1 projection with `K = keep_turns`, in either shape."""
    conversation = history.WhichOneof("shape") == "conversation"
    if conversation:
        steps = [_conversation_step(m) for m in history.conversation.messages]
    else:
        steps = [_chat_step(m) for m in history.chat.messages]
    boundaries = [i for i, step in enumerate(steps) if step.boundary]
    kept_from = len(boundaries) - max(keep_turns, 0) - 1
    unchanged = Projected(history, (), 0, list(range(len(steps))))
    if kept_from <= 0:
        return unchanged

    # Rows before the first boundary (the leading system rows, the summary row of §15.2, the
    # breadcrumb) are copied: the summary row is never projected.
    sources = list(range(boundaries[0]))
    summaries: dict[int, int] = {}  # output index -> N
    collapsed: list[CollapsedTurn] = []
    left_out = 0
    for start, stop in pairwise(boundaries[: kept_from + 1]):
        # A pinned turn of the fixed prefix ends with its breadcrumb (§15.1): the closing reply
        # is the row before it.
        last = stop - 2 if steps[stop - 1].kind is RowKind.BREADCRUMB else stop - 1
        closing = last if last > start and steps[last].reply else None
        drained = [
            i
            for i in range(start + 1, stop)
            if i != closing and steps[i].kind is not RowKind.BREADCRUMB
        ]
        # A turn collapsed earlier and sent back drains to its one summary, which has no tool
        # activity (the history rule keeps calls off a summary): it is copied, as §13.1 asks.
        if not drained or not any(steps[i].tool_activity for i in drained):
            sources.extend(range(start, stop))
            continue
        calls = sum(steps[i].calls for i in drained)
        count = max(calls or sum(steps[i].results for i in drained), 1)
        output_start = len(sources)
        sources.append(start)
        for i in range(start + 1, stop):
            if i == drained[0] and steps[i].assistant:
                summaries[len(sources)] = count
                sources.append(SUMMARY_SOURCE)
            elif i == closing or steps[i].kind is RowKind.BREADCRUMB:
                sources.append(i)
        left_out += len(drained)
        collapsed.append(CollapsedTurn(start, stop, output_start, len(sources)))
    if not collapsed:
        return unchanged
    sources.extend(range(boundaries[kept_from], len(steps)))

    if conversation:
        conv = history.conversation.messages
        projected = with_conversation_messages(
            history,
            (
                history_pb2.ConversationMessage(chat=summary_message(summaries[out]))
                if source == SUMMARY_SOURCE
                else conv[source]
                for out, source in enumerate(sources)
            ),
        )
    else:
        rows = history.chat.messages
        projected = with_chat_messages(
            history,
            (
                summary_message(summaries[out]) if source == SUMMARY_SOURCE else rows[source]
                for out, source in enumerate(sources)
            ),
        )
    return Projected(projected, tuple(collapsed), left_out, sources)


def project_working(working: WorkingHistory, keep_turns: int) -> tuple[WorkingHistory, Projected]:
    """`project` over a priced history, the projection priced without re-pricing its kept rows:
    the current user turn of §9 lies in the copied tail, so every kept row keeps its estimate."""
    projected = project(working.history, keep_turns)
    if not projected.collapsed:
        return working, projected
    rows: list[Row] = []
    tokens: list[int] = []
    images: list[int] = []
    out_messages: Sequence[Message] = (
        projected.history.conversation.messages
        if working.is_conversation
        else projected.history.chat.messages
    )
    for out, source in enumerate(projected.sources):
        if source == SUMMARY_SOURCE:
            message = out_messages[out]
            row = (
                conversation_row(message)
                if isinstance(message, history_pb2.ConversationMessage)
                else chat_row(message)
            )
            rows.append(row)
            estimate, sent = row_estimate(row, False)
            tokens.append(estimate)
            images.append(sent)
        else:
            rows.append(working.rows[source])
            tokens.append(working.pricing.tokens[source])
            images.append(working.pricing.images[source])
    return WorkingHistory(projected.history, rows, Pricing(tokens, images)), projected
