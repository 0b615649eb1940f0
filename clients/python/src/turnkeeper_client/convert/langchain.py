"""LangChain `BaseMessage` lists <-> turnkeeper.v1 History (passthrough key `langchain`), and a
whole-turn `trim_messages` backed by the sidecar. Needs the `langchain` extra
(`pip install 'turnkeeper-client[langchain]'`).

A message's skeleton is its `model_dump()` without default-valued fields, with `type` kept and the
priced values cut out as for the provider formats (docs/converters.md): text becomes its length,
tool call ids, names and `args` (as sorted compact JSON), `tool_call_id` and image URLs or data are
removed. `id`, `name`, `response_metadata`, `usage_metadata`, `additional_kwargs`, `artifact`,
`status` and everything else ride along unpriced.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, overload

from turnkeeper.v1 import history_pb2, history_service_pb2, profile_pb2, trim_pb2

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
    parse_data_url,
    skeleton_copy,
    split_markers,
    user_images_are_attachments,
)

try:
    from langchain_core.messages import (
        BaseMessage,
        HumanMessage,
        MessageLikeRepresentation,
        convert_to_messages,
        messages_from_dict,
    )
    from langchain_core.prompt_values import PromptValue
    from langchain_core.runnables import Runnable, RunnableLambda
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "turnkeeper_client.convert.langchain needs langchain-core: "
        "pip install 'turnkeeper-client[langchain]'"
    ) from error

from ..aio import AsyncTurnkeeperClient
from ..sync import TurnkeeperClient

FORMAT = "langchain"
_ROLES = {
    "system": history_pb2.ROLE_SYSTEM,
    "human": history_pb2.ROLE_USER,
    "ai": history_pb2.ROLE_ASSISTANT,
    "tool": history_pb2.ROLE_TOOL,
}
_TYPES = {role: kind for kind, role in _ROLES.items()}
# Content blocks that repeat a call of `tool_calls` (Anthropic's `tool_use`, LangChain v1's
# `tool_call`): kept as they are, priced once through `tool_calls`.
_CALL_ECHOES = frozenset({"tool_use", "tool_call"})
# Blocks turnkeeper has no field for but the model reads (a provider-side tool's call and result):
# priced as their canonical JSON in the row's text, and given back as they went in.
_OPAQUE_BLOCKS = frozenset({"server_tool_call", "server_tool_result"})


def from_langchain(
    messages: Iterable[BaseMessage],
    *,
    shape: Shape = "chat",
    breadcrumb_texts: Iterable[str] = (DEFAULT_BREADCRUMB,),
    marks: TurnMarks | None = None,
) -> history_pb2.History:
    """Converts LangChain messages (system, human, AI with tool calls, tool) to a History."""
    rows = [_import(message, f"messages[{i}]") for i, message in enumerate(messages)]
    return finish(rows, FORMAT, default_skeleton, breadcrumb_texts, shape, marks)


def _import(message: BaseMessage, where: str) -> Row:
    role = _ROLES.get(message.type)
    if role is None:
        raise ConversionError(f"{where}: unsupported message type {message.type!r}")
    data: JSONObject = {"type": message.type, **message.model_dump(exclude_defaults=True)}
    data.setdefault("content", message.content)
    skeleton = skeleton_copy(data)
    row = Row(history_pb2.ChatMessage(role=role), skeleton)
    if role == history_pb2.ROLE_TOOL:
        row.message.tool_call_id = expect_str(skeleton.pop("tool_call_id"), f"{where}.tool_call_id")
    content = data["content"]
    if isinstance(content, str):
        skeleton["content"] = row.add(content)
    else:
        skeleton["content"] = _import_blocks(row, content, f"{where}.content")
    if role == history_pb2.ROLE_ASSISTANT and data.get("tool_calls"):
        calls = []
        for j, call in enumerate(expect_list(data["tool_calls"], f"{where}.tool_calls")):
            here = f"{where}.tool_calls[{j}]"
            call_skeleton = skeleton_copy(expect_mapping(call, here))
            args = call_skeleton.pop("args", {})
            row.message.tool_calls.append(
                history_pb2.ToolCall(
                    id=expect_str(call_skeleton.pop("id", None), f"{here}.id"),
                    name=expect_str(call_skeleton.pop("name", None), f"{here}.name"),
                    arguments=canonical_json(args),
                )
            )
            calls.append(call_skeleton)
        skeleton["tool_calls"] = calls
    return row


def _import_blocks(row: Row, content: object, where: str) -> list[Any]:
    blocks = expect_list(content, where)
    texts = "".join(
        b if isinstance(b, str) else b.get("text", "") if b.get("type") == "text" else ""
        for b in blocks
        if isinstance(b, str | dict)
    )
    attach = user_images_are_attachments(row.message) or (
        row.message.role == history_pb2.ROLE_USER and is_carrier(texts)
    )
    out: list[Any] = []
    for k, raw in enumerate(blocks):
        here = f"{where}[{k}]"
        if isinstance(raw, str):
            out.append(row.add(raw))
            continue
        block = expect_mapping(raw, here)
        skeleton = skeleton_copy(block)
        kind = block.get("type")
        if kind == "text":
            skeleton["text"] = row.add(expect_str(block.get("text"), f"{here}.text"))
        elif kind == "thinking":
            skeleton[kind] = row.add(expect_str(block.get(kind), f"{here}.{kind}"), REASONING)
        elif kind == "reasoning":
            _import_reasoning(row, block, skeleton, here)
        elif kind in _CALL_ECHOES:
            pass  # the provider's echo of a tool call; the call itself is priced in tool_calls
        elif kind in _OPAQUE_BLOCKS:
            skeleton = {"type": kind, "block": row.add(canonical_json(block))}
        elif kind in ("image_url", "image") and row.message.role != history_pb2.ROLE_ASSISTANT:
            url = _cut_image(block, skeleton, here)
            if attach:
                row.message.attachments.append(attachment_from_url(url, here))
            else:
                row.add(marker(url, here))
        else:
            raise ConversionError(f"{here}: unsupported content block type {kind!r} here")
        out.append(skeleton)
    return out


def _import_reasoning(row: Row, block: Mapping[str, Any], skeleton: JSONObject, where: str) -> None:
    """A v1 reasoning block: its `reasoning` text and each `summary` part's text are priced."""
    if block.get("reasoning") is not None:
        skeleton["reasoning"] = row.add(
            expect_str(block["reasoning"], f"{where}.reasoning"), REASONING
        )
    if block.get("summary") is not None:
        parts = []
        for k, raw in enumerate(expect_list(block["summary"], f"{where}.summary")):
            part = skeleton_copy(expect_mapping(raw, f"{where}.summary[{k}]"))
            part["text"] = row.add(expect_str(part.get("text"), f"{where}.summary[{k}]"), REASONING)
            parts.append(part)
        skeleton["summary"] = parts


