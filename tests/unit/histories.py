"""Small builders for test histories (both shapes)."""

from __future__ import annotations

from turnkeeper.v1 import history_pb2 as h


def system(text: str = "sys") -> h.ChatMessage:
    return h.ChatMessage(role=h.ROLE_SYSTEM, content=text)


def user(text: str = "hi") -> h.ChatMessage:
    return h.ChatMessage(role=h.ROLE_USER, content=text)


def assistant(text: str = "ok", *calls: tuple[str, str, str]) -> h.ChatMessage:
    return h.ChatMessage(
        role=h.ROLE_ASSISTANT,
        content=text,
        tool_calls=[h.ToolCall(id=i, name=n, arguments=a) for i, n, a in calls],
    )


def tool(call_id: str, text: str = "result", attachments: int = 0) -> h.ChatMessage:
    return h.ChatMessage(
        role=h.ROLE_TOOL,
        content=text,
        tool_call_id=call_id,
        attachments=[h.Attachment(media_type="image/png", uri="/x.png")] * attachments,
    )


def crumb(text: str = "[earlier turns omitted to fit the context window]") -> h.ChatMessage:
    return h.ChatMessage(role=h.ROLE_USER, content=text, breadcrumb=True)


def chat(*messages: h.ChatMessage) -> h.History:
    return h.History(chat=h.ChatHistory(messages=list(messages)))


def conversation(*messages: h.ConversationMessage) -> h.History:
    return h.History(conversation=h.ConversationHistory(messages=list(messages)))


def c_chat(message: h.ChatMessage) -> h.ConversationMessage:
    return h.ConversationMessage(chat=message)


def c_calls(text: str, *calls: tuple[str, str, str], reasoning: str = "") -> h.ConversationMessage:
    return h.ConversationMessage(
        assistant_tool_calls=h.AssistantToolCalls(
            text=text,
            reasoning=reasoning,
            tool_calls=[h.ToolCall(id=i, name=n, arguments=a) for i, n, a in calls],
        )
    )


def c_results(*results: tuple[str, str]) -> h.ConversationMessage:
    return h.ConversationMessage(
        tool_results=h.ToolResults(
            results=[h.ToolResult(tool_call_id=i, tool_name="t", content=c) for i, c in results]
        )
    )


def turn(n: int, size: int = 40) -> list[h.ChatMessage]:
    """One tool-using turn: user, assistant call, tool result, assistant answer."""
    cid = f"call-{n}"
    return [
        user(f"question {n} " + "u" * size),
        assistant("", (cid, "search", '{"q": "x"}')),
        tool(cid, "r" * size),
        assistant("a" * size),
    ]
