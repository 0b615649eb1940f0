"""Closed-loop load against a running server: N clients over a few channels, mixed call sizes.

Prints calls/s, refusals and latency percentiles per kind of call (figures, never pass/fail).
Clients are spread over `--processes` client processes, so the load generator itself is not the
bottleneck, and over one channel per `--clients-per-channel` clients (as a fleet of runtimes has
many connections). The mix: of every ten calls, one 1k-row TrimHistory, one ResolveBudget and
eight 20-row TrimHistory; `--heavy N` adds N clients sending 10k-row EstimateTokens.

    python bench/load_probe.py --address 127.0.0.1:50051 --clients 192 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sidecar import OPTIONS, RESOLVE, TRIM, trim_request, workload
from turnkeeper.v1 import history_service_pb2 as svc

ESTIMATE = "/turnkeeper.v1.HistoryService/EstimateTokens"
MIXES = {
    "mixed": ["medium", "resolve", *["small"] * 8],
    "small": ["small"],
    "resolve": ["resolve"],
}


def _requests() -> dict[str, tuple[str, bytes]]:
    resolve = svc.ResolveBudgetRequest()
    return {
        "small": (TRIM, trim_request(workload(20))),
        "medium": (TRIM, trim_request(workload(1_000))),
        "resolve": (RESOLVE, resolve.SerializeToString()),
        "heavy": (
            ESTIMATE,
            svc.EstimateTokensRequest(history=workload(10_000)).SerializeToString(),
        ),
    }


async def _run(
    address: str,
    clients: int,
    heavy: int,
    per_channel: int,
    seconds: float,
    deadline: float,
    mix_name: str,
) -> dict[str, list[tuple[float, str]]]:
    requests = _requests()
    channels = [
        # One connection per channel, as separate runtimes would have.
        grpc.aio.insecure_channel(
            address, options=[*OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
        )
        for _ in range(max(1, (clients + heavy + per_channel - 1) // per_channel))
    ]
    results: dict[str, list[tuple[float, str]]] = {kind: [] for kind in requests}
    end = time.perf_counter() + seconds
    first_errors: dict[str, str] = {}

    async def client(k: int, kinds: list[str]) -> None:
        channel = channels[k % len(channels)]
        calls = {kind: channel.unary_unary(requests[kind][0]) for kind in set(kinds)}
        i = k
        while time.perf_counter() < end:
            kind = kinds[i % len(kinds)]
            i += 1
            start = time.perf_counter()
            try:
                await calls[kind](requests[kind][1], timeout=deadline)
                code = "OK"
            except grpc.aio.AioRpcError as error:
                code = error.code().name
                if code not in first_errors:
                    first_errors[code] = (
                        f"{error.details()} (after {time.perf_counter() - start:.2f} s)"
                    )
            results[kind].append((time.perf_counter() - start, code))

    mix = MIXES[mix_name]
    await asyncio.gather(
        *(client(k, mix) for k in range(clients)),
        *(client(clients + k, ["heavy"]) for k in range(heavy)),
    )
    for channel in channels:
        await channel.close()
    for code, detail in first_errors.items():
        print(f"first {code}: {detail}", file=sys.stderr)
    return results


def _worker(
    args: tuple[str, int, int, int, float, float, str],
) -> dict[str, list[tuple[float, str]]]:
    return asyncio.run(_run(*args))


def measure(
    address: str,
    clients: int,
    heavy: int = 0,
    seconds: float = 10.0,
    mix: str = "mixed",
    processes: int = 2,
    per_channel: int = 16,
    deadline: float = 30.0,
) -> dict[str, object]:
    """Runs the load in `processes` client processes and returns the merged summary."""
    jobs = [
        (
            address,
            clients // processes + (p < clients % processes),
            heavy // processes + (p < heavy % processes),
            per_channel,
            seconds,
            deadline,
            mix,
        )
        for p in range(processes)
    ]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        parts = pool.map(_worker, jobs)
    merged: dict[str, list[tuple[float, str]]] = {}
    for part in parts:
        for kind, rows in part.items():
            merged.setdefault(kind, []).extend(rows)
    return summarize(merged, seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--clients", type=int, default=192)
    parser.add_argument("--heavy", type=int, default=0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--clients-per-channel", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--deadline", type=float, default=30.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--mix", choices=sorted(MIXES), default="mixed")
    args = parser.parse_args()
    report = measure(
        args.address,
        args.clients,
        args.heavy,
        args.seconds,
        args.mix,
        args.processes,
        args.clients_per_channel,
        args.deadline,
    )
    print(json.dumps(report) if args.json else format_report(report))


def summarize(results: dict[str, list[tuple[float, str]]], seconds: float) -> dict[str, object]:
    out: dict[str, object] = {}
    total = 0
    for kind, rows in results.items():
        if not rows:
            continue
        total += len(rows)
        times = sorted(t for t, _ in rows)
        codes: dict[str, int] = {}
        for _, code in rows:
            codes[code] = codes.get(code, 0) + 1
        out[kind] = {
            "calls": len(rows),
            "p50_ms": statistics.median(times) * 1e3,
            "p99_ms": times[max(0, int(len(times) * 0.99) - 1)] * 1e3,
            "max_ms": times[-1] * 1e3,
            "codes": codes,
        }
    out["calls_per_s"] = total / seconds
    return out


def format_report(report: dict[str, object]) -> str:
    lines = [f"calls/s {report['calls_per_s']:.0f}"]
    for kind, row in report.items():
        if isinstance(row, dict):
            lines.append(
                f"  {kind:>8}: {row['calls']:6d} calls, p50 {row['p50_ms']:7.1f} ms, "
                f"p99 {row['p99_ms']:7.1f} ms, max {row['max_ms']:7.1f} ms, {row['codes']}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
