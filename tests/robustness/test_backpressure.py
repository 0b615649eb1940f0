"""Issue 19 "refusals under ordinary concurrency": heavy calls over --max-heavy-calls wait for a
slot instead of being refused; the in-flight byte budget still refuses a burst past it at once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc
from harness import chat
from robustness_support import BIG_MESSAGES, error_info, rich_status
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc

ROWS = 10_000  # about 1 MB of history, over the default --heavy-call-bytes


def _burst(address: str, request: svc.EstimateTokensRequest, n: int) -> list[tuple[str, float]]:
    """n concurrent EstimateTokens calls, one channel each: (outcome, seconds) per call."""
    outcomes: list[tuple[str, float]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(n)

    def call() -> None:
        with grpc.insecure_channel(address, options=BIG_MESSAGES) as channel:
            stub = history_service_pb2_grpc.HistoryServiceStub(channel)
            grpc.channel_ready_future(channel).result(timeout=30)
            barrier.wait()
            started = time.monotonic()
            try:
                stub.EstimateTokens(request, timeout=60)
                outcome = "OK"
            except grpc.RpcError as error:
                status = rich_status(error)
                info = error_info(status) if status is not None else None
                limit = info.metadata.get("limit", "") if info is not None else ""
                outcome = f"{error.code().name}:{limit}"
        with lock:
            outcomes.append((outcome, time.monotonic() - started))

    threads = [threading.Thread(target=call) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return outcomes


def test_twelve_concurrent_heavy_calls_all_succeed_with_default_flags(
    server_factory: Callable[..., Any], figures: Any
) -> None:
    server = server_factory(unix=False)
    request = svc.EstimateTokensRequest(history=chat(ROWS, "a longer line of chat text " * 4))
    assert request.ByteSize() >= 1024 * 1024
    outcomes = _burst(server.address, request, 12)
    statuses = Counter(outcome for outcome, _ in outcomes)
    figures.add("12 x heavy EstimateTokens", dict(statuses))
    figures.add("slowest call s", f"{max(s for _, s in outcomes):.2f}")
    assert statuses == {"OK": 12}


def test_a_burst_past_the_byte_budget_never_waits_for_the_heavy_queue(
    server_factory: Callable[..., Any], figures: Any
) -> None:
    request = svc.EstimateTokensRequest(history=chat(ROWS, "a longer line of chat text " * 4))
    size = request.ByteSize()
    # Room for one and a half requests. A call may start receiving only while a largest request
    # still fits beside what is held (one may always receive), so the burst goes through one
    # receive at a time: a call whose bytes, once in, would pass the budget is refused at once,
    # one that finds the budget free again runs, which of the two is a race. None waits the 60 s
    # the heavy queue would let it; the waiting for receive room is bounded by receive-wait.
    server = server_factory(
        "--max-inflight-request-bytes",
        str(size + size // 2),
        "--max-heavy-calls",
        "1",
        "--heavy-wait-seconds",
        "60",
        "--max-receiving-calls",
        "16",
        "--receive-wait-seconds",
        "0.5",
        unix=False,
    )
    outcomes = _burst(server.address, request, 10)
    statuses = Counter(outcome for outcome, _ in outcomes)
    refused = [s for outcome, s in outcomes if outcome.endswith("max_inflight_request_bytes")]
    figures.add("10 x heavy, budget of 1.5", dict(statuses))
    figures.add("slowest byte-budget refusal s", f"{max(refused, default=0):.2f}")
    assert set(statuses) <= {"OK", "RESOURCE_EXHAUSTED:max_inflight_request_bytes"}, statuses
    assert statuses["OK"] >= 1
    assert max(seconds for _, seconds in outcomes) < 10
