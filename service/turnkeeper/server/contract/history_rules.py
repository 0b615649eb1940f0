"""The history rules of docs/conventions.md "Validation rules": what a history must satisfy.

The Python engine checks a parsed history here (`history_violations`); the native engine finds the
same violations in the request bytes and names each by its rule, and `history_rule_violation`
gives it the reason and the description. Every violation is found before anything is raised (see
`Violations`), in row order.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from turnkeeper.core.rows import TOOL_RESULTS_PREFIX, RowKind, classify_chat
from turnkeeper.core.trimming import fixed_prefix_breadcrumb
from turnkeeper.server.contract.errors import Reason, Violation, Violations, violation
from turnkeeper.v1 import errors_pb2, history_pb2

INVALID_HISTORY = errors_pb2.ERROR_REASON_INVALID_HISTORY
REQUEST_TOO_LARGE = errors_pb2.ERROR_REASON_REQUEST_TOO_LARGE

_ROLES = frozenset(history_pb2.Role.values()) - {history_pb2.ROLE_UNSPECIFIED}


class HistoryRule(enum.StrEnum):
    """The history rules (docs/conventions.md), by the names both engines report them under. The
    native engine finds violations in the request bytes and names them by its own enum
    (`turnkeeper._native.HISTORY_RULES`, the same set: a unit test compares them); the reason and
    the description of each are here."""

    HISTORY_REQUIRED = "history_required"
    TOO_MANY_ROWS = "too_many_rows"
    ROLE = "role"
    TOOL_CALL_ID = "tool_call_id"
    TOOL_CALLS = "tool_calls"
    CALL_ID = "call_id"
    CALL_NAME = "call_name"
    ATTACHMENTS = "attachments"
    BREADCRUMB_ROLE = "breadcrumb_role"
    BREADCRUMB_PLACE = "breadcrumb_place"
    RESULTS_REQUIRED = "results_required"
    RESULT_ID = "result_id"
    MESSAGE_REQUIRED = "message_required"
    TOOL_EXCHANGE_SUMMARY = "tool_exchange_summary"
    PINNED = "pinned"
    SUMMARY = "summary"


# Every rule but TOO_MANY_ROWS, whose description names the row counts (`_too_many_rows`).
HISTORY_RULES: dict[HistoryRule, tuple[Reason, str]] = {
    HistoryRule.HISTORY_REQUIRED: (
        INVALID_HISTORY,
        "A history is required, in the chat or the conversation shape.",
    ),
    HistoryRule.ROLE: (
        INVALID_HISTORY,
        "The role must be ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT or ROLE_TOOL.",
    ),
    HistoryRule.TOOL_CALL_ID: (
        INVALID_HISTORY,
        "A tool row needs the tool_call_id of the call it answers.",
    ),
    HistoryRule.TOOL_CALLS: (INVALID_HISTORY, "Only assistant rows can carry tool calls."),
    HistoryRule.CALL_ID: (INVALID_HISTORY, "A tool call needs a non-empty id."),
    HistoryRule.CALL_NAME: (INVALID_HISTORY, "A tool call needs a non-empty name."),
    HistoryRule.ATTACHMENTS: (
        INVALID_HISTORY,
        "Attachments are allowed only on tool rows and on user rows whose content starts with "
        f"{TOOL_RESULTS_PREFIX}.",
    ),
    HistoryRule.BREADCRUMB_ROLE: (INVALID_HISTORY, "Only a user row can be the breadcrumb."),
    HistoryRule.BREADCRUMB_PLACE: (
        INVALID_HISTORY,
        "The breadcrumb must directly follow the leading system rows, the summary row and the "
        "pinned turns before it, and there can be only one.",
    ),
    HistoryRule.RESULTS_REQUIRED: (
        INVALID_HISTORY,
        "A tool_results row needs at least one result.",
    ),
    HistoryRule.RESULT_ID: (
        INVALID_HISTORY,
        "A tool result needs the tool_call_id of the call it answers.",
    ),
    HistoryRule.MESSAGE_REQUIRED: (
        INVALID_HISTORY,
        "A conversation row needs one of chat, assistant_tool_calls or tool_results.",
    ),
    HistoryRule.TOOL_EXCHANGE_SUMMARY: (
        INVALID_HISTORY,
        "Only an assistant row without tool calls can be a tool-exchange summary.",
    ),
    HistoryRule.PINNED: (
        INVALID_HISTORY,
        "Only a real user row can be pinned: it pins its whole turn.",
    ),
    HistoryRule.SUMMARY: (
        INVALID_HISTORY,
        "The summary row must be a user row directly after the leading system rows, before any "
        "breadcrumb, and there can be only one.",
    ),
}


def _rule(rule: HistoryRule, field: str) -> Violation:
    reason, description = HISTORY_RULES[rule]
    return violation(reason, field, description)


def _too_many_rows(path: str, count: int, max_rows: int) -> Violation:
    return violation(
        REQUEST_TOO_LARGE,
        path,
        f"The history has {count} rows; this server accepts at most {max_rows}.",
    )


def history_rule_violation(rule: HistoryRule, path: str, count: int, max_rows: int) -> Violation:
    """A violation the native engine found, named by its rule."""
    if rule is HistoryRule.TOO_MANY_ROWS:
        return _too_many_rows(path, count, max_rows)
    return _rule(rule, path)


def _tool_call_violations(
    calls: Sequence[history_pb2.ToolCall], path: str, out: Violations
) -> None:
    for j, call in enumerate(calls):
        if out.full:  # a row can hold a million calls: count the rest without naming them
            out.total += (not call.id) + (not call.name)
            continue
        if not call.id:
            out.append(_rule(HistoryRule.CALL_ID, f"{path}[{j}].id"))
        if not call.name:
            out.append(_rule(HistoryRule.CALL_NAME, f"{path}[{j}].name"))


class _Slots(NamedTuple):
    """Where the marked rows of the fixed prefix may stand (§15.1, §15.2), as row indices."""

    summary: int
    """Right after the leading system rows."""
    breadcrumb: int
    """`fixed_prefix_breadcrumb` after them and the summary row; -1 when no place is valid."""


def _slots(kinds: Sequence[RowKind], pins: Sequence[bool]) -> _Slots:
    system_rows = _leading_run(kind is RowKind.SYSTEM for kind in kinds)
    head = system_rows
    if head < len(kinds) and kinds[head] is RowKind.SUMMARY:
        head += 1
    offset = fixed_prefix_breadcrumb((kinds[i], pins[i]) for i in range(head, len(kinds)))
    return _Slots(system_rows, -1 if offset is None else head + offset)


def _chat_row_violations(
    row: history_pb2.ChatMessage, path: str, index: int, slots: _Slots, out: Violations
) -> None:
    """One chat row, at `index` of the history."""
    role = row.role
    if role not in _ROLES:
        out.append(_rule(HistoryRule.ROLE, f"{path}.role"))
    if role == history_pb2.ROLE_TOOL and not row.tool_call_id:
        out.append(_rule(HistoryRule.TOOL_CALL_ID, f"{path}.tool_call_id"))
    if row.tool_calls:
        if role != history_pb2.ROLE_ASSISTANT:
            out.append(_rule(HistoryRule.TOOL_CALLS, f"{path}.tool_calls"))
        else:
            _tool_call_violations(row.tool_calls, f"{path}.tool_calls", out)
    if row.attachments and classify_chat(row) not in (RowKind.TOOL, RowKind.CARRIER):
        out.append(_rule(HistoryRule.ATTACHMENTS, f"{path}.attachments"))
    if row.breadcrumb:
        if role != history_pb2.ROLE_USER:
            out.append(_rule(HistoryRule.BREADCRUMB_ROLE, f"{path}.breadcrumb"))
        elif index != slots.breadcrumb:
            out.append(_rule(HistoryRule.BREADCRUMB_PLACE, f"{path}.breadcrumb"))
    if row.pinned and classify_chat(row) is not RowKind.USER:
        out.append(_rule(HistoryRule.PINNED, f"{path}.pinned"))
    if row.summary and (role != history_pb2.ROLE_USER or index != slots.summary):
        out.append(_rule(HistoryRule.SUMMARY, f"{path}.summary"))
    # The mark is the projection's own (§13.1): a summary stands for calls, so it carries none.
    if row.tool_exchange_summary and (
        role != history_pb2.ROLE_ASSISTANT or row.tool_calls or row.breadcrumb
    ):
        out.append(_rule(HistoryRule.TOOL_EXCHANGE_SUMMARY, f"{path}.tool_exchange_summary"))


def _conversation_row_violations(
    row: history_pb2.ConversationMessage, path: str, index: int, slots: _Slots, out: Violations
) -> None:
    kind = row.WhichOneof("message")
    if kind == "chat":
        _chat_row_violations(row.chat, f"{path}.chat", index, slots, out)
    elif kind == "assistant_tool_calls":
        _tool_call_violations(
            row.assistant_tool_calls.tool_calls, f"{path}.assistant_tool_calls.tool_calls", out
        )
    elif kind == "tool_results":
        results = row.tool_results.results
        if not results:
            out.append(_rule(HistoryRule.RESULTS_REQUIRED, f"{path}.tool_results.results"))
        for j, result in enumerate(results):
            if not result.tool_call_id:
                out.append(
                    _rule(HistoryRule.RESULT_ID, f"{path}.tool_results.results[{j}].tool_call_id")
                )
    else:
        out.append(_rule(HistoryRule.MESSAGE_REQUIRED, f"{path}.message"))


def _leading_run(flags: Iterable[bool]) -> int:
    """Length of the leading run of true flags; stops reading at the first false one."""
    count = 0
    for flag in flags:
        if not flag:
            break
        count += 1
    return count


def history_violations(history: history_pb2.History, path: str, max_rows: int) -> Violations:
    """Every violation of the history rules, in row order; `path` names the History field.

    A history over `max_rows` rows gets only the size violation: its rows are not inspected.
    """
    out = Violations()
    shape = history.WhichOneof("shape")
    if shape is None:
        out.append(_rule(HistoryRule.HISTORY_REQUIRED, path))
        return out
    count = len(history.chat.messages if shape == "chat" else history.conversation.messages)
    if count > max_rows:
        out.append(_too_many_rows(path, count, max_rows))
        return out
    base = f"{path}.{shape}.messages"
    # The summary row and the breadcrumb each have one place they may stand (§15.1, §15.2).
    if shape == "chat":
        chat_rows = history.chat.messages
        slots = _slots([classify_chat(row) for row in chat_rows], [row.pinned for row in chat_rows])
        for i, chat_row in enumerate(chat_rows):
            _chat_row_violations(chat_row, f"{base}[{i}]", i, slots, out)
    else:
        rows = history.conversation.messages
        chats = [row.chat if row.WhichOneof("message") == "chat" else None for row in rows]
        slots = _slots(
            [RowKind.ASSISTANT if chat is None else classify_chat(chat) for chat in chats],
            [chat is not None and chat.pinned for chat in chats],
        )
        for i, row in enumerate(rows):
            _conversation_row_violations(row, f"{base}[{i}]", i, slots, out)
    return out
