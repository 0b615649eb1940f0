"""Anthropic Messages (`system` + `messages`) <-> turnkeeper.v1 History (passthrough key
`anthropic`).

docs/converters.md is the mapping; the converter vectors pin it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Required, TypedDict, cast

from turnkeeper.v1 import history_pb2

from ._common import (
    DEFAULT_BREADCRUMB,
    REASONING,
    ConversionError,
    FlatRow,
    JSONObject,
    Row,
    Shape,
    Streams,
    attachment_url,
    canonical_json,
    data_url,
    decode_base64,
    expect_list,
    expect_mapping,
    expect_str,
    finish,
    flat_rows,
    is_carrier,
    marker,
    marker_text_row,
    parse_data_url,
    plain_json,
    skeleton_copy,
    split_markers,
    user_images_are_attachments,
)

if TYPE_CHECKING:
    # The Anthropic SDK's own parameter types, where the SDK is installed: `**to_anthropic(...)`
    # then passes straight to `client.messages.create(...)` under a type checker. Without the SDK
    # they are Any, and the messages plain dicts.
    from anthropic.types import MessageParam, TextBlockParam

FORMAT = "anthropic"


class AnthropicConversation(TypedDict, total=False):
    """What `to_anthropic` returns: the `system` and `messages` of a Messages request."""

    system: str | list[TextBlockParam]
    messages: Required[list[MessageParam]]


def from_anthropic(
    request: Mapping[str, Any] | Sequence[object],
    *,
    shape: Shape = "chat",
    breadcrumb_texts: Iterable[str] = (DEFAULT_BREADCRUMB,),
) -> history_pb2.History:
    """Converts an Anthropic Messages request (`system` and `messages`; other keys are the
    caller's and are not read), or a bare `messages` array, to a History. Messages and blocks
    may be dicts, their `model_dump()`s or the Anthropic SDK's objects (a response's `content`
    blocks); a key whose value is None is absent.

    `breadcrumb_texts`: a user row right after the system rows with one of these texts is marked
    as the breadcrumb (pass the profile's `breadcrumb_text` if it sets one; `()` disables).
    """
    rows: list[Row] = []
    request = plain_json(request)
    if isinstance(request, Mapping):
        system = request.get("system")
        if isinstance(system, str):
            row = Row(history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM), {})
            row.add(system)
            rows.append(row)
        elif system is not None:
            for k, raw in enumerate(expect_list(system, "system")):
                rows.append(_import_system_block(raw, f"system[{k}]"))
        messages = expect_list(request.get("messages"), "messages")
    else:
        messages = request
    for i, raw in enumerate(messages):
        where = f"messages[{i}]"
        message = expect_mapping(raw, where)
        role = message.get("role")
        if role == "user":
            rows.extend(_import_user(message, where))
        elif role == "assistant":
            rows.append(_import_assistant(message, where))
        else:
            raise ConversionError(f"{where}.role: unsupported role {role!r}")
    return finish(rows, FORMAT, default_skeleton, breadcrumb_texts, shape)


def _import_system_block(raw: object, where: str) -> Row:
    block = expect_mapping(raw, where)
    if block.get("type") != "text":
        raise ConversionError(f"{where}: only text blocks are supported")
    row = Row(history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM), skeleton_copy(block))
    row.skeleton["text"] = row.add(expect_str(block.get("text"), f"{where}.text"))
    return row


def _import_user(message: Mapping[str, Any], where: str) -> list[Row]:
    """One row per `tool_result` block and one user row per run of other blocks, in order; rows
    after the first have a skeleton without `role`: they continue the same message."""
    content = message.get("content")
    skeleton = skeleton_copy(message)
    if isinstance(content, str):
        row = Row(history_pb2.ChatMessage(role=history_pb2.ROLE_USER), skeleton)
        skeleton["content"] = row.add(content)
        return [row]
    blocks = [
        expect_mapping(b, f"{where}.content[{k}]")
        for k, b in enumerate(expect_list(content, f"{where}.content"))
    ]
    runs: list[list[tuple[int, Mapping[str, Any]]]] = []
    for k, block in enumerate(blocks):
        if (
            block.get("type") == "tool_result"
            or not runs
            or runs[-1][0][1].get("type") == ("tool_result")
        ):
            runs.append([(k, block)])
        else:
            runs[-1].append((k, block))
    if not runs:
        skeleton["content"] = []
        return [Row(history_pb2.ChatMessage(role=history_pb2.ROLE_USER), skeleton)]
    rows: list[Row] = []
    for n, run in enumerate(runs):
        head: JSONObject = skeleton if n == 0 else {}
        if run[0][1].get("type") == "tool_result":
            k, block = run[0]
            row, block_skeleton = _import_tool_result(block, f"{where}.content[{k}]")
        else:
            row = Row(history_pb2.ChatMessage(role=history_pb2.ROLE_USER), head)
            block_skeletons = _import_user_blocks(row, run, f"{where}.content")
        row.skeleton = head
        head["content"] = (
            [block_skeleton] if row.message.role == history_pb2.ROLE_TOOL else block_skeletons
        )
        rows.append(row)
    return rows


def _import_user_blocks(
    row: Row, run: Sequence[tuple[int, Mapping[str, Any]]], where: str
) -> list[JSONObject]:
    texts = "".join(
        b["text"] for _, b in run if b.get("type") == "text" and isinstance(b.get("text"), str)
    )
    images_attach = is_carrier(texts)
    out: list[JSONObject] = []
    for k, block in run:
        here = f"{where}[{k}]"
        kind = block.get("type")
        skeleton = skeleton_copy(block)
        if kind == "text":
            skeleton["text"] = row.add(expect_str(block.get("text"), f"{here}.text"))
        elif kind == "image":
            url = _import_image(block, skeleton, here)
            if images_attach:
                row.message.attachments.append(_attachment(url, here))
            else:
                row.add(marker(url, here))
        else:
            raise ConversionError(f"{here}: unsupported user block type {kind!r}")
        out.append(skeleton)
    return out


def _import_image(block: Mapping[str, Any], skeleton: JSONObject, where: str) -> str:
    """The image's URL (a data URL for base64 sources); the skeleton keeps the source's rest."""
    source = skeleton_copy(expect_mapping(block.get("source"), f"{where}.source"))
    kind = source.get("type")
    if kind == "base64":
        media_type = expect_str(source.get("media_type"), f"{where}.source.media_type")
        data = expect_str(source.pop("data", None), f"{where}.source.data")
        url = f"data:{media_type};base64,{data}"
    elif kind == "url":
        url = expect_str(source.pop("url", None), f"{where}.source.url")
    else:
        raise ConversionError(f"{where}.source.type: unsupported image source {kind!r}")
    skeleton["source"] = source
    return url


def _attachment(url: str, where: str) -> history_pb2.Attachment:
    parsed = parse_data_url(url)
    if parsed is not None:
        return history_pb2.Attachment(media_type=parsed[0], data=decode_base64(parsed[1], where))
    return history_pb2.Attachment(uri=url)


def _import_tool_result(block: Mapping[str, Any], where: str) -> tuple[Row, JSONObject]:
    row = Row(history_pb2.ChatMessage(role=history_pb2.ROLE_TOOL), {})
    row.message.tool_call_id = expect_str(block.get("tool_use_id"), f"{where}.tool_use_id")
    skeleton = skeleton_copy(block)
    del skeleton["tool_use_id"]
    content = block.get("content")
    if isinstance(content, str):
        skeleton["content"] = row.add(content)
    elif content is not None:
        inner: list[JSONObject] = []
        for k, raw in enumerate(expect_list(content, f"{where}.content")):
            here = f"{where}.content[{k}]"
            part = expect_mapping(raw, here)
            part_skeleton = skeleton_copy(part)
            kind = part.get("type")
            if kind == "text":
                part_skeleton["text"] = row.add(expect_str(part.get("text"), f"{here}.text"))
            elif kind == "image":
                row.message.attachments.append(
                    _attachment(_import_image(part, part_skeleton, here), here)
                )
            else:
                raise ConversionError(f"{here}: unsupported tool_result block type {kind!r}")
            inner.append(part_skeleton)
        skeleton["content"] = inner
    return row, skeleton


def _import_assistant(message: Mapping[str, Any], where: str) -> Row:
    skeleton = skeleton_copy(message)
    row = Row(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT), skeleton)
    content = message.get("content")
    if isinstance(content, str):
        skeleton["content"] = row.add(content)
        return row
    blocks: list[JSONObject] = []
    for k, raw in enumerate(expect_list(content, f"{where}.content")):
        here = f"{where}.content[{k}]"
        block = expect_mapping(raw, here)
        kind = block.get("type")
        out = skeleton_copy(block)
        if kind == "text":
            out["text"] = row.add(expect_str(block.get("text"), f"{here}.text"))
        elif kind == "thinking":
            out["thinking"] = row.add(expect_str(block.get("thinking"), here), REASONING)
        elif kind == "redacted_thinking":
            out["data"] = row.add(expect_str(block.get("data"), f"{here}.data"), REASONING)
        elif kind == "tool_use":
            row.message.tool_calls.append(
                history_pb2.ToolCall(
                    id=expect_str(out.pop("id", None), f"{here}.id"),
                    name=expect_str(out.pop("name", None), f"{here}.name"),
                    arguments=canonical_json(
                        expect_mapping(out.pop("input", None), f"{here}.input")
                    ),
                )
            )
        else:
            raise ConversionError(f"{here}: unsupported assistant block type {kind!r}")
        blocks.append(out)
    skeleton["content"] = blocks
    return row


def _continues(row: FlatRow | None) -> bool:
    """Whether a tool row without passthrough after `row` (whose skeleton is the one it was
    exported with) joins its message: after a tool row or a row continuing a message."""
    if row is None or row.skeleton is None:
        return False
    return "role" not in row.skeleton or row.message.role == history_pb2.ROLE_TOOL


def _joinable(message: JSONObject) -> bool:
    """A row continuing a message joins the last one when that is a user message of blocks."""
    return message.get("role") == "user" and isinstance(message.get("content"), list)


def _image_skeleton(url: str) -> JSONObject:
    parsed = parse_data_url(url)
    if parsed is not None:
        return {"type": "image", "source": {"type": "base64", "media_type": parsed[0]}}
    return {"type": "image", "source": {"type": "url"}}


def _attachment_skeleton(attachment: history_pb2.Attachment) -> JSONObject:
    if attachment.WhichOneof("source") == "data":
        return {"type": "image", "source": {"type": "base64", "media_type": attachment.media_type}}
    return {"type": "image", "source": {"type": "url"}}


def default_skeleton(row: FlatRow, previous: FlatRow | None) -> JSONObject:
    """The skeleton of the fragment a row becomes when it carries none (docs/converters.md)."""
    message = row.message
    n = len(message.content)
    if message.role == history_pb2.ROLE_SYSTEM:
        return {}  # a lone leading system row is the `system` string; see to_anthropic
    if message.role == history_pb2.ROLE_TOOL:
        result: JSONObject = {"type": "tool_result", "content": n}
        if message.attachments:
            inner: list[JSONObject] = [{"type": "text", "text": n}] if n else []
            inner.extend(_attachment_skeleton(a) for a in message.attachments)
            result["content"] = inner
        if _continues(previous):
            return {"content": [result]}
        return {"role": "user", "content": [result]}
    if message.role == history_pb2.ROLE_USER:
        if message.attachments and is_carrier(message.content):
            blocks: list[JSONObject] = [{"type": "text", "text": n}]
            blocks.extend(_attachment_skeleton(a) for a in message.attachments)
            return {"role": "user", "content": blocks}
        pieces = [] if marker_text_row(message) else split_markers(message.content)
        if not any(isinstance(p, int) for p in pieces):
            return {"role": "user", "content": n}
        cursor = 0
        user_blocks: list[JSONObject] = []
        for piece in pieces:
            if isinstance(piece, int):
                ref = message.content[cursor + len("[IMAGE:") : cursor + piece - 1]
                user_blocks.append(_image_skeleton(ref))
                cursor += piece
            else:
                user_blocks.append({"type": "text", "text": len(piece)})
                cursor += len(piece)
        return {"role": "user", "content": user_blocks}
    if message.role == history_pb2.ROLE_ASSISTANT:
        if not message.tool_calls:
            return {"role": "assistant", "content": n}
        call_blocks: list[JSONObject] = [{"type": "text", "text": n}] if n else []
        call_blocks.extend({"type": "tool_use"} for _ in message.tool_calls)
        return {"role": "assistant", "content": call_blocks}
    raise ConversionError(f"role {message.role} has no Anthropic role")


def to_anthropic(history: history_pb2.History) -> AnthropicConversation:
    """Converts a History (either shape) to `{"system": ..., "messages": [...]}`, typed with the
    Anthropic SDK's `MessageParam` and `TextBlockParam` where the SDK is installed.

    Leading system rows become `system` (a string for one row without passthrough, else text
    blocks); tool rows join into user messages of `tool_result` blocks.
    """
    rows = flat_rows(history, FORMAT)
    lead = 0
    while lead < len(rows) and rows[lead].message.role == history_pb2.ROLE_SYSTEM:
        lead += 1
    out: JSONObject = {}
    if lead == 1 and rows[0].skeleton is None:
        out["system"] = rows[0].message.content
    elif lead:
        blocks = []
        for i in range(lead):
            skeleton = rows[i].skeleton or {"type": "text", "text": len(rows[i].message.content)}
            streams = Streams(rows[i], f"rows[{i}]")
            block = skeleton_copy(skeleton)
            block["text"] = streams.text.take(skeleton.get("text"), f"rows[{i}].text")
            streams.done()
            blocks.append(block)
        out["system"] = blocks
    messages: list[JSONObject] = []
    previous: FlatRow | None = None
    for i in range(lead, len(rows)):
        row = rows[i]
        where = f"rows[{i}]"
        if row.message.role == history_pb2.ROLE_SYSTEM:
            raise ConversionError(f"{where}: Anthropic Messages has no system row after messages")
        skeleton = row.skeleton if row.skeleton is not None else default_skeleton(row, previous)
        message = _export(row, skeleton, where)
        if "role" in skeleton:
            messages.append(message)
        elif messages and _joinable(messages[-1]):
            messages[-1]["content"].extend(message["content"])
        else:
            messages.append({"role": "user", **message})
        previous = FlatRow(row.message, row.reasoning, skeleton)
    out["messages"] = messages
    # The dicts are the wire format the SDK's TypedDicts describe (the converter vectors pin it).
    return cast("AnthropicConversation", out)


def _export(row: FlatRow, skeleton: JSONObject, where: str) -> JSONObject:
    message = row.message
    expected = "assistant" if message.role == history_pb2.ROLE_ASSISTANT else "user"
    if skeleton.get("role", "user") != expected:
        raise ConversionError(f"{where}: passthrough role does not match the row")
    streams = Streams(row, where)
    out = skeleton_copy(skeleton)
    content = skeleton.get("content")
    if isinstance(content, list):
        out["content"] = [
            _export_block(message, streams, expect_mapping(b, f"{where}.content[{k}]"), where)
            for k, b in enumerate(content)
        ]
        if message.role == history_pb2.ROLE_ASSISTANT:
            # Tool-use blocks whose call the sweep removed are gone with it.
            out["content"] = [b for b in out["content"] if b is not None]
    else:
        out["content"] = streams.text.take(content, f"{where}.content")
    streams.done()
    return out


def _export_block(
    message: history_pb2.ChatMessage, streams: Streams, block: Mapping[str, Any], where: str
) -> Any:
    out = skeleton_copy(block)
    kind = block.get("type")
    if kind == "text":
        out["text"] = streams.text.take(block.get("text"), f"{where}.text")
    elif kind == "thinking":
        out["thinking"] = streams.reasoning.take(block.get("thinking"), f"{where}.thinking")
    elif kind == "redacted_thinking":
        out["data"] = streams.reasoning.take(block.get("data"), f"{where}.data")
    elif kind == "tool_use":
        call = streams.call()
        if call is None:
            return None
        try:
            arguments = json.loads(call.arguments) if call.arguments else {}
        except json.JSONDecodeError as error:
            raise ConversionError(f"{where}: tool call {call.id} arguments are not JSON") from error
        if not isinstance(arguments, dict):
            raise ConversionError(f"{where}: tool call {call.id} arguments are not a JSON object")
        out.update(id=call.id, name=call.name, input=arguments)
    elif kind == "tool_result":
        if message.role != history_pb2.ROLE_TOOL:
            raise ConversionError(f"{where}: passthrough tool_result on a row that is not a tool")
        out["tool_use_id"] = message.tool_call_id
        inner = block.get("content")
        if isinstance(inner, list):
            out["content"] = [
                _export_block(message, streams, expect_mapping(b, where), where) for b in inner
            ]
        elif inner is not None:
            out["content"] = streams.text.take(inner, f"{where}.content")
    elif kind == "image":
        if user_images_are_attachments(message):
            url = attachment_url(streams.attachment(where), where)
        else:
            url = streams.text.marker_url(where)
        source = skeleton_copy(expect_mapping(block.get("source") or {}, f"{where}.source"))
        parsed = parse_data_url(url)
        if source.get("type") == "base64":
            if parsed is None:
                raise ConversionError(f"{where}: a base64 image needs a data: URL, got {url[:40]}")
            source.setdefault("media_type", parsed[0])
            source["data"] = parsed[1]
        else:
            source["url"] = url
        out["source"] = source
    else:
        raise ConversionError(f"{where}: passthrough block type {kind!r} is not Anthropic")
    return out


__all__ = ["AnthropicConversation", "data_url", "from_anthropic", "to_anthropic"]
