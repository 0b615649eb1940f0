"""The shared apply-plan vectors (tests/conformance/compaction, spec §15.3 step 4) through
`apply_compaction`: each gives its expected history exactly, or is refused with ConversionError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from turnkeeper.v1 import history_pb2, history_service_pb2

from turnkeeper_client import ConversionError, apply_compaction

from .conftest import REPO

VECTOR_DIR = REPO / "tests" / "conformance" / "compaction"
VECTORS = sorted(VECTOR_DIR.glob("*.json"))
KEYS = {"name", "rule", "description", "history", "plan", "summaryText", "expect"}


def load(path: Path) -> dict[str, Any]:
    vector: dict[str, Any] = json.loads(path.read_text())
    assert set(vector) == KEYS, path.name
    assert path.stem.split("-", 1)[1] == vector["name"]
    return vector


def test_there_are_vectors() -> None:
    assert len(VECTORS) >= 6


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_compaction_vector(path: Path) -> None:
    vector = load(path)
    history = json_format.ParseDict(vector["history"], history_pb2.History())
    plan = json_format.ParseDict(vector["plan"], history_service_pb2.CompactionPlan())
    if "error" in vector["expect"]:
        with pytest.raises(ConversionError):
            apply_compaction(history, plan, vector["summaryText"])
        return
    expected = json_format.ParseDict(vector["expect"]["history"], history_pb2.History())
    applied = apply_compaction(history, plan, vector["summaryText"])
    assert applied == expected, json_format.MessageToJson(applied)
