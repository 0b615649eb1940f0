"""Issue 9 "error size is unbounded": errors list at most 100 violations, in order, count the rest,
fit the 8 KiB trailer a default client accepts, and cost work linear in the request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from robustness_support import BIG_MESSAGES, bad_request, error_info, rich_status, rss_kib
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc

MAX_DETAILS = 64 * 1024


@pytest.fixture
def stub(live_server: Any) -> Iterator[history_service_pb2_grpc.HistoryServiceStub]:
    # A default client: gRPC's 8 KiB metadata limit, only the send limit raised.
    with grpc.insecure_channel(live_server.address, options=BIG_MESSAGES[:1]) as channel:
        yield history_service_pb2_grpc.HistoryServiceStub(channel)


def _fail(stub: history_service_pb2_grpc.HistoryServiceStub, history: h.History) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        stub.EstimateTokens(svc.EstimateTokensRequest(history=history), timeout=60)
    return caught.value


def test_150_bad_rows_reach_a_default_client_as_invalid_argument_with_details(
    stub: history_service_pb2_grpc.HistoryServiceStub, figures: Any
) -> None:
    error = _fail(stub, h.History(chat=h.ChatHistory(messages=[h.ChatMessage()] * 150)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    status = rich_status(error)
    assert status is not None
    info, found = error_info(status), bad_request(status)
    assert info is not None and found is not None
    assert info.reason == "ERROR_REASON_INVALID_HISTORY"
    fields = [v.field for v in found.field_violations]
    assert 0 < len(fields) <= 100
    assert fields == [f"history.chat.messages[{i}].role" for i in range(len(fields))]
    assert info.metadata["field_violations_total"] == "150"
    assert int(info.metadata["field_violations_omitted"]) == 150 - len(fields)
    assert f"and {150 - 5} more" in error.details()
    figures.add("violations listed / found", f"{len(fields)} / 150")
    figures.add("status bytes", status.ByteSize())


@pytest.mark.parametrize("calls", [300_000, 1_000_000])
@pytest.mark.parametrize("item_limit", ["default", "raised"])
def test_a_row_of_empty_tool_calls_costs_linear_work_and_a_bounded_error(
    server_factory: Any, figures: Any, calls: int, item_limit: str
) -> None:
    """The probe saw 300k empty ToolCall() cost 3.3 s, a 52 MB error and +630 MB of RSS. With
    the default --max-request-items the request is refused before it is parsed; with the limit
    raised past it, every violation is found in linear time and the error stays bounded."""
    flags = ("--max-request-items", str(10 * calls)) if item_limit == "raised" else ()
    live_server = server_factory(*flags, unix=False)
    channel = grpc.insecure_channel(live_server.address, options=BIG_MESSAGES)
    stub = history_service_pb2_grpc.HistoryServiceStub(channel)
    row = h.ChatMessage(role=h.ROLE_ASSISTANT, tool_calls=[h.ToolCall()] * calls)
    history = h.History(chat=h.ChatHistory(messages=[row]))
    rss_before = rss_kib(live_server.pid)
    started = time.perf_counter()
    error = _fail(stub, history)
    elapsed = time.perf_counter() - started
    rss_after = rss_kib(live_server.pid)
    channel.close()
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rich_status(error)
    assert status is not None and status.ByteSize() <= MAX_DETAILS
    info = error_info(status)
    assert info is not None
    if item_limit == "default":
        assert info.reason == "ERROR_REASON_REQUEST_TOO_LARGE"
        assert "max_request_items" in info.metadata
    else:
        assert info.metadata["field_violations_total"] == str(2 * calls)
    # Linear: a few microseconds per call, on a loaded 2-core machine.
    assert elapsed < 6e-6 * calls + 1.0, f"{elapsed:.2f} s for {calls} calls"
    assert rss_after - rss_before < 200 * 1024
    size = history.ByteSize()
    what = f"{size / 1e6:.1f} MB request, {item_limit} item limit"
    figures.add(f"{what}: seconds", f"{elapsed:.2f}")
    figures.add(f"{what}: status bytes", status.ByteSize())
    figures.add(f"{what}: RSS growth MiB", f"{(rss_after - rss_before) / 1024:.0f}")


def test_long_user_text_in_a_violation_is_clipped(
    stub: history_service_pb2_grpc.HistoryServiceStub,
) -> None:
    """A duplicate classifier hint quotes the caller's text; a 1 MB hint must not make a 1 MB error."""
    request = svc.ResolveBudgetRequest()
    for _ in range(2):
        route = request.profiles.runtime.classifier_routes.add()
        route.hint = "é🦀" * 300_000  # percent-encoded 3 bytes per UTF-8 byte in grpc-message
        route.provider = "p"
    with pytest.raises(grpc.RpcError) as caught:
        stub.ResolveBudget(request, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rich_status(caught.value)
    assert status is not None and status.ByteSize() < 8 * 1024
