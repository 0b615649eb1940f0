"""The issue 8 / issue 19 table: turnkeeper on each engine against floor servers and LangChain.

Prints figures and ratios; never a pass/fail test. Workload: a seeded synthetic tool-heavy history
(a ~1,500-character system row; turns of a ~200-character user row, 0-4 tool exchanges with
~90-character JSON arguments and ~800-character results, a ~400-character reply), at 20, 1k, 10k
and 100k rows, trimmed to a budget of 25 % of its estimate. Turnkeeper runs with its default flags.
The floors (bench/floor_server.py) parse the request with the generated types and return the rows
turnkeeper keeps, told where to cut in metadata. Contenders run in rotating order, round after
round, so machine noise hits them alike; the closed-loop load sections use bench/load_probe.py's
load (harness.load).
`BENCH_QUICK=1` runs fewer rounds.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import grpc
from harness import (
    OPTIONS,
    QUICK,
    TRIM,
    Server,
    closed_loop,
    floor,
    keep_of,
    naive_cut,
    timed,
    trim_request,
    turnkeeper,
    workload,
)
from harness.load import format_report, measure
from turnkeeper.core.working import WorkingHistory
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import trim_pb2

SIZES = (1_000, 10_000, 100_000)
ROUNDS = {1_000: 9, 10_000: 5, 100_000: 3} if not QUICK else {1_000: 3, 10_000: 2, 100_000: 1}


def client_costs(history: h.History, response: bytes) -> tuple[float, float]:
    """The typed client's own share of a round trip, ms: serializing the request, parsing the
    response (medians)."""
    request = svc.TrimHistoryRequest(
        history=history,
        mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
        explicit_limits=svc.ExplicitLimits(budget_tokens=1),
    )
    out = [timed(request.SerializeToString) for _ in range(5)]
    back = [timed(lambda: svc.TrimHistoryResponse.FromString(response)) for _ in range(5)]
    return statistics.median(out) * 1e3, statistics.median(back) * 1e3


def langchain_trim(history: h.History) -> Callable[[], object]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.messages.utils import count_tokens_approximately, trim_messages

    messages: list[Any] = []
    for m in history.chat.messages:
        if m.role == h.ROLE_SYSTEM:
            messages.append(SystemMessage(m.content))
        elif m.role == h.ROLE_USER:
            messages.append(HumanMessage(m.content))
        elif m.role == h.ROLE_TOOL:
            messages.append(ToolMessage(m.content, tool_call_id=m.tool_call_id))
        else:
            calls = [
                {"id": c.id, "name": c.name, "args": json.loads(c.arguments)} for c in m.tool_calls
            ]
            messages.append(AIMessage(m.content, tool_calls=calls))
    budget = count_tokens_approximately(messages) // 4

    def run() -> object:
        return trim_messages(
            messages,
            max_tokens=budget,
            token_counter=count_tokens_approximately,
            strategy="last",
            start_on="human",
            include_system=True,
        )

    return run


def small_rate(server: Server, raw: bytes, keep: int, in_flight: int, seconds: float) -> float:
    done, elapsed, _ = closed_loop(server, TRIM, raw, server.metadata(keep), in_flight, seconds)
    return done / elapsed


def latency_under_big_calls(server: Server, big: bytes, samples: int) -> tuple[float, float]:
    stop = threading.Event()

    def hammer() -> None:
        with grpc.insecure_channel(server.address, options=OPTIONS) as channel:
            call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(TRIM)
            while not stop.is_set():
                call(big, metadata=server.metadata(1))

    thread = threading.Thread(target=hammer)
    thread.start()
    time.sleep(0.3)
    times = sorted(timed(lambda: server.resolve(b"")) for _ in range(samples))
    stop.set()
    thread.join()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main() -> None:
    servers = [floor("echo"), floor("suffix"), turnkeeper("native"), turnkeeper("python")]
    echo, suffix_floor, native, python = servers
    try:
        table(servers, echo, suffix_floor, native, python)
    finally:
        for server in servers:
            server.stop()


def table(
    servers: list[Server], echo: Server, floor_: Server, native: Server, python: Server
) -> None:
    print("== TrimHistory round trip, median ms (interleaved rounds); the floors return the rows")
    print("   turnkeeper keeps (`keep` in metadata); client ms: the typed client's own share")
    print(
        f"{'rows':>8} {'MB':>6} "
        + " ".join(f"{s.name:>18}" for s in servers)
        + f" {'LangChain':>10} {'naive':>8} {'client ser/parse':>17}"
    )
    medians: dict[int, dict[str, float]] = {}
    keeps: dict[int, int] = {}
    for size in SIZES:
        history = workload(size)
        raw = trim_request(history)
        keep = keeps[size] = keep_of(native, raw)
        lc = langchain_trim(history)
        times: dict[str, list[float]] = {s.name: [] for s in servers}
        times["LangChain"] = []
        for server in servers:
            server.trim(raw, keep)  # warm-up
        for r in range(ROUNDS[size]):
            order = servers[r % len(servers) :] + servers[: r % len(servers)]
            for server in order:
                times[server.name].append(timed(partial(server.trim, raw, keep)))
            times["LangChain"].append(timed(lc))
        med = {name: statistics.median(v) * 1e3 for name, v in times.items()}
        naive = "-"
        if size <= 10_000:
            w = WorkingHistory.of(history)
            budget = w.pricing.total // 4
            naive = f"{timed(lambda: naive_cut(history, budget)) * 1e3:.0f}"  # noqa: B023 (now)
        serialize, parse = client_costs(history, native.trim(raw, keep))
        medians[size] = med
        print(
            f"{size:>8} {len(raw) / 1e6:6.1f} "
            + " ".join(f"{med[s.name]:18.1f}" for s in servers)
            + f" {med['LangChain']:10.1f} {naive:>8} {serialize:8.1f}/{parse:.1f}"
        )
    print("\n== ratios (turnkeeper / contender)")
    for size in SIZES:
        med = medians[size]
        for engine in ("turnkeeper native", "turnkeeper python"):
            print(
                f"{size:>8} {engine:>18}: / suffix floor {med[engine] / med['floor suffix']:.2f}x, "
                f"/ echo floor {med[engine] / med['floor echo']:.2f}x, "
                f"/ LangChain {med[engine] / med['LangChain']:.2f}x"
            )

    small = trim_request(workload(20))
    small_keep = keep_of(native, small)
    print("\n== 20-row TrimHistory, requests/s (median of three interleaved runs)")
    for in_flight in (1, 16):
        rates: dict[str, list[float]] = {s.name: [] for s in (floor_, native, python)}
        for r in range(3):
            order = [floor_, native, python] if r % 2 == 0 else [python, native, floor_]
            for s in order:
                rates[s.name].append(
                    small_rate(s, small, small_keep, in_flight, 0.7 if QUICK else 1.5)
                )
        rate = {name: statistics.median(v) for name, v in rates.items()}
        print(
            f"{in_flight:>2} in flight: "
            + ", ".join(f"{name} {value:.0f}" for name, value in rate.items())
            + f"; native {rate[native.name] / rate[floor_.name] * 100:.0f} % of the floor, "
            f"python {rate[python.name] / rate[floor_.name] * 100:.0f} %"
        )

    big = trim_request(workload(100_000))
    # Peak RSS for one 100k-row request: bench_memory.py, with the receive floor beside it.
    print("\n== ResolveBudget latency while 100k-row TrimHistory calls run back to back")
    for server in (native, python):
        p50, p99 = latency_under_big_calls(server, big, 100 if QUICK else 300)
        print(f"{server.name:>18}: p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms")

    seconds = 3.0 if QUICK else 8.0
    print(
        "\n== closed-loop load on turnkeeper native, default flags (bench/load_probe.py: of ten "
        "calls, eight 20-row and one 1k-row TrimHistory and one ResolveBudget; heavy: clients "
        "sending 10k-row EstimateTokens)"
    )
    for clients, heavy in ((48, 0), (48, 12), (192, 0)):
        report = measure(native.address, clients, heavy, seconds)
        print(f"{clients} mixed clients + {heavy} heavy: {format_report(report)}")


if __name__ == "__main__":
    main()
