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
import asyncio
import multiprocessing
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sidecar import Server, trim_request, workload
from load_probe import retry_delay

SERVICE = "/turnkeeper.v1.HistoryService/"
METHODS = ("EstimateTokens", "TrimHistory", "PrepareModelCall", "ResolveBudget")
MIX = (
    ["EstimateTokens"] * 3 + ["TrimHistory"] * 3 + ["PrepareModelCall"] * 2 + ["ResolveBudget"] * 2
)
OTHERS_PER_METHOD = 4


def requests() -> dict[str, bytes]:
    history = workload(20)
    profiles = profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(max_context_tokens=100_000, default_provider="p"),
        providers=[profile_pb2.ProviderProfile(alias="p", context_window=128_000)],
    )
    return {
        "EstimateTokens": svc.EstimateTokensRequest(history=history).SerializeToString(),
        "TrimHistory": trim_request(history),
        "PrepareModelCall": svc.PrepareModelCallRequest(
            history=h.History(chat=history.chat), profiles=profiles
        ).SerializeToString(),
        "ResolveBudget": svc.ResolveBudgetRequest().SerializeToString(),
    }


def plan(load: str, clients: int) -> list[list[str]]:
    """Each client's methods, sent in turn."""
    if load == "flood":
        others = [[m] for m in METHODS[1:] for _ in range(OTHERS_PER_METHOD)]
        return [["EstimateTokens"]] * clients + others
    return [[MIX[(k + i) % len(MIX)] for i in range(len(MIX))] for k in range(clients)]


def _client(address: str, plans: list[list[str]], seconds: float, out: Any) -> None:
    async def main() -> dict[str, tuple[list[float], int]]:
        raw = requests()
        channels = [grpc.aio.insecure_channel(address) for _ in range(max(1, len(plans) // 16))]
        for channel in channels:
            await channel.channel_ready()
        out.put("ready")
        results: dict[str, tuple[list[float], list[int]]] = {m: ([], [0]) for m in METHODS}
        failed: Counter[str] = Counter()
        end = time.perf_counter() + seconds

        async def one(k: int, methods: list[str]) -> None:
            channel = channels[k % len(channels)]
            calls = {m: channel.unary_unary(SERVICE + m) for m in set(methods)}
            i = 0
            while time.perf_counter() < end:
                method = methods[i % len(methods)]
                i += 1
                start = time.perf_counter()
                try:
                    await calls[method](raw[method], timeout=30)
                except grpc.aio.AioRpcError as error:
                    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        failed[f"{method} {error.code().name} {error.details()}"] += 1
                        continue
                    results[method][1][0] += 1
                    await asyncio.sleep(retry_delay(error) or 0.0)
                    continue
                results[method][0].append(time.perf_counter() - start)

        await asyncio.gather(*(one(k, p) for k, p in enumerate(plans)))
        if failed:
            print(f"failed calls: {dict(failed)}", flush=True)
        return {m: (lat, refused[0]) for m, (lat, refused) in results.items()}

    out.put(asyncio.run(main()))


def run(address: str, plans: list[list[str]], seconds: float) -> dict[str, tuple[list[float], int]]:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [
        context.Process(target=_client, args=(address, plans[p::2], seconds, out)) for p in range(2)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        assert out.get() == "ready"
    merged: dict[str, tuple[list[float], int]] = {m: ([], 0) for m in METHODS}
    for _ in workers:
        for method, (latencies, refused) in out.get().items():
            merged[method] = (merged[method][0] + latencies, merged[method][1] + refused)
    for worker in workers:
        worker.join()
    return merged


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--load", choices=("flood", "mixed"), default="flood")
    parser.add_argument("--clients", type=int, default=96)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("flags", nargs="*", default=[""])
    args = parser.parse_args()
    servers = {
        flags or "default flags": Server(
            flags or "default flags",
            [sys.executable, "-m", "turnkeeper.server", "--listen", "127.0.0.1:0", *flags.split()],
        )
        for flags in args.flags
    }
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    try:
        for round_ in range(args.rounds):
            names = list(servers) if round_ % 2 == 0 else list(reversed(servers))
            for name in names:
                address = servers[name].address
                alone = run(address, [[m] for m in METHODS], 2.0)
                loaded = run(address, plan(args.load, args.clients), args.seconds)
                row: dict[str, float] = {}
                for method in METHODS:
                    cost = statistics.median(alone[method][0])
                    latencies, refused = loaded[method]
                    row[f"{method} cost ms"] = 1e3 * cost
                    row[f"{method} p50 ms"] = 1e3 * percentile(latencies, 0.5)
                    row[f"{method} p99 ms"] = 1e3 * percentile(latencies, 0.99)
                    row[f"{method} p50/cost"] = percentile(latencies, 0.5) / cost
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