def _cut_image(block: Mapping[str, Any], skeleton: JSONObject, where: str) -> str:
    """The image's URL (a data URL for base64 data); the skeleton keeps the rest of the block."""
    if block["type"] == "image_url":
        image = block.get("image_url")
        if isinstance(image, str):
            del skeleton["image_url"]
            return image
        rest = skeleton_copy(expect_mapping(image, f"{where}.image_url"))
        skeleton["image_url"] = rest
        return expect_str(rest.pop("url", None), f"{where}.image_url.url")
    for key in ("url", "base64", "data"):
        if key in block:
            value = expect_str(skeleton.pop(key), f"{where}.{key}")
            if key == "url":
                return value
            mime_type = expect_str(block.get("mime_type"), f"{where}.mime_type")
            return f"data:{mime_type};base64,{value}"
    raise ConversionError(f"{where}: an image block needs url, base64 or data")


def default_skeleton(row: FlatRow, previous: FlatRow | None) -> JSONObject:
    """The skeleton of the message a row becomes when it carries none."""
    message = row.message
    if message.role not in _TYPES:
        raise ConversionError(f"role {message.role} has no LangChain message type")
    n = len(message.content)
    out: JSONObject = {"type": _TYPES[message.role], "content": n}
    if message.attachments and user_images_are_attachments(message):
        blocks: list[JSONObject] = [{"type": "text", "text": n}] if n else []
        blocks.extend({"type": "image_url", "image_url": {}} for _ in message.attachments)
        out["content"] = blocks
    elif message.role == history_pb2.ROLE_USER and not marker_text_row(message):
        pieces = split_markers(message.content)
        if any(isinstance(p, int) for p in pieces):
            out["content"] = [
                {"type": "image_url", "image_url": {}}
                if isinstance(p, int)
                else {"type": "text", "text": len(p)}
                for p in pieces
            ]
    if message.role == history_pb2.ROLE_ASSISTANT and message.tool_calls:
        out["tool_calls"] = [{"type": "tool_call"} for _ in message.tool_calls]
    return out


