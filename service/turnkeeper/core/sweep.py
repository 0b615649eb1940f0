"""The orphan sweep (spec §8, §10.2): the safety net for histories that were already inconsistent.

Whole-turn retention never separates a call from its result; this repairs histories restored or
edited from outside. Providers accept a tool result only right after the assistant row that called
it, so the sweep works on adjacency: one forward pass decides every row, and a row whose calls wait
on a later `[Tool results]` carrier is settled when its turn ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from turnkeeper.core.rows import (
    RowKind,
    classify_chat,
    with_chat_messages,
    with_conversation_messages,
)
from turnkeeper.v1 import history_pb2, trim_pb2

RESULT_WITHOUT_CALL = trim_pb2.ORPHAN_KIND_TOOL_RESULT_WITHOUT_CALL
CALL_WITHOUT_RESULT = trim_pb2.ORPHAN_KIND_TOOL_CALL_WITHOUT_RESULT

Message = history_pb2.ConversationMessage | history_pb2.ChatMessage


@dataclass(frozen=True, slots=True)
class SweepResult:
    history: history_pb2.History
    removals: list[trim_pb2.OrphanRemoval]


@dataclass(slots=True)
class _Caller:
    """An assistant row with calls, while the run of tool rows right after it is read."""

    index: int
    calls: list[str]
    call_set: frozenset[str]
    answered: set[str] = field(default_factory=set)

    def unanswered(self) -> list[int]:
        return [j for j, call_id in enumerate(self.calls) if call_id not in self.answered]


def _kind(message: Message) -> RowKind | None:
    """The row's class; None for structured tool-call and tool-result rows (classified by shape)."""
    chat = _chat_of(message)
    return None if chat is None else classify_chat(chat)


def sweep(history: history_pb2.History) -> SweepResult:
    conversation = history.WhichOneof("shape") == "conversation"
    messages: Sequence[Message] = (
        history.conversation.messages if conversation else history.chat.messages
    )
    # Per row: the result positions without a call, and the calls without a result.
    orphan_results: dict[int, list[int]] = {}
    unanswered: dict[int, list[int]] = {}
    call_ids: dict[int, list[str]] = {}
    result_ids: dict[int, list[str]] = {}
    caller: _Caller | None = None
    # Callers whose unanswered calls a later `[Tool results]` carrier in this turn would answer.
    waiting: list[_Caller] = []

    def close_run() -> None:
        nonlocal caller
        if caller is not None and caller.unanswered():
            waiting.append(caller)
        caller = None

    def settle(answered_by_carrier: bool) -> None:
        if not answered_by_carrier:
            for pending in waiting:
                unanswered[pending.index] = pending.unanswered()
        waiting.clear()

    for i, message in enumerate(messages):
        kind = _kind(message)
        results = _result_ids(message)
        if results:  # a tool row, or a structured tool-results row
            result_ids[i] = results
            for j, result_id in enumerate(results):
                if caller is not None and result_id in caller.call_set:
                    caller.answered.add(result_id)
                else:
                    orphan_results.setdefault(i, []).append(j)
            continue
        close_run()
        if kind is None or kind is RowKind.ASSISTANT:
            calls = _call_ids(message)
            if calls:
                call_ids[i] = calls
                caller = _Caller(i, calls, frozenset(calls))
        elif kind is RowKind.CARRIER:
            settle(answered_by_carrier=True)
        elif kind is RowKind.USER:
            settle(answered_by_carrier=False)
    close_run()
    settle(answered_by_carrier=False)

    if not orphan_results and not unanswered:
        return SweepResult(history, [])
    removals: list[trim_pb2.OrphanRemoval] = []
    out: list[Message] = []
    for i, message in enumerate(messages):
        dropped_results = orphan_results.get(i, [])
        dropped_calls = unanswered.get(i, [])
        if not dropped_results and not dropped_calls:
            out.append(message)
            continue
        repaired = _without(message, set(dropped_results), set(dropped_calls))
        gone = repaired is None
        for j in dropped_results:
            removals.append(_removal(RESULT_WITHOUT_CALL, i, result_ids[i][j], gone))
        for j in dropped_calls:
            removals.append(_removal(CALL_WITHOUT_RESULT, i, call_ids[i][j], gone))
        if repaired is not None:
            out.append(repaired)
    if conversation:
        conv = [m for m in out if isinstance(m, history_pb2.ConversationMessage)]
        swept = with_conversation_messages(history, conv)
    else:
        chat = [m for m in out if isinstance(m, history_pb2.ChatMessage)]
        swept = with_chat_messages(history, chat)
    return SweepResult(swept, removals)


def _removal(
    kind: trim_pb2.OrphanKind.ValueType, index: int, call_id: str, row_removed: bool
) -> trim_pb2.OrphanRemoval:
    return trim_pb2.OrphanRemoval(
        kind=kind, message_index=index, tool_call_id=call_id, row_removed=row_removed
    )


def _chat_of(
    message: Message,
) -> history_pb2.ChatMessage | None:
    if isinstance(message, history_pb2.ChatMessage):
        return message
    return message.chat if message.WhichOneof("message") == "chat" else None


def _call_ids(message: Message) -> list[str]:
    chat = _chat_of(message)
    if chat is not None:
        return [c.id for c in chat.tool_calls] if chat.role == history_pb2.ROLE_ASSISTANT else []
    assert isinstance(message, history_pb2.ConversationMessage)
    if message.WhichOneof("message") == "assistant_tool_calls":
        return [c.id for c in message.assistant_tool_calls.tool_calls]
    return []


def _result_ids(message: Message) -> list[str]:
    chat = _chat_of(message)
    if chat is not None:
        return [chat.tool_call_id] if chat.role == history_pb2.ROLE_TOOL else []
    assert isinstance(message, history_pb2.ConversationMessage)
    if message.WhichOneof("message") == "tool_results":
        return [r.tool_call_id for r in message.tool_results.results]
    return []


def _without(
    message: Message,
    results: set[int],
    calls: set[int],
) -> Message | None:
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
        repaired_results = history_pb2.ToolResults()
        repaired_results.CopyFrom(message.tool_results)
        del repaired_results.results[:]
        repaired_results.results.extend(kept)
        return history_pb2.ConversationMessage(tool_results=repaired_results)
    step = message.assistant_tool_calls
    kept_calls = [c for j, c in enumerate(step.tool_calls) if j not in calls]
    if not kept_calls and not step.text and not step.reasoning:
        return None
    # Everything but the removed calls is kept: text, reasoning, passthrough, unknown fields.
    repaired_step = history_pb2.AssistantToolCalls()
    repaired_step.CopyFrom(step)
    del repaired_step.tool_calls[:]
    repaired_step.tool_calls.extend(kept_calls)
    return history_pb2.ConversationMessage(assistant_tool_calls=repaired_step)
