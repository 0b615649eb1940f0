"""The unary wrapper: connections, deadlines, message size, decoded errors."""

from __future__ import annotations

import inspect
import json
import os
import re
import typing
from pathlib import Path

import grpc
import pytest
from turnkeeper.v1 import history_pb2, profile_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

from turnkeeper_client import (
    DEFAULT_RETRY,
    DEFAULT_TIMEOUT,
    MAX_MESSAGE_BYTES,
    RETRYABLE_CODES,
    AsyncTurnkeeperClient,
    TurnkeeperClient,
    TurnkeeperError,
    target,
)
from turnkeeper_client._rpcs import unary_rpcs

from .conftest import Endpoints
from .helpers import budget_trim, three_turns


def _bad_history() -> svc.EstimateTokensRequest:
    return svc.EstimateTokensRequest(
        history=history_pb2.History(
            chat=history_pb2.ChatHistory(
                messages=[
                    history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="hi"),
                    history_pb2.ChatMessage(role=history_pb2.ROLE_TOOL, content="out"),
                    history_pb2.ChatMessage(
                        role=history_pb2.ROLE_USER,
                        tool_calls=[history_pb2.ToolCall(id="c1", name="f")],
                    ),
                ]
            )
        )
    )


def test_target_forms() -> None:
    assert target("127.0.0.1:5") == "127.0.0.1:5"
    assert target(unix_path="/run/tk.sock") == "unix:/run/tk.sock"
    with pytest.raises(ValueError):
        target("127.0.0.1:5", "/run/tk.sock")
    with pytest.raises(ValueError):
        target()


def test_invalid_request_decoded(client: TurnkeeperClient) -> None:
    with pytest.raises(TurnkeeperError) as caught:
        client.estimate_tokens(_bad_history())
    error = caught.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.reason == "ERROR_REASON_INVALID_HISTORY"
    assert error.domain == "turnkeeper.v1"
    assert error.fields == {
        "history.chat.messages[1].tool_call_id",
        "history.chat.messages[2].tool_calls",
    }
    assert all(v.description for v in error.field_violations)
    assert error.capacity_report is None
    assert "INVALID_ARGUMENT (ERROR_REASON_INVALID_HISTORY)" in str(error)
    assert isinstance(error.__cause__, grpc.RpcError)


async def test_invalid_request_decoded_async(unix_aclient: AsyncTurnkeeperClient) -> None:
    with pytest.raises(TurnkeeperError) as caught:
        await unix_aclient.trim_history(svc.TrimHistoryRequest(history=three_turns()))
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.reason == "ERROR_REASON_INVALID_LIMITS"
    assert caught.value.fields == {"mode"}


def _oversized() -> svc.CheckCapacityRequest:
    return svc.CheckCapacityRequest(
        history=three_turns(),
        profiles=profile_pb2.Profiles(
            runtime=profile_pb2.RuntimeProfile(default_provider="p"),
            providers=[profile_pb2.ProviderProfile(alias="p", context_window=100)],
        ),
        reserved_output_tokens=50,
    )


def test_capacity_report_detail(unix_client: TurnkeeperClient) -> None:
    with pytest.raises(TurnkeeperError) as caught:
        unix_client.check_capacity(_oversized())
    error = caught.value
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION
    assert error.reason == "ERROR_REASON_CONTEXT_WINDOW_EXCEEDED"
    report = error.capacity_report
    assert report is not None and not report.fits
    assert report.capacity.safety_tokens == 100
    assert report.reserved_output_tokens == 50
    assert report.total_tokens == report.message_tokens + 50
    assert error.precondition_violations


async def test_capacity_report_detail_async(aclient: AsyncTurnkeeperClient) -> None:
    with pytest.raises(TurnkeeperError) as caught:
        await aclient.check_capacity(_oversized())
    assert caught.value.capacity_report is not None
    assert caught.value.capacity_report.capacity.safety_tokens == 100


def test_history_trimmed_result(unix_client: TurnkeeperClient) -> None:
    response = unix_client.trim_history(budget_trim("s-result"))
    trimmed = response.history_trimmed
    assert trimmed.reason == trim_pb2.TRIM_REASON_TOKEN_BUDGET
    assert trimmed.dropped_turns == response.outcome.dropped_turns > 0
    assert trimmed.caller.session_id == "s-result"
    assert trimmed.breadcrumb_inserted
    assert response.history.chat.messages[1].breadcrumb


def test_every_unary_rpc_sync(client: TurnkeeperClient) -> None:
    history = three_turns()
    assert client.estimate_tokens(svc.EstimateTokensRequest(history=history)).turns == 3
    assert client.resolve_budget(svc.ResolveBudgetRequest()).resolution.budget_tokens == 32000
    assert client.prepare_model_call(svc.PrepareModelCallRequest(history=history)).tokens_before
    assert client.check_capacity(svc.CheckCapacityRequest(history=history)).report.fits
    assert not client.sweep_orphans(svc.SweepOrphansRequest(history=history)).removals
    capped = client.cap_tool_results(
        svc.CapToolResultsRequest(contents=["x" * 30], max_tool_result_chars=9)
    )
    assert capped.results[0].truncated_chars == 21


async def test_every_unary_rpc_async(aclient: AsyncTurnkeeperClient) -> None:
    history = three_turns()
    assert (await aclient.estimate_tokens(svc.EstimateTokensRequest(history=history))).turns == 3
    resolved = await aclient.resolve_budget(svc.ResolveBudgetRequest())
    assert resolved.resolution.max_history_turns == 50
    prepared = await aclient.prepare_model_call(svc.PrepareModelCallRequest(history=history))
    assert prepared.capacity_report.fits
    assert (await aclient.check_capacity(svc.CheckCapacityRequest(history=history))).report.fits
    swept = await aclient.sweep_orphans(svc.SweepOrphansRequest(history=history))
    assert swept.history == history
    capped = await aclient.cap_tool_results(
        svc.CapToolResultsRequest(contents=["short"], max_tool_result_chars=9)
    )
    assert capped.results[0].content == "short"


