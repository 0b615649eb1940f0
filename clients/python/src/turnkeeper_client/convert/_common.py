"""Pieces shared by the OpenAI and Anthropic converters."""

from __future__ import annotations

import base64
import binascii
import mimetypes
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from turnkeeper.v1 import history_pb2

from ..errors import ConversionError as ConversionError

# The server's default breadcrumb text (docs/semantics.md, Trims).
DEFAULT_BREADCRUMB = "[earlier turns omitted to fit the context window]"
CARRIER_PREFIX = "[Tool results]"
_MARKER_OPEN = "[IMAGE:"

Shape = Literal["chat", "conversation"]
JSONObject = dict[str, Any]


@dataclass(frozen=True)
class ImageRef:
    """An image marker found in user text that the provider format can send as an image."""

    url: str


def sendable_url(ref: str) -> bool:
    """Refs a provider can fetch itself: http(s) and data URLs. Local paths stay marker text,
    because only the runtime can load them."""
    return ref.startswith(("http://", "https://", "data:"))


def split_markers(content: str) -> list[str | ImageRef]:
    """Splits user text into text runs and sendable `[IMAGE:<ref>]` markers, per the server's
    scanning rule: a marker runs from `[IMAGE:` to the first `]`, its ref trimmed."""
    parts: list[str | ImageRef] = []
    text_start = 0
    pos = 0
    while True:
        start = content.find(_MARKER_OPEN, pos)
        if start < 0:
            break
        end = content.find("]", start + len(_MARKER_OPEN))
        if end < 0:
            break
        ref = content[start + len(_MARKER_OPEN) : end].strip()
        if sendable_url(ref):
            if start > text_start:
                parts.append(content[text_start:start])
            parts.append(ImageRef(ref))
            text_start = end + 1
        pos = end + 1
    if text_start < len(content):
        parts.append(content[text_start:])
    return parts


def marker(url: str, where: str) -> str:
    if "]" in url:
        raise ConversionError(f"{where}: image URL contains ']' and cannot be an [IMAGE:] marker")
    return f"{_MARKER_OPEN}{url}]"


def is_carrier(content: str) -> bool:
    return content.startswith(CARRIER_PREFIX)


def marker_text_row(message: history_pb2.ChatMessage) -> bool:
    """A user row whose `[IMAGE:]` markers are plain text: the breadcrumb or a carrier."""
    return message.breadcrumb or is_carrier(message.content)


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def parse_base64_data_url(url: str) -> tuple[str, str] | None:
    """(media_type, base64 payload) of a `data:<type>;base64,<payload>` URL, else None."""
    if not url.startswith("data:"):
        return None
    header, sep, payload = url[len("data:") :].partition(",")
    if not sep or not header.endswith(";base64"):
        return None
    return header[: -len(";base64")], payload


def decode_base64(payload: str, where: str) -> bytes:
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ConversionError(f"{where}: invalid base64 image data") from error


def guess_media_type(uri: str) -> str:
    """Provider URL sources carry no media type; infer it from the path's extension."""
    guessed, _ = mimetypes.guess_type(urlsplit(uri).path)
    return guessed or ""


def attachment_from_url(url: str, where: str) -> history_pb2.Attachment:
    parsed = parse_base64_data_url(url)
    if parsed is not None:
        media_type, payload = parsed
        return history_pb2.Attachment(media_type=media_type, data=decode_base64(payload, where))
    return history_pb2.Attachment(media_type=guess_media_type(url), uri=url)


def attachment_url(attachment: history_pb2.Attachment, where: str) -> str:
    source = attachment.WhichOneof("source")
    if source == "data":
        return data_url(attachment.media_type, attachment.data)
    if source == "uri":
        return attachment.uri
    raise ConversionError(f"{where}: attachment has neither data nor uri")


def expect_str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ConversionError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def expect_mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConversionError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def expect_list(value: object, where: str) -> Sequence[Any]:
    if not isinstance(value, list | tuple):
        raise ConversionError(f"{where}: expected an array, got {type(value).__name__}")
    return value


