"""Converters: refusals, format detection, and one round-trip property per format (hypothesis):
provider JSON -> history -> TrimHistory with no budget pressure (live server) -> provider JSON is
the input exactly. The mappings themselves are pinned by the shared converter vectors
(test_converter_vectors.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turnkeeper.v1 import history_pb2, history_service_pb2, trim_pb2

from turnkeeper_client import ClientError, ConversionError, TurnkeeperClient, TurnkeeperError
from turnkeeper_client.convert import (
    DEFAULT_BREADCRUMB,
    TurnMarks,
    chat_rows,
    detect_format,
    from_anthropic,
    from_openai,
    from_openai_responses,
    to_anthropic,
    to_openai,
    to_openai_responses,
    turn_marks,
)
from turnkeeper_client.convert._common import split_markers

ROLE = history_pb2


def chat(*rows: history_pb2.ChatMessage) -> history_pb2.History:
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def row(role: int, content: str = "", **fields: Any) -> history_pb2.ChatMessage:
    return history_pb2.ChatMessage(role=role, content=content, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("messages", "where"),
    [
        ([{"role": "function", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": [{"type": "input_audio"}]}], "messages[0].content[0]"),
        (
            [
                {
                    "role": "assistant",
                    "content": [{"type": "image_url", "image_url": {"url": "https://a"}}],
                }
            ],
            "messages[0].content[0]",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom"}]}],
            "tool_calls[0].type",
        ),
        ([{"role": "assistant", "function_call": {"name": "f"}}], "function_call"),
        ([{"role": "tool", "content": "x"}], "messages[0].tool_call_id"),
        ([{"role": "user", "content": 3}], "messages[0].content"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a]b"}}]}],
            "contains ']'",
        ),
    ],
)
def test_openai_rejects_what_it_cannot_carry(messages: list[dict[str, Any]], where: str) -> None:
    with pytest.raises(ConversionError, match=re.escape(where)):
        from_openai(messages)


def test_export_rejects_fields_the_format_has_no_place_for() -> None:
    with pytest.raises(ConversionError, match="attachments"):
        to_openai(chat(row(ROLE.ROLE_USER, "x"), row(ROLE.ROLE_ASSISTANT, "y", attachments=[{}])))
    with pytest.raises(ConversionError, match="tool calls"):
        to_openai(chat(row(ROLE.ROLE_USER, "x", tool_calls=[{"id": "c", "name": "f"}])))
    with pytest.raises(ConversionError, match="tool_call_id"):
        to_anthropic(chat(row(ROLE.ROLE_USER, "x", tool_call_id="c")))
    with pytest.raises(ConversionError, match="system row after messages"):
        to_anthropic(chat(row(ROLE.ROLE_USER, "x"), row(ROLE.ROLE_SYSTEM, "late")))
    step = history_pb2.AssistantToolCalls(
        reasoning="why", tool_calls=[history_pb2.ToolCall(id="c", name="f")]
    )
    history = history_pb2.History(
        conversation=history_pb2.ConversationHistory(
            messages=[history_pb2.ConversationMessage(assistant_tool_calls=step)]
        )
    )
    with pytest.raises(ConversionError, match="reasoning"):
        to_anthropic(history)


def test_export_refuses_a_passthrough_the_row_no_longer_matches() -> None:
    history = from_anthropic(
        [{"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": {}}]}]
    )
    history.chat.messages[0].content = "hello, edited"
    with pytest.raises(ConversionError, match="no place"):
        to_anthropic(history)
    history.chat.messages[0].content = "hi"
    with pytest.raises(ConversionError, match="only 2 remain"):
        to_anthropic(history)


def test_anthropic_refuses_blocks_it_cannot_price() -> None:
    with pytest.raises(ConversionError, match=r"messages\[0\]\.content\[0\]"):
        from_anthropic([{"role": "user", "content": [{"type": "document"}]}])
    with pytest.raises(ConversionError, match="image source"):
        from_anthropic(
            [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]
        )
    with pytest.raises(ConversionError, match="not a JSON object"):
        to_anthropic(
            chat(row(ROLE.ROLE_ASSISTANT, tool_calls=[{"id": "c", "name": "f", "arguments": "1"}]))
        )


def test_swept_tool_calls_leave_their_blocks_out() -> None:
    """The orphan sweep may remove calls from a row: their tool_use blocks go with them."""
    history = from_anthropic(
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                    {"type": "tool_use", "id": "b", "name": "g", "input": {}, "cache_control": {}},
                ],
            }
        ]
    )
    del history.chat.messages[0].tool_calls[1]
    assert to_anthropic(history)["messages"][0]["content"] == [
        {"type": "tool_use", "id": "a", "name": "f", "input": {}}
    ]


def test_split_markers_follows_the_server_scan() -> None:
    text = "a [IMAGE: https://x/1.png ] b [IMAGE:/local.png] [IMAGE:data:x;base64,AA] [IMAGE:c"
    assert split_markers(text) == ["a ", 25, " b [IMAGE:/local.png] ", 24, " [IMAGE:c"]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"chat": {"messages": []}}, "proto"),
        ({"history": {}, "mode": "TRIM_MODE_TOKEN_BUDGET"}, "proto"),
        ({"system": "s", "messages": []}, "anthropic"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}], "anthropic"),
        ({"model": "m", "messages": [{"role": "tool", "tool_call_id": "t"}]}, "openai"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "openai"),
        ([{"role": "user", "content": "hi"}], "openai"),
        ({"model": "m", "input": [{"role": "user", "content": "hi"}]}, "openai_responses"),
        ([{"type": "function_call_output", "call_id": "c", "output": ""}], "openai_responses"),
        ([{"role": "user", "content": [{"type": "input_text", "text": ""}]}], "openai_responses"),
    ],
)
def test_detect_format(data: object, expected: str) -> None:
    assert detect_format(data) == expected


def test_detect_format_rejects_other_json() -> None:
    with pytest.raises(ConversionError):
        detect_format({"foo": 1})


def test_conversion_error_belongs_to_the_client_error_family() -> None:
    with pytest.raises(ClientError) as caught:
        from_anthropic([{"role": "user", "content": [{"type": "document"}]}])
    assert isinstance(caught.value, ConversionError) and isinstance(caught.value, ValueError)
    assert issubclass(TurnkeeperError, ClientError)


# --- Round-trip properties through a live server ------------------------------------------------

TEXT = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("[]:/ "), max_size=20)
IDS = st.text(alphabet="abcdefgh_0123456789", min_size=1, max_size=8)
IMAGE_URLS = st.sampled_from(
    ["https://x.test/a.png", "http://h/b.jpg", "data:image/png;base64,AAAA", "data:;base64,"]
)
EXTRA = st.dictionaries(
    st.sampled_from(["cache_control", "x_note", "id"]),
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), TEXT, st.just({"type": "ephemeral"})),
    max_size=2,
)
JSON_ARGS = st.dictionaries(
    st.text(max_size=4), st.one_of(st.integers(-9, 9), TEXT, st.booleans(), st.none()), max_size=3
)


def extra(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    return {**draw(EXTRA), **base}


@st.composite
def openai_messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
        message: dict[str, Any] = {"role": kind}
        if draw(st.booleans()):
            message["name"] = draw(TEXT)
        if kind == "tool":
            message["tool_call_id"] = draw(IDS)
            message["content"] = draw(TEXT)
        elif kind == "assistant":
            message["content"] = draw(st.one_of(st.none(), TEXT))
            if draw(st.booleans()):
                message["tool_calls"] = [
                    {
                        "id": draw(IDS),
                        "type": "function",
                        "function": {"name": draw(IDS), "arguments": draw(TEXT)},
                    }
                    for _ in range(draw(st.integers(1, 2)))
                ]
            if draw(st.booleans()):
                message["refusal"] = draw(st.one_of(st.none(), TEXT))
        elif kind == "user" and draw(st.booleans()):
            parts: list[dict[str, Any]] = []
            for _ in range(draw(st.integers(0, 3))):
                if draw(st.booleans()):
                    parts.append({"type": "text", "text": draw(TEXT)})
                else:
                    image: dict[str, Any] = {"url": draw(IMAGE_URLS)}
                    if draw(st.booleans()):
                        image["detail"] = draw(st.sampled_from(["low", "high", "auto"]))
                    parts.append({"type": "image_url", "image_url": image})
            message["content"] = parts
        else:
            message["content"] = draw(
                st.one_of(TEXT, st.lists(TEXT.map(lambda t: {"type": "text", "text": t})))
            )
        out.append(message)
    return out


@st.composite
def responses_items(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["message", "function_call", "output", "reasoning"]))
        if kind == "message":
            role = draw(st.sampled_from(["system", "developer", "user", "assistant"]))
            part = "output_text" if role == "assistant" else "input_text"
            content: Any = draw(TEXT)
            if draw(st.booleans()):
                content = [{"type": part, "text": draw(TEXT)}]
                if role == "user" and draw(st.booleans()):
                    detail = draw(st.sampled_from(["low", "high", "auto"]))
                    content.append(
                        {"type": "input_image", "image_url": draw(IMAGE_URLS), "detail": detail}
                    )
            item = {"role": role, "content": content}
            if draw(st.booleans()):
                item.update(type="message", id=draw(IDS), status="completed")
            out.append(item)
        elif kind == "function_call":
            call = {"type": "function_call", "call_id": draw(IDS), "name": draw(IDS)}
            out.append(extra(draw, {**call, "arguments": draw(TEXT)}))
        elif kind == "output":
            output: Any = draw(st.one_of(TEXT, st.just([{"type": "input_text", "text": "o"}])))
            out.append({"type": "function_call_output", "call_id": draw(IDS), "output": output})
        else:
            summary = [
                {"type": "summary_text", "text": t} for t in draw(st.lists(TEXT, max_size=2))
            ]
            item = {"type": "reasoning", "id": draw(IDS), "summary": summary}
            if draw(st.booleans()):
                item["encrypted_content"] = draw(st.one_of(st.none(), TEXT))
            out.append(item)
    return out


def anthropic_image(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        source = {"type": "url", "url": draw(IMAGE_URLS)}
    else:
        source = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    return {"type": "image", "source": source}


@st.composite
def anthropic_requests(draw: st.DrawFn) -> dict[str, Any]:
    request: dict[str, Any] = {}
    system = draw(st.sampled_from(["none", "string", "blocks"]))
    if system == "string":
        request["system"] = draw(TEXT)
    elif system == "blocks":
        request["system"] = [
            extra(draw, {"type": "text", "text": draw(TEXT)})
            for _ in range(draw(st.integers(1, 2)))
        ]
    messages: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            blocks: list[dict[str, Any]] = []
            for _ in range(draw(st.integers(0, 4))):
                kind = draw(st.sampled_from(["text", "thinking", "redacted", "tool_use"]))
                if kind == "text":
                    blocks.append(extra(draw, {"type": "text", "text": draw(TEXT)}))
                elif kind == "thinking":
                    signature = draw(IDS)
                    blocks.append(
                        {"type": "thinking", "thinking": draw(TEXT), "signature": signature}
                    )
                elif kind == "redacted":
                    blocks.append({"type": "redacted_thinking", "data": draw(TEXT)})
                else:
                    use = {"type": "tool_use", "id": draw(IDS), "name": draw(IDS)}
                    blocks.append(extra(draw, {**use, "input": draw(JSON_ARGS)}))
            messages.append(
                {"role": "assistant", "content": draw(st.one_of(TEXT, st.just(blocks)))}
            )
            continue
        blocks = []
        for _ in range(draw(st.integers(0, 2))):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": draw(IDS)}
            shape = draw(st.sampled_from(["absent", "string", "blocks"]))
            if shape == "string":
                result["content"] = draw(TEXT)
            elif shape == "blocks":
                result["content"] = [{"type": "text", "text": draw(TEXT)}, anthropic_image(draw)]
            if draw(st.booleans()):
                result["is_error"] = draw(st.booleans())
            blocks.append(extra(draw, result))
        for _ in range(draw(st.integers(0, 2))):
            if draw(st.booleans()):
                blocks.append(extra(draw, {"type": "text", "text": draw(TEXT)}))
            else:
                blocks.append(anthropic_image(draw))
        messages.append({"role": "user", "content": draw(st.one_of(TEXT, st.just(blocks)))})
    request["messages"] = messages
    return request


def round_trip(
    client: TurnkeeperClient,
    provider: Any,
    from_format: Callable[..., history_pb2.History],
    to_format: Callable[[history_pb2.History], Any],
    shape: str,
) -> None:
    history = from_format(provider, shape=shape)
    response = client.trim_history(
        history_service_pb2.TrimHistoryRequest(
            history=history,
            mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
            caller_path=trim_pb2.CALLER_PATH_AGENT,
            explicit_limits=history_service_pb2.ExplicitLimits(budget_tokens=1_000_000_000),
        )
    )
    assert response.history == history
    assert to_format(response.history) == provider


PROPERTY = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
SHAPES = st.sampled_from(["chat", "conversation"])


@PROPERTY
@given(openai_messages(), SHAPES)
def test_openai_chat_round_trip_is_exact(
    client: TurnkeeperClient, messages: list[dict[str, Any]], shape: str
) -> None:
    round_trip(client, messages, from_openai, to_openai, shape)


@PROPERTY
@given(responses_items(), SHAPES)
def test_openai_responses_round_trip_is_exact(
    client: TurnkeeperClient, items: list[dict[str, Any]], shape: str
) -> None:
    round_trip(client, items, from_openai_responses, to_openai_responses, shape)


@PROPERTY
@given(anthropic_requests(), SHAPES)
def test_anthropic_round_trip_is_exact(
    client: TurnkeeperClient, request: dict[str, Any], shape: str
) -> None:
    round_trip(client, request, from_anthropic, to_anthropic, shape)


def test_the_former_module_name_still_imports() -> None:
    from turnkeeper_client.convert import openai, openai_chat

    assert openai.from_openai is openai_chat.from_openai is from_openai
    assert openai.to_openai is openai_chat.to_openai is to_openai


SUMMARY = "[Tool exchange: 2 tool call(s) \u2014 results collapsed]"


@pytest.mark.parametrize(
    ("to_format", "from_format", "shape"),
    [
        (to_openai, from_openai, "chat"),
        (to_openai_responses, from_openai_responses, "chat"),
        (to_openai_responses, from_openai_responses, "conversation"),
        (to_anthropic, from_anthropic, "chat"),
    ],
)
def test_a_tool_exchange_summary_comes_back_as_a_plain_assistant_row(
    to_format: Callable[..., Any], from_format: Callable[..., history_pb2.History], shape: str
) -> None:
    """Spec §13.1: the mark has no provider form (the vectors pin the export); imported back, the
    summary is an assistant row like any other, which the projection copies unchanged."""
    history = chat(
        row(ROLE.ROLE_USER, "q"),
        row(ROLE.ROLE_ASSISTANT, SUMMARY, tool_exchange_summary=True),
        row(ROLE.ROLE_ASSISTANT, "a"),
    )
    back = from_format(to_format(history), shape=shape)
    rows = [m.chat for m in back.conversation.messages] if shape == "conversation" else None
    summary = rows[1] if rows is not None else back.chat.messages[1]
    assert summary == row(ROLE.ROLE_ASSISTANT, SUMMARY)


MARK = {"type": "ephemeral"}


def marked_blocks(request: Any) -> list[str]:
    """The text of every block carrying cache_control, system first."""
    blocks = list(request["system"]) if isinstance(request.get("system"), list) else []
    for message in request["messages"]:
        if isinstance(message["content"], list):
            blocks.extend(message["content"])
    return [b.get("text", b.get("content")) for b in blocks if "cache_control" in b]


def test_cache_breakpoints_leave_room_for_four_marks_of_the_callers() -> None:
    """Spec §14: with four marks of the caller's in the rows' passthrough, none is added."""
    own = {
        "anthropic": {
            "role": "user",
            "content": [{"type": "text", "text": 1, "cache_control": MARK}],
        }
    }
    history = chat(
        row(ROLE.ROLE_SYSTEM, "s"),
        *(row(ROLE.ROLE_USER, str(k), passthrough=own) for k in range(4)),
        row(ROLE.ROLE_ASSISTANT, "a"),
    )
    request = to_anthropic(history, cache_breakpoints=[0, 5])
    assert marked_blocks(request) == ["0", "1", "2", "3"]
    assert request["system"] == "s"  # a left-out mark leaves its row as it was
    assert request["messages"][-1] == {"role": "assistant", "content": "a"}


def test_cache_breakpoints_without_the_caller_marks_put_every_candidate() -> None:
    history = chat(
        row(ROLE.ROLE_SYSTEM, "s"),
        row(ROLE.ROLE_USER, "q1"),
        row(ROLE.ROLE_ASSISTANT, "a1"),
        row(ROLE.ROLE_USER, "q2"),
    )
    request = to_anthropic(history, cache_breakpoints=[0, 2, 3])
    assert marked_blocks(request) == ["s", "a1", "q2"]
    assert to_anthropic(history) == to_anthropic(history, cache_breakpoints=[])


@pytest.mark.parametrize("index", [-1, 2])
def test_a_cache_breakpoint_outside_the_history_is_refused(index: int) -> None:
    history = chat(row(ROLE.ROLE_USER, "q"), row(ROLE.ROLE_ASSISTANT, "a"))
    with pytest.raises(ConversionError, match=re.escape("cache_breakpoints[1]")):
        to_anthropic(history, cache_breakpoints=[1, index])


def _chat(*rows: history_pb2.ChatMessage) -> history_pb2.History:
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


SYSTEM = history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="sys")


def test_a_summary_rows_markers_stay_text_on_export() -> None:
    """The summary row is priced as text (spec §15.2): its `[IMAGE:]` markers are no images."""
    text = "Saw [IMAGE:https://example.com/a.png] earlier."
    summary = history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=text, summary=True)
    history = _chat(SYSTEM, summary)
    assert to_openai(history)[1] == {"role": "user", "content": text}
    assert to_anthropic(history)["messages"] == [{"role": "user", "content": text}]
    assert to_openai_responses(history)[1] == {"role": "user", "content": text}
    assert from_openai(to_openai(history), marks=TurnMarks(summary=True)) == history


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content="a", pinned=True)],
            "rows[1]: pinned, but only a real user row starts a turn",
        ),
        (
            [
                history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="q"),
                history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="s", summary=True),
            ],
            "rows[2]: a summary row stands nowhere but right after the system rows",
        ),
    ],
)
def test_turn_marks_refuse_what_no_position_names(
    rows: list[history_pb2.ChatMessage], message: str
) -> None:
    with pytest.raises(ConversionError, match=re.escape(message)):
        turn_marks(_chat(SYSTEM, *rows))


def test_turn_marks_count_turns_from_real_user_rows() -> None:
    """The summary, the breadcrumb and a `[Tool results]` carrier start no turn."""
    user = history_pb2.ROLE_USER
    history = _chat(
        SYSTEM,
        history_pb2.ChatMessage(role=user, content="so far", summary=True),
        history_pb2.ChatMessage(role=user, content="task", pinned=True),
        history_pb2.ChatMessage(role=user, content=DEFAULT_BREADCRUMB, breadcrumb=True),
        history_pb2.ChatMessage(role=user, content="q1"),
        history_pb2.ChatMessage(role=user, content="[Tool results] 42"),
        history_pb2.ChatMessage(role=user, content="q2", pinned=True),
    )
    assert turn_marks(history) == TurnMarks(summary=True, pinned_turns=(0, 2))
    assert from_openai(to_openai(history), marks=turn_marks(history)) == history
    # Without the pin, the breadcrumb after it is no breadcrumb position: it is a plain turn.
    unpinned = from_openai(to_openai(history), marks=TurnMarks(summary=True))
    assert not chat_rows(unpinned)[3].breadcrumb
