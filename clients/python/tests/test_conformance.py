"""Every conformance vector in tests/conformance/vectors, through this client (docs/conventions.md).

Each vector runs twice: the sync client over TCP and the asyncio client over the Unix socket.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format, message_factory
from google.protobuf.message import Message
from turnkeeper.v1 import history_service_pb2, trim_pb2

from turnkeeper_client import AsyncTurnkeeperClient, TurnkeeperClient, TurnkeeperError

from .conftest import REPO

VECTOR_DIR = Path(
    os.environ.get("TURNKEEPER_CONFORMANCE_DIR") or REPO / "tests" / "conformance" / "vectors"
)
VECTORS = sorted(VECTOR_DIR.glob("*.json"))
SERVICE = history_service_pb2.DESCRIPTOR.services_by_name["HistoryService"]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _load(path: Path) -> tuple[dict[str, Any], Message, str]:
    vector = json.loads(path.read_text())
    method = SERVICE.methods_by_name.get(vector["rpc"])
    assert method is not None, f"{path.name}: unknown rpc {vector['rpc']!r}"
    assert not method.server_streaming, f"{path.name}: vectors cover unary RPCs only"
    request = message_factory.GetMessageClass(method.input_type)()
    json_format.ParseDict(vector["request"], request)  # unknown fields are an error
    return vector, request, _snake(method.name)


def _check_response(vector: dict[str, Any], response: Message) -> None:
    expected = type(response)()
    json_format.ParseDict(vector["expect"]["response"], expected)
    assert response == expected, (
        f"{vector['name']}: got\n{json_format.MessageToJson(response)}\n"
        f"want\n{json_format.MessageToJson(expected)}"
    )


def _check_error(vector: dict[str, Any], error: TurnkeeperError) -> None:
    want = vector["expect"]["error"]
    assert error.code.name == want["code"], f"{vector['name']}: {error}"
    assert error.reason == want["reason"], f"{vector['name']}: {error}"
    assert error.domain == "turnkeeper.v1"
    if "fieldViolations" in want:
        assert error.fields == set(want["fieldViolations"]), f"{vector['name']}: {error}"
    if "capacityReport" in want:
        expected = trim_pb2.CapacityReport()
        json_format.ParseDict(want["capacityReport"], expected)
        assert error.capacity_report == expected, f"{vector['name']}: {error.capacity_report}"


def _expects_error(vector: dict[str, Any]) -> bool:
    expect = vector["expect"]
    assert ("response" in expect) != ("error" in expect), f"{vector['name']}: bad expect"
    return "error" in expect


def test_vectors_exist() -> None:
    assert VECTORS, f"no conformance vectors in {VECTOR_DIR}"


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_vector_sync_tcp(path: Path, client: TurnkeeperClient) -> None:
    vector, request, method = _load(path)
    call = getattr(client, method)
    if _expects_error(vector):
        with pytest.raises(TurnkeeperError) as caught:
            call(request)
        _check_error(vector, caught.value)
    else:
        _check_response(vector, call(request))


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
async def test_vector_async_unix(path: Path, unix_aclient: AsyncTurnkeeperClient) -> None:
    vector, request, method = _load(path)
    call = getattr(unix_aclient, method)
    if _expects_error(vector):
        with pytest.raises(TurnkeeperError) as caught:
            await call(request)
        _check_error(vector, caught.value)
    else:
        _check_response(vector, await call(request))