def to_langchain(history: history_pb2.History) -> list[BaseMessage]:
    """Converts a History (either shape) to LangChain messages."""
    out: list[BaseMessage] = []
    for i, row in enumerate(flat_rows(history, FORMAT)):
        where = f"rows[{i}]"
        skeleton = row.skeleton if row.skeleton is not None else default_skeleton(row, None)
        out.append(_export(row, skeleton, where))
    return out


def _export(row: FlatRow, skeleton: JSONObject, where: str) -> BaseMessage:
    message = row.message
    if _ROLES.get(skeleton.get("type", "")) != message.role:
        raise ConversionError(f"{where}: passthrough type does not match the row")
    streams = Streams(row, where)
    data = skeleton_copy(skeleton)
    kind = data.pop("type")
    if message.role == history_pb2.ROLE_TOOL:
        data["tool_call_id"] = message.tool_call_id
    content = skeleton.get("content")
    if isinstance(content, list):
        calls_left = {call.id for call in message.tool_calls}
        data["content"] = [
            _export_block(message, streams, b, where)
            for b in content
            if not _echo_of_swept_call(b, calls_left)
        ]
    else:
        data["content"] = streams.text.take(content, f"{where}.content")
    if "tool_calls" in skeleton:
        calls = []
        for raw in expect_list(skeleton["tool_calls"], f"{where}.tool_calls"):
            call = streams.call()
            if call is None:
                break
            try:
                args = json.loads(call.arguments) if call.arguments else {}
            except json.JSONDecodeError as error:
                raise ConversionError(f"{where}: tool call {call.id} args are not JSON") from error
            calls.append(
                {**expect_mapping(raw, where), "id": call.id, "name": call.name, "args": args}
            )
        data["tool_calls"] = calls
    streams.done()
    try:
        return messages_from_dict([{"type": kind, "data": data}])[0]
    except (ValueError, TypeError) as error:
        raise ConversionError(f"{where}: not a valid {kind} message: {error}") from error


def _echo_of_swept_call(block: object, calls_left: set[str]) -> bool:
    """An echo block of a call the orphan sweep removed goes with its call."""
    return (
        isinstance(block, dict)
        and block.get("type") in _CALL_ECHOES
        and isinstance(block.get("id"), str)
        and block["id"] not in calls_left
    )


