"""OpenAI Responses input items (what the Agents SDK sessions store) <-> turnkeeper.v1 History
(passthrough key `openai_responses`).

docs/converters.md is the mapping; the converter vectors pin it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

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
    TurnMarks,
    attachment_from_url,
    attachment_url,
    canonical_json,
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
    # The OpenAI SDK's input item type, where the SDK is installed (as for to_openai).
    from openai.types.responses import ResponseInputItemParam

FORMAT = "openai_responses"
_ROLES = {
    "system": history_pb2.ROLE_SYSTEM,
    "developer": history_pb2.ROLE_SYSTEM,
    "user": history_pb2.ROLE_USER,
    "assistant": history_pb2.ROLE_ASSISTANT,
}
_ROLE_NAMES = {
    history_pb2.ROLE_SYSTEM: "system",
    history_pb2.ROLE_USER: "user",
    history_pb2.ROLE_ASSISTANT: "assistant",
}
_TEXT_PARTS = {"input_text", "output_text"}
# Items turnkeeper has no row field for but a model reads (the hosted tools' calls and results, the
# Agents SDK's references and compactions): each is one assistant row whose text is the item's
# canonical JSON, so it is priced, stays within its turn and comes back as it went in.
OPAQUE_ITEMS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "computer_call",
        "computer_call_output",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "tool_search_call",
        "compaction_trigger",
        "hosted_tool_call",
        "item_reference",
        "compaction",
    }
)
# Content parts kept the same way inside their message or tool output.
OPAQUE_PARTS = frozenset({"input_file"})
# The Agents SDK for JavaScript names the call id `callId` and a tool result
# `function_call_result`; the skeleton keeps the key (empty) so export writes it back the same way.
_CAMEL_CALL_ID = "callId"
_OUTPUT_ITEMS = frozenset({"function_call_output", "function_call_result"})


def from_openai_responses(
    items: Sequence[object] | Mapping[str, Any],
    *,
    shape: Shape = "chat",
    breadcrumb_texts: Iterable[str] = (DEFAULT_BREADCRUMB,),
    marks: TurnMarks | None = None,
) -> history_pb2.History:
    """Converts Responses input items (or a request object holding them as `input`) to a History:
    one row per item. Items may be dicts, their `model_dump()`s or the OpenAI SDK's objects (a
    response's `output` items); a key whose value is None is absent. `breadcrumb_texts` as in
    `from_openai`.
    `marks`: the summary and pinned-turn marks kept beside the provider JSON (`turn_marks`).
    """
    items = plain_json(items)
    if isinstance(items, Mapping):
        items = expect_list(items.get("input"), "input")
    rows = _group_calls(
        [_import_item(item, f"input[{i}]") for i, item in enumerate(items)],
        [_item_type(item) for item in items],
    )
    return finish(rows, FORMAT, default_skeleton, breadcrumb_texts, shape, marks)


def _item_type(item: object) -> object:
    return item.get("type") if isinstance(item, Mapping) else None


def _group_calls(rows: list[Row], kinds: list[object]) -> list[Row]:
    """Consecutive `function_call` items are one assistant row (parallel tool calls), so the
    results that follow answer one row and the orphan sweep keeps every call. A group's skeleton
    is `{"items": [...]}`, one function_call skeleton per call."""
    out: list[Row] = []
    run: list[Row] = []

    def close_run() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            grouped = Row(
                history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT),
                {"items": [row.skeleton for row in run]},
            )
            for row in run:
                grouped.message.tool_calls.extend(row.message.tool_calls)
            out.append(grouped)
        run.clear()

    for row, kind in zip(rows, kinds, strict=True):
        if kind == "function_call":
            run.append(row)
            continue
        close_run()
        out.append(row)
    close_run()
    return out


def _take_call_id(skeleton: JSONObject, where: str) -> str:
    if "call_id" not in skeleton and _CAMEL_CALL_ID in skeleton:
        call_id = expect_str(skeleton[_CAMEL_CALL_ID], f"{where}.{_CAMEL_CALL_ID}")
        skeleton[_CAMEL_CALL_ID] = ""
        return call_id
    return expect_str(skeleton.pop("call_id", None), f"{where}.call_id")


def _put_call_id(out: JSONObject, skeleton: Mapping[str, Any], call_id: str) -> None:
    out[_CAMEL_CALL_ID if _CAMEL_CALL_ID in skeleton else "call_id"] = call_id


def _import_item(raw: object, where: str) -> Row:
    item = expect_mapping(raw, where)
    kind = item.get("type")
    if kind is None:  # absent or null: a message, or an item reference (its `type` is optional)
        kind = "item_reference" if item.get("role") is None and "id" in item else "message"
    skeleton = skeleton_copy(item)
    if kind == "message":
        role_name = item.get("role")
        role = _ROLES.get(role_name)  # type: ignore[arg-type]
        if role is None:
            raise ConversionError(f"{where}.role: unsupported role {role_name!r}")
        row = Row(history_pb2.ChatMessage(role=role), skeleton)
        content = item.get("content")
        if isinstance(content, str):
            skeleton["content"] = row.add(content)
        else:
            skeleton["content"] = _import_parts(row, content, f"{where}.content")
        return row
    if kind == "function_call":
        row = Row(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT), skeleton)
        row.message.tool_calls.append(
            history_pb2.ToolCall(
                id=_take_call_id(skeleton, where),
                name=expect_str(skeleton.pop("name", None), f"{where}.name"),
                arguments=expect_str(skeleton.pop("arguments", None), f"{where}.arguments"),
            )
        )
        return row
    if kind in _OUTPUT_ITEMS:
        row = Row(history_pb2.ChatMessage(role=history_pb2.ROLE_TOOL), skeleton)
        row.message.tool_call_id = _take_call_id(skeleton, where)
        output = item.get("output")
        if isinstance(output, str):
            skeleton["output"] = row.add(output)
        elif isinstance(output, Mapping) and kind == "function_call_result":
            skeleton["output"] = _import_parts(row, [output], f"{where}.output")[0]
        else:
            skeleton["output"] = _import_parts(row, output, f"{where}.output")
        return row
    if kind in OPAQUE_ITEMS:
        row = Row(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT), {"type": kind})
        row.skeleton["item"] = row.add(canonical_json(item))
        return row
    if kind == "reasoning":
        row = Row(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT), skeleton)
        for key, part_type in (("summary", "summary_text"), ("content", "reasoning_text")):
            if item.get(key) is None:
                continue
            parts = []
            for k, raw_part in enumerate(expect_list(item[key], f"{where}.{key}")):
                part = expect_mapping(raw_part, f"{where}.{key}[{k}]")
                if part.get("type") != part_type:
                    raise ConversionError(f"{where}.{key}[{k}]: expected a {part_type} part")
                out = skeleton_copy(part)
                out["text"] = row.add(
                    expect_str(part.get("text"), f"{where}.{key}[{k}]"), REASONING
                )
                parts.append(out)
            skeleton[key] = parts
        encrypted = item.get("encrypted_content")
        if isinstance(encrypted, str):
            skeleton["encrypted_content"] = row.add(encrypted, REASONING)
        return row
    raise ConversionError(f"{where}.type: unsupported item type {kind!r}")


def _import_parts(row: Row, content: object, where: str) -> list[JSONObject]:
    parts = [expect_mapping(p, f"{where}[{k}]") for k, p in enumerate(expect_list(content, where))]
    role = row.message.role
    texts = "".join(
        p["text"]
        for p in parts
        if p.get("type") in (*_TEXT_PARTS, "text") and isinstance(p.get("text"), str)
    )
    images_attach = role == history_pb2.ROLE_TOOL or (
        role == history_pb2.ROLE_USER and is_carrier(texts)
    )
    out: list[JSONObject] = []
    for k, part in enumerate(parts):
        here = f"{where}[{k}]"
        kind = part.get("type")
        skeleton = skeleton_copy(part)
        if kind in _TEXT_PARTS or (kind == "text" and role == history_pb2.ROLE_TOOL):
            skeleton["text"] = row.add(expect_str(part.get("text"), f"{here}.text"))
        elif kind in OPAQUE_PARTS:
            skeleton = {"type": kind, "part": row.add(canonical_json(part))}
        elif kind == "refusal" and role == history_pb2.ROLE_ASSISTANT:
            skeleton["refusal"] = row.add(expect_str(part.get("refusal"), f"{here}.refusal"))
        elif kind == "input_image" and role in (history_pb2.ROLE_USER, history_pb2.ROLE_TOOL):
            url = expect_str(skeleton.pop("image_url", None), f"{here}.image_url")
            if images_attach:
                row.message.attachments.append(attachment_from_url(url, here))
            else:
                row.add(marker(url, here))
        else:
            raise ConversionError(f"{here}: unsupported content part type {kind!r} here")
        out.append(skeleton)
    return out


def default_skeleton(row: FlatRow, previous: FlatRow | None) -> JSONObject:
    """The skeleton of the item a row becomes when it carries none (docs/converters.md); an
    assistant row with tool calls becomes several items (see `_default_items`)."""
    items = _default_items(row)
    return items[0] if len(items) == 1 else {"items": items}


def _default_items(row: FlatRow) -> list[JSONObject]:
    message = row.message
    n = len(message.content)
    if message.role == history_pb2.ROLE_TOOL:
        output: Any = n
        if message.attachments:
            output = [{"type": "input_text", "text": n}] if n else []
            output.extend({"type": "input_image", "detail": "auto"} for _ in message.attachments)
        return [{"type": "function_call_output", "output": output}]
    if message.role not in _ROLE_NAMES:
        raise ConversionError(f"role {message.role} has no Responses role")
    item: JSONObject = {"role": _ROLE_NAMES[message.role], "content": n}
    if message.role == history_pb2.ROLE_USER:
        if message.attachments and is_carrier(message.content):
            parts: list[JSONObject] = [{"type": "input_text", "text": n}]
            parts.extend({"type": "input_image", "detail": "auto"} for _ in message.attachments)
            item["content"] = parts
        elif not marker_text_row(message):
            pieces = split_markers(message.content)
            if any(isinstance(p, int) for p in pieces):
                item["content"] = [
                    {"type": "input_image", "detail": "auto"}
                    if isinstance(p, int)
                    else {"type": "input_text", "text": len(p)}
                    for p in pieces
                ]
    if message.role == history_pb2.ROLE_ASSISTANT and message.tool_calls:
        calls: list[JSONObject] = [{"type": "function_call"} for _ in message.tool_calls]
        return [item, *calls] if n else calls
    return [item]


def to_openai_responses(history: history_pb2.History) -> list[ResponseInputItemParam]:
    """Converts a History (either shape) to Responses input items, typed as the OpenAI SDK's
    `ResponseInputItemParam` where the SDK is installed (plain dicts at runtime)."""
    out: list[JSONObject] = []
    for i, row in enumerate(flat_rows(history, FORMAT)):
        where = f"rows[{i}]"
        items = _skeleton_items(row.skeleton) if row.skeleton is not None else _default_items(row)
        streams = Streams(row, where)
        for item in items:
            exported = _export(row, streams, item, where)
            if exported is not None:
                out.append(exported)
        streams.done()
    # The dicts are the wire format the SDK's TypedDicts describe (the converter vectors pin it).
    return cast("list[ResponseInputItemParam]", out)


def _skeleton_items(skeleton: JSONObject) -> list[JSONObject]:
    """The items of a row's skeleton: a group of parallel calls is `{"items": [...]}` alone."""
    if skeleton.keys() == {"items"}:
        return [expect_mapping(item, "passthrough.items") for item in skeleton["items"]]  # type: ignore[misc]
    return [skeleton]


