"""Clearing the running turn's oldest tool results (spec §13.4).

When only the running turn is left and it alone exceeds the budget, its oldest tool results are
cleared one at a time, in row order, never the newest `R`: each keeps its row, role, position and
`tool_call_id`, so every call keeps its answer. Only the changed row is re-priced per result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from turnkeeper.core.pricing import text_tokens, utf8_len
from turnkeeper.core.projection import is_retention_boundary
from turnkeeper.core.rows import (
    CLEARED_TOOL_RESULT,
    TOOL_RESULTS_PREFIX,
    Pricing,
    Row,
    RowKind,
    last_boundary,
    row_estimate,
)
from turnkeeper.core.trimming import layout
from turnkeeper.core.working import WorkingHistory
from turnkeeper.v1 import history_pb2

CARRIER_CLEARED_PREFIX = TOOL_RESULTS_PREFIX + "\n"
"""A cleared `[Tool results]` carrier's content is this, then the cleared text."""

_CLEARED = re.compile(
    re.escape(CLEARED_TOOL_RESULT[0]) + "[0-9]+" + re.escape(CLEARED_TOOL_RESULT[1])
)

NO_RESULT = -1
"""The result index of a chat row, which holds a single result: the row's own content."""


@dataclass(frozen=True, slots=True)
class Clearing:
    """The history after clearing, and how many results were cleared (0: the input itself)."""

    working: WorkingHistory
    cleared: int


def cleared_text(original: str) -> str:
    """A cleared result's content: the original's length in code points, between the two parts."""
    return f"{CLEARED_TOOL_RESULT[0]}{len(original)}{CLEARED_TOOL_RESULT[1]}"


def is_cleared(content: str, carrier: bool) -> bool:
    """Whether a result's content is exactly a cleared text (any count), carriers with their
    prefix and newline."""
    if carrier:
        if not content.startswith(CARRIER_CLEARED_PREFIX):
            return False
        content = content[len(CARRIER_CLEARED_PREFIX) :]
    return _CLEARED.fullmatch(content) is not None


def _chat_of(
    message: history_pb2.ChatMessage | history_pb2.ConversationMessage,
) -> history_pb2.ChatMessage | None:
    if isinstance(message, history_pb2.ChatMessage):
        return message
    return message.chat if message.WhichOneof("message") == "chat" else None


def running_turn_start(working: WorkingHistory) -> int:
    """The first row of the running turn (§13.4): the last retention boundary of §13.1; when none
    remains, the row after the breadcrumb, or with no breadcrumb either, the row after the leading
    system rows (the first row that could belong to a turn)."""
    messages: Sequence[history_pb2.ChatMessage | history_pb2.ConversationMessage] = (
        working.history.conversation.messages
        if working.is_conversation
        else working.history.chat.messages
    )
    for i in range(len(messages) - 1, -1, -1):
        chat = _chat_of(messages[i])
        if chat is not None and is_retention_boundary(chat):
            return i
    return layout(working.rows).prefix


def tool_results(working: WorkingHistory, start: int) -> list[tuple[int, int]]:
    """Every tool result from row `start` on, in row order, as (row, result): a tool row or a
    `[Tool results]` carrier is one result (`NO_RESULT`), a `ToolResults` row one per result."""
    found: list[tuple[int, int]] = []
    if working.is_conversation:
        conversation = working.history.conversation.messages
        for i in range(start, len(conversation)):
            if working.rows[i].kind not in (RowKind.TOOL, RowKind.CARRIER):
                continue
            message = conversation[i]
            if message.WhichOneof("message") == "tool_results":
                found.extend((i, j) for j in range(len(message.tool_results.results)))
            else:
                found.append((i, NO_RESULT))
    else:
        for i in range(start, len(working.rows)):
            if working.rows[i].kind in (RowKind.TOOL, RowKind.CARRIER):
                found.append((i, NO_RESULT))
    return found


def clear_tool_results(working: WorkingHistory, keep_newest: int, stop_tokens: int) -> Clearing:
    """§13.4: the running turn's oldest tool results cleared one at a time in row order, never the
    newest `keep_newest` (counted among all its results), until the estimate is at most
    `stop_tokens` or nothing more may be cleared. A result already cleared, or whose cleared form
    would not estimate less, is skipped."""
    total = working.pricing.total
    if total <= stop_tokens:
        return Clearing(working, 0)
    results = tool_results(working, running_turn_start(working))
    candidates = results[: max(len(results) - max(keep_newest, 0), 0)]
    if not candidates:
        return Clearing(working, 0)

    source = working.history
    conversation = working.is_conversation
    current_from = last_boundary(working.rows) + 1
    # Copied on the first clear only; then changed row by row in place.
    history: history_pb2.History | None = None
    rows = list(working.rows)
    tokens = list(working.pricing.tokens)
    images = list(working.pricing.images)
    cleared = 0
    for i, j in candidates:
        if total <= stop_tokens:
            break
        row = rows[i]
        if j == NO_RESULT:
            message = (
                source.conversation.messages[i].chat if conversation else source.chat.messages[i]
            )
            carrier = row.kind is RowKind.CARRIER
            content = message.content
            if is_cleared(content, carrier):
                continue
            new_content = (CARRIER_CLEARED_PREFIX if carrier else "") + cleared_text(content)
            id_bytes = utf8_len(message.tool_call_id)
            new_bytes = utf8_len(new_content) + id_bytes
            new_row = Row(row.kind, 1, new_bytes, text_tokens(new_bytes), 0, 0)
        else:
            result = source.conversation.messages[i].tool_results.results[j]
            content = result.content
            if is_cleared(content, False):
                continue
            new_content = cleared_text(content)
            id_bytes = utf8_len(result.tool_call_id)
            old_bytes = utf8_len(content) + id_bytes
            new_bytes = utf8_len(new_content) + id_bytes
            new_row = Row(
                row.kind,
                row.provider_rows,
                row.text_bytes - old_bytes + new_bytes,
                row.text_tokens - text_tokens(old_bytes) + text_tokens(new_bytes),
                0,
                row.attachments - len(result.attachments),
            )
        estimate, sent = row_estimate(new_row, i >= current_from)
        if estimate >= tokens[i]:
            continue
        if history is None:
            history = history_pb2.History()
            history.CopyFrom(source)
        _clear(history, conversation, i, j, new_content)
        total += estimate - tokens[i]
        rows[i] = new_row
        tokens[i] = estimate
        images[i] = sent
        cleared += 1
    if history is None:
        return Clearing(working, 0)
    return Clearing(WorkingHistory(history, rows, Pricing(tokens, images)), cleared)


def _clear(
    history: history_pb2.History, conversation: bool, row: int, result: int, content: str
) -> None:
    """Gives one result its cleared content and drops its attachments, in place; everything else
    of the row (role, `tool_call_id`, passthrough, the other results) is kept."""
    target: history_pb2.ChatMessage | history_pb2.ToolResult
    if not conversation:
        target = history.chat.messages[row]
    elif result == NO_RESULT:
        target = history.conversation.messages[row].chat
    else:
        target = history.conversation.messages[row].tool_results.results[result]
    target.content = content
    del target.attachments[:]
