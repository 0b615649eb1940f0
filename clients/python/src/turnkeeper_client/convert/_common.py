"""Pieces every converter shares: rows being built, skeletons, cursors, markers, attachments.

docs/converters.md is the mapping; the converter vectors in tests/conformance/converters pin it.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf import json_format
from turnkeeper.v1 import history_pb2

from ..errors import ConversionError as ConversionError

# The server's default breadcrumb text (docs/semantics.md, Trims).
DEFAULT_BREADCRUMB = "[earlier turns omitted to fit the context window]"
CARRIER_PREFIX = "[Tool results]"
MARKER_OPEN = "[IMAGE:"

Shape = Literal["chat", "conversation"]
JSONObject = dict[str, Any]
# The two streams a skeleton slot takes priced text from. They are one field (`content`) on every
# row except an assistant step of the conversation shape, which keeps reasoning apart.
TEXT = "text"
REASONING = "reasoning"


def plain_json(value: object) -> Any:
    """Provider JSON as plain dicts and lists, at any depth. An SDK object (a pydantic model: the
    OpenAI SDK's `ChatCompletionMessage` or Responses output items, the Anthropic SDK's content
    blocks) becomes the dict its SDK sends for it when it is passed back in a request:
    `model_dump(mode="json", exclude_unset=True, by_alias=True)`. Duck-typed, so neither SDK (nor
    pydantic) is needed to convert plain JSON."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        value = dump(
            mode="json",
            exclude_unset=True,
            by_alias=True,
            exclude=getattr(value, "__api_exclude__", None),
        )
    if isinstance(value, Mapping):
        return {key: plain_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(item) for item in value]
    return value


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


def expect_length(value: object, where: str) -> int:
    """A skeleton slot: the number of code points the slot takes from its stream."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ConversionError(f"{where}: passthrough slot is not a length")
    if value < 0:
        raise ConversionError(f"{where}: passthrough slot is negative")
    return int(value)


def canonical_json(value: object) -> str:
    """Compact JSON with sorted keys: the one text every client writes for a JSON value."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def is_carrier(content: str) -> bool:
    return content.startswith(CARRIER_PREFIX)


def sendable_url(ref: str) -> bool:
    """Refs a provider can fetch itself: http(s) and data URLs. Local paths stay marker text,
    because only the runtime can load them."""
    return ref.strip().startswith(("http://", "https://", "data:"))


def marker(url: str, where: str) -> str:
    if "]" in url:
        raise ConversionError(f"{where}: image URL contains ']' and cannot be an [IMAGE:] marker")
    return f"{MARKER_OPEN}{url}]"


def split_markers(content: str) -> list[str | int]:
    """User text as text runs (str) and the code-point lengths of sendable `[IMAGE:<ref>]` markers
    (int), per the server's scanning rule: a marker runs from `[IMAGE:` to the first `]`."""
    parts: list[str | int] = []
    text_start = 0
    pos = 0
    while True:
        start = content.find(MARKER_OPEN, pos)
        if start < 0:
            break
        end = content.find("]", start + len(MARKER_OPEN))
        if end < 0:
            break
        if sendable_url(content[start + len(MARKER_OPEN) : end]):
            if start > text_start:
                parts.append(content[text_start:start])
            parts.append(end + 1 - start)
            text_start = end + 1
        pos = end + 1
    if text_start < len(content):
        parts.append(content[text_start:])
    return parts


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def parse_data_url(url: str) -> tuple[str, str] | None:
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


def attachment_from_url(url: str, where: str) -> history_pb2.Attachment:
    """A data URL becomes inline bytes, any other URL a `uri` (no media type is guessed)."""
    parsed = parse_data_url(url)
    if parsed is not None:
        media_type, payload = parsed
        return history_pb2.Attachment(media_type=media_type, data=decode_base64(payload, where))
    return history_pb2.Attachment(uri=url)


def attachment_url(attachment: history_pb2.Attachment, where: str) -> str:
    source = attachment.WhichOneof("source")
    if source == "data":
        return data_url(attachment.media_type, attachment.data)
    if source == "uri":
        return attachment.uri
    raise ConversionError(f"{where}: attachment has neither data nor uri")


