"""Raw request bytes: undecodable requests are INVALID_ARGUMENT/MALFORMED_REQUEST, and engine work
runs off the event loop so health and small calls stay answerable (issue 8; docs/conventions.md Errors)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from turnkeeper.server.contract.wire import encode_varint, malformed_fields
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc, profile_pb2

SERVICE = "turnkeeper.v1.HistoryService"
METHODS = svc.DESCRIPTOR.services_by_name["HistoryService"].methods
UNARY = [m.name for m in METHODS if not m.server_streaming]
assert [m.name for m in METHODS if m.server_streaming] == ["TrimEvents"]


def field(number: int, payload: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def chat_row(content: bytes) -> bytes:
    return b"\x08\x02" + field(2, content)


def history_bytes(*rows: bytes) -> bytes:
    return field(1, field(1, b"".join(field(1, r) for r in rows)))


MALFORMED: dict[str, tuple[bytes, list[str]]] = {
    "truncated top-level length": (b"\x0a\x05\x0a", [""]),
    "truncated varint at the top": (b"\x10\xff", [""]),
    "wire type 7 at the top": (b"\x0f\x00", [""]),
    "field number 0": (b"\x00\x00", [""]),
    "invalid UTF-8 in a row": (history_bytes(chat_row(b"ok"), chat_row(b"\xff\xfe")), ["history"]),
    "truncated row length inside history": (field(1, b"\x0a\x07\x0a\x05\x08"), ["history"]),
    "huge length inside history": (field(1, b"\x0a\x0a\xff\xff\xff\xff\x0f"), ["history"]),
    "nesting deeper than 100": (
        field(1, field(1, field(1, b"\x7b" * 120 + b"\x7c" * 120))),
        ["history"],
    ),
}


@pytest.fixture
def channel(live_server: Any) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(live_server.address) as ch:
        yield ch


def call_raw(channel: grpc.Channel, method: str, payload: bytes) -> bytes:
    rpc = channel.unary_unary(f"/{SERVICE}/{method}")  # identity (de)serializers: raw bytes
    result: bytes = rpc(payload, timeout=10)
    return result


def error_details(error: grpc.RpcError) -> tuple[str, list[str]]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    reason, fields = "", []
    for packed in status.details:
        if packed.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            packed.Unpack(info)
            assert info.domain == "turnkeeper.v1"
            reason = info.reason
        elif packed.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            packed.Unpack(bad)
            fields = [v.field for v in bad.field_violations]
    return reason, fields


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("method", ["EstimateTokens", "TrimHistory", "PrepareModelCall"])
def test_undecodable_bytes_are_invalid_argument(
    channel: grpc.Channel, method: str, case: str
) -> None:
    """Undecodable bytes are INVALID_ARGUMENT with ERROR_REASON_MALFORMED_REQUEST naming the field."""
    payload, expected = MALFORMED[case]
    with pytest.raises(grpc.RpcError) as caught:
        call_raw(channel, method, payload)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_details(caught.value) == ("ERROR_REASON_MALFORMED_REQUEST", expected)


@pytest.mark.parametrize("method", [*UNARY, "TrimEvents"])
def test_every_method_reads_raw_bytes(channel: grpc.Channel, method: str) -> None:
    """Every RPC, streaming included, decodes its own bytes: a broken request is never UNKNOWN."""
    if method == "TrimEvents":
        stream = channel.unary_stream(f"/{SERVICE}/{method}")
        with pytest.raises(grpc.RpcError) as caught:
            next(iter(stream(b"\x0a\x05", timeout=10)))
    else:
        with pytest.raises(grpc.RpcError) as caught:
            call_raw(channel, method, b"\x0a\x05")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_details(caught.value) == ("ERROR_REASON_MALFORMED_REQUEST", [""])


def test_wrong_wire_type_is_an_unknown_field_not_an_error(channel: grpc.Channel) -> None:
    """As protobuf has it, a known field number with another wire type is an unknown field."""
    row = b"\x08\x02" + b"\x10\x05"  # content (field 2) sent as a varint
    body = call_raw(channel, "EstimateTokens", history_bytes(row))
    response = svc.EstimateTokensResponse.FromString(body)
    assert response.turns == 1 and response.messages[0].text_bytes == 0


def test_malformed_fields_names_each_top_level_field_once_in_number_order() -> None:
    bad_profiles = field(5, field(1, field(6, b"\xff")))  # profiles.runtime.default_provider
    payload = bad_profiles + history_bytes(chat_row(b"\xc3")) + history_bytes(chat_row(b"\xc3"))
    assert malformed_fields(payload, svc.TrimHistoryRequest) == ["history", "profiles"]
    assert malformed_fields(history_bytes(chat_row(b"fine")), svc.TrimHistoryRequest) == [""]


def big_history(rows: int) -> h.History:
    messages = [h.ChatMessage(role=h.ROLE_SYSTEM, content="system " * 200)]
    for i in range(rows // 2):
        messages.append(h.ChatMessage(role=h.ROLE_USER, content=f"question {i} " * 4))
        messages.append(h.ChatMessage(role=h.ROLE_ASSISTANT, content="answer " * 20))
    return h.History(chat=h.ChatHistory(messages=messages))


def test_health_and_small_calls_answer_while_a_big_call_runs(live_server: Any) -> None:
    """A 100k-row PrepareModelCall runs in the worker pool: health and ResolveBudget do not wait."""
    request = svc.PrepareModelCallRequest(
        history=big_history(99_998),  # with the system row: 99,999 rows, under the limit
        profiles=profile_pb2.Profiles(runtime=profile_pb2.RuntimeProfile(max_context_tokens=5000)),
    )
    done = threading.Event()
    answered_big: list[svc.PrepareModelCallResponse] = []

    def big_call() -> None:
        try:
            with grpc.insecure_channel(
                live_server.address, options=[("grpc.max_send_message_length", 256 << 20)]
            ) as ch:
                response = history_service_pb2_grpc.HistoryServiceStub(ch).PrepareModelCall(
                    request, timeout=120
                )
                answered_big.append(response)
        finally:
            done.set()

    worker = threading.Thread(target=big_call)
    worker.start()
    try:
        with grpc.insecure_channel(live_server.address) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            stub = history_service_pb2_grpc.HistoryServiceStub(ch)
            health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            slowest = 0.0
            answered = 0
            while not done.is_set():
                start = time.perf_counter()
                health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=2)
                stub.ResolveBudget(svc.ResolveBudgetRequest(), timeout=2)
                slowest = max(slowest, time.perf_counter() - start)
                answered += 1
    finally:
        worker.join()
    assert answered_big and answered_big[0].trims, "the big call itself did not succeed"
    assert answered >= 3, "the big call finished before the loop could be probed"
    assert slowest < 0.5, f"a health check + ResolveBudget took {slowest:.3f} s behind a big call"


def test_startup_log_names_the_engine(server_factory: Any) -> None:
    server = server_factory("--engine", "python", "--engine-workers", "3", unix=False)
    server.stop()
    assert "engine=python engine_workers=3" in server.log_text()


def test_the_default_engine_is_native_when_built(live_server: Any) -> None:
    """Issue 8: `--engine` unset picks the native engine when the extension is built."""
    from turnkeeper.server.engine import default_engine_name

    assert f"engine={default_engine_name()} " in live_server.log_text()


def test_without_the_extension_the_python_engine_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without cargo at install time there is no extension: the default falls back to the
    Python engine (the sidecar logs one warning), and asking for native fails to start."""
    from turnkeeper.server import engine

    monkeypatch.setattr(engine, "native_available", lambda: False)
    assert engine.create_engine(None).name == "python"
    with pytest.raises(engine.EngineUnavailableError, match="--engine python"):
        engine.create_engine("native")


def test_version_without_the_extension_names_the_python_engine() -> None:
    script = (
        "import sys; sys.modules['turnkeeper._native'] = None; "
        "from turnkeeper.server.__main__ import main; sys.exit(main(['--version']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("(engine: python)")
