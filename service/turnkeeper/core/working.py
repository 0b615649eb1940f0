"""A history together with its row view and pricing, kept in step as plans are applied.

Estimates depend on a row's position only through the current user turn, which every trim keeps,
so a plan applied to the rows and their prices yields the output's prices without re-pricing.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnkeeper.core.pricing import price_text
from turnkeeper.core.rows import (
    Pricing,
    Row,
    breadcrumb_row,
    price,
    rows_of,
    with_chat_messages,
    with_conversation_messages,
)
from turnkeeper.core.trimming import TrimPlan, apply_plan
from turnkeeper.v1 import history_pb2


def breadcrumb_message(text: str) -> history_pb2.ChatMessage:
    return history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=text, breadcrumb=True)


def breadcrumb_cost(text: str) -> int:
    return price_text(text)


@dataclass(frozen=True, slots=True)
class WorkingHistory:
    history: history_pb2.History
    rows: list[Row]
    pricing: Pricing

    @classmethod
    def of(cls, history: history_pb2.History) -> WorkingHistory:
        rows = rows_of(history)
        return cls(history, rows, price(rows))

    @property
    def is_conversation(self) -> bool:
        return self.history.WhichOneof("shape") == "conversation"

    def apply(self, plan: TrimPlan, breadcrumb_text: str) -> WorkingHistory:
        if not plan.trimmed:
            return self
        if self.is_conversation:
            conversation = apply_plan(
                self.history.conversation.messages,
                plan,
                lambda: history_pb2.ConversationMessage(chat=breadcrumb_message(breadcrumb_text)),
            )
            history = with_conversation_messages(self.history, conversation)
        else:
            chat = apply_plan(
                self.history.chat.messages, plan, lambda: breadcrumb_message(breadcrumb_text)
            )
            history = with_chat_messages(self.history, chat)
        crumb_tokens = breadcrumb_cost(breadcrumb_text)
        pricing = Pricing(
            apply_plan(self.pricing.tokens, plan, lambda: crumb_tokens),
            apply_plan(self.pricing.images, plan, lambda: 0),
        )
        rows = apply_plan(self.rows, plan, lambda: breadcrumb_row(breadcrumb_text))
        return WorkingHistory(history, rows, pricing)