@dataclass
class Row:
    """A provider row being imported: the message without its priced text, the priced text as
    (stream, text) pieces in provider order, and the skeleton of the fragment it came from."""

    message: history_pb2.ChatMessage
    skeleton: JSONObject
    pieces: list[tuple[str, str]] = field(default_factory=list)

    def add(self, text: str, stream: str = TEXT) -> int:
        """Adds priced text; returns its length, which the skeleton keeps in the text's place."""
        self.pieces.append((stream, text))
        return len(text)

    def joined(self) -> str:
        return "".join(text for _, text in self.pieces)


DefaultSkeleton = Callable[["FlatRow", "FlatRow | None"], JSONObject]


@dataclass(frozen=True)
class TurnMarks:
    """The spec §15 marks of a history, which no provider format can carry: a provider refuses a
    key it does not know, so the summary row and a pinned turn's user row export as plain user
    messages, and the runtime keeps these marks beside the provider JSON.

    `summary`: the first row after the leading system rows is the summary row (§15.2).
    `pinned_turns`: the pinned turns (§15.1) by their 0-based position among the history's turns,
    ascending; a turn starts at a real user row (not the summary, the breadcrumb or a
    `[Tool results]` carrier). `turn_marks(history)` reads them from a history; the import
    functions take them as `marks=` and set them on the rows they make.
    """

    summary: bool = False
    pinned_turns: tuple[int, ...] = ()


def starts_turn(message: history_pb2.ChatMessage) -> bool:
    """A real user row (spec §0): a turn boundary, the only row a pin may mark (§15.1)."""
    return (
        message.role == history_pb2.ROLE_USER
        and not message.breadcrumb
        and not message.summary
        and not is_carrier(message.content)
    )


def turn_marks(history: history_pb2.History) -> TurnMarks:
    """The summary and pinned-turn marks of a history, to keep beside its provider JSON and pass
    back as `marks=` when importing it again. A mark no provider position can name (a pin on a row
    that starts no turn, a summary row anywhere but right after the leading system rows) is a
    `ConversionError`: the server refuses such a history too."""
    rows = [row.message for row in flat_rows(history, "")]
    first = next((i for i, row in enumerate(rows) if row.role != history_pb2.ROLE_SYSTEM), None)
    pinned: list[int] = []
    turn = 0
    for i, row in enumerate(rows):
        if row.summary and i != first:
            raise ConversionError(
                f"rows[{i}]: a summary row stands nowhere but right after the system rows"
            )
        if starts_turn(row):
            if row.pinned:
                pinned.append(turn)
            turn += 1
        elif row.pinned:
            raise ConversionError(f"rows[{i}]: pinned, but only a real user row starts a turn")
    return TurnMarks(first is not None and rows[first].summary, tuple(pinned))


def finish(
    rows: Sequence[Row],
    fmt: str,
    default_skeleton: DefaultSkeleton,
    breadcrumb_texts: Iterable[str],
    shape: Shape,
    marks: TurnMarks | None = None,
) -> history_pb2.History:
    """Fills content, sets the caller's marks, marks the breadcrumb, drops skeletons that say
    nothing (equal to what the converter makes of the row without one) and builds the history in
    the asked shape."""
    for row in rows:
        row.message.content = row.joined()
    _apply_marks(rows, marks or TurnMarks(), breadcrumb_texts)
    previous: FlatRow | None = None
    for row in rows:
        if row.skeleton != default_skeleton(FlatRow(row.message, None, None), previous):
            row.message.passthrough.update({fmt: row.skeleton})
        previous = FlatRow(row.message, None, row.skeleton)
    return _build_history(rows, shape)


