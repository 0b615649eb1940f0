"""Engine and sidecar benchmarks: prints figures and ratios; never a pass/fail test.

- Scaling: pricing + token-budget trim at 1k, 10k and 100k rows; the per-row cost should stay flat
  (O(n)), so the 100k/10k time ratio should be near 10.
- Suffix sums vs naive: the engine's one-pass cut search against re-estimating the kept suffix for
  every candidate turn (what the spec's formula reads like, O(n x k)).
- Round trip: TrimHistory through a real sidecar on loopback for a 10k-row history.
"""

from __future__ import annotations

import statistics
import time

from harness import CRUMB, best_of, naive_cut, turnkeeper_server
from turnkeeper.core.trimming import plan_token_budget
from turnkeeper.core.working import WorkingHistory
from turnkeeper.v1 import history_pb2 as h


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

    server = turnkeeper_server("turnkeeper", "--log-level", "WARNING")
    try:
        options = [
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20),
        ]
        with grpc.insecure_channel(server.address, options=options) as channel:
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
        server.stop()


if __name__ == "__main__":
    main()