def test_large_messages_both_ways(client: TurnkeeperClient) -> None:
    # Above gRPC's 4 MiB default in both directions: the trim echoes the untrimmed history.
    big = "x" * (6 * 1024 * 1024)
    request = svc.TrimHistoryRequest(
        history=history_pb2.History(
            chat=history_pb2.ChatHistory(
                messages=[history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=big)]
            )
        ),
        mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
        explicit_limits=svc.ExplicitLimits(budget_tokens=0),
    )
    assert request.ByteSize() < MAX_MESSAGE_BYTES
    response = client.trim_history(request, timeout=60)
    assert response.history.chat.messages[0].content == big


def _slow_request() -> svc.EstimateTokensRequest:
    # Pricing 20,000 rows takes the server well over a millisecond.
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="q")] * 20_000
    return svc.EstimateTokensRequest(
        history=history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))
    )


def test_per_call_deadline(client: TurnkeeperClient) -> None:
    with pytest.raises(TurnkeeperError) as caught:
        client.estimate_tokens(_slow_request(), timeout=0.001)
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert caught.value.reason == ""
    # The same call with the default deadline succeeds.
    assert client.estimate_tokens(_slow_request()).turns == 20_000


def test_client_default_deadline(endpoints: Endpoints) -> None:
    with (
        TurnkeeperClient.connect(endpoints.address, timeout=0.001) as tk,
        pytest.raises(TurnkeeperError) as caught,
    ):
        tk.estimate_tokens(_slow_request())
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_async_per_call_deadline(aclient: AsyncTurnkeeperClient) -> None:
    with pytest.raises(TurnkeeperError) as caught:
        await aclient.estimate_tokens(_slow_request(), timeout=0.001)
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_unreachable_socket_is_unavailable() -> None:
    with (
        TurnkeeperClient.connect(unix_path="/nonexistent/tk.sock", timeout=2) as tk,
        pytest.raises(TurnkeeperError) as caught,
    ):
        tk.resolve_budget(svc.ResolveBudgetRequest())
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    assert caught.value.reason == ""


def test_metadata_is_sent(endpoints: Endpoints) -> None:
    # Client-wide and per-call metadata are merged; the server accepts arbitrary headers.
    with TurnkeeperClient.connect(endpoints.address, metadata=[("x-runtime", "pytest")]) as tk:
        tk.resolve_budget(svc.ResolveBudgetRequest(), metadata=[("x-call", "1")])


def test_defaults_are_the_ones_every_client_shares() -> None:
    vectors = os.environ.get("TURNKEEPER_CONFORMANCE_DIR")
    base = (
        Path(vectors).parent
        if vectors
        else Path(__file__).resolve().parents[3] / "tests" / "conformance"
    )
    shared = json.loads((base / "client-defaults.json").read_text(encoding="utf-8"))
    assert shared["unaryDeadlineSeconds"] == DEFAULT_TIMEOUT
    assert shared["maxMessageBytes"] == MAX_MESSAGE_BYTES
    retry = shared["retry"]
    assert retry["maxAttempts"] == DEFAULT_RETRY.max_attempts
    assert {grpc.StatusCode[code] for code in retry["retryableCodes"]} == RETRYABLE_CODES
    assert retry["maxDelaySeconds"] == DEFAULT_RETRY.max_delay
    assert retry["backoffSeconds"] == DEFAULT_RETRY.backoff
    assert retry["backoffMultiplier"] == DEFAULT_RETRY.multiplier
    assert retry["backoffJitter"] == DEFAULT_RETRY.jitter


def test_one_table_of_unary_rpcs_serves_both_clients(
    client: TurnkeeperClient, aclient: AsyncTurnkeeperClient
) -> None:
    """Every unary RPC of the contract is one `Rpc` entry, with the contract's message types; it
    is a blocking method on the sync client and a coroutine method on the asyncio one."""
    service = svc.DESCRIPTOR.services_by_name["HistoryService"]
    unary = {m.name for m in service.methods if not m.server_streaming}
    table = unary_rpcs()
    assert {rpc.rpc_name for rpc in table.values()} == unary
    for name, rpc in table.items():
        method = service.methods_by_name[rpc.rpc_name]
        assert name == re.sub(r"(?<!^)(?=[A-Z])", "_", method.name).lower()
        request, response = typing.get_args(rpc.__orig_class__)  # type: ignore[attr-defined]
        assert (method.input_type, method.output_type) == (request.DESCRIPTOR, response.DESCRIPTOR)
        for owner, bound, coroutine in (
            (TurnkeeperClient, getattr(client, name), False),
            (AsyncTurnkeeperClient, getattr(aclient, name), True),
        ):
            assert inspect.iscoroutinefunction(bound) is coroutine
            assert bound.__name__ == name and bound.__doc__ == rpc.__doc__ != ""
            assert list(inspect.signature(bound).parameters) == ["request", "timeout", "metadata"]
            # On the class, the function itself, as for any method: help() shows it.
            function = getattr(owner, name)
            assert inspect.iscoroutinefunction(function) is coroutine
            assert function.__doc__ == rpc.__doc__
            assert function.__qualname__ == f"HistoryServiceMethods.{name}"
            signature = inspect.signature(function)
            assert list(signature.parameters)[:2] == ["self", "request"]
            assert signature.parameters["request"].annotation is request
            assert signature.return_annotation is response
