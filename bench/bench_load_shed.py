"""Issue 19 item 4, load shedding: 192 closed-loop mixed clients against turnkeeper with its default
flags and with shedding off (--shed-queue-ms 0), interleaved round after round so machine noise
hits both alike; then 48 mixed clients, and 48 + 12 heavy, with default flags (they must see no
refusal). Clients honour RetryInfo as turnkeeper's clients do (harness.load, bench/load_probe.py's
load); calls started in the first second (192 clients arriving at once) are not counted. Prints figures (medians over
rounds) and the load average; never pass/fail. `BENCH_QUICK=1`: shorter.

Per contender: served calls/s and the refused share; 20-row calls' served p50/p99 and refusal
p50/p99 (a refusal comes when the server first sees the call, so its latency is how early it is);
the same for 4 of the clients that run in a process of their own ("probe": little of the load
generator's own queueing); and the server's own view of a call, from its metrics: the mean wait
before the server took it (turnkeeper_queue_wait_seconds over grpc_server_started) plus the mean
handling time (grpc_server_handling_seconds), against the mean latency the clients measured.
"""

from __future__ import annotations

import os
import re
import statistics
import threading
import time
import urllib.request

from harness import QUICK, Server, turnkeeper_server
from harness.load import measure as load

ROUNDS = 2 if QUICK else 3
SECONDS = 4.0 if QUICK else 6.0
WARMUP = 1.0
PROBE = 4
KINDS = ("small", "medium", "resolve", "heavy", "probe")
_SAMPLE = re.compile(r"^(\w+)(?:\{[^}]*\})? (\S+)$", re.M)
_SERVER = ("grpc_server_started_total", "grpc_server_handling_seconds_sum",
           "grpc_server_handling_seconds_count", "turnkeeper_queue_wait_seconds_total")  # fmt: skip


def server(*flags: str) -> Server:
    return turnkeeper_server(" ".join(flags) or "default flags", "--http", "127.0.0.1:0", *flags)


def server_totals(contender: Server) -> dict[str, float]:
    """The server's counters of calls started, handling time and queue wait (all methods)."""
    ops = contender.ready["http"]
    with urllib.request.urlopen(f"http://{ops}/metrics", timeout=10) as response:
        text = response.read().decode()
    totals = dict.fromkeys(_SERVER, 0.0)
    for name, value in _SAMPLE.findall(text):
        if name in totals:
            totals[name] += float(value)
    return totals


def _after_warmup(contender: Server, into: dict[str, float]) -> None:
    """The server's counters WARMUP seconds after the load's first call reached it, as the
    clients count from then on."""
    idle = server_totals(contender)["grpc_server_started_total"]
    while server_totals(contender)["grpc_server_started_total"] == idle:
        time.sleep(0.05)
    time.sleep(WARMUP)
    into.update(server_totals(contender))


def measure(contender: Server, clients: int, heavy: int = 0) -> dict[str, float]:
    """One round: the figures of the module docstring."""
    before: dict[str, float] = {}
    sampler = threading.Thread(target=_after_warmup, args=(contender, before))
    sampler.start()
    report = load(contender.address, clients, heavy, SECONDS, probe=PROBE, warmup=WARMUP)
    after = server_totals(contender)
    sampler.join()
    delta = {name: after[name] - before[name] for name in _SERVER}
    out = {
        "served/s": report["served_per_s"],
        "refused %": 100 * report["refused_share"],
    }
    attempts: list[tuple[int, float]] = []
    for kind in KINDS:
        row = report.get(kind)
        if not isinstance(row, dict):
            continue
        attempts.append((row["calls"], row["mean_ms"]))
        out[f"{kind} refused"] = row["codes"].get("RESOURCE_EXHAUSTED", 0)
        for label, key in (("served", "ok"), ("refused", "refused")):
            if key in row and kind in ("small", "probe", "heavy"):
                out[f"{kind} {label} p50 ms"] = row[key]["p50_ms"]
                out[f"{kind} {label} p99 ms"] = row[key]["p99_ms"]
    calls = delta["grpc_server_started_total"]
    if delta["turnkeeper_queue_wait_seconds_total"]:  # (not measured with shedding off)
        out["server wait ms"] = 1e3 * delta["turnkeeper_queue_wait_seconds_total"] / calls
    out["server handling ms"] = (
        1e3
        * delta["grpc_server_handling_seconds_sum"]
        / max(1.0, delta["grpc_server_handling_seconds_count"])
    )
    out["client mean ms"] = sum(n * mean for n, mean in attempts) / max(
        1, sum(n for n, _ in attempts)
    )
    return out


def show(name: str, rounds: list[dict[str, float]]) -> None:
    """Medians over the rounds, a line per kind of call (then the server's view)."""
    keys = [key for key in rounds[0] if all(key in r for r in rounds)]
    print(f"{name} (median of {len(rounds)}):")
    groups: dict[str, list[str]] = {}  # by kind of call; "" for the whole load and the server
    for key in keys:
        kind = key.split()[0]
        value = statistics.median(r[key] for r in rounds)
        groups.setdefault(kind if kind in KINDS else "", []).append(f"{key} {value:.1f}")
    for items in groups.values():
        print("  " + ", ".join(items))


def main() -> None:
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    contenders = {"shedding on (default)": server(), "shedding off": server("--shed-queue-ms", "0")}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    try:
        for round_ in range(ROUNDS):
            names = list(contenders) if round_ % 2 == 0 else list(reversed(contenders))
            for name in names:
                results[name].append(measure(contenders[name], 192))
        print(f"== 192 mixed clients ({PROBE} in a process of their own), interleaved")
        for name, rounds in results.items():
            show(name, rounds)
    finally:
        for contender in contenders.values():
            contender.stop()
    default = server()
    try:
        print("== default flags: ordinary load (no refusal expected)")
        for clients, heavy in ((48, 0), (48, 12)):
            rounds = [measure(default, clients, heavy) for _ in range(max(1, ROUNDS - 1))]
            show(f"{clients} mixed + {heavy} heavy", rounds)
    finally:
        default.stop()
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
