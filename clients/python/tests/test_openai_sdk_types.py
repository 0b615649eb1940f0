"""The exports are typed as the SDKs' params where the SDKs are installed: `to_openai` as the
OpenAI SDK's `ChatCompletionMessageParam`, `to_openai_responses` as its `ResponseInputItemParam`,
`to_anthropic` as a TypedDict of the Anthropic SDK's `MessageParam` / `TextBlockParam`.

`mypy --strict` over this file is half of the test: the `sdk_*` functions only type-check when the
converters return the SDKs' parameter types (plain `dict[str, Any]` rows would be rejected). The
other half validates what the converters really produce, for every converter vector, against the
SDKs' TypedDicts at run time.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from google.protobuf import json_format
from turnkeeper.v1 import history_pb2

from turnkeeper_client.convert import (
    from_anthropic,
    from_openai,
    from_openai_responses,
    to_anthropic,
    to_openai,
    to_openai_responses,
)

from .conftest import REPO

if TYPE_CHECKING:
    from anthropic.types import ContentBlock, MessageParam, TextBlockParam
    from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageParam
    from openai.types.responses import ResponseInputItemParam, ResponseOutputItem

openai_chat = pytest.importorskip("openai.types.chat")
pydantic = pytest.importorskip("pydantic")

VECTORS = sorted((REPO / "tests" / "conformance" / "converters").glob("*.json"))


def not_request_params(vector: dict[str, typing.Any]) -> bool:
    """The vectors whose provider JSON is no request param, and comes back as it went in: a
    response object's dump (annotations, audio, status: keys only the response types have; pinned
    to the SDKs by test_sdk_objects.py) and null-valued keys (absent to the converters)."""
    name: str = vector["name"]
    return "-sdk-dump-" in name or "null-valued" in name


def sdk_messages(history: history_pb2.History) -> list[ChatCompletionMessageParam]:
    return to_openai(history)


def sdk_inputs(
    params: list[ChatCompletionMessageParam],
    reply: ChatCompletionMessage,
    items: list[ResponseInputItemParam],
    output: list[ResponseOutputItem],
    turns: list[MessageParam],
    blocks: list[ContentBlock],
) -> list[history_pb2.History]:
    """What the SDKs type goes in as it is (mypy checks the argument types)."""
    return [
        from_openai([*params, reply]),
        from_openai_responses([*items, *output]),
        from_anthropic({"messages": [*turns, {"role": "assistant", "content": blocks}]}),
    ]


def sdk_items(history: history_pb2.History) -> list[ResponseInputItemParam]:
    return to_openai_responses(history)


def sdk_anthropic(history: history_pb2.History) -> tuple[list[MessageParam], object]:
    request = to_anthropic(history)
    system: str | list[TextBlockParam] = request.get("system", "")
    return request["messages"], system


def test_the_return_annotation_is_the_sdk_message_param() -> None:
    sdk_type: typing.Any = openai_chat.ChatCompletionMessageParam
    hints = typing.get_type_hints(to_openai, localns={"ChatCompletionMessageParam": sdk_type})
    assert typing.get_origin(hints["return"]) is list
    assert typing.get_args(hints["return"]) == (sdk_type,)


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_exported_messages_validate_against_the_sdk_types(path: Path) -> None:
    vector = json.loads(path.read_text())
    if vector["format"] != "openai_chat" or "history" not in vector:
        pytest.skip("not an OpenAI Chat Completions export")
    if not_request_params(vector):
        pytest.skip("SDK response dumps or null-valued keys, not request params")
    history = history_pb2.History()
    json_format.ParseDict(vector["history"], history)
    sdk_type: typing.Any = openai_chat.ChatCompletionMessageParam
    # extra="forbid": a key the SDK does not know is a failure too, not only a missing one.
    adapter = pydantic.TypeAdapter(list[sdk_type], config=pydantic.ConfigDict(extra="forbid"))
    adapter.validate_python(sdk_messages(history))


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_responses_and_anthropic_exports_validate_against_the_sdk_types(path: Path) -> None:
    pytest.importorskip("anthropic")
    import anthropic.types
    import openai.types.responses

    vector = json.loads(path.read_text())
    if vector["format"] not in ("openai_responses", "anthropic") or "history" not in vector:
        pytest.skip("not a Responses or Anthropic export")
    if not_request_params(vector):
        pytest.skip("SDK response dumps or null-valued keys, not request params")
    history = history_pb2.History()
    json_format.ParseDict(vector["history"], history)
    # Unknown keys ride along in the passthrough (docs/converters.md), so extra keys are allowed
    # here; every key the SDK knows must have the SDK's type.
    if vector["format"] == "openai_responses":
        item: typing.Any = openai.types.responses.ResponseInputItemParam
        pydantic.TypeAdapter(list[item]).validate_python(sdk_items(history))
    else:
        message: typing.Any = anthropic.types.MessageParam
        block: typing.Any = anthropic.types.TextBlockParam
        messages, system = sdk_anthropic(history)
        pydantic.TypeAdapter(list[message]).validate_python(messages)
        pydantic.TypeAdapter(str | list[block]).validate_python(system)
