"""How long each method's calls wait beside the others' (issue 26 item 5): figures, never pass/fail.

Closed-loop clients (in two client processes) against turnkeeper servers started with the given
flag sets, interleaved round after round. `--load flood`: `--clients` clients send 20-row
EstimateTokens and 4 more send each of the other per-call methods (20-row TrimHistory, 20-row
PrepareModelCall, ResolveBudget); `--load mixed`: `--clients` clients each send one method in
turn, 30 % EstimateTokens, 30 % TrimHistory, 20 % PrepareModelCall, 20 % ResolveBudget. Per method:
its cost (p50 of one client alone), and under the load the served calls' p50 / p99 and their p50
over the cost, and the share refused (RESOURCE_EXHAUSTED; the client then waits its RetryInfo
delay, as turnkeeper's clients do, and sends its next call).

    python bench/method_wait_probe.py --load flood --clients 96 "--accept-ahead 0" ""
    python bench/method_wait_probe.py --load mixed --clients 192 "--accept-ahead 0" ""
"""

from __future__ import annotations

import argparse
import statistics

from harness import quantile, turnkeeper_server
from harness.load import METHODS, method_loads, method_plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--load", choices=("flood", "mixed"), default="flood")
    parser.add_argument("--clients", type=int, default=96)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("flags", nargs="*", default=[""])
    args = parser.parse_args()
    servers = {
        flags or "default flags": turnkeeper_server(flags or "default flags", *flags.split())
        for flags in args.flags
    }
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    try:
        for round_ in range(args.rounds):
            names = list(servers) if round_ % 2 == 0 else list(reversed(servers))
            for name in names:
                address = servers[name].address
                alone = method_loads(address, [[m] for m in METHODS], 2.0)
                loaded = method_loads(address, method_plan(args.load, args.clients), args.seconds)
                row: dict[str, float] = {}
                for method in METHODS:
                    cost = statistics.median(alone[method][0])
                    latencies, refused = loaded[method]
                    row[f"{method} cost ms"] = 1e3 * cost
                    row[f"{method} p50 ms"] = 1e3 * quantile(latencies, 0.5)
                    row[f"{method} p99 ms"] = 1e3 * quantile(latencies, 0.99)
                    row[f"{method} p50/cost"] = quantile(latencies, 0.5) / cost
                    row[f"{method} refused %"] = 100 * refused / max(1, refused + len(latencies))
                figures[name].append(row)
                print(f"round {round_ + 1} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)  # fmt: skip
    finally:
        for server in servers.values():
            server.stop()
    print(f"== {args.load}, {args.clients} clients, medians of {args.rounds} rounds")
    for name, rows in figures.items():
        print(f"{name}:")
        for method in METHODS:
            keys = [k for k in rows[0] if k.startswith(method + " ")]
            print(
                "  " + ", ".join(f"{k} {statistics.median(r[k] for r in rows):.1f}" for k in keys)
            )


if __name__ == "__main__":
    main()
