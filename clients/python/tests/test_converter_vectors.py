"""The shared converter vectors (tests/conformance/converters, docs/converters.md) through this
client's converters and a live server.

Each `both` vector: provider JSON -> the vector's history exactly; the history -> the provider
JSON exactly; the server's estimate of the history is the vector's; and the round trip: convert,
trim with no budget pressure, convert back, get the input exactly. `export` vectors check the
history -> provider direction (and the estimate, and the trim round trip); `import-error`
vectors must be refused with ConversionError. A vector's `exportOptions` (Anthropic only: the
cache breakpoints and lifetime of spec §14) are passed to every export. A vector's `marks` (the
summary and pinned-turn marks of spec §15, which no provider format carries) are passed to every
import, and `turn_marks` of the history must give them back (no marks: none).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from turnkeeper.v1 import history_pb2, history_service_pb2, profile_pb2, trim_pb2

from turnkeeper_client import ConversionError, TurnkeeperClient, TurnMarks
from turnkeeper_client.convert import (
    from_anthropic,
    from_openai,
    from_openai_responses,
    to_anthropic,
    to_openai,
    to_openai_responses,
    turn_marks,
)

from .conftest import REPO

VECTOR_DIR = REPO / "tests" / "conformance" / "converters"
VECTORS = sorted(VECTOR_DIR.glob("*.json"))
FORMATS: dict[str, tuple[Callable[..., history_pb2.History], Callable[..., Any]]] = {
    "openai_chat": (from_openai, to_openai),
    "openai_responses": (from_openai_responses, to_openai_responses),
    "anthropic": (from_anthropic, to_anthropic),
}
NO_PRESSURE = 1_000_000_000


def load(path: Path) -> dict[str, Any]:
    vector: dict[str, Any] = json.loads(path.read_text())
    return vector


def expected_history(vector: dict[str, Any]) -> history_pb2.History:
    history = history_pb2.History()
    json_format.ParseDict(vector["history"], history)  # unknown fields are an error
    return history


def export_options(vector: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of the vector's `exportOptions`."""
    options = vector.get("exportOptions", {})
    assert set(options) <= {"cacheBreakpoints", "cacheLifetime"}, options
    kwargs: dict[str, Any] = {}
    if "cacheBreakpoints" in options:
        kwargs["cache_breakpoints"] = options["cacheBreakpoints"]
    if "cacheLifetime" in options:
        kwargs["cache_lifetime"] = profile_pb2.CacheLifetime.Value(options["cacheLifetime"])
    return kwargs


def marks(vector: dict[str, Any]) -> TurnMarks:
    """The vector's `marks`, as the import functions take them."""
    given = vector.get("marks", {})
    assert set(given) <= {"summary", "pinnedTurns"}, given
    return TurnMarks(given.get("summary", False), tuple(given.get("pinnedTurns", ())))


def trim_without_pressure(client: TurnkeeperClient, history: history_pb2.History) -> Any:
    response = client.trim_history(
        history_service_pb2.TrimHistoryRequest(
            history=history,
            mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
            caller_path=trim_pb2.CALLER_PATH_AGENT,
            explicit_limits=history_service_pb2.ExplicitLimits(budget_tokens=NO_PRESSURE),
        )
    )
    assert not response.outcome.trimmed
    return response.history


def test_suite_shape() -> None:
    """At least one import-and-export vector per format and shape, names unique."""
    vectors = [load(p) for p in VECTORS]
    assert len({v["name"] for v in vectors}) == len(vectors)
    covered = {(v["format"], v["shape"]) for v in vectors if v["direction"] == "both"}
    for fmt in FORMATS:
        assert {(fmt, "chat"), (fmt, "conversation")} <= covered, fmt
    assert all(v["direction"] in ("both", "export", "import-error") for v in vectors)


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_converter_vector(path: Path, client: TurnkeeperClient) -> None:
    vector = load(path)
    from_format, to_format = FORMATS[vector["format"]]
    if vector["direction"] == "import-error":
        with pytest.raises(ConversionError):
            from_format(vector["provider"], shape=vector["shape"], marks=marks(vector))
        return
    provider = vector["provider"]
    history = expected_history(vector)
    if vector["direction"] == "both":
        got = from_format(provider, shape=vector["shape"], marks=marks(vector))
        assert json_format.MessageToDict(got) == json_format.MessageToDict(history)
    assert turn_marks(history) == marks(vector)
    options = export_options(vector)
    assert to_format(history, **options) == provider
    estimate = client.estimate_tokens(history_service_pb2.EstimateTokensRequest(history=history))
    assert estimate.total_tokens == vector["estimate"]["totalTokens"]
    kept = trim_without_pressure(client, history)
    assert kept == history
    assert to_format(kept, **options) == provider