def _apply_marks(rows: Sequence[Row], marks: TurnMarks, breadcrumb_texts: Iterable[str]) -> None:
    """Sets the caller's marks and finds the breadcrumb. Provider formats have no breadcrumb flag:
    a user row with a known breadcrumb text is the breadcrumb the server inserted when it stands
    where one may (spec §7, §15.1): right after the leading system rows, the summary row and the
    pinned turns before it. Turns are counted without it, so the pins are set on the same walk."""
    texts = frozenset(breadcrumb_texts)
    leading = 0
    while leading < len(rows) and rows[leading].message.role == history_pb2.ROLE_SYSTEM:
        leading += 1
    after_system = [row.message for row in rows[leading:]]
    if marks.summary:
        first = after_system[0] if after_system else None
        if (
            first is None
            or first.role != history_pb2.ROLE_USER
            or first.attachments
            or is_carrier(first.content)
        ):
            raise ConversionError(
                "marks.summary: the first message after the system messages is no plain user "
                "message"
            )
        first.summary = True
    pinned = frozenset(marks.pinned_turns)
    turn = 0
    crumb_may_follow = True
    for message in after_system:
        if message.summary:
            continue
        is_crumb_text = (
            message.role == history_pb2.ROLE_USER
            and message.content in texts
            and not message.attachments
        )
        if crumb_may_follow and is_crumb_text:
            message.breadcrumb = True
            crumb_may_follow = False
        elif starts_turn(message):
            message.pinned = turn in pinned
            crumb_may_follow = crumb_may_follow and message.pinned
            turn += 1
        elif turn == 0:
            # Rows before the first real user row belong to the first turn (spec §0).
            crumb_may_follow = False
    missing = [n for n in marks.pinned_turns if not 0 <= n < turn]
    if missing:
        raise ConversionError(
            f"marks.pinned_turns: turn {missing[0]} does not exist (the history has {turn})"
        )


def _build_history(rows: Sequence[Row], shape: Shape) -> history_pb2.History:
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
            step = history_pb2.AssistantToolCalls(
                text="".join(t for stream, t in row.pieces if stream == TEXT),
                reasoning="".join(t for stream, t in row.pieces if stream == REASONING),
                tool_calls=message.tool_calls,
            )
            if message.HasField("passthrough"):
                step.passthrough.CopyFrom(message.passthrough)
            out.append(history_pb2.ConversationMessage(assistant_tool_calls=step))
        elif message.role == history_pb2.ROLE_TOOL:
            result = history_pb2.ToolResult(
                tool_call_id=message.tool_call_id,
                tool_name=names.get(message.tool_call_id, ""),
                content=message.content,
                attachments=message.attachments,
            )
            if message.HasField("passthrough"):
                result.passthrough.CopyFrom(message.passthrough)
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


def struct_json(value: Any) -> Any:
    """A Struct's JSON with integral numbers as ints again (Struct keeps every number a double)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: struct_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [struct_json(item) for item in value]
    return value


@dataclass(frozen=True)
class FlatRow:
    """One provider row of a history on its way out: the row, the reasoning of an assistant step
    (None where the shape keeps reasoning in `content`) and this format's skeleton, if any."""

    message: history_pb2.ChatMessage
    reasoning: str | None
    skeleton: JSONObject | None


def flat_rows(history: history_pb2.History, fmt: str) -> list[FlatRow]:
    """The provider rows a history stands for, in order, with their `fmt` skeletons."""
    shape = history.WhichOneof("shape")
    if shape == "chat":
        return [FlatRow(m, None, _skeleton(m.passthrough, fmt)) for m in history.chat.messages]
    if shape != "conversation":
        raise ConversionError("history: neither chat nor conversation is set")
    rows: list[FlatRow] = []
    for i, message in enumerate(history.conversation.messages):
        kind = message.WhichOneof("message")
        if kind == "chat":
            rows.append(FlatRow(message.chat, None, _skeleton(message.chat.passthrough, fmt)))
        elif kind == "assistant_tool_calls":
            step = message.assistant_tool_calls
            row = history_pb2.ChatMessage(
                role=history_pb2.ROLE_ASSISTANT, content=step.text, tool_calls=step.tool_calls
            )
            rows.append(FlatRow(row, step.reasoning, _skeleton(step.passthrough, fmt)))
        elif kind == "tool_results":
            for result in message.tool_results.results:
                row = history_pb2.ChatMessage(
                    role=history_pb2.ROLE_TOOL,
                    tool_call_id=result.tool_call_id,
                    content=result.content,
                    attachments=result.attachments,
                )
                rows.append(FlatRow(row, None, _skeleton(result.passthrough, fmt)))
        else:
            raise ConversionError(f"history.conversation.messages[{i}]: no message set")
    return rows


