"""Closed loops of many clients in client processes of their own, against a running server.

`measure`: the mixed load of bench/load_probe.py (of every ten calls, one 1k-row TrimHistory, one
ResolveBudget and eight 20-row TrimHistory; heavy clients send 10k-row EstimateTokens), clients
honouring RetryInfo as turnkeeper's clients do (tests/conformance/client-defaults.json).
`method_loads`: the per-method loads of bench/method_wait_probe.py (and
tests/robustness/test_fair_waits.py): each client sends its own list of methods in turn.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from collections import Counter
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from turnkeeper.server.contract.methods import method_path
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2

from harness import ESTIMATE, OPTIONS, REPO, RESOLVE, TRIM, trim_request, workload

RETRY = json.loads((REPO / "tests/conformance/client-defaults.json").read_text())["retry"]
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
        calls: dict[str, grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = {
            kind: channel.unary_unary(requests[kind][0]) for kind in set(kinds)
        }
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
) -> dict[str, Any]:
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


def _percentiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50_ms": statistics.median(times) * 1e3,
        "p99_ms": times[max(0, int(len(times) * 0.99) - 1)] * 1e3,
        "max_ms": times[-1] * 1e3,
    }


def summarize(results: dict[str, list[tuple[float, str]]], seconds: float) -> dict[str, Any]:
    """Per kind of call: attempts, their codes, and latency percentiles of the served (OK) ones
    and of the refused (RESOURCE_EXHAUSTED) ones."""
    out: dict[str, Any] = {}
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
        row: dict[str, Any] = {
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


def format_report(report: dict[str, Any]) -> str:
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


# ---- per-method loads -------------------------------------------------------------------------

METHODS = ("EstimateTokens", "TrimHistory", "PrepareModelCall", "ResolveBudget")
MIX = (
    ["EstimateTokens"] * 3 + ["TrimHistory"] * 3 + ["PrepareModelCall"] * 2 + ["ResolveBudget"] * 2
)
OTHERS_PER_METHOD = 4


def method_requests() -> dict[str, bytes]:
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


def method_plan(load: str, clients: int) -> list[list[str]]:
    """Each client's methods, sent in turn."""
    if load == "flood":
        others = [[m] for m in METHODS[1:] for _ in range(OTHERS_PER_METHOD)]
        return [["EstimateTokens"]] * clients + others
    return [[MIX[(k + i) % len(MIX)] for i in range(len(MIX))] for k in range(clients)]


def _method_client(address: str, plans: list[list[str]], seconds: float, out: Any) -> None:
    async def main() -> dict[str, tuple[list[float], int]]:
        raw = method_requests()
        channels = [grpc.aio.insecure_channel(address) for _ in range(max(1, len(plans) // 16))]
        for channel in channels:
            await channel.channel_ready()
        out.put("ready")
        results: dict[str, tuple[list[float], list[int]]] = {m: ([], [0]) for m in METHODS}
        failed: Counter[str] = Counter()
        end = time.perf_counter() + seconds

        async def one(k: int, methods: list[str]) -> None:
            channel = channels[k % len(channels)]
            calls: dict[str, grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = {
                m: channel.unary_unary(method_path(m)) for m in set(methods)
            }
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


def method_loads(
    address: str, plans: list[list[str]], seconds: float
) -> dict[str, tuple[list[float], int]]:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [
        context.Process(target=_method_client, args=(address, plans[p::2], seconds, out))
        for p in range(2)
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
