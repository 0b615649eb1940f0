"""Anthropic Messages (`system` + `messages`) <-> turnkeeper.v1 History.

See the README's "Converters" section for the exact mapping and what cannot be carried.
"""

from __future__ import annotations

import json
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
    attachment_url,
    build_history,
    chat_rows,
    check_exportable,
    decode_base64,
    expect_list,
    expect_mapping,
    expect_str,
    guess_media_type,
    is_carrier,
    mark_breadcrumb,
    marker,
    marker_text_row,
    parse_base64_data_url,
    split_markers,
)


def from_anthropic(
    request: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    shape: Shape = "chat",
    breadcrumb_texts: Iterable[str] = (DEFAULT_BREADCRUMB,),
) -> history_pb2.History:
    """Converts an Anthropic Messages request (`system` and `messages`; other keys are ignored),
    or a bare `messages` array, to a History.

    `breadcrumb_texts`: a user row right after the system rows with one of these texts is marked
    as the breadcrumb (pass the profile's `breadcrumb_text` if it sets one; `()` disables).
    With `shape="conversation"`, `thinking` blocks become the `reasoning` of tool-calling steps.
    """
    rows: list[Row] = []
    if isinstance(request, Mapping):
        system = request.get("system")
        if isinstance(system, str):
            rows.append(Row(history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content=system)))
        elif system is not None:
            for k, raw in enumerate(expect_list(system, "system")):
                block = expect_mapping(raw, f"system[{k}]")
                if block.get("type") != "text":
                    raise ConversionError(f"system[{k}]: only text blocks are supported")
                text = expect_str(block.get("text"), f"system[{k}].text")
                rows.append(
                    Row(history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content=text))
                )
        messages = expect_list(request.get("messages"), "messages")
    else:
        messages = request
    for i, raw in enumerate(messages):
        where = f"messages[{i}]"
        message = expect_mapping(raw, where)
        role = message.get("role")
        if role == "user":
            rows.extend(_import_user(message.get("content"), f"{where}.content"))
        elif role == "assistant":
            rows.append(_import_assistant(message.get("content"), f"{where}.content"))
        else:
            raise ConversionError(f"{where}.role: unsupported role {role!r}")
    mark_breadcrumb(rows, breadcrumb_texts)
    return build_history(rows, shape)


def _image_url(block: Mapping[str, Any], where: str) -> tuple[str, history_pb2.Attachment]:
    """The image as a marker URL and as an attachment."""
    source = expect_mapping(block.get("source"), f"{where}.source")
    kind = source.get("type")
    if kind == "base64":
        media_type = expect_str(source.get("media_type"), f"{where}.source.media_type")
        payload = expect_str(source.get("data"), f"{where}.source.data")
        attachment = history_pb2.Attachment(
            media_type=media_type, data=decode_base64(payload, f"{where}.source.data")
        )
        return f"data:{media_type};base64,{payload}", attachment
    if kind == "url":
        url = expect_str(source.get("url"), f"{where}.source.url")
        return url, history_pb2.Attachment(media_type=guess_media_type(url), uri=url)
    raise ConversionError(f"{where}.source.type: unsupported image source {kind!r}")


def _import_user(content: object, where: str) -> list[Row]:
    if isinstance(content, str):
        return [Row(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=content))]
    rows: list[Row] = []
    # Text and image blocks between tool results form one user row.
    pending: list[tuple[str | ImageRef, history_pb2.Attachment | None]] = []

    def flush() -> None:
        if not pending:
            return
        plain = "".join(part for part, _ in pending if isinstance(part, str))
        row = history_pb2.ChatMessage(role=history_pb2.ROLE_USER)
        if is_carrier(plain):
            row.content = plain
            row.attachments.extend(a for _, a in pending if a is not None)
        else:
            row.content = "".join(
                marker(part.url, where) if isinstance(part, ImageRef) else part
                for part, _ in pending
            )
        rows.append(Row(row))
        pending.clear()

    for k, raw in enumerate(expect_list(content, where)):
        block = expect_mapping(raw, f"{where}[{k}]")
        kind = block.get("type")
        if kind == "text":
            pending.append((expect_str(block.get("text"), f"{where}[{k}].text"), None))
        elif kind == "image":
            url, attachment = _image_url(block, f"{where}[{k}]")
            pending.append((ImageRef(url), attachment))
        elif kind == "tool_result":
            flush()
            rows.append(Row(_import_tool_result(block, f"{where}[{k}]")))
        else:
            raise ConversionError(f"{where}[{k}]: unsupported user block type {kind!r}")
    flush()
    return rows


def _import_tool_result(block: Mapping[str, Any], where: str) -> history_pb2.ChatMessage:
    row = history_pb2.ChatMessage(
        role=history_pb2.ROLE_TOOL,
        tool_call_id=expect_str(block.get("tool_use_id"), f"{where}.tool_use_id"),
    )
    content = block.get("content")
    if content is None or isinstance(content, str):
        row.content = content or ""
        return row
    texts: list[str] = []
    for k, raw in enumerate(expect_list(content, f"{where}.content")):
        inner = expect_mapping(raw, f"{where}.content[{k}]")
        kind = inner.get("type")
        if kind == "text":
            texts.append(expect_str(inner.get("text"), f"{where}.content[{k}].text"))
        elif kind == "image":
            row.attachments.append(_image_url(inner, f"{where}.content[{k}]")[1])
        else:
            raise ConversionError(f"{where}.content[{k}]: unsupported block type {kind!r}")
    row.content = "".join(texts)
    return row


