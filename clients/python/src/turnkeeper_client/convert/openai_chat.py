"""OpenAI Chat Completions `messages` <-> turnkeeper.v1 History (passthrough key `openai_chat`).

docs/converters.md is the mapping; the converter vectors pin it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from turnkeeper.v1 import history_pb2

from ._common import (
    DEFAULT_BREADCRUMB,
    ConversionError,
    FlatRow,
    JSONObject,
    Row,
    Shape,
    Streams,
    TurnMarks,
    attachment_from_url,
    attachment_url,
    expect_list,
    expect_mapping,
    expect_str,
    finish,
    flat_rows,
    is_carrier,
    marker,
    marker_text_row,
    plain_json,
    skeleton_copy,
    split_markers,
    user_images_are_attachments,
)

if TYPE_CHECKING:
    # The OpenAI SDK's own parameter type, where the SDK is installed: `to_openai(...)` then
    # passes straight to `client.chat.completions.create(messages=...)` under a type checker.
    # Without the SDK (mypy: ignore_missing_imports) it is Any, and the messages plain dicts.
    from openai.types.chat import ChatCompletionMessageParam

FORMAT = "openai_chat"
_ROLES = {
    "system": history_pb2.ROLE_SYSTEM,
    "developer": history_pb2.ROLE_SYSTEM,
    "user": history_pb2.ROLE_USER,
    "assistant": history_pb2.ROLE_ASSISTANT,
    "tool": history_pb2.ROLE_TOOL,
}
_ROLE_NAMES = {
    history_pb2.ROLE_SYSTEM: "system",
    history_pb2.ROLE_USER: "user",
    history_pb2.ROLE_ASSISTANT: "assistant",
    history_pb2.ROLE_TOOL: "tool",
}
# Content part types each role may carry, and what they price as.
_PART_TYPES = {
    history_pb2.ROLE_SYSTEM: {"text"},
    history_pb2.ROLE_USER: {"text", "image_url"},
    history_pb2.ROLE_ASSISTANT: {"text", "refusal"},
    history_pb2.ROLE_TOOL: {"text", "image_url"},
}


def from_openai(
    messages: Sequence[object] | Mapping[str, Any],
    *,
    shape: Shape = "chat",
    breadcrumb_texts: Iterable[str] = (DEFAULT_BREADCRUMB,),
    marks: TurnMarks | None = None,
) -> history_pb2.History:
    """Converts Chat Completions `messages` (or a request object holding them) to a History.
    The messages may be dicts, their `model_dump()`s or the OpenAI SDK's objects (a
    `ChatCompletionMessage` from a response); a key whose value is None is absent.

    `breadcrumb_texts`: a user row right after the leading system rows with one of these texts is
    marked as the breadcrumb (pass the profile's `breadcrumb_text` if it sets one; `()` disables).
    `marks`: the summary and pinned-turn marks kept beside the provider JSON (`turn_marks`).
    """
    messages = plain_json(messages)
    if isinstance(messages, Mapping):
        messages = expect_list(messages.get("messages"), "messages")
    rows = [_import_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    return finish(rows, FORMAT, default_skeleton, breadcrumb_texts, shape, marks)


def _import_message(raw: object, where: str) -> Row:
    message = expect_mapping(raw, where)
    role_name = expect_str(message.get("role"), f"{where}.role")
    role = _ROLES.get(role_name)
    if role is None:
        raise ConversionError(f"{where}.role: unsupported role {role_name!r}")
    # A key whose value is null is absent (SDK dumps write `function_call: None`, `tool_calls:
    # None`, `refusal: None`, `audio: None`); the skeleton keeps the null, so it round-trips.
    if message.get("function_call") is not None:
        raise ConversionError(f"{where}.function_call: the deprecated form; send tool_calls")
    skeleton = skeleton_copy(message)
    row = Row(history_pb2.ChatMessage(role=role), skeleton)
    if role == history_pb2.ROLE_TOOL:
        row.message.tool_call_id = expect_str(message.get("tool_call_id"), f"{where}.tool_call_id")
        del skeleton["tool_call_id"]
    content = message.get("content")
    if isinstance(content, str):
        skeleton["content"] = row.add(content)
    elif content is not None:
        skeleton["content"] = _import_parts(row, content, f"{where}.content")
    refusal = message.get("refusal")
    if isinstance(refusal, str) and role == history_pb2.ROLE_ASSISTANT:
        skeleton["refusal"] = row.add(refusal)
    calls = message.get("tool_calls")
    if calls is not None:
        if role != history_pb2.ROLE_ASSISTANT:
            raise ConversionError(f"{where}.tool_calls: only assistant messages carry tool calls")
        skeleton["tool_calls"] = [
            _import_call(row, call, f"{where}.tool_calls[{j}]")
            for j, call in enumerate(expect_list(calls, f"{where}.tool_calls"))
        ]
    return row


def _import_parts(row: Row, content: object, where: str) -> list[JSONObject]:
    parts = [expect_mapping(p, f"{where}[{k}]") for k, p in enumerate(expect_list(content, where))]
    role = row.message.role
    texts = "".join(
        p["text"] for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str)
    )
    images_attach = role == history_pb2.ROLE_TOOL or (
        role == history_pb2.ROLE_USER and is_carrier(texts)
    )
    out: list[JSONObject] = []
    for k, part in enumerate(parts):
        here = f"{where}[{k}]"
        kind = part.get("type")
        if kind not in _PART_TYPES[role]:
            raise ConversionError(f"{here}: unsupported content part type {kind!r} here")
        skeleton = skeleton_copy(part)
        if kind == "text":
            skeleton["text"] = row.add(expect_str(part.get("text"), f"{here}.text"))
        elif kind == "refusal":
            skeleton["refusal"] = row.add(expect_str(part.get("refusal"), f"{here}.refusal"))
        else:
            image = skeleton_copy(expect_mapping(part.get("image_url"), f"{here}.image_url"))
            url = expect_str(image.pop("url", None), f"{here}.image_url.url")
            skeleton["image_url"] = image
            if images_attach:
                row.message.attachments.append(attachment_from_url(url, here))
            else:
                row.add(marker(url, here))
        out.append(skeleton)
    return out


def _import_call(row: Row, raw: object, where: str) -> JSONObject:
    call = expect_mapping(raw, where)
    if call.get("type") not in (None, "function"):
        raise ConversionError(f"{where}.type: unsupported tool call type {call.get('type')!r}")
    function = expect_mapping(call.get("function"), f"{where}.function")
    row.message.tool_calls.append(
        history_pb2.ToolCall(
            id=expect_str(call.get("id"), f"{where}.id"),
            name=expect_str(function.get("name"), f"{where}.function.name"),
            arguments=expect_str(function.get("arguments") or "", f"{where}.function.arguments"),
        )
    )
    skeleton = skeleton_copy(call)
    del skeleton["id"]
    rest = skeleton_copy(function)
    rest.pop("name")
    rest.pop("arguments", None)
    skeleton["function"] = rest
    return skeleton


def default_skeleton(row: FlatRow, previous: FlatRow | None) -> JSONObject:
    """The skeleton of the message a row becomes when it carries none (docs/converters.md)."""
    message = row.message
    role = message.role
    n = len(message.content)
    if role not in _ROLE_NAMES:
        raise ConversionError(f"role {role} has no Chat Completions role")
    out: JSONObject = {"role": _ROLE_NAMES[role]}
    if role == history_pb2.ROLE_ASSISTANT and message.tool_calls:
        out["content"] = n if n else None
        out["tool_calls"] = [{"type": "function", "function": {}} for _ in message.tool_calls]
    elif message.attachments and user_images_are_attachments(message):
        parts: list[JSONObject] = (
            [{"type": "text", "text": n}] if n or role == history_pb2.ROLE_USER else []
        )
        parts.extend({"type": "image_url", "image_url": {}} for _ in message.attachments)
        out["content"] = parts
    elif role == history_pb2.ROLE_USER and not marker_text_row(message):
        pieces = split_markers(message.content)
        if any(isinstance(p, int) for p in pieces):
            out["content"] = [
                {"type": "image_url", "image_url": {}}
                if isinstance(p, int)
                else {"type": "text", "text": len(p)}
                for p in pieces
            ]
        else:
            out["content"] = n
    else:
        out["content"] = n
    return out


def to_openai(history: history_pb2.History) -> list[ChatCompletionMessageParam]:
    """Converts a History (either shape) to Chat Completions `messages`, typed as the OpenAI
    SDK's `ChatCompletionMessageParam` where the SDK is installed (plain dicts at runtime)."""
    out: list[JSONObject] = []
    previous: FlatRow | None = None
    for i, row in enumerate(flat_rows(history, FORMAT)):
        skeleton = row.skeleton if row.skeleton is not None else default_skeleton(row, previous)
        out.append(_export(row, skeleton, f"messages[{i}]"))
        previous = row
    # The dicts are the wire format the SDK's TypedDicts describe (the converter vectors pin it).
    return cast("list[ChatCompletionMessageParam]", out)


def _export(row: FlatRow, skeleton: JSONObject, where: str) -> JSONObject:
    message = row.message
    role_name = skeleton.get("role")
    if _ROLES.get(role_name) != message.role:  # type: ignore[arg-type]
        raise ConversionError(f"{where}: passthrough role {role_name!r} does not match the row")
    streams = Streams(row, where)
    out = skeleton_copy(skeleton)
    if message.role == history_pb2.ROLE_TOOL:
        out["tool_call_id"] = message.tool_call_id
    content = skeleton.get("content")
    if isinstance(content, list):
        out["content"] = [
            _export_part(message, streams, expect_mapping(p, f"{where}.content[{k}]"), where)
            for k, p in enumerate(content)
        ]
    elif content is not None:
        out["content"] = streams.text.take(content, f"{where}.content")
    if "refusal" in skeleton and skeleton["refusal"] is not None:
        out["refusal"] = streams.text.take(skeleton["refusal"], f"{where}.refusal")
    if skeleton.get("tool_calls") is not None:
        calls: list[JSONObject] = []
        for j, raw in enumerate(expect_list(skeleton["tool_calls"], f"{where}.tool_calls")):
            call = streams.call()
            if call is None:
                break
            filled = skeleton_copy(expect_mapping(raw, f"{where}.tool_calls[{j}]"))
            function = skeleton_copy(expect_mapping(filled.get("function") or {}, where))
            function["name"] = call.name
            function["arguments"] = call.arguments
            filled["id"] = call.id
            filled["function"] = function
            calls.append(filled)
        out["tool_calls"] = calls
    streams.done()
    return out


def _export_part(
    message: history_pb2.ChatMessage, streams: Streams, part: Mapping[str, Any], where: str
) -> JSONObject:
    out = skeleton_copy(part)
    kind = part.get("type")
    if kind == "text":
        out["text"] = streams.text.take(part.get("text"), f"{where}.text")
    elif kind == "refusal":
        out["refusal"] = streams.text.take(part.get("refusal"), f"{where}.refusal")
    elif kind == "image_url":
        image = skeleton_copy(expect_mapping(part.get("image_url") or {}, f"{where}.image_url"))
        if user_images_are_attachments(message):
            image["url"] = attachment_url(streams.attachment(where), where)
        else:
            image["url"] = streams.text.marker_url(where)
        out["image_url"] = image
    else:
        raise ConversionError(f"{where}: passthrough part type {kind!r} is not Chat Completions")
    return out
