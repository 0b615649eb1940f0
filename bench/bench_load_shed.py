"""Issue 19 item 4, load shedding: 192 closed-loop mixed clients against turnkeeper with its default
flags and with shedding off (--shed-queue-ms 0), interleaved round after round so machine noise
hits both alike; then 48 mixed clients, and 48 + 12 heavy, with default flags (they must see no
refusal). Clients honour RetryInfo as turnkeeper's clients do (bench/load_probe.py). Prints
figures (medians over rounds) and the load average; never pass/fail. `BENCH_QUICK=1`: shorter.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load_probe
from bench_sidecar import QUICK, Server

ROUNDS = 2 if QUICK else 3
SECONDS = 4.0 if QUICK else 8.0
KINDS = ("small", "medium", "resolve", "heavy")


def server(*flags: str) -> Server:
    argv = [sys.executable, "-m", "turnkeeper.server", "--listen", "127.0.0.1:0", *flags]
    return Server(" ".join(flags) or "default flags", argv)


def figures(report: dict[str, Any]) -> dict[str, float]:
    """The numbers one round gives: calls/s, refusal share, and per kind served/refused p50/p99."""
    out = {
        "attempts/s": report["calls_per_s"],
        "served/s": report["served_per_s"],
        "refused %": 100 * report["refused_share"],
    }
    for kind in KINDS:
        row = report.get(kind)
        if not isinstance(row, dict):
            continue
        out[f"{kind} refused"] = row["codes"].get("RESOURCE_EXHAUSTED", 0)
        for label, key in (("served", "ok"), ("refused", "refused")):
            if key in row:
                out[f"{kind} {label} p50 ms"] = row[key]["p50_ms"]
                out[f"{kind} {label} p99 ms"] = row[key]["p99_ms"]
    return out


def show(name: str, rounds: list[dict[str, float]]) -> None:
    keys = [key for key in rounds[0] if all(key in r for r in rounds)]
    print(f"{name} (median of {len(rounds)}):")
    print(
        "  " + ", ".join(f"{key} {statistics.median(r[key] for r in rounds):.1f}" for key in keys)
    )


def main() -> None:
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    contenders = {"shedding on (default)": server(), "shedding off": server("--shed-queue-ms", "0")}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    try:
        for round_ in range(ROUNDS):
            names = list(contenders) if round_ % 2 == 0 else list(reversed(contenders))
            for name in names:
                report = load_probe.measure(contenders[name].address, 192, 0, SECONDS)
                results[name].append(figures(report))
        print("== 192 mixed clients, interleaved")
        for name, rounds in results.items():
            show(name, rounds)
    finally:
        for contender in contenders.values():
            contender.stop()
    default = server()
    try:
        print("== default flags: ordinary load (no refusal expected)")
        for clients, heavy in ((48, 0), (48, 12)):
            rounds = [
                figures(load_probe.measure(default.address, clients, heavy, SECONDS))
                for _ in range(max(1, ROUNDS - 1))
            ]
            show(f"{clients} mixed + {heavy} heavy", rounds)
    finally:
        default.stop()
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