def chat_rows(history: history_pb2.History) -> list[history_pb2.ChatMessage]:
    """The provider rows a history stands for, in order (the conversation shape flattened)."""
    return [row.message for row in flat_rows(history, "")]


def _skeleton(passthrough: Any, fmt: str) -> JSONObject | None:
    if not fmt or fmt not in passthrough.fields:
        return None
    value = struct_json(json_format.MessageToDict(passthrough)[fmt])
    if not isinstance(value, dict):
        raise ConversionError(f"passthrough.{fmt}: expected an object")
    return value


def skeleton_copy(skeleton: Mapping[str, Any]) -> JSONObject:
    return copy.deepcopy(dict(skeleton))


class Cursor:
    """Reads a row's priced text back in the order the skeleton's slots name it."""

    def __init__(self, text: str, where: str, field_name: str) -> None:
        self._text = text
        self._pos = 0
        self._where = where
        self._field = field_name

    def take(self, length: object, where: str) -> str:
        n = expect_length(length, where)
        if self._pos + n > len(self._text):
            raise ConversionError(
                f"{where}: passthrough wants {n} characters of {self._field} but only "
                f"{len(self._text) - self._pos} remain; the row changed since it was converted"
            )
        piece = self._text[self._pos : self._pos + n]
        self._pos += n
        return piece

    def marker_url(self, where: str) -> str:
        """The URL of the `[IMAGE:<url>]` marker at the current position."""
        if not self._text.startswith(MARKER_OPEN, self._pos):
            raise ConversionError(f"{where}: passthrough expects an [IMAGE:] marker here")
        end = self._text.find("]", self._pos)
        url = self._text[self._pos + len(MARKER_OPEN) : end]
        self._pos = end + 1
        return url

    def done(self) -> None:
        if self._pos != len(self._text):
            raise ConversionError(
                f"{self._where}: {len(self._text) - self._pos} characters of {self._field} have "
                "no place in the passthrough or the target format"
            )


class Streams:
    """The text and reasoning cursors of one row (one cursor where reasoning is in `content`)."""

    def __init__(self, row: FlatRow, where: str) -> None:
        self.text = Cursor(row.message.content, where, "content")
        self.reasoning = (
            self.text if row.reasoning is None else Cursor(row.reasoning, where, "reasoning")
        )
        self._attachments = list(row.message.attachments)
        self._calls = list(row.message.tool_calls)
        self._where = where
        if row.message.tool_call_id and row.message.role != history_pb2.ROLE_TOOL:
            raise ConversionError(f"{where}: tool_call_id on a non-tool row has no provider field")

    def attachment(self, where: str) -> history_pb2.Attachment:
        if not self._attachments:
            raise ConversionError(f"{where}: passthrough expects an attachment the row lacks")
        return self._attachments.pop(0)

    def call(self) -> history_pb2.ToolCall | None:
        """The next tool call; None once the row has no more (the sweep may have removed some)."""
        return self._calls.pop(0) if self._calls else None

    def done(self) -> None:
        self.text.done()
        self.reasoning.done()
        if self._attachments:
            raise ConversionError(f"{self._where}: attachments have no place in the passthrough")
        if self._calls:
            raise ConversionError(f"{self._where}: tool calls have no place in the passthrough")


def user_images_are_attachments(message: history_pb2.ChatMessage) -> bool:
    """Images of a tool row or a `[Tool results]` carrier are its attachments; those of any other
    user row are `[IMAGE:]` markers in its text."""
    return message.role == history_pb2.ROLE_TOOL or (
        message.role == history_pb2.ROLE_USER and is_carrier(message.content)
    )


def marker_text_row(message: history_pb2.ChatMessage) -> bool:
    """A user row whose `[IMAGE:]` markers are plain text: the breadcrumb, the summary row (priced
    as text, spec §15.2) or a carrier."""
    return message.breadcrumb or message.summary or is_carrier(message.content)
