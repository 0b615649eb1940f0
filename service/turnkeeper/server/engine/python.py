"""The reference engine: protobuf parses the whole request, the pure-Python core does the history
work (`turnkeeper.core`), behind the interface of `protocol.py`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import Message

from turnkeeper.core.clearing import clear_tool_results
from turnkeeper.core.pricing import FRAMING_TOKENS, TOKENS_PER_IMAGE
from turnkeeper.core.projection import project_working
from turnkeeper.core.rows import with_chat_messages, with_conversation_messages
from turnkeeper.core.sweep import sweep
from turnkeeper.core.trimming import (
    TrimPlan,
    fixed_floor,
    layout,
    pinned_tokens,
    pinned_turns,
    plan_row_count,
    plan_token_budget,
    plan_turn_count,
)
from turnkeeper.core.working import WorkingHistory
from turnkeeper.server import allocator
from turnkeeper.server.contract import history_rules, limits, wire
from turnkeeper.server.engine.protocol import (
    NO_PROJECTION,
    PYTHON,
    HistorySource,
    Projection,
    TurnSpan,
)
from turnkeeper.v1 import history_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

M = TypeVar("M", bound=Message)


@dataclass(frozen=True, slots=True)
class PythonHistoryView:
    """The reference engine: the core's row view over a parsed History message."""

    working: WorkingHistory

    @property
    def total_tokens(self) -> int:
        return self.working.pricing.total

    @property
    def image_tokens(self) -> int:
        return self.working.pricing.image_tokens

    @property
    def turns(self) -> int:
        return sum(1 for row in self.working.rows if row.is_turn_boundary)

    @property
    def system_floor_tokens(self) -> int:
        return sum(self.working.pricing.tokens[: layout(self.working.rows).system_rows])

    @property
    def pinned_tokens(self) -> int:
        return pinned_tokens(self.working.rows, self.working.pricing.tokens)

    @property
    def fixed_floor_tokens(self) -> int:
        return fixed_floor(self.working.rows, self.working.pricing.tokens)

    @property
    def summary_row(self) -> int | None:
        lay = layout(self.working.rows)
        return lay.system_rows if lay.head > lay.system_rows else None

    def turn_spans(self) -> tuple[TurnSpan, ...]:
        rows = self.working.rows
        lay = layout(rows)
        # The fixed prefix holds pinned turns only; B's turns carry their own pins.
        prefix = [span for span in pinned_turns(lay, rows).spans if span.stop <= lay.prefix]
        return (
            *(TurnSpan(span, True) for span in prefix),
            *(TurnSpan(lay.turn_span(t), lay.pinned[t]) for t in range(lay.turns)),
        )

    def summary_request(self, stop: int, instruction: str) -> PythonHistoryView:
        """Rows 0 to `stop` (exclusive), then one user row holding `instruction` (§15.3), priced
        anew: the instruction row starts the current user turn."""
        history = self.working.history
        prompt = history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=instruction)
        if self.working.is_conversation:
            conversation = history.conversation.messages
            request = with_conversation_messages(
                history, [*conversation[:stop], history_pb2.ConversationMessage(chat=prompt)]
            )
        else:
            request = with_chat_messages(history, [*history.chat.messages[:stop], prompt])
        return PythonHistoryView(WorkingHistory.of(request))

    def plan_token_budget(
        self,
        budget: int,
        breadcrumb_cost: int | None,
        low_water: float = 1.0,
        step_budget: int | None = None,
        allow_growth: bool = False,
    ) -> TrimPlan:
        w = self.working
        return plan_token_budget(
            w.rows, w.pricing, budget, breadcrumb_cost, low_water, step_budget, allow_growth
        )

    def plan_turn_count(
        self, limit: int, breadcrumb_cost: int | None, low_water: float = 1.0
    ) -> TrimPlan:
        w = self.working
        return plan_turn_count(w.rows, w.pricing, limit, breadcrumb_cost, low_water)

    def plan_row_count(self, limit: int) -> TrimPlan:
        return plan_row_count(self.working.rows, self.working.pricing, limit)

    def apply(self, plan: TrimPlan, breadcrumb_text: str) -> PythonHistoryView:
        return PythonHistoryView(self.working.apply(plan, breadcrumb_text))

    def sweep(self) -> tuple[PythonHistoryView, list[trim_pb2.OrphanRemoval]]:
        swept = sweep(self.working.history)
        if not swept.removals:
            return self, []
        return PythonHistoryView(WorkingHistory.of(swept.history)), swept.removals

    @property
    def rows(self) -> int:
        return len(self.working.rows)

    @property
    def system_rows(self) -> int:
        return layout(self.working.rows).system_rows

    def tokens_through(self, index: int) -> int:
        return sum(self.working.pricing.tokens[: index + 1]) if index >= 0 else 0

    def project(self, keep_turns: int) -> tuple[PythonHistoryView, Projection]:
        working, projected = project_working(self.working, keep_turns)
        if not projected.collapsed:
            return self, NO_PROJECTION
        return PythonHistoryView(working), Projection(projected.collapsed, projected.rows_left_out)

    def clear_tool_results(
        self, keep_newest: int, stop_tokens: int
    ) -> tuple[PythonHistoryView, int]:
        clearing = clear_tool_results(self.working, keep_newest, stop_tokens)
        if not clearing.cleared:
            return self, 0
        return PythonHistoryView(clearing.working), clearing.cleared

    def history_field(self, tail: bytes = b"") -> bytes:
        return wire.length_delimited(1, self.working.history.SerializeToString(), tail)

    def estimates_field(self) -> bytes:
        pricing = self.working.pricing
        estimates = [
            trim_pb2.MessageEstimate(
                provider_rows=row.provider_rows,
                text_bytes=row.text_bytes,
                text_tokens=row.text_tokens,
                framing_tokens=FRAMING_TOKENS * row.provider_rows,
                images=images,
                image_tokens=TOKENS_PER_IMAGE * images,
                total_tokens=tokens,
                turn_boundary=row.is_turn_boundary,
            )
            for row, tokens, images in zip(
                self.working.rows, pricing.tokens, pricing.images, strict=True
            )
        ]
        return svc.EstimateTokensResponse(messages=estimates).SerializeToString()


def python_history_source(history: history_pb2.History, max_rows: int) -> HistorySource:
    violations = history_rules.history_violations(history, "history", max_rows)
    if violations.total:
        return violations
    return PythonHistoryView(WorkingHistory.of(history))


class PythonEngine:
    """protobuf parses the whole request; the pure-Python core does the history work."""

    name = PYTHON

    def read(
        self,
        raw: bytes,
        request_type: type[M],
        max_rows: int,
        max_items: int = limits.DEFAULT_MAX_REQUEST_ITEMS,
    ) -> tuple[M, HistorySource]:
        allocator.before_work(len(raw))
        # protobuf parses everything: the items are counted on the wire before it does.
        limits.check_items(raw, request_type, max_items)
        request = wire.decode(raw, request_type)
        history: history_pb2.History = getattr(request, "history")  # noqa: B009 (typed field)
        return request, python_history_source(history, max_rows)