def chat_rows(history: history_pb2.History) -> list[history_pb2.ChatMessage]:
    """The provider rows a history stands for, in order (the conversation shape flattened:
    `reasoning` and `tool_name` have no provider row field and are left out)."""
    shape = history.WhichOneof("shape")
    if shape == "chat":
        return list(history.chat.messages)
    if shape != "conversation":
        raise ConversionError("history: neither chat nor conversation is set")
    rows: list[history_pb2.ChatMessage] = []
    for i, message in enumerate(history.conversation.messages):
        kind = message.WhichOneof("message")
        if kind == "chat":
            rows.append(message.chat)
        elif kind == "assistant_tool_calls":
            step = message.assistant_tool_calls
            rows.append(
                history_pb2.ChatMessage(
                    role=history_pb2.ROLE_ASSISTANT, content=step.text, tool_calls=step.tool_calls
                )
            )
        elif kind == "tool_results":
            rows.extend(
                history_pb2.ChatMessage(
                    role=history_pb2.ROLE_TOOL,
                    tool_call_id=result.tool_call_id,
                    content=result.content,
                    attachments=result.attachments,
                )
                for result in message.tool_results.results
            )
        else:
            raise ConversionError(f"history.conversation.messages[{i}]: no message set")
    return rows


@dataclass
class Row:
    """A provider row being imported, with the extras only the conversation shape can hold."""

    message: history_pb2.ChatMessage
    reasoning: str = ""


def mark_breadcrumb(rows: Sequence[Row], breadcrumb_texts: Iterable[str]) -> None:
    """Provider formats have no breadcrumb flag: a user row right after the leading system rows
    whose text is a known breadcrumb text is the breadcrumb the server inserted."""
    texts = frozenset(breadcrumb_texts)
    for row in rows:
        message = row.message
        if message.role == history_pb2.ROLE_SYSTEM:
            continue
        if (
            message.role == history_pb2.ROLE_USER
            and message.content in texts
            and not message.attachments
        ):
            message.breadcrumb = True
        return


def build_history(rows: Sequence[Row], shape: Shape) -> history_pb2.History:
    if shape == "chat":
        return history_pb2.History(
            chat=history_pb2.ChatHistory(messages=[row.message for row in rows])
        )
    if shape != "conversation":
        raise ValueError(f"unknown shape {shape!r}")
    out: list[history_pb2.ConversationMessage] = []
    names: dict[str, str] = {}
    for row in rows:
        message = row.message
        if message.role == history_pb2.ROLE_ASSISTANT and message.tool_calls:
            names.update((call.id, call.name) for call in message.tool_calls)
            out.append(
                history_pb2.ConversationMessage(
                    assistant_tool_calls=history_pb2.AssistantToolCalls(
                        text=message.content,
                        tool_calls=message.tool_calls,
                        reasoning=row.reasoning,
                    )
                )
            )
        elif message.role == history_pb2.ROLE_TOOL:
            result = history_pb2.ToolResult(
                tool_call_id=message.tool_call_id,
                tool_name=names.get(message.tool_call_id, ""),
                content=message.content,
                attachments=message.attachments,
            )
            # Adjacent tool rows are one structured ToolResults step.
            if out and out[-1].WhichOneof("message") == "tool_results":
                out[-1].tool_results.results.append(result)
            else:
                out.append(
                    history_pb2.ConversationMessage(
                        tool_results=history_pb2.ToolResults(results=[result])
                    )
                )
        else:
            out.append(history_pb2.ConversationMessage(chat=message))
    return history_pb2.History(conversation=history_pb2.ConversationHistory(messages=out))


def check_exportable(message: history_pb2.ChatMessage, where: str) -> None:
    """Rejects fields the provider formats have no place for on this row's role."""
    if message.tool_call_id and message.role != history_pb2.ROLE_TOOL:
        raise ConversionError(f"{where}: tool_call_id on a non-tool row has no provider field")
    if message.tool_calls and message.role != history_pb2.ROLE_ASSISTANT:
        raise ConversionError(f"{where}: tool_calls on a non-assistant row")
    if message.attachments and not (
        message.role == history_pb2.ROLE_TOOL
        or (message.role == history_pb2.ROLE_USER and is_carrier(message.content))
    ):
        raise ConversionError(f"{where}: attachments on a row that is not a tool or carrier row")
