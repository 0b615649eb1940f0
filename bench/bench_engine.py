"""Engine and sidecar benchmarks: prints figures and ratios; never a pass/fail test.

- Scaling: pricing + token-budget trim at 1k, 10k and 100k rows; the per-row cost should stay flat
  (O(n)), so the 100k/10k time ratio should be near 10.
- Suffix sums vs naive: the engine's one-pass cut search against re-estimating the kept suffix for
  every candidate turn (what the spec's formula reads like, O(n x k)).
- Round trip: TrimHistory through a real sidecar on loopback for a 10k-row history.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "service"))

from turnkeeper.core.rows import price, rows_of  # noqa: E402
from turnkeeper.core.trimming import layout, plan_token_budget  # noqa: E402
from turnkeeper.core.working import WorkingHistory, breadcrumb_cost  # noqa: E402
from turnkeeper.v1 import history_pb2 as h  # noqa: E402

CRUMB = breadcrumb_cost("[earlier turns omitted to fit the context window]")


def history(rows: int) -> h.History:
    messages = [h.ChatMessage(role=h.ROLE_SYSTEM, content="You are a careful agent." * 4)]
    n = 0
    while len(messages) < rows:
        cid = f"call-{n}"
        messages += [
            h.ChatMessage(role=h.ROLE_USER, content=f"question {n} " + "lorem ipsum " * 8),
            h.ChatMessage(
                role=h.ROLE_ASSISTANT,
                tool_calls=[h.ToolCall(id=cid, name="search", arguments='{"q": "x"}')],
            ),
            h.ChatMessage(role=h.ROLE_TOOL, tool_call_id=cid, content="result " * 30),
            h.ChatMessage(role=h.ROLE_ASSISTANT, content="answer " * 20),
        ]
        n += 1
    return h.History(chat=h.ChatHistory(messages=messages[:rows]))


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def naive_cut(hist: h.History, budget: int) -> int:
    """Re-prices P + crumb + B[bj:] for every candidate j: the O(n x k) reading of §9."""
    rows = rows_of(hist)
    lay = layout(rows)
    for j in range(1, lay.turns):
        kept = rows[: lay.prefix] + rows[lay.boundaries[j] :]
        if sum(price(kept).tokens) + CRUMB <= budget:
            return j
    return lay.turns - 1


def main() -> None:
    print("== engine scaling (pricing + token-budget trim to 25% of the estimate)")
    per_row: dict[int, float] = {}
    for size in (1_000, 10_000, 100_000):
        hist = history(size)

        def run(hist: h.History = hist) -> None:
            w = WorkingHistory.of(hist)
            plan = plan_token_budget(w.rows, w.pricing, w.pricing.total // 4, CRUMB)
            w.apply(plan, "x")

        seconds = best_of(run, repeat=3)
        per_row[size] = seconds / size
        print(f"{size:>8} rows: {seconds * 1e3:9.2f} ms  ({seconds / size * 1e6:.2f} us/row)")
    print(
        f"time ratio 100k/10k: {per_row[100_000] * 100_000 / (per_row[10_000] * 10_000):.1f}x (10x = linear)"
    )

    print(
        "\n== cut search: suffix sums vs naive re-estimation (2,000 rows, budget 10% of estimate)"
    )
    hist = history(2_000)
    w = WorkingHistory.of(hist)
    budget = w.pricing.total // 10
    fast = best_of(lambda: plan_token_budget(w.rows, w.pricing, budget, CRUMB))
    slow = best_of(lambda: naive_cut(hist, budget), repeat=1)
    assert (
        naive_cut(hist, budget) == plan_token_budget(w.rows, w.pricing, budget, CRUMB).dropped_turns
    )
    print(f"suffix sums {fast * 1e3:.2f} ms, naive {slow * 1e3:.1f} ms: {slow / fast:.0f}x faster")

    print("\n== TrimHistory round trip through a sidecar on loopback (10,000 rows)")
    round_trip(history(10_000))


def round_trip(hist: h.History) -> None:
    import grpc
    from turnkeeper.v1 import history_service_pb2 as svc
    from turnkeeper.v1 import history_service_pb2_grpc as rpc
    from turnkeeper.v1 import trim_pb2

    with tempfile.TemporaryDirectory() as tmp:
        ready = os.path.join(tmp, "ready.json")
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "turnkeeper.server",
                "--listen",
                "127.0.0.1:0",
                "--ready-file",
                ready,
                "--log-level",
                "WARNING",
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT / "service")},
        )
        try:
            for _ in range(200):
                if os.path.exists(ready):
                    break
                time.sleep(0.05)
            address = json.loads(Path(ready).read_text())["tcp"][0]
            options = [
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.max_receive_message_length", 64 << 20),
            ]
            with grpc.insecure_channel(address, options=options) as channel:
                stub = rpc.HistoryServiceStub(channel)
                request = svc.TrimHistoryRequest(
                    history=hist,
                    mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
                    explicit_limits=svc.ExplicitLimits(budget_tokens=20_000),
                )
                stub.TrimHistory(request)  # warm up
                samples = []
                for _ in range(20):
                    start = time.perf_counter()
                    stub.TrimHistory(request)
                    samples.append(time.perf_counter() - start)
            size = request.ByteSize()
            print(
                f"request {size / 1e6:.1f} MB: median {statistics.median(samples) * 1e3:.1f} ms, "
                f"p90 {sorted(samples)[int(len(samples) * 0.9)] * 1e3:.1f} ms over {len(samples)} calls"
            )
        finally:
            server.terminate()
            server.wait(timeout=15)


if __name__ == "__main__":
    main()
