"""The compact per-row view every decision is made over (spec §0, §1, §9).

A Row keeps only what pricing and turn structure need: its class, how many provider rows it stands
for, its text cost, and its image counts. Both history shapes reduce to the same view.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from turnkeeper.core.pricing import (
    FRAMING_TOKENS,
    TOKENS_PER_IMAGE,
    strip_sent_images,
    text_tokens,
    utf8_len,
)
from turnkeeper.v1 import history_pb2

TOOL_RESULTS_PREFIX = "[Tool results]"
"""A user row starting with this carries tool results for text-only providers (§1)."""

PARSE_ERROR_PREFIX = "[Tool call parse error]"
"""A user row starting with this is the loop's feedback on a malformed call: it belongs to the
turn it interrupts, so it is no retention boundary (§13.1; the trims keep §9's boundaries)."""

TOOL_EXCHANGE_SUMMARY = ("[Tool exchange: ", " tool call(s) \u2014 results collapsed]")
"""The text of a tool-exchange summary row (§13.1) is these two parts around the count N."""

CLEARED_TOOL_RESULT = ("[Tool result cleared to fit the context window: ", " characters]")
"""A cleared tool result's text (§13.4) is these two parts around the original length in code
points; a `[Tool results]` carrier's is the prefix, a newline, then that text."""


class RowKind(enum.Enum):
    SYSTEM = "system"
    USER = "user"
    """A real user row: the start of a turn."""
    CARRIER = "carrier"
    """A `[Tool results]` user row; part of the turn before it."""
    BREADCRUMB = "breadcrumb"
    SUMMARY = "summary"
    """The summary row of §15.2: a user row in the fixed prefix, never a turn boundary, priced as
    text (its image markers are plain text)."""
    ASSISTANT = "assistant"
    TOOL = "tool"


class Row(NamedTuple):
    """One row's view; a NamedTuple because one is built per row on every call."""

    kind: RowKind
    provider_rows: int
    text_bytes: int
    text_tokens: int
    """Sum of ceil(bytes / 4) over the provider rows this row stands for."""
    marker_images: int
    """Loadable `[IMAGE:...]` markers in a real user row: always sent."""
    attachments: int
    """Declared attachments: sent only in the current user turn."""
    pinned: bool = False
    """A pinned real user row (§15.1): every trim keeps its whole turn."""

    @property
    def is_turn_boundary(self) -> bool:
        return self.kind is RowKind.USER


def _calls_bytes(calls: Iterable[history_pb2.ToolCall]) -> int:
    return sum(utf8_len(c.id) + utf8_len(c.name) + utf8_len(c.arguments) for c in calls)


def classify_chat(message: history_pb2.ChatMessage) -> RowKind:
    return _classify(message.role, message.breadcrumb, message.summary, message.content)


def _classify(role: int, breadcrumb: bool, summary: bool, content: str) -> RowKind:
    """A row's kind; on a user row `summary` is read before `breadcrumb` (a row marked both is
    invalid, §15.2) and both before the `[Tool results]` prefix."""
    if role == history_pb2.ROLE_USER:
        if summary:
            return RowKind.SUMMARY
        if breadcrumb:
            return RowKind.BREADCRUMB
        if content.startswith(TOOL_RESULTS_PREFIX):
            return RowKind.CARRIER
        return RowKind.USER
    if role == history_pb2.ROLE_SYSTEM:
        return RowKind.SYSTEM
    if role == history_pb2.ROLE_TOOL:
        return RowKind.TOOL
    return RowKind.ASSISTANT


def chat_row(message: history_pb2.ChatMessage) -> Row:
    # Each field is read once: reading a string field of a protobuf message builds a new str.
    content = message.content
    kind = _classify(message.role, message.breadcrumb, message.summary, content)
    images = 0
    pinned = False
    if kind is RowKind.USER:
        content, images = strip_sent_images(content)
        pinned = message.pinned
    nbytes = utf8_len(content)
    tool_call_id = message.tool_call_id
    if tool_call_id:
        nbytes += utf8_len(tool_call_id)
    calls = message.tool_calls
    if calls:
        nbytes += _calls_bytes(calls)
    attachments = len(message.attachments) if kind in _ATTACHMENT_KINDS else 0
    return Row(kind, 1, nbytes, text_tokens(nbytes), images, attachments, pinned)


_ATTACHMENT_KINDS = (RowKind.TOOL, RowKind.CARRIER)


def conversation_row(message: history_pb2.ConversationMessage) -> Row:
    """A structured row priced as the provider rows it stands for (§9)."""
    which = message.WhichOneof("message")
    if which == "assistant_tool_calls":
        step = message.assistant_tool_calls
        nbytes = utf8_len(step.text) + utf8_len(step.reasoning) + _calls_bytes(step.tool_calls)
        return Row(RowKind.ASSISTANT, 1, nbytes, text_tokens(nbytes), 0, 0)
    if which == "tool_results":
        total_bytes = total_tokens = attachments = 0
        for result in message.tool_results.results:
            nbytes = utf8_len(result.content) + utf8_len(result.tool_call_id)
            total_bytes += nbytes
            total_tokens += text_tokens(nbytes)
            attachments += len(result.attachments)
        results = len(message.tool_results.results)
        return Row(RowKind.TOOL, results, total_bytes, total_tokens, 0, attachments)
    return chat_row(message.chat)


def rows_of(history: history_pb2.History) -> list[Row]:
    if history.WhichOneof("shape") == "conversation":
        return [conversation_row(m) for m in history.conversation.messages]
    return [chat_row(m) for m in history.chat.messages]


@dataclass(frozen=True, slots=True)
class Pricing:
    """Per-row estimates of one history (§9 Estimate of a row, History estimate)."""

    tokens: list[int]
    images: list[int]
    """Images sent per row: markers in real user rows, attachments in the current turn."""

    @property
    def total(self) -> int:
        return sum(self.tokens)

    @property
    def image_tokens(self) -> int:
        return TOKENS_PER_IMAGE * sum(self.images)


def last_boundary(rows: Sequence[Row]) -> int:
    """Index of the last real user row, or -1: rows after it form the current user turn."""
    for i in range(len(rows) - 1, -1, -1):
        if rows[i].is_turn_boundary:
            return i
    return -1


def row_estimate(row: Row, in_current_turn: bool) -> tuple[int, int]:
    """A row's estimate and the images it sends (§9 Estimate of a row): declared attachments are
    sent only when the row is in the current user turn."""
    sent = row.marker_images + (row.attachments if in_current_turn else 0)
    return row.text_tokens + FRAMING_TOKENS * row.provider_rows + TOKENS_PER_IMAGE * sent, sent


def price(rows: Sequence[Row]) -> Pricing:
    current_from = last_boundary(rows) + 1
    tokens: list[int] = []
    images: list[int] = []
    for i, row in enumerate(rows):
        estimate, sent = row_estimate(row, i >= current_from)
        tokens.append(estimate)
        images.append(sent)
    return Pricing(tokens, images)


def breadcrumb_row(text: str) -> Row:
    nbytes = utf8_len(text)
    return Row(RowKind.BREADCRUMB, 1, nbytes, text_tokens(nbytes), 0, 0)


def with_chat_messages(
    history: history_pb2.History, messages: Iterable[history_pb2.ChatMessage]
) -> history_pb2.History:
    """`history` with other chat rows. Every other field the caller sent, unknown fields of the
    History and of its message list included, is kept: nothing sent is silently lost, and the
    native engine, which copies them as sent, answers the same bytes."""
    out = history_pb2.History()
    out.CopyFrom(history)
    del out.chat.messages[:]
    out.chat.messages.extend(messages)
    return out


def with_conversation_messages(
    history: history_pb2.History, messages: Iterable[history_pb2.ConversationMessage]
) -> history_pb2.History:
    """`history` with other conversation rows, everything else kept (see `with_chat_messages`)."""
    out = history_pb2.History()
    out.CopyFrom(history)
    del out.conversation.messages[:]
    out.conversation.messages.extend(messages)
    return out
