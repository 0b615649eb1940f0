"""The OpenAI and Anthropic SDKs' own objects convert, in both the forms runtimes hold them: the
objects themselves (pydantic models, as the SDKs' tool-loop examples append them) and their
`model_dump()` (null-valued keys and all; the shared vectors 017-021 are those dumps).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import json_format

from turnkeeper_client.convert import (
    detect_format,
    from_anthropic,
    from_openai,
    from_openai_responses,
    to_anthropic,
    to_openai,
    to_openai_responses,
)

from .conftest import REPO

pytest.importorskip("openai")
pytest.importorskip("anthropic")

from .sdk_objects import SDK_VECTORS, dumped  # needs both SDKs

VECTOR_DIR = REPO / "tests" / "conformance" / "converters"
CONVERTERS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "openai_chat": (from_openai, to_openai),
    "openai_responses": (from_openai_responses, to_openai_responses),
    "anthropic": (from_anthropic, to_anthropic),
}
DETECTED = {
    "openai_chat": "openai",
    "openai_responses": "openai_responses",
    "anthropic": "anthropic",
}


def vector(name: str) -> dict[str, Any]:
    (path,) = VECTOR_DIR.glob(f"*-{name}.json")
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def sent(value: Any) -> Any:
    """What the SDKs send for their objects in a request (their `_transform`: the fields the
    object was given, JSON mode)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_unset=True, by_alias=True)
    if isinstance(value, dict):
        return {key: sent(item) for key, item in value.items()}
    if isinstance(value, list):
        return [sent(item) for item in value]
    return value


@pytest.mark.parametrize("name", SDK_VECTORS)
def test_the_vector_is_the_sdk_objects_model_dump(name: str) -> None:
    fmt, shape, build = SDK_VECTORS[name]
    data = vector(name)
    assert (data["format"], data["shape"]) == (fmt, shape)
    assert data["provider"] == dumped(build())


@pytest.mark.parametrize("name", SDK_VECTORS)
def test_sdk_objects_convert_and_round_trip(name: str) -> None:
    fmt, shape, build = SDK_VECTORS[name]
    from_format, to_format = CONVERTERS[fmt]
    objects = build()
    history = from_format(objects, shape=shape)
    # The objects convert like the dicts their SDK sends for them, and come back as those dicts.
    assert history == from_format(sent(objects), shape=shape)
    assert to_format(history) == sent(objects)
    assert detect_format(objects) == DETECTED[fmt]
    # The priced rows are those of the full dump (which only adds null-valued keys).
    from_dump = from_format(dumped(objects), shape=shape)
    rows = json_format.MessageToDict(history)
    dump_rows = json_format.MessageToDict(from_dump)
    assert strip_passthrough(rows) == strip_passthrough(dump_rows)


def strip_passthrough(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_passthrough(v) for k, v in value.items() if k != "passthrough"}
    if isinstance(value, list):
        return [strip_passthrough(v) for v in value]
    return value


def test_a_model_dump_with_tool_calls_none_round_trips_and_a_set_function_call_is_refused() -> None:
    from openai.types.chat import ChatCompletionMessage

    from turnkeeper_client import ConversionError

    message = ChatCompletionMessage.model_validate({"role": "assistant", "content": "Hi."})
    dump = message.model_dump()
    assert dump["tool_calls"] is None and dump["function_call"] is None
    assert to_openai(from_openai([dump])) == [dump]
    with pytest.raises(ConversionError, match="function_call"):
        from_openai([{**dump, "function_call": {"name": "f", "arguments": "{}"}}])
