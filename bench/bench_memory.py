"""Issue 19 items 2 and 6: what one big request costs in memory, and what a wave of them does.

Prints figures, never pass/fail. Every measurement uses a fresh server (the high-water mark starts
at its idle size) with its default flags:

- peak RSS growth (VmHWM - VmRSS before the call) for one 100k-row TrimHistory (harness's
  workload), as a multiple of the request's size, next to the receive floor (a grpc.aio server
  that takes the request's bytes and answers nothing: gRPC's own receive path) and the suffix
  floor (the generated types parse the request); contenders in rotating order, medians;
- a wave of 16 concurrent 60 MB EstimateTokens: outcomes, RSS idle / peak / after, and the
  latency of 20-row calls sent meanwhile. tests/robustness/test_memory_cgroup.py runs the same
  wave under a 768 MiB cgroup limit.

`BENCH_QUICK=1` runs one round.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import Counter

import grpc
from harness import (
    ESTIMATE,
    OPTIONS,
    QUICK,
    Server,
    chat,
    floor,
    keep_of,
    trim_request,
    turnkeeper,
    workload,
)
from turnkeeper.server.allocator import QUIET_SECONDS
from turnkeeper.v1 import history_service_pb2 as svc

# turnkeeper hands freed memory back QUIET_SECONDS after the last big call.
SETTLE_SECONDS = QUIET_SECONDS + 1.0

ROUNDS = 1 if QUICK else 3
WAVE = 16


def contender(name: str) -> Server:
    return floor(name.split()[1]) if name.startswith("floor") else turnkeeper(name.split()[1])


def one_request(name: str, big: bytes, small: bytes, keep: int) -> tuple[float, float]:
    """Peak growth and RSS `SETTLE_SECONDS` after, both as multiples of the request's size."""
    server = contender(name)
    try:
        server.trim(small, 1)
        before = server.rss_kib("VmRSS")
        server.trim(big, keep)
        peak = server.rss_kib("VmHWM")
        time.sleep(SETTLE_SECONDS)
        after = server.rss_kib("VmRSS")
        return (peak - before) * 1024 / len(big), (after - before) * 1024 / len(big)
    finally:
        server.stop()


def peak_per_request() -> None:
    big = trim_request(workload(100_000))
    small = trim_request(workload(20))
    probe = turnkeeper("native")
    try:
        keep = keep_of(probe, big)
    finally:
        probe.stop()
    names = ["floor receive", "floor suffix", "turnkeeper native", "turnkeeper python"]
    print(f"== peak server RSS growth for one 100k-row TrimHistory ({len(big) / 1e6:.1f} MB)")
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(ROUNDS):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            figures[name].append(one_request(name, big, small, keep))
    for name in names:
        peak = statistics.median(p for p, _ in figures[name])
        after = statistics.median(a for _, a in figures[name])
        spread = ", ".join(f"{p:.2f}" for p, _ in figures[name])
        print(
            f"{name:>18}: peak +{peak:.2f}x the request ({spread}); "
            f"{SETTLE_SECONDS:.0f} s after +{after:.2f}x"
        )


def wave() -> None:
    body = svc.EstimateTokensRequest(history=chat(100_000, "y" * 590)).SerializeToString()
    small = svc.EstimateTokensRequest(history=chat(20, "hello")).SerializeToString()
    server = turnkeeper("native")
    outcomes: Counter[str] = Counter()
    latencies: list[float] = []
    lock = threading.Lock()
    done = threading.Event()

    def big_call() -> None:
        with grpc.insecure_channel(server.address, options=OPTIONS) as channel:
            try:
                big: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(ESTIMATE)
                big(body, timeout=120)
                outcome = "OK"
            except grpc.RpcError as error:
                outcome = error.code().name
        with lock:
            outcomes[outcome] += 1

    def small_calls() -> None:
        with grpc.insecure_channel(server.address) as channel:
            call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(ESTIMATE)
            while not done.is_set():
                started = time.perf_counter()
                try:
                    call(small, timeout=30)
                    latencies.append(time.perf_counter() - started)
                except grpc.RpcError:
                    pass
                time.sleep(0.02)

    try:
        channel = grpc.insecure_channel(server.address)
        first: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(ESTIMATE)
        first(small)
        channel.close()
        idle = server.rss_kib("VmRSS") // 1024
        prober = threading.Thread(target=small_calls)
        prober.start()
        threads = [threading.Thread(target=big_call) for _ in range(WAVE)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        peak = idle
        while any(t.is_alive() for t in threads):
            peak = max(peak, server.rss_kib("VmRSS") // 1024)
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        done.set()
        prober.join()
        time.sleep(SETTLE_SECONDS)
        after = server.rss_kib("VmRSS") // 1024
    finally:
        server.stop()
    print(
        f"\n== a wave of {WAVE} concurrent {len(body) / 1e6:.0f} MB EstimateTokens, default flags"
    )
    print(f"outcomes {dict(outcomes)} in {elapsed:.1f} s")
    print(f"RSS MiB: idle {idle}, peak {peak}, {SETTLE_SECONDS:.0f} s after {after}")
    if latencies:
        latencies.sort()
        p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)]
        print(
            f"20-row calls meanwhile: {len(latencies)}, p50 "
            f"{statistics.median(latencies) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms"
        )


def main() -> None:
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    peak_per_request()
    wave()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