def _export(row: FlatRow, streams: Streams, skeleton: JSONObject, where: str) -> JSONObject | None:
    """The item a skeleton slot stands for; None for a call slot whose call the sweep removed."""
    message = row.message
    out = skeleton_copy(skeleton)
    kind = skeleton.get("type")
    if kind is None:
        kind = "message"
    if kind in OPAQUE_ITEMS:
        return _opaque(streams.text.take(skeleton.get("item"), f"{where}.item"), where)
    if kind == "message":
        if _ROLES.get(skeleton.get("role")) != message.role:  # type: ignore[arg-type]
            raise ConversionError(f"{where}: passthrough role does not match the row")
        content = skeleton.get("content")
        if isinstance(content, list):
            out["content"] = [_export_part(message, streams, p, where) for p in content]
        else:
            out["content"] = streams.text.take(content, f"{where}.content")
    elif kind == "function_call":
        if message.role != history_pb2.ROLE_ASSISTANT:
            raise ConversionError(f"{where}: passthrough function_call on a non-assistant row")
        call = streams.call()
        if call is None:
            return None
        _put_call_id(out, skeleton, call.id)
        out.update(name=call.name, arguments=call.arguments)
    elif kind in _OUTPUT_ITEMS:
        if message.role != history_pb2.ROLE_TOOL:
            raise ConversionError(f"{where}: passthrough {kind} on a non-tool row")
        _put_call_id(out, skeleton, message.tool_call_id)
        output = skeleton.get("output")
        if isinstance(output, list):
            out["output"] = [_export_part(message, streams, p, where) for p in output]
        elif isinstance(output, Mapping):
            out["output"] = _export_part(message, streams, output, where)
        else:
            out["output"] = streams.text.take(output, f"{where}.output")
    elif kind == "reasoning":
        for key in ("summary", "content"):
            if isinstance(skeleton.get(key), list):
                out[key] = [
                    {**part, "text": streams.reasoning.take(part.get("text"), where)}
                    for part in skeleton[key]
                ]
        if skeleton.get("encrypted_content") is not None:
            out["encrypted_content"] = streams.reasoning.take(skeleton["encrypted_content"], where)
    else:
        raise ConversionError(f"{where}: passthrough item type {kind!r} is not Responses")
    return out


def _export_part(
    message: history_pb2.ChatMessage, streams: Streams, raw: object, where: str
) -> JSONObject:
    part = expect_mapping(raw, where)
    out = skeleton_copy(part)
    kind = part.get("type")
    if kind in _TEXT_PARTS or kind == "text":
        out["text"] = streams.text.take(part.get("text"), f"{where}.text")
    elif kind in OPAQUE_PARTS:
        return _opaque(streams.text.take(part.get("part"), f"{where}.part"), where)
    elif kind == "refusal":
        out["refusal"] = streams.text.take(part.get("refusal"), f"{where}.refusal")
    elif kind == "input_image":
        if user_images_are_attachments(message):
            out["image_url"] = attachment_url(streams.attachment(where), where)
        else:
            out["image_url"] = streams.text.marker_url(where)
    else:
        raise ConversionError(f"{where}: passthrough part type {kind!r} is not Responses")
    return out


def _opaque(text: str, where: str) -> JSONObject:
    """An opaque item or part back from the canonical JSON its row holds."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConversionError(f"{where}: the row's text is no longer the item's JSON") from error
    return dict(expect_mapping(value, where))
