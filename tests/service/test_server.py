"""A real sidecar process on a loopback port and a Unix socket, driven through the generated stubs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status
from turnkeeper.v1 import history_pb2, history_service_pb2_grpc, profile_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

SERVICE = "turnkeeper.v1.HistoryService"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture(params=["tcp", "unix"])
def target(request: pytest.FixtureRequest, engine_server: Any) -> str:
    return str(engine_server.address if request.param == "tcp" else engine_server.unix_target)


@pytest.fixture
def channel(target: str) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(target) as ch:
        yield ch


def stub(ch: grpc.Channel) -> history_service_pb2_grpc.HistoryServiceStub:
    return history_service_pb2_grpc.HistoryServiceStub(ch)


def user_history(*texts: str) -> history_pb2.History:
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=t) for t in texts]
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def details(error: grpc.RpcError) -> tuple[error_details_pb2.ErrorInfo, list[str]]:
    """The ErrorInfo and the BadRequest field paths from grpc-status-details-bin."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "no grpc-status-details-bin trailer"
    infos, fields = [], []
    for packed in status.details:
        if packed.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            packed.Unpack(info)
            infos.append(info)
        elif packed.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            packed.Unpack(bad)
            fields += [v.field for v in bad.field_violations]
    assert len(infos) == 1
    return infos[0], fields


def health_check(ch: grpc.Channel, service: str = "") -> int:
    request = health_pb2.HealthCheckRequest(service=service)
    return int(health_pb2_grpc.HealthStub(ch).Check(request, timeout=5).status)


def test_health_serving_for_server_service_and_feed(channel: grpc.Channel) -> None:
    for name in ("", SERVICE, f"{SERVICE}/events"):
        assert health_check(channel, name) == SERVING, name


