"""Log lines of a call: RFC 3339 times, one request id on every line of the call, returned to
the caller in the `x-request-id` trailer and taken from the caller when it sends one."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from grpc_status import rpc_status
from turnkeeper.v1 import history_pb2, history_service_pb2_grpc, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

RFC3339_UTC_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def trim_request(session: str) -> svc.TrimHistoryRequest:
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"q{i}") for i in range(4)]
    return svc.TrimHistoryRequest(
        history=history_pb2.History(chat=history_pb2.ChatHistory(messages=rows)),
        mode=trim_pb2.TRIM_MODE_TURN_COUNT,
        explicit_limits=svc.ExplicitLimits(max_history_messages=1),
        caller=trim_pb2.CallerContext(session_id=session, runtime_id="rt"),
    )


def trailer(call: Any, key: str = "x-request-id") -> str:
    values = [value for k, value in call.trailing_metadata() or () if k == key]
    assert len(values) == 1, call.trailing_metadata()
    return str(values[0])


def json_records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_every_line_of_a_call_carries_its_request_id_and_the_caller_gets_it_back(
    server_factory: Callable[..., Any],
) -> None:
    server = server_factory("--log-format", "json", "--log-level", "DEBUG")
    with grpc.insecure_channel(server.address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        # The caller's id is kept ...
        _, sent = stub.TrimHistory.with_call(
            trim_request("s-sent"), metadata=(("x-request-id", "lb-7f3a.91"),), timeout=5
        )
        assert trailer(sent) == "lb-7f3a.91"
        # ... a new one made when there is none, or when it is not usable as an id.
        _, made = stub.TrimHistory.with_call(trim_request("s-made"), timeout=5)
        _, replaced = stub.TrimHistory.with_call(
            trim_request("s-replaced"), metadata=(("x-request-id", "two words"),), timeout=5
        )
        # A failed call returns it beside its rich error details.
        with pytest.raises(grpc.RpcError) as caught:
            stub.TrimHistory(svc.TrimHistoryRequest(), timeout=5)
    made_id, replaced_id, failed_id = trailer(made), trailer(replaced), trailer(caught.value)
    for value in (made_id, replaced_id, failed_id):
        assert uuid.UUID(value).version == 4
    assert len({made_id, replaced_id, failed_id}) == 3
    status = rpc_status.from_call(caught.value)  # type: ignore[arg-type]
    assert status is not None and status.details
    assert server.stop() == 0

    records = json_records(server.log_text())
    assert records and all(RFC3339_UTC_MS.fullmatch(r["time"]) for r in records), records[:3]
    by_session: dict[str, set[str]] = {}
    for record in records:
        if "session_id" in record:
            by_session.setdefault(record["session_id"], set()).add(record["logger"])
            expected = {"s-sent": "lb-7f3a.91", "s-made": made_id, "s-replaced": replaced_id}
            assert record["request_id"] == expected[record["session_id"]], record
    # The access line and the trim line of each call both carry it.
    for session in ("s-sent", "s-made", "s-replaced"):
        assert by_session[session] == {"turnkeeper.access", "turnkeeper.trim"}, by_session
    failed = [r for r in records if r.get("request_id") == failed_id]
    assert [r["status"] for r in failed] == ["INVALID_ARGUMENT"]


def test_text_lines_use_rfc3339_too(server_factory: Callable[..., Any]) -> None:
    server = server_factory()
    assert server.stop() == 0
    lines = [line for line in server.log_text().splitlines() if "turnkeeper serving" in line]
    assert lines and RFC3339_UTC_MS.match(lines[0]), lines


def test_grpc_core_lines_come_out_as_records_naming_the_tls_handshake_cause(
    server_factory: Callable[..., Any], credentials: Any
) -> None:
    """A plaintext client and a client without a certificate both read "Socket closed"; the
    server's log tells them apart."""
    server = server_factory(
        "--log-format",
        "json",
        "--tls-cert",
        str(credentials.server_cert),
        "--tls-key",
        str(credentials.server_key),
        "--tls-client-ca",
        str(credentials.ca),
        unix=False,
    )
    no_certificate = grpc.ssl_channel_credentials(credentials.ca.read_bytes())
    for channel in (
        grpc.insecure_channel(server.address),
        grpc.secure_channel(server.address, no_certificate),
    ):
        with channel, pytest.raises(grpc.RpcError) as caught:
            history_service_pb2_grpc.HistoryServiceStub(channel).EstimateTokens(
                svc.EstimateTokensRequest(), timeout=5
            )
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert server.stop() == 0
    records = json_records(server.log_text())  # every line is JSON, grpc core's too
    core = [r for r in records if r["logger"] == "grpc.core"]
    causes = [r.get("cause") for r in core]
    assert "plaintext_client" in causes and "no_client_certificate" in causes, core
    refused = next(r for r in core if r.get("cause") == "plaintext_client")
    assert refused["message"].startswith("TLS handshake refused: a client without TLS")
    assert refused["source"].startswith("ssl_transport_security.cc:")
    assert RFC3339_UTC_MS.fullmatch(refused["time"])


