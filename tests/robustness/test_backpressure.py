"""Issue 19 "refusals under ordinary concurrency": heavy calls over --max-heavy-calls wait for a
slot instead of being refused; the in-flight byte budget still refuses a burst past it at once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc
from robustness_support import BIG_MESSAGES, chat, error_info, rich_status
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


def test_a_burst_past_the_byte_budget_is_refused_at_once(
    server_factory: Callable[..., Any], figures: Any
) -> None:
    request = svc.EstimateTokensRequest(history=chat(ROWS, "a longer line of chat text " * 4))
    size = request.ByteSize()
    # Room for one and a half requests: a call that arrives while another is admitted passes the
    # budget, though the heavy queue would let it wait 60 s.
    server = server_factory(
        "--max-inflight-request-bytes",
        str(size + size // 2),
        "--max-heavy-calls",
        "1",
        "--heavy-wait-seconds",
        "60",
        "--max-receiving-calls",
        "16",
        unix=False,
    )
    outcomes = _burst(server.address, request, 10)
    statuses = Counter(outcome for outcome, _ in outcomes)
    refused = [s for outcome, s in outcomes if outcome.endswith("max_inflight_request_bytes")]
    figures.add("10 x heavy, budget of 1.5", dict(statuses))
    figures.add("slowest byte-budget refusal s", f"{max(refused, default=0):.2f}")
    assert set(statuses) <= {"OK", "RESOURCE_EXHAUSTED:max_inflight_request_bytes"}, statuses
    assert statuses["OK"] >= 1 and refused
    # Refused without queueing: far sooner than the 60 s a heavy call may wait.
    assert max(refused) < 10