def _export_block(
    message: history_pb2.ChatMessage, streams: Streams, block: object, where: str
) -> Any:
    if not isinstance(block, dict):
        return streams.text.take(block, f"{where}.content")
    out = skeleton_copy(block)
    kind = block.get("type")
    if kind == "text":
        out["text"] = streams.text.take(block.get("text"), f"{where}.text")
    elif kind == "thinking":
        out[kind] = streams.reasoning.take(block.get(kind), f"{where}.{kind}")
    elif kind == "reasoning":
        if block.get("reasoning") is not None:
            out["reasoning"] = streams.reasoning.take(block["reasoning"], f"{where}.reasoning")
        if block.get("summary") is not None:
            out["summary"] = [
                {**part, "text": streams.reasoning.take(part.get("text"), f"{where}.summary")}
                for part in expect_list(block["summary"], f"{where}.summary")
            ]
    elif kind in _OPAQUE_BLOCKS:
        text = streams.text.take(block.get("block"), f"{where}.block")
        try:
            return dict(expect_mapping(json.loads(text), where))
        except json.JSONDecodeError as error:
            raise ConversionError(f"{where}: the row's text is no longer the block JSON") from error
    elif kind in ("image_url", "image"):
        if user_images_are_attachments(message):
            url = attachment_url(streams.attachment(where), where)
        else:
            url = streams.text.marker_url(where)
        _put_image(out, url, where)
    elif kind not in _CALL_ECHOES:
        raise ConversionError(f"{where}: passthrough block type {kind!r} is not LangChain")
    return out


def _put_image(out: JSONObject, url: str, where: str) -> None:
    if out["type"] == "image_url":
        if "image_url" in out:
            out["image_url"] = {**out["image_url"], "url": url}
        else:
            out["image_url"] = url
        return
    parsed = parse_data_url(url)
    wants_data = out.get("source_type") == "base64" or (
        "source_type" not in out and parsed is not None
    )
    if not wants_data:
        out["url"] = url
        return
    if parsed is None:
        raise ConversionError(f"{where}: a base64 image needs a data: URL")
    out["data" if "source_type" in out else "base64"] = parsed[1]
    out.setdefault("mime_type", parsed[0])


# LangChain's `start_on` values a turnkeeper trim always satisfies: the kept history (after the
# system messages) starts with the breadcrumb or a turn's first message, a human message.
_HUMAN_START = frozenset({"human", "user", HumanMessage})
MessageType = str | type[BaseMessage]
MessagesInput = Sequence[MessageLikeRepresentation] | PromptValue
# LangChain's counters: a callable, a chat model (anything with `get_num_tokens_from_messages`,
# a bound model included) or the "approximate" shortcut. They are checked as LangChain checks
# them, so an invalid one fails here as it would there, and never called: the sidecar's
# estimate (calibrated per route) is what counts.
TokenCounter = Callable[..., int] | Literal["approximate"] | object
_TOKEN_COUNTER_SHORTCUTS = ("approximate",)


@dataclass(frozen=True)
class _TrimOptions:
    """The keywords of one `trim_messages` call (or of its Runnable), checked on each use."""

    max_tokens: int | None
    profiles: profile_pb2.Profiles | None
    session_id: str
    breadcrumb_text: str | None
    token_counter: TokenCounter | None
    strategy: str
    allow_partial: bool
    end_on: MessageType | Sequence[MessageType] | None
    start_on: MessageType | Sequence[MessageType] | None
    include_system: bool
    text_splitter: object

    def request(self, messages: MessagesInput) -> history_service_pb2.TrimHistoryRequest:
        """The request, after refusing what a whole-turn trim cannot honour."""
        self._check()
        if isinstance(messages, PromptValue):
            messages = messages.to_messages()
        request = history_service_pb2.TrimHistoryRequest(
            mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
            caller_path=trim_pb2.CALLER_PATH_AGENT,
            caller=trim_pb2.CallerContext(session_id=self.session_id),
        )
        texts = [DEFAULT_BREADCRUMB]
        if self.profiles is not None:
            request.profiles.CopyFrom(self.profiles)
            if self.breadcrumb_text is not None:
                request.profiles.runtime.breadcrumb_text = self.breadcrumb_text
            if request.profiles.runtime.breadcrumb_text:
                texts.append(request.profiles.runtime.breadcrumb_text)
        else:
            request.explicit_limits.budget_tokens = self.max_tokens or 0
            if self.breadcrumb_text is not None:
                request.explicit_limits.breadcrumb_text = self.breadcrumb_text
                texts.append(self.breadcrumb_text)
        request.history.CopyFrom(
            from_langchain(convert_to_messages(messages), breadcrumb_texts=texts)
        )
        return request

    def _check(self) -> None:
        if (self.max_tokens is None) == (self.profiles is None):
            raise ValueError(
                "trim_messages needs one budget: max_tokens=, or profiles= to resolve it from"
            )
        if self.strategy != "last":
            raise ValueError(
                f"strategy={self.strategy!r}: turnkeeper keeps the newest whole turns "
                "(strategy='last')"
            )
        if self.allow_partial or self.text_splitter is not None:
            raise ValueError("allow_partial/text_splitter: turnkeeper never splits a message")
        if not self.include_system:
            raise ValueError(
                "include_system=False: turnkeeper always keeps the leading system messages"
            )
        if self.end_on is not None:
            raise ValueError("end_on: turnkeeper keeps the history's end as it is")
        start_on = self.start_on
        starts = [start_on] if isinstance(start_on, str | type) else list(start_on or [])
        if any(kind not in _HUMAN_START for kind in starts):
            raise ValueError(
                f"start_on={start_on!r}: a turnkeeper trim starts on a human message ('human')"
            )
        _check_token_counter(self.token_counter)


