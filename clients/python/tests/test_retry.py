"""The unary retry policy (docs/conventions.md, Client defaults): RetryInfo honoured on
RESOURCE_EXHAUSTED / UNAVAILABLE, bounded attempts, never past the call's deadline, off with
`retry=None`.

`with_server.py --overloaded` starts both servers used here: a scripted fake (support/flaky.py)
that refuses as each request says and counts the attempts, and a real server that refuses every
call with RESOURCE_EXHAUSTED + RetryInfo (1 s) (support/overloaded.py).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import grpc.aio
import pytest
from turnkeeper.v1 import history_pb2
from turnkeeper.v1 import history_service_pb2 as svc

from turnkeeper_client import (
    DEFAULT_RETRY,
    AsyncTurnkeeperClient,
    RetryPolicy,
    TurnkeeperClient,
    TurnkeeperError,
)

from .conftest import SUPPORT

EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


@pytest.fixture(scope="module")
def flaky() -> Iterator[str]:
    """The scripted fake's address: its EstimateTokens refuses as the request's first row says
    (`<call id> CODE:delay_ms ...`, -1 for no RetryInfo), then answers with `total_tokens` = the
    attempts it took."""
    address = os.environ.get("TURNKEEPER_FLAKY_ADDRESS")
    if address:
        yield address
        return
    sys.path.insert(0, str(SUPPORT))
    import flaky as fake  # type: ignore[import-not-found]

    server, address = fake.start()
    try:
        yield address
    finally:
        server.stop(None)


def scripted(script: str) -> svc.EstimateTokensRequest:
    """A request the fake refuses per `script`, under a call id of its own."""
    request = svc.EstimateTokensRequest()
    request.history.chat.messages.add(
        role=history_pb2.ROLE_USER, content=f"py-{uuid.uuid4().hex} {script}"
    )
    return request


class CountingInterceptor(grpc.UnaryUnaryClientInterceptor):
    def __init__(self) -> None:
        self.calls = 0

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self.calls += 1
        return continuation(details, request)


def counting(
    address: str, retry: RetryPolicy | None = DEFAULT_RETRY
) -> tuple[TurnkeeperClient, CountingInterceptor]:
    """A client of `address` that counts the attempts it makes."""
    counter = CountingInterceptor()
    channel = grpc.intercept_channel(grpc.insecure_channel(address), counter)
    return TurnkeeperClient(channel, retry=retry), counter


def test_retry_info_is_waited_for_then_the_call_succeeds(flaky: str) -> None:
    with TurnkeeperClient.connect(flaky) as tk:
        started = time.monotonic()
        response = tk.estimate_tokens(scripted("RESOURCE_EXHAUSTED:300"))
        elapsed = time.monotonic() - started
    assert response.total_tokens == 2
    assert elapsed >= 0.3


async def test_retry_info_is_waited_for_then_the_call_succeeds_async(flaky: str) -> None:
    async with AsyncTurnkeeperClient.connect(flaky) as tk:
        started = time.monotonic()
        response = await tk.estimate_tokens(scripted("UNAVAILABLE:300 RESOURCE_EXHAUSTED:200"))
        elapsed = time.monotonic() - started
    assert response.total_tokens == 3
    assert elapsed >= 0.5


def test_attempts_are_bounded(flaky: str) -> None:
    tk, counter = counting(flaky)
    with tk, pytest.raises(TurnkeeperError) as caught:
        tk.estimate_tokens(scripted("RESOURCE_EXHAUSTED:10 " * 5))
    assert caught.value.code == EXHAUSTED
    assert caught.value.retry_delay == pytest.approx(0.01)
    assert counter.calls == 3
    with TurnkeeperClient.connect(flaky, retry=RetryPolicy(max_attempts=5)) as tk:
        script = "RESOURCE_EXHAUSTED:10 RESOURCE_EXHAUSTED:10 UNAVAILABLE:10 UNAVAILABLE:10"
        assert tk.estimate_tokens(scripted(script)).total_tokens == 5


@pytest.mark.parametrize(
    ("script", "policy", "code", "why"),
    [
        ("RESOURCE_EXHAUSTED:50", None, EXHAUSTED, "retrying turned off"),
        ("RESOURCE_EXHAUSTED:-1", DEFAULT_RETRY, EXHAUSTED, "RESOURCE_EXHAUSTED without RetryInfo"),
        (
            "RESOURCE_EXHAUSTED:500",
            RetryPolicy(max_delay=0.2),
            EXHAUSTED,
            "RetryInfo over max_delay",
        ),
        (
            "INTERNAL:50",
            DEFAULT_RETRY,
            grpc.StatusCode.INTERNAL,
            "a code the policy does not retry",
        ),
    ],
)
def test_not_retried(
    flaky: str, script: str, policy: RetryPolicy | None, code: grpc.StatusCode, why: str
) -> None:
    tk, counter = counting(flaky, policy)
    with tk, pytest.raises(TurnkeeperError) as caught:
        tk.estimate_tokens(scripted(script))
    assert caught.value.code == code, why
    assert counter.calls == 1, why


def test_unavailable_without_retry_info_backs_off(flaky: str) -> None:
    policy = RetryPolicy(backoff=0.2, multiplier=2.0, jitter=0.0)
    with TurnkeeperClient.connect(flaky, retry=policy) as tk:
        started = time.monotonic()
        response = tk.estimate_tokens(scripted("UNAVAILABLE:-1 UNAVAILABLE:-1"))
        elapsed = time.monotonic() - started
    assert response.total_tokens == 3
    assert elapsed >= 0.2 + 0.4


def test_a_delay_past_the_deadline_returns_the_error_at_once(flaky: str) -> None:
    tk, counter = counting(flaky)
    with tk, pytest.raises(TurnkeeperError) as caught:
        started = time.monotonic()
        tk.estimate_tokens(scripted("RESOURCE_EXHAUSTED:2000"), timeout=1.0)
    assert time.monotonic() - started < 0.5
    assert caught.value.code == EXHAUSTED
    assert counter.calls == 1


def _request() -> svc.EstimateTokensRequest:
    request = svc.EstimateTokensRequest()
    request.history.chat.messages.add(role=history_pb2.ROLE_USER, content="hello")
    return request


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
    tk, counter = counting(overloaded)
    with tk:
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
    tk, counter = counting(overloaded)
    with tk:
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
