"""Applying a compaction plan (spec §15.3 step 4): the runtime's half of PlanCompaction.

The sidecar never calls a model. The runtime sends `plan.summary_request` to its summarizer and
hands the answer to `apply_compaction`, which builds the history to keep from then on. Every
client ships this function and holds it to tests/conformance/compaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from turnkeeper.v1 import history_pb2, history_service_pb2, trim_pb2

from .errors import ConversionError

__all__ = ["apply_compaction"]

Row = TypeVar("Row", history_pb2.ChatMessage, history_pb2.ConversationMessage)


class Kept(NamedTuple):
    """The rows a plan keeps besides the summary row."""

    leading: int
    """The leading system rows, kept first."""
    pinned: list[int]
    """The pinned rows kept after the summary row, as input indices in order."""
    end: int
    """The end of the condensed rows: every row from here on is kept."""


def apply_compaction(
    history: history_pb2.History,
    plan: history_service_pb2.CompactionPlan,
    summary_text: str,
) -> history_pb2.History:
    """The history after the summarizer answered `summary_text` to `plan.summary_request`.

    `history` is the history the plan was made for (the request's own, in either shape). The
    result is its leading system rows, one summary row (a user row marked `summary` holding the
    answer), every pinned turn that stood before the end of the condensed rows (in order), then
    every row after them; the old summary and any breadcrumb before that end are left out, since
    the new summary says what they said. A plan whose ranges do not fit the history (out of
    bounds, unordered, overlapping, or inside the leading system rows) is a `ConversionError`.
    """
    shape = history.WhichOneof("shape")
    if shape == "chat":
        chat_rows = list(history.chat.messages)
        kept = _kept_indices(_leading_system_rows(chat_rows), len(chat_rows), plan)
        summary = _summary_row(summary_text)
        return history_pb2.History(
            chat=history_pb2.ChatHistory(messages=_assemble(chat_rows, kept, summary))
        )
    if shape == "conversation":
        rows = list(history.conversation.messages)
        leading = _leading_system_rows([row.chat if row.HasField("chat") else None for row in rows])
        kept = _kept_indices(leading, len(rows), plan)
        step = history_pb2.ConversationMessage(chat=_summary_row(summary_text))
        return history_pb2.History(
            conversation=history_pb2.ConversationHistory(messages=_assemble(rows, kept, step))
        )
    raise ConversionError("history: neither chat nor conversation is set")


def _summary_row(summary_text: str) -> history_pb2.ChatMessage:
    return history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=summary_text, summary=True)


def _leading_system_rows(rows: Sequence[history_pb2.ChatMessage | None]) -> int:
    count = 0
    while count < len(rows):
        row = rows[count]
        if row is None or row.role != history_pb2.ROLE_SYSTEM:
            break
        count += 1
    return count


def _assemble(rows: Sequence[Row], kept: Kept, summary: Row) -> list[Row]:
    out = list(rows[: kept.leading])
    out.append(summary)
    out.extend(rows[i] for i in kept.pinned)
    out.extend(rows[kept.end :])
    return out


def _kept_indices(leading: int, total: int, plan: history_service_pb2.CompactionPlan) -> Kept:
    """The rows to keep, after checking that the plan's ranges fit the history."""
    if not plan.condensed_rows:
        raise ConversionError("plan.condensed_rows: empty; a plan condenses at least one row")
    condensed = _checked_ranges(plan.condensed_rows, "plan.condensed_rows", leading, total)
    end = condensed[-1].end
    pinned = _checked_ranges(plan.pinned_turns, "plan.pinned_turns", leading, end)
    for i, turn in enumerate(pinned):
        for rows in condensed:
            if turn.start < rows.end and rows.start < turn.end:
                raise ConversionError(
                    f"plan.pinned_turns[{i}]: overlaps the condensed rows "
                    f"[{rows.start}, {rows.end})"
                )
    return Kept(leading, [row for turn in pinned for row in range(turn.start, turn.end)], end)


def _checked_ranges(
    ranges: Sequence[trim_pb2.IndexRange], where: str, first: int, limit: int
) -> Sequence[trim_pb2.IndexRange]:
    """Ranges that are non-empty, ascending, disjoint and within `[first, limit)`."""
    previous_end = first
    for i, index_range in enumerate(ranges):
        if index_range.start >= index_range.end:
            raise ConversionError(
                f"{where}[{i}]: empty range [{index_range.start}, {index_range.end})"
            )
        if index_range.start < previous_end or index_range.end > limit:
            raise ConversionError(
                f"{where}[{i}]: [{index_range.start}, {index_range.end}) is not within "
                f"[{previous_end}, {limit}): the ranges must ascend, disjoint, after the "
                "leading system rows and before the end of the history (pinned turns: before "
                "the end of the condensed rows)"
            )
        previous_end = index_range.end
    return ranges
