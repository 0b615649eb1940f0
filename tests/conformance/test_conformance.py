"""Runs every conformance vector (tests/conformance/vectors/*.json) against a live server.

The server is $TURNKEEPER_ADDRESS when set (for example under tests/support/with_server.py), otherwise the
session's `live_server` fixture (tests/conftest.py). The suite-level checks and the per-vector format
checks need no server.
"""

from __future__ import annotations

import os

import grpc
import pytest

from . import vectors_lib as vl
from .vectors_lib import Vector

MIN_VECTORS = 60
SPEC_SECTIONS = frozenset(range(1, 10)) | {11, 12, 14}
"""§1-§9, the third edition's §11 and §12, and the fourth edition's §14 cache breakpoints."""
AMENDMENTS = frozenset(range(1, 8))
"""§10.1-§10.7, the second edition."""
THIRD_EDITION = frozenset({(11, 1), (11, 2)})
"""§11.1-§11.2 cache-stable trimming, of the third edition."""
FOURTH_EDITION = frozenset({(13, 1), (13, 2), (13, 3), (13, 4), (15, 3), (16, 1), (16, 2)})
"""§13.1-§13.4 tool context retention, §15.3 planning a compaction and §16.1-§16.2 the amendments,
of the fourth edition."""
VECTORS: list[Vector] = vl.load_vectors()


def _ids(vectors: list[Vector]) -> list[str]:
    return [f"{v.number:03d}-{v.name}" for v in vectors]


@pytest.fixture(params=["native", "python"])
def server_address(request: pytest.FixtureRequest) -> str:
    """$TURNKEEPER_ADDRESS when set; otherwise the session server of each engine in turn, so
    every vector runs against both engines (issue 8)."""
    configured = os.environ.get("TURNKEEPER_ADDRESS")
    if configured:
        if request.param == "python":
            pytest.skip("an external server serves one engine")
        return configured
    name = "python_engine_server" if request.param == "python" else "live_server"
    address: str = request.getfixturevalue(name).address
    return address


def test_suite_shape() -> None:
    """At least 60 vectors, unique names and numbers, every vector names a rule, every spec section,
    every §10 rule, every third-edition section and the fourth edition's §13, §14 and §16 covered."""
    assert len(VECTORS) >= MIN_VECTORS, f"only {len(VECTORS)} vectors"
    names = [v.name for v in VECTORS]
    assert len(set(names)) == len(names), sorted({n for n in names if names.count(n) > 1})
    numbers = [v.number for v in VECTORS]
    assert len(set(numbers)) == len(numbers), sorted({n for n in numbers if numbers.count(n) > 1})
    unnamed = [v.name for v in VECTORS if not v.sections]
    assert not unnamed, f"vectors whose rule names no spec section (§N): {unnamed}"
    missing = SPEC_SECTIONS - vl.covered_sections(VECTORS)
    assert not missing, f"spec sections no vector covers: {sorted(missing)}"
    amended = frozenset(n for v in VECTORS for n in v.amendments)
    assert not AMENDMENTS - amended, f"§10 rules no vector covers: {sorted(AMENDMENTS - amended)}"
    third = THIRD_EDITION - frozenset(s for v in VECTORS for s in v.subsections)
    assert not third, f"third-edition rules no vector covers: {sorted(third)}"
    fourth = FOURTH_EDITION - frozenset(s for v in VECTORS for s in v.subsections)
    assert not fourth, f"fourth-edition rules no vector covers: {sorted(fourth)}"
    assert {v.rpc for v in VECTORS} == set(vl.RPCS), "every unary RPC has at least one vector"


@pytest.mark.parametrize("vector", VECTORS, ids=_ids(VECTORS))
def test_vector_parses_strictly(vector: Vector) -> None:
    """The request and the expectation parse into their messages with no unknown field (no server)."""
    assert vector.request_message() is not None
    assert vector.expected_response() is not None or vector.expected_error() is not None


@pytest.mark.parametrize("vector", VECTORS, ids=_ids(VECTORS))
async def test_vector(vector: Vector, server_address: str) -> None:
    async with grpc.aio.insecure_channel(server_address) as channel:
        outcome = await vl.call_vector(channel, vector)
    problems = vl.check_outcome(vector, outcome)
    if problems:
        pytest.fail(
            f"{vector.path.name} ({vector.rule})\n{vector.description}\n\n" + "\n".join(problems),
            pytrace=False,
        )