def test_grpc_core_lines_of_a_failed_start_are_relayed_before_the_process_ends(
    server_factory: Callable[..., Any],
) -> None:
    running = server_factory(unix=False)
    with pytest.raises(Exception, match="cannot start") as caught:
        server_factory("--log-format", "json", "--listen", running.address, unix=False)
    log = str(caught.value).partition("its log:\n")[2]
    records = json_records(log)
    core = [r for r in records if r["logger"] == "grpc.core"]
    assert any(r["level"] == "ERROR" and "Failed to add port" in r["message"] for r in core), log


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_every_answered_call_has_its_lines_after_a_sigterm_mid_load(
    server_factory: Callable[..., Any], log_format: str
) -> None:
    """Lines are written once per event-loop turn: none is lost to a SIGTERM that arrives while
    calls are in flight, and the last line is still the server's `stopped`."""
    server = server_factory("--log-format", log_format)
    answered: list[str] = []
    stop = threading.Event()

    def caller(index: int) -> None:
        with grpc.insecure_channel(server.address) as channel:
            stub = history_service_pb2_grpc.HistoryServiceStub(channel)
            while not stop.is_set():
                try:
                    _, call = stub.TrimHistory.with_call(trim_request(f"s-{index}"), timeout=5)
                except grpc.RpcError:
                    return  # the server is draining or gone
                answered.append(trailer(call))

    callers = [threading.Thread(target=caller, args=(index,)) for index in range(6)]
    for thread in callers:
        thread.start()
    deadline = time.monotonic() + 30
    while len(answered) < 60 and time.monotonic() < deadline:
        time.sleep(0.01)
    server.terminate()
    stop.set()
    for thread in callers:
        thread.join(30)
    assert server.stop() == 0
    text = server.log_text()
    if log_format == "json":
        records = json_records(text)
        ids = [(r["logger"], r.get("request_id")) for r in records]
        last = records[-1]["message"]
    else:
        lines = text.splitlines()
        ids = [
            (line.split()[2].rstrip(":"), line.partition("request_id=")[2].split(" ")[0])
            for line in lines
            if "request_id=" in line
        ]
        last = lines[-1].partition(": ")[2]
    assert len(answered) >= 60
    for logger in ("turnkeeper.access", "turnkeeper.trim"):
        logged = {request_id for name, request_id in ids if name == logger}
        assert set(answered) <= logged, logger
    assert last == "stopped"


def test_a_stream_at_its_deadline_is_logged_deadline_exceeded_and_a_cancelled_one_cancelled(
    server_factory: Callable[..., Any],
) -> None:
    """The client's deadline timer fires before the server's (it started first) and ends the
    stream with a cancellation: it is still the deadline, and the access line says so."""
    server = server_factory("--log-format", "json")
    with grpc.insecure_channel(server.address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        for _ in range(4):
            with pytest.raises(grpc.RpcError) as caught:
                for _item in stub.TrimEvents(svc.TrimEventsRequest(), timeout=1.0):
                    pass
            assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        stream = stub.TrimEvents(svc.TrimEventsRequest(), timeout=60)
        next(stream)  # the opening heartbeat: the stream is open
        stream.cancel()

    def statuses() -> list[str]:
        return [
            record["status"]
            for record in json_records(server.log_text())
            if record.get("method", "").endswith("/TrimEvents")
        ]

    deadline = time.monotonic() + 10
    while len(statuses()) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert statuses() == ["DEADLINE_EXCEEDED"] * 4 + ["CANCELLED"]
