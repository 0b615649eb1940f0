"""The provider conversations of the SDK-dump converter vectors, built from the real `openai` and
`anthropic` SDKs' objects, the way the SDKs' tool-loop examples keep them: request params as dicts,
the responses' objects appended as they came back.

`test_sdk_objects.py` checks that each vector's `provider` is these objects' `model_dump()`, and
that passing the objects themselves converts like the dicts their SDK sends for them. Each builder
returns the list as a runtime would hold it (SDK objects in it) for one vector.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from anthropic.types import RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock
from openai.types.chat import ChatCompletionMessage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseReasoningItem,
)

WEATHER_ARGS = '{"city":"Paris"}'


def openai_chat_tool_loop() -> list[Any]:
    """A Chat Completions tool loop: the assistant's tool call and its answer are the SDK's
    `ChatCompletionMessage` objects as the API returned them (`refusal: null`)."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        ChatCompletionMessage.model_validate(
            {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": WEATHER_ARGS},
                    }
                ],
            }
        ),
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C, clear"},
        ChatCompletionMessage.model_validate(
            {"role": "assistant", "content": "21 C and clear.", "refusal": None, "annotations": []}
        ),
    ]


def openai_chat_refusal() -> list[Any]:
    """A refusal (`content: null`) and params whose optional keys a caller set to None."""
    return [
        {"role": "developer", "content": "Answer in French.", "name": None},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": None}},
            ],
            "name": None,
        },
        ChatCompletionMessage.model_validate(
            {"role": "assistant", "content": None, "refusal": "I can't describe that."}
        ),
    ]


def openai_responses_tool_loop() -> list[Any]:
    """A Responses tool loop: `input += response.output` (reasoning, function call, message)."""
    return [
        {"role": "user", "content": "Weather in Paris?"},
        ResponseReasoningItem.model_validate(
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "Look it up."}],
            }
        ),
        ResponseFunctionToolCall.model_validate(
            {
                "id": "fc_1",
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": WEATHER_ARGS,
                "status": "completed",
            }
        ),
        {"type": "function_call_output", "call_id": "call_1", "output": "21 C, clear"},
        ResponseOutputMessage.model_validate(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "21 C and clear.", "annotations": []}],
            }
        ),
    ]


def anthropic_tool_loop() -> dict[str, Any]:
    """An Anthropic tool loop with extended thinking: `{"role": "assistant", "content":
    response.content}` holds the SDK's `ThinkingBlock`, `TextBlock` and `ToolUseBlock`."""
    return {
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    ThinkingBlock(type="thinking", thinking="Look it up.", signature="sig-1"),
                    TextBlock(type="text", text="Checking."),
                    ToolUseBlock(
                        type="tool_use", id="toolu_1", name="get_weather", input={"city": "Paris"}
                    ),
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "21 C, clear",
                        "is_error": None,
                        "cache_control": None,
                    }
                ],
            },
            {"role": "assistant", "content": [TextBlock(type="text", text="21 C and clear.")]},
        ],
    }


def anthropic_redacted_thinking() -> dict[str, Any]:
    """Redacted thinking beside a tool call, answered by a tool result without content."""
    return {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Go.", "cache_control": None}]},
            {
                "role": "assistant",
                "content": [
                    RedactedThinkingBlock(type="redacted_thinking", data="opaque"),
                    ToolUseBlock(type="tool_use", id="toolu_2", name="run", input={}),
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": None}],
            },
        ],
    }


# Vector name -> (format, shape, builder).
SDK_VECTORS: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "openai-chat-sdk-dump-tool-loop": ("openai_chat", "chat", openai_chat_tool_loop),
    "openai-chat-sdk-dump-refusal-null-keys": ("openai_chat", "conversation", openai_chat_refusal),
    "openai-responses-sdk-dump-output-items": (
        "openai_responses",
        "conversation",
        openai_responses_tool_loop,
    ),
    "anthropic-sdk-dump-thinking-tool-loop": ("anthropic", "chat", anthropic_tool_loop),
    "anthropic-sdk-dump-redacted-thinking-null-content": (
        "anthropic",
        "conversation",
        anthropic_redacted_thinking,
    ),
}


def dumped(value: Any) -> Any:
    """`value` with every SDK object replaced by its `model_dump()` (None-valued keys and all)."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if isinstance(value, dict):
        return {key: dumped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [dumped(item) for item in value]
    return value