def _import_assistant(content: object, where: str) -> Row:
    row = history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT)
    if isinstance(content, str):
        row.content = content
        return Row(row)
    texts: list[str] = []
    reasoning: list[str] = []
    for k, raw in enumerate(expect_list(content, where)):
        block = expect_mapping(raw, f"{where}[{k}]")
        kind = block.get("type")
        if kind == "text":
            texts.append(expect_str(block.get("text"), f"{where}[{k}].text"))
        elif kind == "tool_use":
            arguments = block.get("input", {})
            row.tool_calls.append(
                history_pb2.ToolCall(
                    id=expect_str(block.get("id"), f"{where}[{k}].id"),
                    name=expect_str(block.get("name"), f"{where}[{k}].name"),
                    # Compact JSON, so a round trip reproduces the text the contract priced.
                    arguments=json.dumps(arguments, separators=(",", ":"), ensure_ascii=False),
                )
            )
        elif kind == "thinking":
            reasoning.append(expect_str(block.get("thinking"), f"{where}[{k}].thinking"))
        elif kind == "redacted_thinking":
            continue  # Opaque to the model's reader; nothing the contract can price or carry.
        else:
            raise ConversionError(f"{where}[{k}]: unsupported assistant block type {kind!r}")
    row.content = "".join(texts)
    return Row(row, reasoning="".join(reasoning))


def to_anthropic(history: history_pb2.History) -> JSONObject:
    """Converts a History (either shape) to `{"system": ..., "messages": [...]}`.

    Leading system rows become `system` (a string for one row, text blocks for several);
    adjacent tool rows become one user message of `tool_result` blocks.
    """
    rows = chat_rows(history)
    lead = 0
    while lead < len(rows) and rows[lead].role == history_pb2.ROLE_SYSTEM:
        lead += 1
    out: JSONObject = {}
    if lead == 1:
        out["system"] = rows[0].content
    elif lead > 1:
        out["system"] = [{"type": "text", "text": row.content} for row in rows[:lead]]
    messages: list[JSONObject] = []
    for i in range(lead, len(rows)):
        row = rows[i]
        where = f"rows[{i}]"
        check_exportable(row, where)
        if row.role == history_pb2.ROLE_SYSTEM:
            raise ConversionError(f"{where}: Anthropic Messages has no system row after messages")
        if row.role == history_pb2.ROLE_TOOL:
            block = _tool_result_block(row, where)
            previous = messages[-1] if messages else None
            if previous is not None and previous.get("_tools"):
                previous["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block], "_tools": True})
        elif row.role == history_pb2.ROLE_USER:
            messages.append({"role": "user", "content": _user_content(row, where)})
        elif row.role == history_pb2.ROLE_ASSISTANT:
            messages.append({"role": "assistant", "content": _assistant_content(row, where)})
        else:
            raise ConversionError(f"{where}.role: role {row.role} has no Anthropic role")
    for message in messages:
        message.pop("_tools", None)
    out["messages"] = messages
    return out


def _image_block(url: str) -> JSONObject:
    parsed = parse_base64_data_url(url)
    if parsed is not None:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": parsed[0], "data": parsed[1]},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _attachment_block(attachment: history_pb2.Attachment, where: str) -> JSONObject:
    return _image_block(attachment_url(attachment, where))


def _user_content(row: history_pb2.ChatMessage, where: str) -> str | list[JSONObject]:
    if row.attachments:
        blocks: list[JSONObject] = [{"type": "text", "text": row.content}]
        blocks.extend(_attachment_block(a, where) for a in row.attachments)
        return blocks
    # Markers are images only in real user rows; in a breadcrumb or carrier they are text.
    pieces = [] if marker_text_row(row) else split_markers(row.content)
    if not any(isinstance(piece, ImageRef) for piece in pieces):
        return row.content
    return [
        _image_block(piece.url) if isinstance(piece, ImageRef) else {"type": "text", "text": piece}
        for piece in pieces
    ]


def _tool_result_block(row: history_pb2.ChatMessage, where: str) -> JSONObject:
    content: str | list[JSONObject] = row.content
    if row.attachments:
        content = [{"type": "text", "text": row.content}] if row.content else []
        content.extend(_attachment_block(a, where) for a in row.attachments)
    return {"type": "tool_result", "tool_use_id": row.tool_call_id, "content": content}


def _assistant_content(row: history_pb2.ChatMessage, where: str) -> str | list[JSONObject]:
    if not row.tool_calls:
        return row.content
    blocks: list[JSONObject] = []
    if row.content:
        blocks.append({"type": "text", "text": row.content})
    for j, call in enumerate(row.tool_calls):
        try:
            # Anthropic wants `input` as an object; an empty argument string means no arguments.
            arguments = json.loads(call.arguments) if call.arguments else {}
        except json.JSONDecodeError as error:
            raise ConversionError(f"{where}.tool_calls[{j}].arguments: not JSON") from error
        if not isinstance(arguments, dict):
            raise ConversionError(f"{where}.tool_calls[{j}].arguments: not a JSON object")
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return blocks
