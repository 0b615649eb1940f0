"""The orphan sweep (spec §8): the last safety net for histories that were already inconsistent.

Whole-turn retention never separates a call from its result; this repairs histories restored or
edited from outside. Two passes over the rows, so it stays O(n).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnkeeper.core.rows import RowKind, classify_chat
from turnkeeper.v1 import history_pb2, trim_pb2

RESULT_WITHOUT_CALL = trim_pb2.ORPHAN_KIND_TOOL_RESULT_WITHOUT_CALL
CALL_WITHOUT_RESULT = trim_pb2.ORPHAN_KIND_TOOL_CALL_WITHOUT_RESULT


@dataclass(frozen=True, slots=True)
class SweepResult:
    history: history_pb2.History
    removals: list[trim_pb2.OrphanRemoval]


def _kind(message: history_pb2.ConversationMessage | history_pb2.ChatMessage) -> RowKind | None:
    chat = _chat_of(message)
    return None if chat is None else classify_chat(chat)


def _carrier_later_in_turn(kinds: Sequence[RowKind | None]) -> list[bool]:
    """For each row: does a `[Tool results]` carrier follow it within the same turn?"""
    later = [False] * len(kinds)
    seen = False
    for i in range(len(kinds) - 1, -1, -1):
        later[i] = seen
        if kinds[i] is RowKind.CARRIER:
            seen = True
        elif kinds[i] is RowKind.USER:
            seen = False
    return later


def sweep(history: history_pb2.History) -> SweepResult:
    conversation = history.WhichOneof("shape") == "conversation"
    messages: Sequence[history_pb2.ConversationMessage | history_pb2.ChatMessage] = (
        history.conversation.messages if conversation else history.chat.messages
    )
    kinds = [_kind(m) for m in messages]
    carrier_later = _carrier_later_in_turn(kinds)

    # Pass 1: results must follow their call; the kept ones say which calls were answered.
    called: set[str] = set()
    answered: set[str] = set()
    orphan_results: dict[int, list[int]] = {}  # row -> indices of orphan results in that row
    for i, message in enumerate(messages):
        for call_id in _call_ids(message):
            called.add(call_id)
        for j, result_id in enumerate(_result_ids(message)):
            if result_id in called:
                answered.add(result_id)
            else:
                orphan_results.setdefault(i, []).append(j)

    # Pass 2: rebuild, dropping orphan results and unanswered calls.
    removals: list[trim_pb2.OrphanRemoval] = []
    out_chat: list[history_pb2.ChatMessage] = []
    out_conv: list[history_pb2.ConversationMessage] = []
    for i, message in enumerate(messages):
        results = _result_ids(message)
        calls = _call_ids(message)
        dropped_results = orphan_results.get(i, [])
        unanswered = (
            [] if carrier_later[i] else [j for j, c in enumerate(calls) if c not in answered]
        )
        if not dropped_results and not unanswered:
            _append(out_chat, out_conv, message)
            continue
        repaired = _without(message, set(dropped_results), set(unanswered))
        gone = repaired is None
        for j in dropped_results:
            removals.append(_removal(RESULT_WITHOUT_CALL, i, results[j], gone))
        for j in unanswered:
            removals.append(_removal(CALL_WITHOUT_RESULT, i, calls[j], gone))
        if repaired is not None:
            _append(out_chat, out_conv, repaired)

    if not removals:
        return SweepResult(history, [])
    if conversation:
        swept = history_pb2.History(conversation=history_pb2.ConversationHistory(messages=out_conv))
    else:
        swept = history_pb2.History(chat=history_pb2.ChatHistory(messages=out_chat))
    return SweepResult(swept, removals)


def _removal(
    kind: trim_pb2.OrphanKind.ValueType, index: int, call_id: str, row_removed: bool
) -> trim_pb2.OrphanRemoval:
    return trim_pb2.OrphanRemoval(
        kind=kind, message_index=index, tool_call_id=call_id, row_removed=row_removed
    )


def _append(
    out_chat: list[history_pb2.ChatMessage],
    out_conv: list[history_pb2.ConversationMessage],
    message: history_pb2.ConversationMessage | history_pb2.ChatMessage,
) -> None:
    if isinstance(message, history_pb2.ChatMessage):
        out_chat.append(message)
    else:
        out_conv.append(message)


def _chat_of(
    message: history_pb2.ConversationMessage | history_pb2.ChatMessage,
) -> history_pb2.ChatMessage | None:
    if isinstance(message, history_pb2.ChatMessage):
        return message
    return message.chat if message.WhichOneof("message") == "chat" else None


def _call_ids(message: history_pb2.ConversationMessage | history_pb2.ChatMessage) -> list[str]:
    chat = _chat_of(message)
    if chat is not None:
        return [c.id for c in chat.tool_calls] if chat.role == history_pb2.ROLE_ASSISTANT else []
    assert isinstance(message, history_pb2.ConversationMessage)
    if message.WhichOneof("message") == "assistant_tool_calls":
        return [c.id for c in message.assistant_tool_calls.tool_calls]
    return []


def _result_ids(message: history_pb2.ConversationMessage | history_pb2.ChatMessage) -> list[str]:
    chat = _chat_of(message)
    if chat is not None:
        return [chat.tool_call_id] if chat.role == history_pb2.ROLE_TOOL else []
    assert isinstance(message, history_pb2.ConversationMessage)
    if message.WhichOneof("message") == "tool_results":
        return [r.tool_call_id for r in message.tool_results.results]
    return []


def _without(
    message: history_pb2.ConversationMessage | history_pb2.ChatMessage,
    results: set[int],
    calls: set[int],
) -> history_pb2.ConversationMessage | history_pb2.ChatMessage | None:
    """The row without the given results and calls, or None when nothing worth keeping is left."""
    chat = _chat_of(message)
    if chat is not None:
        if results:  # a tool row holds exactly one result
            return None
        kept_calls = [c for j, c in enumerate(chat.tool_calls) if j not in calls]
        if not kept_calls and not chat.content:
            return None
        repaired_chat = history_pb2.ChatMessage()
        repaired_chat.CopyFrom(chat)
        del repaired_chat.tool_calls[:]
        repaired_chat.tool_calls.extend(kept_calls)
        if isinstance(message, history_pb2.ChatMessage):
            return repaired_chat
        return history_pb2.ConversationMessage(chat=repaired_chat)
    assert isinstance(message, history_pb2.ConversationMessage)
    if message.WhichOneof("message") == "tool_results":
        kept = [r for j, r in enumerate(message.tool_results.results) if j not in results]
        if not kept:
            return None
        return history_pb2.ConversationMessage(tool_results=history_pb2.ToolResults(results=kept))
    step = message.assistant_tool_calls
    kept_calls = [c for j, c in enumerate(step.tool_calls) if j not in calls]
    if not kept_calls and not step.text and not step.reasoning:
        return None
    return history_pb2.ConversationMessage(
        assistant_tool_calls=history_pb2.AssistantToolCalls(
            text=step.text, tool_calls=kept_calls, reasoning=step.reasoning
        )
    )