def _check_token_counter(counter: object) -> None:
    """Refuses what LangChain's trim_messages refuses, with its words, and `len`, which LangChain
    accepts as a message count but turnkeeper's budget is in tokens."""
    if counter is None:
        return
    if isinstance(counter, str):
        if counter not in _TOKEN_COUNTER_SHORTCUTS:
            shortcuts = ", ".join(f"'{key}'" for key in _TOKEN_COUNTER_SHORTCUTS)
            raise ValueError(
                f"Invalid token_counter shortcut '{counter}'. Available shortcuts: {shortcuts}."
            )
        return
    if counter is len:
        raise ValueError("token_counter=len counts messages; turnkeeper's max_tokens are tokens")
    if not hasattr(counter, "get_num_tokens_from_messages") and not callable(counter):
        raise ValueError(
            "'token_counter' expected to be a model that implements "
            "'get_num_tokens_from_messages()' or a function. Received object of type "
            f"{type(counter)}."
        )


def _trim_sync(
    client: TurnkeeperClient | AsyncTurnkeeperClient,
    options: _TrimOptions,
    messages: MessagesInput,
) -> list[BaseMessage]:
    request = options.request(messages)
    if not isinstance(client, TurnkeeperClient):
        raise TypeError(
            "trim_messages has an AsyncTurnkeeperClient: use atrim_messages, or the Runnable "
            "form's ainvoke/astream"
        )
    return to_langchain(client.trim_history(request).history)


async def _trim_async(
    client: TurnkeeperClient | AsyncTurnkeeperClient,
    options: _TrimOptions,
    messages: MessagesInput,
) -> list[BaseMessage]:
    request = options.request(messages)
    if isinstance(client, AsyncTurnkeeperClient):
        return to_langchain((await client.trim_history(request)).history)
    response = await asyncio.to_thread(client.trim_history, request)
    return to_langchain(response.history)


@overload
def trim_messages(
    messages: MessagesInput,
    *,
    max_tokens: int | None = None,
    client: TurnkeeperClient,
    profiles: profile_pb2.Profiles | None = None,
    session_id: str = "",
    breadcrumb_text: str | None = None,
    token_counter: TokenCounter | None = None,
    strategy: Literal["first", "last"] = "last",
    allow_partial: bool = False,
    end_on: MessageType | Sequence[MessageType] | None = None,
    start_on: MessageType | Sequence[MessageType] | None = None,
    include_system: bool = True,
    text_splitter: object = None,
) -> list[BaseMessage]: ...


