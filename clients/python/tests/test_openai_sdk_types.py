"""`to_openai` is typed as the OpenAI SDK's `ChatCompletionMessageParam` where the SDK is installed.

`mypy --strict` over this file is half of the test: `sdk_messages` only type-checks when
`to_openai` returns the SDK's parameter type (plain `dict[str, Any]` rows would be rejected). The
other half validates what the converter really produces, for every OpenAI Chat converter vector,
against the SDK's TypedDicts at run time.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from google.protobuf import json_format
from turnkeeper.v1 import history_pb2

from turnkeeper_client.convert import to_openai

from .conftest import REPO

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

openai_chat = pytest.importorskip("openai.types.chat")
pydantic = pytest.importorskip("pydantic")

VECTORS = sorted((REPO / "tests" / "conformance" / "converters").glob("*.json"))


def sdk_messages(history: history_pb2.History) -> list[ChatCompletionMessageParam]:
    return to_openai(history)


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
    if "-sdk-dump-" in vector["name"]:
        # A response object's dump (annotations, audio: keys only the response type has) comes
        # back as it went in; these vectors are pinned to the SDK by test_sdk_objects.py.
        pytest.skip("the dump of an SDK response object, not a request param")
    history = history_pb2.History()
    json_format.ParseDict(vector["history"], history)
    sdk_type: typing.Any = openai_chat.ChatCompletionMessageParam
    # extra="forbid": a key the SDK does not know is a failure too, not only a missing one.
    adapter = pydantic.TypeAdapter(list[sdk_type], config=pydantic.ConfigDict(extra="forbid"))
    adapter.validate_python(sdk_messages(history))
