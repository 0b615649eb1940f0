"""Anthropic Messages (`system` + `messages`) <-> turnkeeper.v1 History (passthrough key
`anthropic`).

docs/converters.md is the mapping; the converter vectors pin it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Required, TypedDict, cast

from turnkeeper.v1 import history_pb2, profile_pb2

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

MAX_CACHE_MARKS = 4
"""The `cache_control` breakpoints a Messages request may carry (spec §14)."""

_LEAVE_OUT_ORDER = (2, 1, 3)
"""Past four marks, turnkeeper's breakpoint candidates are left out in this order (spec §14):
the newest collapsed turn's, the system row's, then the rolling last row's."""

_TTL = {
    profile_pb2.CACHE_LIFETIME_FIVE_MINUTES: "5m",
    profile_pb2.CACHE_LIFETIME_ONE_HOUR: "1h",
}

BlockPlace = tuple[str | int, int | None]
"""Where a row's last rendered block is: `("system", k)` or `(message index, block index)`;
a block index of None is a string `content` (or the `system` string), one text block once
marked."""


class AnthropicConversation(TypedDict, total=False):
    """What `to_anthropic` returns: the `system` and `messages` of a Messages request."""

    system: str | list[TextBlockParam]
    messages: Required[list[MessageParam]]


def from_anthropic(
    request: Mapping[str, Any] | Sequence[object],
    *,
    shape: Shape = "chat",
    breadcrumb_texts: Iterable[str] = (DEFAULT_BREADCRUMB,),
    marks: TurnMarks | None = None,
) -> history_pb2.History:
    """Converts an Anthropic Messages request (`system` and `messages`; other keys are the
    caller's and are not read), or a bare `messages` array, to a History. Messages and blocks
    may be dicts, their `model_dump()`s or the Anthropic SDK's objects (a response's `content`
    blocks); a key whose value is None is absent.

    `breadcrumb_texts`: a user row right after the system rows with one of these texts is marked
    as the breadcrumb (pass the profile's `breadcrumb_text` if it sets one; `()` disables).
    `marks`: the summary and pinned-turn marks kept beside the provider JSON (`turn_marks`).
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
    return finish(rows, FORMAT, default_skeleton, breadcrumb_texts, shape, marks)


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


def to_anthropic(
    history: history_pb2.History,
    *,
    cache_breakpoints: Iterable[int] = (),
    cache_lifetime: profile_pb2.CacheLifetime.ValueType = profile_pb2.CACHE_LIFETIME_UNSPECIFIED,
) -> AnthropicConversation:
    """Converts a History (either shape) to `{"system": ..., "messages": [...]}`, typed with the
    Anthropic SDK's `MessageParam` and `TextBlockParam` where the SDK is installed.

    Leading system rows become `system` (a string for one row without passthrough, else text
    blocks); tool rows join into user messages of `tool_result` blocks.

    `cache_breakpoints`: a PrepareModelCallResponse's `cache_breakpoints` (indices into the
    prepared history, which is `history`): each row's last block gets `cache_control`
    (`{"type": "ephemeral"}`, with the `ttl` of `cache_lifetime`, the route's
    `ProviderProfile.cache_lifetime`, when declared). Never more than four marks counting those
    the rows already carry: past four, the candidates of spec §14 are left out in the order 2, 1,
    3 (docs/converters.md).
    """
    rows = flat_rows(history, FORMAT)
    lead = 0
    while lead < len(rows) and rows[lead].message.role == history_pb2.ROLE_SYSTEM:
        lead += 1
    out: JSONObject = {}
    places: list[BlockPlace | None] = []
    if lead == 1 and rows[0].skeleton is None:
        out["system"] = rows[0].message.content
        places.append(("system", None))
    elif lead:
        blocks = []
        for i in range(lead):
            skeleton = rows[i].skeleton or {"type": "text", "text": len(rows[i].message.content)}
            streams = Streams(rows[i], f"rows[{i}]")
            block = skeleton_copy(skeleton)
            block["text"] = streams.text.take(skeleton.get("text"), f"rows[{i}].text")
            streams.done()
            blocks.append(block)
            places.append(("system", i))
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
        places.append(_last_block(messages, message))
        previous = FlatRow(row.message, row.reasoning, skeleton)
    out["messages"] = messages
    breakpoints = list(cache_breakpoints)
    if breakpoints:
        by_row = _history_row_places(history, places)
        _mark_breakpoints(out, by_row, breakpoints, lead, cache_lifetime)
    # The dicts are the wire format the SDK's TypedDicts describe (the converter vectors pin it).
    return cast("AnthropicConversation", out)


def _last_block(messages: list[JSONObject], rendered: JSONObject) -> BlockPlace | None:
    """Where the row just rendered as `rendered` (now in `messages[-1]`) has its last block;
    None when it rendered no block."""
    content = rendered.get("content")
    if isinstance(content, str):
        return (len(messages) - 1, None)
    if not content:
        return None
    return (len(messages) - 1, len(messages[-1]["content"]) - 1)


def _history_row_places(
    history: history_pb2.History, places: list[BlockPlace | None]
) -> list[BlockPlace | None]:
    """The last block of each history row, from that of each provider row (a ToolResults row of
    the conversation shape is one provider row per result)."""
    if history.WhichOneof("shape") != "conversation":
        return places
    by_row: list[BlockPlace | None] = []
    end = 0
    for message in history.conversation.messages:
        count = 1
        if message.WhichOneof("message") == "tool_results":
            count = len(message.tool_results.results)
        end += count
        by_row.append(places[end - 1] if count else None)
    return by_row


def _candidate(index: int, lead: int, rows: int) -> int:
    """Which candidate of spec §14 a returned breakpoint is: 1 the last leading system row, 3 the
    last row, 2 one in between (the newest collapsed turn's last row)."""
    if index == lead - 1:
        return 1
    if index == rows - 1:
        return 3
    return 2


_MARK = "cache_control"


def _block_at(out: JSONObject, place: BlockPlace) -> JSONObject:
    """The block at `place`, turning a string content (or `system` string) into one text block."""
    where, index = place
    holder: JSONObject = out if where == "system" else out["messages"][where]
    key = "system" if where == "system" else "content"
    if index is None:
        if isinstance(holder[key], str):
            holder[key] = [{"type": "text", "text": holder[key]}]
        index = 0
    block: JSONObject = holder[key][index]
    return block


def _marked(out: JSONObject, place: BlockPlace) -> bool:
    """Whether the block at `place` already carries a mark (a string content carries none)."""
    where, index = place
    if index is None:
        return False
    holder: JSONObject = out if where == "system" else out["messages"][where]
    return holder["system" if where == "system" else "content"][index].get(_MARK) is not None


def _marks(value: object) -> int:
    """The `cache_control` marks in rendered blocks, nested blocks included (null is absent)."""
    if isinstance(value, list):
        return sum(_marks(item) for item in value)
    if not isinstance(value, dict):
        return 0
    own = 0 if value.get(_MARK) is None else 1
    return own + sum(_marks(v) for k, v in value.items() if k != _MARK)


def _mark_breakpoints(
    out: JSONObject,
    places: list[BlockPlace | None],
    breakpoints: list[int],
    lead: int,
    lifetime: profile_pb2.CacheLifetime.ValueType,
) -> None:
    """Puts `cache_control` on the last block of each breakpoint row, leaving out candidates in
    the order 2, 1, 3 while the request would hold more than four marks (spec §14). A block
    that already carries the caller's mark keeps it, and it serves that breakpoint."""
    wanted: dict[BlockPlace, int] = {}
    for k, index in enumerate(breakpoints):
        if not 0 <= index < len(places):
            raise ConversionError(f"cache_breakpoints[{k}]: {index} is not a row of the history")
        place = places[index]
        if place is not None and place not in wanted:
            wanted[place] = _candidate(index, lead, len(places))
    room = MAX_CACHE_MARKS - _marks(out.get("system")) - _marks(out["messages"])
    marks = [place for place in wanted if not _marked(out, place)]
    for candidate in _LEAVE_OUT_ORDER:
        while len(marks) > max(room, 0) and any(wanted[p] == candidate for p in marks):
            marks.remove(next(p for p in marks if wanted[p] == candidate))
    for place in marks:
        mark: JSONObject = {"type": "ephemeral"}
        if lifetime in _TTL:
            mark["ttl"] = _TTL[lifetime]
        _block_at(out, place)[_MARK] = mark


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
