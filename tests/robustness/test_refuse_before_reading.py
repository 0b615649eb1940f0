"""Issue 17 "unauthenticated requests are read whole before they are refused": 32 concurrent 60 MB
EstimateTokens calls without a token peaked the sidecar at 2.05 GB. The refusal now needs only the
headers and never reads the request."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from robustness_support import BIG_MESSAGES, chat, error_info, rich_status, rss_kib
from turnkeeper.v1 import history_service_pb2 as svc

BURST = 32
ESTIMATE = "/turnkeeper.v1.HistoryService/EstimateTokens"


def test_32_unauthenticated_60_mb_requests_cost_no_memory(
    server_factory: Callable[..., Any], credentials: Any, figures: Any
) -> None:
    tokens: Path = credentials.tokens
    server = server_factory("--auth-tokens", str(tokens), unix=False)
    body = svc.EstimateTokensRequest(history=chat(100_000, "y" * 590)).SerializeToString()
    assert len(body) >= 60_000_000
    idle = rss_kib(server.pid) // 1024
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def stranger() -> None:
        with grpc.insecure_channel(server.address, options=BIG_MESSAGES) as channel:
            call = channel.unary_unary(ESTIMATE)
            try:
                call(body, timeout=120)
                outcome = "OK"
            except grpc.RpcError as error:
                status = rich_status(error)
                info = error_info(status) if status is not None else None
                outcome = f"{error.code().name}:{info.reason if info else 'no ErrorInfo'}"
        with lock:
            outcomes[outcome] += 1

    threads = [threading.Thread(target=stranger) for _ in range(BURST)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    peak = idle
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_kib(server.pid) // 1024)
        time.sleep(0.02)
    elapsed = time.monotonic() - started
    figures.add("32 x 60 MB without a token", dict(outcomes))
    figures.add("idle / peak RSS MiB / burst s", f"{idle} / {peak} / {elapsed:.1f}")
    assert outcomes == {"UNAUTHENTICATED:ERROR_REASON_UNAUTHENTICATED": BURST}
    assert peak - idle <= 100
