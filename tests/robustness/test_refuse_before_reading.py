"""Issue 17 "unauthenticated requests are read whole before they are refused": 32 concurrent 60 MB
EstimateTokens calls without a token peaked the sidecar at 2.05 GB. The refusal now needs only the
headers and never reads the request."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from harness import chat
from robustness_support import burst, error_info, rich_status, rss_kib
from turnkeeper.v1 import history_service_pb2 as svc

BURST = 32


def test_32_unauthenticated_60_mb_requests_cost_no_memory(
    server_factory: Callable[..., Any], credentials: Any, figures: Any
) -> None:
    tokens: Path = credentials.tokens
    server = server_factory("--auth-tokens", str(tokens), unix=False)
    body = svc.EstimateTokensRequest(history=chat(100_000, "y" * 590)).SerializeToString()
    assert len(body) >= 60_000_000
    idle = rss_kib(server.pid) // 1024

    def outcome_of(error: grpc.RpcError) -> str:
        status = rich_status(error)
        info = error_info(status) if status is not None else None
        return f"{error.code().name}:{info.reason if info else 'no ErrorInfo'}"

    started = time.monotonic()
    outcomes, peak = burst(server.address, body, BURST, outcome_of, server.pid, 0.02)
    elapsed = time.monotonic() - started
    figures.add("32 x 60 MB without a token", dict(outcomes))
    figures.add("idle / peak RSS MiB / burst s", f"{idle} / {peak} / {elapsed:.1f}")
    assert outcomes == {"UNAUTHENTICATED:ERROR_REASON_UNAUTHENTICATED": BURST}
    assert peak - idle <= 100