@overload
def trim_messages(
    messages: None = None,
    *,
    max_tokens: int | None = None,
    client: TurnkeeperClient | AsyncTurnkeeperClient,
    profiles: profile_pb2.Profiles | None = None,
    session_id: str = "",
    breadcrumb_text: str | None = None,
    token_counter: TokenCounter | None = None,
    strategy: Literal["first", "last"] = "last",
    allow_partial: bool = False,
    end_on: MessageType | Sequence[MessageType] | None = None,
    start_on: MessageType | Sequence[MessageType] | None = None,
    include_system: bool = True,
    text_splitter: object = None,
) -> Runnable[MessagesInput, list[BaseMessage]]: ...


def trim_messages(
    messages: MessagesInput | None = None,
    *,
    max_tokens: int | None = None,
    client: TurnkeeperClient | AsyncTurnkeeperClient,
    profiles: profile_pb2.Profiles | None = None,
    session_id: str = "",
    breadcrumb_text: str | None = None,
    token_counter: TokenCounter | None = None,
    strategy: Literal["first", "last"] = "last",
    allow_partial: bool = False,
    end_on: MessageType | Sequence[MessageType] | None = None,
    start_on: MessageType | Sequence[MessageType] | None = None,
    include_system: bool = True,
    text_splitter: object = None,
) -> list[BaseMessage] | Runnable[MessagesInput, list[BaseMessage]]:
    """turnkeeper's whole-turn trim with the keywords of `langchain_core.messages.trim_messages`.
    It is not LangChain's function: it keeps the leading system messages and the newest whole
    turns that fit the budget by the sidecar's estimate, never splits a tool exchange, and puts a
    breadcrumb `HumanMessage` where turns were dropped. Messages come back as they went in.

    Called without messages it returns a Runnable (as LangChain's does) for a chain:
    `prompt | trim_messages(max_tokens=..., client=client) | model`; with an
    `AsyncTurnkeeperClient` that Runnable serves `ainvoke` / `astream`.

    The budget is `max_tokens`, or the budget `profiles` resolve to (one of the two).
    `session_id` names the session in the trim's event. Where it differs from LangChain's
    (docs/frameworks.md lists each): `token_counter` is checked as LangChain checks it but never
    called (`len` is refused: it counts messages); the newest turn is kept whole even over the
    budget; the breadcrumb is added; `include_system` is True by default. `strategy="first"`,
    `allow_partial`, `text_splitter`, `end_on`, `include_system=False` and a `start_on` other
    than the human type raise ValueError.
    """
    options = _TrimOptions(
        max_tokens,
        profiles,
        session_id,
        breadcrumb_text,
        token_counter,
        strategy,
        allow_partial,
        end_on,
        start_on,
        include_system,
        text_splitter,
    )
    if messages is None:
        return RunnableLambda(
            partial(_trim_sync, client, options),
            afunc=partial(_trim_async, client, options),
            name="trim_messages",
        )
    return _trim_sync(client, options, messages)


async def atrim_messages(
    messages: MessagesInput,
    *,
    max_tokens: int | None = None,
    client: AsyncTurnkeeperClient,
    profiles: profile_pb2.Profiles | None = None,
    session_id: str = "",
    breadcrumb_text: str | None = None,
    token_counter: TokenCounter | None = None,
    strategy: Literal["first", "last"] = "last",
    allow_partial: bool = False,
    end_on: MessageType | Sequence[MessageType] | None = None,
    start_on: MessageType | Sequence[MessageType] | None = None,
    include_system: bool = True,
    text_splitter: object = None,
) -> list[BaseMessage]:
    """`trim_messages` with the asyncio client (its Runnable form is `trim_messages(client=...)`
    without messages, whose `ainvoke` uses this client)."""
    options = _TrimOptions(
        max_tokens,
        profiles,
        session_id,
        breadcrumb_text,
        token_counter,
        strategy,
        allow_partial,
        end_on,
        start_on,
        include_system,
        text_splitter,
    )
    return await _trim_async(client, options, messages)


__all__ = ["atrim_messages", "from_langchain", "to_langchain", "trim_messages"]
