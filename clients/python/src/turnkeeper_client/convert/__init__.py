"""Converters between turnkeeper.v1 histories and the formats runtimes keep on disk."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ._common import (
    CARRIER_PREFIX,
    DEFAULT_BREADCRUMB,
    ConversionError,
    Shape,
    TurnMarks,
    chat_rows,
    plain_json,
    turn_marks,
)
from .anthropic import AnthropicConversation, from_anthropic, to_anthropic
from .openai_chat import from_openai, to_openai
from .openai_responses import OPAQUE_ITEMS, from_openai_responses, to_openai_responses

Format = Literal["openai", "openai_responses", "anthropic", "proto"]

__all__ = [
    "CARRIER_PREFIX",
    "DEFAULT_BREADCRUMB",
    "AnthropicConversation",
    "ConversionError",
    "Format",
    "Shape",
    "TurnMarks",
    "chat_rows",
    "detect_format",
    "from_anthropic",
    "from_openai",
    "from_openai_responses",
    "to_anthropic",
    "to_openai",
    "to_openai_responses",
    "turn_marks",
]

_PROTO_KEYS = frozenset({"history", "chat", "conversation"})
_OPENAI_ROLES = frozenset({"system", "developer", "tool", "function"})
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "image", "thinking", "redacted_thinking"})
_RESPONSES_ITEMS = frozenset(
    {"message", "function_call", "function_call_output", "function_call_result", "reasoning"}
    | OPAQUE_ITEMS
)
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file"})


def detect_format(data: object) -> Format:
    """Guesses the format of parsed JSON: the proto JSON mapping (a History, or a request with a
    `history`), Anthropic Messages, OpenAI Responses items (an `input` array, or items with a
    Responses `type`), or OpenAI Chat Completions (the default when several fit: a plain
    user/assistant text exchange means the same in all)."""
    data = plain_json(data)
    messages: object = data
    if isinstance(data, Mapping):
        if _PROTO_KEYS & data.keys():
            return "proto"
        if "system" in data:
            return "anthropic"
        if "input" in data and "messages" not in data:
            return "openai_responses"
        messages = data.get("messages")
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        raise ConversionError(
            "unrecognised input: expected a proto History/request, an OpenAI messages array or "
            "request, or an Anthropic Messages request"
        )
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        if message.get("type") in _RESPONSES_ITEMS:
            return "openai_responses"
        if message.get("role") in _OPENAI_ROLES or message.get("tool_calls") is not None:
            return "openai"
        content: Any = message.get("content")
        if isinstance(content, list):
            for part in content:
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind in _ANTHROPIC_BLOCKS:
                    return "anthropic"
                if kind in _RESPONSES_PARTS:
                    return "openai_responses"
                if kind == "image_url":
                    return "openai"
    return "openai"
