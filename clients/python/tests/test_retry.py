"""The unary retry policy (docs/conventions.md, Client defaults): RetryInfo honoured on
RESOURCE_EXHAUSTED / UNAVAILABLE, bounded attempts, never past the call's deadline, off with
`retry=None`.

A fake HistoryService in this process refuses a chosen number of calls and then answers; the
overloaded sidecar (`with_server.py --overloaded`, tests/support/overloaded.py) refuses every call
with RESOURCE_EXHAUSTED + RetryInfo (1 s) for real.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2
from turnkeeper.v1 import history_pb2
from turnkeeper.v1 import history_service_pb2 as svc

from turnkeeper_client import (
    AsyncTurnkeeperClient,
    RetryPolicy,
    TurnkeeperClient,
    TurnkeeperError,
)

from .conftest import SUPPORT

# What the fake answers before it succeeds: (code, RetryInfo delay in seconds or None).
Refusal = tuple[grpc.StatusCode, float | None]


class FakeService:
    """Answers ResolveBudget: the queued refusals first, then OK; counts the calls."""

    def __init__(self) -> None:
        self.refusals: list[Refusal] = []
        self.calls = 0

    def resolve_budget(
        self, request: svc.ResolveBudgetRequest, context: grpc.ServicerContext
    ) -> svc.ResolveBudgetResponse:
        self.calls += 1
        if not self.refusals:
            response = svc.ResolveBudgetResponse()
            response.resolution.budget_tokens = 7
            return response
        code, delay = self.refusals.pop(0)
        status = status_pb2.Status(code=code.value[0], message="refused by the fake")
        if delay is not None:
            retry = error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(nanos=int(delay * 1e9))
            )
            status.details.add().Pack(retry)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(code, status.message)


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeService, str]]:
    service = FakeService()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2), options=[("grpc.so_reuseport", 0)]
    )
    handler = grpc.unary_unary_rpc_method_handler(
        service.resolve_budget,
        request_deserializer=svc.ResolveBudgetRequest.FromString,
        response_serializer=svc.ResolveBudgetResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "turnkeeper.v1.HistoryService", {"ResolveBudget": handler}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield service, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.fixture
def refuse(fake: tuple[FakeService, str]) -> Callable[..., FakeService]:
    def arm(*refusals: Refusal) -> FakeService:
        service = fake[0]
        service.refusals = list(refusals)
        service.calls = 0
        return service

    return arm


EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


def test_retry_info_is_waited_for_then_the_call_succeeds(
    fake: tuple[FakeService, str], refuse: Callable[..., FakeService]
) -> None:
    service = refuse((EXHAUSTED, 0.3))
    with TurnkeeperClient.connect(fake[1]) as tk:
        started = time.monotonic()
        response = tk.resolve_budget(svc.ResolveBudgetRequest())
        elapsed = time.monotonic() - started
    assert response.resolution.budget_tokens == 7
    assert service.calls == 2
    assert elapsed >= 0.3


async def test_retry_info_is_waited_for_then_the_call_succeeds_async(
    fake: tuple[FakeService, str], refuse: Callable[..., FakeService]
) -> None:
    service = refuse((UNAVAILABLE, 0.3), (EXHAUSTED, 0.2))
    async with AsyncTurnkeeperClient.connect(fake[1]) as tk:
        started = time.monotonic()
        response = await tk.resolve_budget(svc.ResolveBudgetRequest())
        elapsed = time.monotonic() - started
    assert response.resolution.budget_tokens == 7
    assert service.calls == 3
    assert elapsed >= 0.5


def test_attempts_are_bounded(
    fake: tuple[FakeService, str], refuse: Callable[..., FakeService]
) -> None:
    service = refuse(*[(EXHAUSTED, 0.01)] * 5)
    with TurnkeeperClient.connect(fake[1]) as tk, pytest.raises(TurnkeeperError) as caught:
        tk.resolve_budget(svc.ResolveBudgetRequest())
    assert caught.value.code == EXHAUSTED
    assert caught.value.retry_delay == pytest.approx(0.01)
    assert service.calls == 3
    service = refuse(*[(EXHAUSTED, 0.01)] * 5)
    with (
        TurnkeeperClient.connect(fake[1], retry=RetryPolicy(max_attempts=5)) as tk,
        pytest.raises(TurnkeeperError),
    ):
        tk.resolve_budget(svc.ResolveBudgetRequest())
    assert service.calls == 5


@pytest.mark.parametrize(
    ("refusal", "policy", "why"),
    [
        ((EXHAUSTED, 0.05), None, "retrying turned off"),
        ((EXHAUSTED, None), RetryPolicy(), "RESOURCE_EXHAUSTED without RetryInfo"),
        ((EXHAUSTED, 0.5), RetryPolicy(max_delay=0.2), "RetryInfo over max_delay"),
        ((grpc.StatusCode.INTERNAL, 0.05), RetryPolicy(), "a code the policy does not retry"),
    ],
)
def test_not_retried(
    fake: tuple[FakeService, str],
    refuse: Callable[..., FakeService],
    refusal: Refusal,
    policy: RetryPolicy | None,
    why: str,
) -> None:
    service = refuse(refusal)
    with (
        TurnkeeperClient.connect(fake[1], retry=policy) as tk,
        pytest.raises(TurnkeeperError) as caught,
    ):
        tk.resolve_budget(svc.ResolveBudgetRequest())
    assert caught.value.code == refusal[0], why
    assert service.calls == 1, why


def test_unavailable_without_retry_info_backs_off(
    fake: tuple[FakeService, str], refuse: Callable[..., FakeService]
) -> None:
    service = refuse((UNAVAILABLE, None), (UNAVAILABLE, None))
    policy = RetryPolicy(backoff=0.2, multiplier=2.0, jitter=0.0)
    with TurnkeeperClient.connect(fake[1], retry=policy) as tk:
        started = time.monotonic()
        tk.resolve_budget(svc.ResolveBudgetRequest())
        elapsed = time.monotonic() - started
    assert service.calls == 3
    assert elapsed >= 0.2 + 0.4


def test_a_delay_past_the_deadline_returns_the_error_at_once(
    fake: tuple[FakeService, str], refuse: Callable[..., FakeService]
) -> None:
    service = refuse((EXHAUSTED, 2.0))
    with TurnkeeperClient.connect(fake[1]) as tk, pytest.raises(TurnkeeperError) as caught:
        started = time.monotonic()
        tk.resolve_budget(svc.ResolveBudgetRequest(), timeout=1.0)
    assert time.monotonic() - started < 0.5
    assert caught.value.code == EXHAUSTED
    assert service.calls == 1


def _request() -> svc.EstimateTokensRequest:
    request = svc.EstimateTokensRequest()
    request.history.chat.messages.add(role=history_pb2.ROLE_USER, content="hello")
    return request


class CountingInterceptor(grpc.UnaryUnaryClientInterceptor):
    def __init__(self) -> None:
        self.calls = 0

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self.calls += 1
        return continuation(details, request)


@pytest.fixture(scope="module")
def overloaded() -> Iterator[str]:
    address = os.environ.get("TURNKEEPER_OVERLOADED_ADDRESS")
    if address:
        yield address
        return
    sys.path.insert(0, str(SUPPORT))
    import overloaded as overload  # type: ignore[import-not-found]
    from live import start_server  # type: ignore[import-not-found]

    server = start_server(*overload.SERVER_FLAGS, unix=False)
    try:
        release = overload.hold(server.address)
        yield server.address
        release()
    finally:
        server.stop()


def test_the_overloaded_server_is_retried_max_attempts_times(overloaded: str) -> None:
    counter = CountingInterceptor()
    channel = grpc.intercept_channel(grpc.insecure_channel(overloaded), counter)
    with TurnkeeperClient(channel) as tk:
        started = time.monotonic()
        with pytest.raises(TurnkeeperError) as caught:
            tk.estimate_tokens(_request())
        elapsed = time.monotonic() - started
    assert caught.value.reason == "ERROR_REASON_OVERLOADED"
    assert caught.value.retry_delay is not None
    assert counter.calls == 3
    # Two waits of the server's RetryInfo delay, and well within the 10 s default deadline.
    assert 2 * caught.value.retry_delay <= elapsed < 10


def test_the_overloaded_server_within_the_deadline(overloaded: str) -> None:
    counter = CountingInterceptor()
    channel = grpc.intercept_channel(grpc.insecure_channel(overloaded), counter)
    with TurnkeeperClient(channel) as tk:
        started = time.monotonic()
        with pytest.raises(TurnkeeperError) as caught:
            tk.estimate_tokens(_request(), timeout=1.5)
        elapsed = time.monotonic() - started
    delay = caught.value.retry_delay
    assert delay is not None
    assert delay == pytest.approx(1.0)
    # Refused at 0 s, waited 1 s, refused again; a second wait would pass the 1.5 s deadline.
    assert counter.calls == 2
    assert delay <= elapsed < 1.5
    assert caught.value.code == EXHAUSTED


async def test_the_overloaded_server_with_retrying_off_async(overloaded: str) -> None:
    async with AsyncTurnkeeperClient.connect(overloaded, retry=None) as tk:
        started = time.monotonic()
        with pytest.raises(TurnkeeperError) as caught:
            await tk.estimate_tokens(_request())
        assert time.monotonic() - started < 0.9
    assert caught.value.code == EXHAUSTED