def test_reflection_lists_history_service(channel: grpc.Channel) -> None:
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    (response,) = list(reflect.ServerReflectionInfo(iter([request]), timeout=5))
    names = {s.name for s in response.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health"} <= names


def test_a_10_mib_request_is_accepted(channel: grpc.Channel) -> None:
    text = "a" * (10 * 1024 * 1024)
    response = stub(channel).EstimateTokens(
        svc.EstimateTokensRequest(history=user_history(text)), timeout=30
    )
    # docs/semantics.md: ceil(bytes / 4) + 4 per row.
    assert response.total_tokens == len(text) // 4 + 4


def test_bad_request_gets_invalid_argument_with_rich_details_and_server_keeps_serving(
    channel: grpc.Channel,
) -> None:
    bad = history_pb2.History(
        chat=history_pb2.ChatHistory(
            messages=[
                history_pb2.ChatMessage(role=history_pb2.ROLE_UNSPECIFIED, content="x"),
                history_pb2.ChatMessage(role=history_pb2.ROLE_TOOL, content="result"),
            ]
        )
    )
    with pytest.raises(grpc.RpcError) as caught:
        stub(channel).TrimHistory(
            svc.TrimHistoryRequest(history=bad, mode=trim_pb2.TRIM_MODE_TURN_COUNT), timeout=5
        )
    error = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    info, fields = details(error)
    assert info.domain == "turnkeeper.v1"
    assert info.reason == "ERROR_REASON_INVALID_HISTORY"
    assert fields == ["history.chat.messages[0].role", "history.chat.messages[1].tool_call_id"]

    with pytest.raises(grpc.RpcError) as caught:
        stub(channel).ResolveBudget(
            svc.ResolveBudgetRequest(
                profiles=profile_pb2.Profiles(providers=[profile_pb2.ProviderProfile(alias="")])
            ),
            timeout=5,
        )
    info, fields = details(caught.value)
    assert (info.reason, fields) == (
        "ERROR_REASON_INVALID_PROFILE",
        ["profiles.providers[0].alias"],
    )

    assert stub(channel).EstimateTokens(
        svc.EstimateTokensRequest(history=user_history("hello")), timeout=5
    ).total_tokens == (2 + 4)
    assert health_check(channel) == SERVING


def test_request_over_max_receive_bytes_is_resource_exhausted(
    server_factory: Callable[..., Any],
) -> None:
    server = server_factory("--max-receive-bytes", str(1024 * 1024), unix=False)
    with grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as caught:
            stub(ch).EstimateTokens(
                svc.EstimateTokensRequest(history=user_history("b" * (2 * 1024 * 1024))),
                timeout=10,
            )
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        assert health_check(ch) == SERVING


def test_second_server_on_the_same_unix_socket_fails_fast_and_first_keeps_serving(
    server_factory: Callable[..., Any],
) -> None:
    first = server_factory()
    started = time.monotonic()
    # ServerStartError (a RuntimeError) carries the second server's log.
    with pytest.raises(RuntimeError) as caught:
        server_factory(unix_path=first.unix_path, timeout=20)
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert "exited with code 1" in message
    assert f"unix socket {first.unix_path} is in use by another turnkeeper server" in message
    assert f"pid {first.pid}" in message
    assert "Traceback" not in message
    with grpc.insecure_channel(first.unix_target) as ch:
        assert health_check(ch, SERVICE) == SERVING
    assert first.alive()


def test_stale_unix_socket_file_is_replaced_and_removed_on_shutdown(
    server_factory: Callable[..., Any],
) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="tk-stale-", dir="/tmp"))
    path = workdir / "tk.sock"
    try:
        # A socket file left behind by a crashed server: nobody holds its lock.
        with socket.socket(socket.AF_UNIX) as leftover:
            leftover.bind(str(path))
        server = server_factory(workdir=workdir)
        with grpc.insecure_channel(server.unix_target) as ch:
            assert health_check(ch) == SERVING
        assert server.stop() == 0
        assert not path.exists()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_sigterm_health_goes_not_serving_streams_end_and_exit_0_within_grace(
    server_factory: Callable[..., Any],
) -> None:
    server = server_factory("--grace-seconds", "5")
    ready_files = list(Path(server.workdir).glob("ready-*.json"))
    assert len(ready_files) == 1
    with grpc.insecure_channel(server.unix_target) as ch:
        watch = health_pb2_grpc.HealthStub(ch).Watch(
            health_pb2.HealthCheckRequest(service=SERVICE), timeout=20
        )
        assert next(watch).status == SERVING
        events = stub(ch).TrimEvents(svc.TrimEventsRequest(), timeout=20)
        time.sleep(0.2)  # let the subscription register before shutdown
        started = time.monotonic()
        os.kill(server.pid, signal.SIGTERM)
        assert next(watch).status == NOT_SERVING
        # Watch streams end after NOT_SERVING rather than holding the drain.
        assert list(watch) == []
        # Closing the feed ends open TrimEvents streams instead of holding shutdown for the grace.
        with pytest.raises((StopIteration, grpc.RpcError)):
            while True:
                item = next(events)
                assert item.WhichOneof("item") == "heartbeat"
        assert server.process.wait(timeout=10) == 0
        assert time.monotonic() - started < 5
    assert not ready_files[0].exists(), "the ready file is removed on shutdown"
    assert "shutting down" in server.log_text()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_logs_name_methods_sizes_and_ids_but_never_message_text(
    server_factory: Callable[..., Any], log_format: str
) -> None:
    server = server_factory("--log-level", "DEBUG", "--log-format", log_format)
    secret = "zq-secret-7f3a"  # a marker that appears in no other output
    session = "session-4d1c"  # ids are logged: they name the call, they are not message text
    history = history_pb2.History(
        chat=history_pb2.ChatHistory(
            messages=[
                history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content=f"{secret}-system"),
                history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"{secret}-user"),
                history_pb2.ChatMessage(
                    role=history_pb2.ROLE_ASSISTANT,
                    content=f"{secret}-assistant",
                    tool_calls=[
                        history_pb2.ToolCall(
                            id=f"{secret}-id", name=f"{secret}-name", arguments=f"{secret}-args"
                        )
                    ],
                ),
                history_pb2.ChatMessage(
                    role=history_pb2.ROLE_TOOL,
                    content=f"{secret}-tool",
                    tool_call_id=f"{secret}-id",
                ),
                history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"{secret}-user2"),
            ]
        )
    )
    with grpc.insecure_channel(server.address) as ch:
        service = stub(ch)
        service.EstimateTokens(svc.EstimateTokensRequest(history=history), timeout=5)
        trimmed = service.TrimHistory(
            svc.TrimHistoryRequest(
                history=history,
                mode=trim_pb2.TRIM_MODE_TURN_COUNT,
                explicit_limits=svc.ExplicitLimits(
                    max_history_messages=1, breadcrumb_text=f"{secret}-crumb"
                ),
                caller=trim_pb2.CallerContext(
                    session_id=session, runtime_id="runtime-9", agent_id="agent-2"
                ),
            ),
            timeout=5,
        )
        assert trimmed.outcome.trimmed
        service.PrepareModelCall(
            svc.PrepareModelCallRequest(history=history, hook_texts=[f"{secret}-hook"]),
            timeout=5,
        )
        bad = history_pb2.History(
            chat=history_pb2.ChatHistory(
                messages=[history_pb2.ChatMessage(role=history_pb2.ROLE_TOOL, content=secret)]
            )
        )
        with pytest.raises(grpc.RpcError):
            service.SweepOrphans(svc.SweepOrphansRequest(history=bad), timeout=5)
        service.CapToolResults(
            svc.CapToolResultsRequest(contents=[secret * 100], max_tool_result_chars=10), timeout=5
        )
    assert server.stop() == 0
    log = server.log_text()
    assert "turnkeeper serving" in log and "stopped" in log
    assert secret not in log
    size = svc.EstimateTokensRequest(history=history).ByteSize()
    if log_format == "text":
        assert (
            "method=/turnkeeper.v1.HistoryService/EstimateTokens status=OK" in log
            and f"request_bytes={size} " in log
        ), log
        assert "method=/turnkeeper.v1.HistoryService/SweepOrphans status=INVALID_ARGUMENT" in log
        trim_lines = [line for line in log.splitlines() if "TrimHistory" in line]
        assert f"session_id={session} runtime_id=runtime-9 agent_id=agent-2" in trim_lines[0]
        return
    records = [json.loads(line) for line in log.splitlines() if line.strip()]
    access = {
        r["method"].rpartition("/")[2]: r for r in records if r.get("logger") == "turnkeeper.access"
    }
    assert access["EstimateTokens"]["status"] == "OK"
    assert access["EstimateTokens"]["request_bytes"] == size
    assert access["EstimateTokens"]["response_bytes"] > 0
    assert access["EstimateTokens"]["duration_ms"] >= 0
    assert access["SweepOrphans"]["status"] == "INVALID_ARGUMENT"
    assert access["SweepOrphans"]["error_reason"] == "ERROR_REASON_INVALID_HISTORY"
    trim = access["TrimHistory"]
    assert (trim["session_id"], trim["runtime_id"], trim["agent_id"]) == (
        session,
        "runtime-9",
        "agent-2",
    )
    # The trim line of the same call carries the same ids.
    trimmed = next(r for r in records if r.get("logger") == "turnkeeper.trim")
    assert (trimmed["session_id"], trimmed["level"]) == (session, "INFO")


def test_unreachable_redis_feed_degrades_events_health_only(
    server_factory: Callable[..., Any],
) -> None:
    with socket.socket() as probe:  # a loopback port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = server_factory("--events", f"redis://127.0.0.1:{port}", unix=False)
    with grpc.insecure_channel(server.address) as ch:
        assert health_check(ch, f"{SERVICE}/events") == NOT_SERVING
        assert health_check(ch, "") == SERVING
        assert health_check(ch, SERVICE) == SERVING
        assert stub(ch).EstimateTokens(
            svc.EstimateTokensRequest(history=user_history("hello")), timeout=5
        ).total_tokens == (2 + 4)
    assert server.stop() == 0
    assert "event feed degraded" in server.log_text()
