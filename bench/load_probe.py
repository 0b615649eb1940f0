"""Closed-loop load against a running server: N clients over a few channels, mixed call sizes.

Prints calls/s, refusals and latency percentiles per kind of call (figures, never pass/fail).
Clients are spread over `--processes` client processes, so the load generator itself is not the
bottleneck, and over one channel per `--clients-per-channel` clients (as a fleet of runtimes has
many connections). The mix: of every ten calls, one 1k-row TrimHistory, one ResolveBudget and
eight 20-row TrimHistory; `--heavy N` adds N clients sending 10k-row EstimateTokens.

Clients honour RetryInfo as turnkeeper's clients do (tests/conformance/client-defaults.json: a
refused call waits the delay and is tried again, at most maxAttempts times in all); every attempt
is counted. `--no-retry` sends the next call at once instead.

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
from google.rpc import error_details_pb2, status_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sidecar import OPTIONS, RESOLVE, TRIM, trim_request, workload
from turnkeeper.v1 import history_service_pb2 as svc

ESTIMATE = "/turnkeeper.v1.HistoryService/EstimateTokens"
RETRY = json.loads(
    (Path(__file__).resolve().parent.parent / "tests/conformance/client-defaults.json").read_text()
)["retry"]
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


def retry_delay(error: grpc.aio.AioRpcError) -> float | None:
    """The RetryInfo delay of a retryable error, if it has one."""
    if error.code().name not in RETRY["retryableCodes"]:
        return None
    raw = dict(error.trailing_metadata() or ()).get("grpc-status-details-bin", b"")
    status = status_pb2.Status.FromString(raw if isinstance(raw, bytes) else raw.encode())
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            delay: float = info.retry_delay.ToTimedelta().total_seconds()
            return delay if delay <= RETRY["maxDelaySeconds"] else None
    return None


async def _run(
    address: str,
    clients: int,
    heavy: int,
    per_channel: int,
    seconds: float,
    deadline: float,
    mix_name: str,
    retry: bool = True,
    warmup: float = 0.0,
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
    begin = time.perf_counter() + warmup  # calls started before it are not counted
    end = begin + seconds
    first_errors: dict[str, str] = {}

    async def client(k: int, kinds: list[str]) -> None:
        channel = channels[k % len(channels)]
        calls = {kind: channel.unary_unary(requests[kind][0]) for kind in set(kinds)}
        i = k
        attempt = 0
        while time.perf_counter() < end:
            kind = kinds[i % len(kinds)]
            start = time.perf_counter()
            delay = None
            try:
                await calls[kind](requests[kind][1], timeout=deadline)
                code = "OK"
            except grpc.aio.AioRpcError as error:
                code = error.code().name
                if code not in first_errors:
                    first_errors[code] = (
                        f"{error.details()} (after {time.perf_counter() - start:.2f} s)"
                    )
                delay = retry_delay(error) if retry else None
            if start >= begin:
                results[kind].append((time.perf_counter() - start, code))
            attempt += 1
            if delay is not None and attempt < RETRY["maxAttempts"]:
                await asyncio.sleep(delay)  # the same call again
                continue
            attempt = 0
            i += 1

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
    args: tuple[str, int, int, int, float, float, str, bool, float],
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
    retry: bool = True,
    probe: int = 0,
    warmup: float = 0.0,
) -> dict[str, object]:
    """Runs the load in `processes` client processes and returns the merged summary; calls
    started in the first `warmup` seconds are not counted. `probe`: so many of the `clients`
    send 20-row TrimHistory calls from a process of their own instead (kind "probe"), where
    their latency carries little of the load generator's own queueing: what the loaded clients
    measure beyond it is spent in their processes, not in the server."""
    clients -= probe
    jobs = [
        (
            address,
            clients // processes + (p < clients % processes),
            heavy // processes + (p < heavy % processes),
            per_channel,
            seconds,
            deadline,
            mix,
            retry,
            warmup,
        )
        for p in range(processes)
    ]
    if probe:
        jobs.append((address, probe, 0, per_channel, seconds, deadline, "small", retry, warmup))
    with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
        parts = pool.map(_worker, jobs)
    merged: dict[str, list[tuple[float, str]]] = {}
    for p, part in enumerate(parts):
        for kind, rows in part.items():
            merged.setdefault("probe" if p == processes else kind, []).extend(rows)
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
    parser.add_argument("--no-retry", action="store_true", help="ignore RetryInfo")
    parser.add_argument(
        "--probe", type=int, default=0, help="of the clients, so many in a process of their own"
    )
    parser.add_argument("--warmup", type=float, default=0.0, help="seconds not counted first")
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
        not args.no_retry,
        args.probe,
        args.warmup,
    )
    print(json.dumps(report) if args.json else format_report(report))


def _percentiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50_ms": statistics.median(times) * 1e3,
        "p99_ms": times[max(0, int(len(times) * 0.99) - 1)] * 1e3,
        "max_ms": times[-1] * 1e3,
    }


def summarize(results: dict[str, list[tuple[float, str]]], seconds: float) -> dict[str, object]:
    """Per kind of call: attempts, their codes, and latency percentiles of the served (OK) ones
    and of the refused (RESOURCE_EXHAUSTED) ones."""
    out: dict[str, object] = {}
    total = served = refused = 0
    for kind, rows in results.items():
        if not rows:
            continue
        total += len(rows)
        codes: dict[str, int] = {}
        for _, code in rows:
            codes[code] = codes.get(code, 0) + 1
        served += codes.get("OK", 0)
        refused += codes.get("RESOURCE_EXHAUSTED", 0)
        row: dict[str, object] = {
            "calls": len(rows),
            "codes": codes,
            "mean_ms": statistics.fmean(t for t, _ in rows) * 1e3,
        }
        ok = [t for t, code in rows if code == "OK"]
        if ok:
            row["ok"] = _percentiles(ok)
        refusals = [t for t, code in rows if code == "RESOURCE_EXHAUSTED"]
        if refusals:
            row["refused"] = _percentiles(refusals)
        out[kind] = row
    out["calls_per_s"] = total / seconds
    out["served_per_s"] = served / seconds
    out["refused_share"] = refused / total if total else 0.0
    return out


def format_report(report: dict[str, object]) -> str:
    lines = [
        f"attempts/s {report['calls_per_s']:.0f}, served/s {report['served_per_s']:.0f}, "
        f"refused {report['refused_share']:.1%}"
    ]
    for kind, row in report.items():
        if isinstance(row, dict):
            text = f"  {kind:>8}: {row['calls']:6d} calls"
            for label, key in (("served", "ok"), ("refused", "refused")):
                if key in row:
                    p = row[key]
                    text += (
                        f", {label} p50 {p['p50_ms']:6.1f} p99 {p['p99_ms']:6.1f} "
                        f"max {p['max_ms']:6.1f} ms"
                    )
            lines.append(f"{text}, {row['codes']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
