"""OpenAI Chat Completions `messages` <-> turnkeeper.v1 History.

See the README's "Converters" section for the exact mapping and what cannot be carried.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from turnkeeper.v1 import history_pb2

from ._common import (
    DEFAULT_BREADCRUMB,
    ConversionError,
    ImageRef,
    JSONObject,
    Row,
    Shape,
    attachment_from_url,
    attachment_url,
    build_history,
    chat_rows,
    check_exportable,
    expect_list,
    expect_mapping,
    expect_str,
    is_carrier,
    mark_breadcrumb,
    marker,
    marker_text_row,
    split_markers,
)

_ROLES = {
    "system": history_pb2.ROLE_SYSTEM,
    # The developer role is the newer name of the system role; turnkeeper treats both alike.
    "developer": history_pb2.ROLE_SYSTEM,
    "user": history_pb2.ROLE_USER,
    "assistant": history_pb2.ROLE_ASSISTANT,
    "tool": history_pb2.ROLE_TOOL,
}


def from_openai(
    messages: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    *,
    shape: Shape = "chat",
    breadcrumb_texts: Iterable[str] = (DEFAULT_BREADCRUMB,),
) -> history_pb2.History:
    """Converts Chat Completions `messages` (or a request object holding them) to a History.

    `breadcrumb_texts`: a user row right after the leading system rows with one of these texts is
    marked as the breadcrumb (pass the profile's `breadcrumb_text` if it sets one; `()` disables).
    """
    if isinstance(messages, Mapping):
        messages = expect_list(messages.get("messages"), "messages")
    rows = [_import_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    mark_breadcrumb(rows, breadcrumb_texts)
    return build_history(rows, shape)


def _import_message(raw: object, where: str) -> Row:
    message = expect_mapping(raw, where)
    role_name = expect_str(message.get("role"), f"{where}.role")
    role = _ROLES.get(role_name)
    if role is None:
        raise ConversionError(f"{where}.role: unsupported role {role_name!r}")
    out = history_pb2.ChatMessage(role=role)
    content = message.get("content")
    if role == history_pb2.ROLE_USER:
        text, images = _import_content(content, f"{where}.content", allow_images=True)
        if is_carrier(_plain_text(text)):
            out.content = _plain_text(text)
            out.attachments.extend(attachment_from_url(url, f"{where}.content") for url in images)
        else:
            out.content = "".join(
                marker(part.url, f"{where}.content") if isinstance(part, ImageRef) else part
                for part in text
            )
    elif role == history_pb2.ROLE_TOOL:
        out.tool_call_id = expect_str(message.get("tool_call_id"), f"{where}.tool_call_id")
        text, images = _import_content(content, f"{where}.content", allow_images=True)
        out.content = _plain_text(text)
        out.attachments.extend(attachment_from_url(url, f"{where}.content") for url in images)
    else:
        text, _ = _import_content(content, f"{where}.content", allow_images=False)
        out.content = _plain_text(text)
    if role == history_pb2.ROLE_ASSISTANT:
        calls = message.get("tool_calls")
        if calls is not None:
            for j, call in enumerate(expect_list(calls, f"{where}.tool_calls")):
                out.tool_calls.append(_import_call(call, f"{where}.tool_calls[{j}]"))
    return Row(out)


def _plain_text(parts: list[str | ImageRef]) -> str:
    return "".join(part for part in parts if isinstance(part, str))


def _import_content(
    content: object, where: str, *, allow_images: bool
) -> tuple[list[str | ImageRef], list[str]]:
    """The text runs and image refs in order, plus the image URLs alone."""
    if content is None:
        return [], []
    if isinstance(content, str):
        return [content], []
    parts: list[str | ImageRef] = []
    images: list[str] = []
    for k, raw in enumerate(expect_list(content, where)):
        part = expect_mapping(raw, f"{where}[{k}]")
        kind = part.get("type")
        if kind == "text":
            parts.append(expect_str(part.get("text"), f"{where}[{k}].text"))
        elif kind == "refusal":
            parts.append(expect_str(part.get("refusal"), f"{where}[{k}].refusal"))
        elif kind == "image_url" and allow_images:
            image = expect_mapping(part.get("image_url"), f"{where}[{k}].image_url")
            url = expect_str(image.get("url"), f"{where}[{k}].image_url.url")
            parts.append(ImageRef(url))
            images.append(url)
        else:
            raise ConversionError(f"{where}[{k}]: unsupported content part type {kind!r}")
    return parts, images


def _import_call(raw: object, where: str) -> history_pb2.ToolCall:
    call = expect_mapping(raw, where)
    kind = call.get("type", "function")
    if kind != "function":
        raise ConversionError(f"{where}.type: unsupported tool call type {kind!r}")
    function = expect_mapping(call.get("function"), f"{where}.function")
    arguments = function.get("arguments", "")
    return history_pb2.ToolCall(
        id=expect_str(call.get("id"), f"{where}.id"),
        name=expect_str(function.get("name"), f"{where}.function.name"),
        arguments=expect_str(arguments, f"{where}.function.arguments"),
    )


def to_openai(history: history_pb2.History) -> list[JSONObject]:
    """Converts a History (either shape) to Chat Completions `messages`."""
    return [_export_row(row, f"messages[{i}]") for i, row in enumerate(chat_rows(history))]


def _image_part(url: str) -> JSONObject:
    return {"type": "image_url", "image_url": {"url": url}}


def _export_row(row: history_pb2.ChatMessage, where: str) -> JSONObject:
    check_exportable(row, where)
    if row.role == history_pb2.ROLE_SYSTEM:
        return {"role": "system", "content": row.content}
    if row.role == history_pb2.ROLE_USER:
        if row.attachments:
            parts: list[JSONObject] = [{"type": "text", "text": row.content}]
            parts.extend(_image_part(attachment_url(a, where)) for a in row.attachments)
            return {"role": "user", "content": parts}
        # Markers are images only in real user rows; in a breadcrumb or carrier they are text.
        pieces = [] if marker_text_row(row) else split_markers(row.content)
        if not any(isinstance(piece, ImageRef) for piece in pieces):
            return {"role": "user", "content": row.content}
        return {
            "role": "user",
            "content": [
                _image_part(piece.url)
                if isinstance(piece, ImageRef)
                else {"type": "text", "text": piece}
                for piece in pieces
            ],
        }
    if row.role == history_pb2.ROLE_ASSISTANT:
        out: JSONObject = {"role": "assistant"}
        if row.tool_calls:
            # Chat Completions sends null content next to tool calls when there is no text.
            out["content"] = row.content or None
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in row.tool_calls
            ]
        else:
            out["content"] = row.content
        return out
    if row.role == history_pb2.ROLE_TOOL:
        content: str | list[JSONObject] = row.content
        if row.attachments:
            content = [{"type": "text", "text": row.content}] if row.content else []
            content.extend(_image_part(attachment_url(a, where)) for a in row.attachments)
        return {"role": "tool", "tool_call_id": row.tool_call_id, "content": content}
    raise ConversionError(f"{where}.role: role {row.role} has no Chat Completions role")
