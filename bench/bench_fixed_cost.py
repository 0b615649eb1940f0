"""A call's fixed cost (issue 19 item 1): small calls against the suffix floor, rate and server CPU.

Prints figures, never pass/fail. Contenders: the suffix floor (bench/floor_server.py) and
turnkeeper with its default flags (access log at INFO, metrics, admission; native engine), plus,
when `BENCH_BASELINE` names another checkout's `service/` directory, turnkeeper from there (to
measure a change before/after in one interleaved run). Workloads: the 20-row TrimHistory of
`harness.workload`, and a 20-row PrepareModelCall (profiles and a caller; the floor does not
serve it). Each measurement is a closed loop of 1 or 16 calls in flight for `SECONDS`, contenders
in rotating order, round after round; medians. Two figures: requests/s (noisy on a shared
machine) and the server process's CPU time per call (utime + stime from /proc, all threads: what
the call costs the server, much less sensitive to what else the machine runs).
`BENCH_QUICK=1` runs fewer, shorter rounds.
"""

from __future__ import annotations

import os
import statistics

from harness import (
    PREPARE,
    QUICK,
    TRIM,
    Server,
    closed_loop,
    floor,
    keep_of,
    prepare_request,
    trim_request,
    turnkeeper_server,
    workload,
)

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3" if QUICK else "5"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "0.8" if QUICK else "1.5"))


def loop(
    server: Server, method: str, raw: bytes, metadata: object, in_flight: int
) -> tuple[float, float]:
    """(calls/s, server CPU µs per call) of a closed loop of `in_flight` calls."""
    done, elapsed, cpu = closed_loop(server, method, raw, metadata, in_flight, SECONDS)
    return done / elapsed, cpu / done * 1e6


def turnkeeper_at(name: str, service: str | None) -> Server:
    return turnkeeper_server(name, env={"PYTHONPATH": service} if service else {})


def main() -> None:
    servers = [floor("suffix"), turnkeeper_at("turnkeeper", None)]
    baseline = os.environ.get("BENCH_BASELINE")
    if baseline:
        servers.append(turnkeeper_at("baseline", baseline))
    try:
        run(servers)
    finally:
        for server in servers:
            server.stop()


def run(servers: list[Server]) -> None:
    floor, tk = servers[0], servers[1]
    trim = trim_request(workload(20))
    keep = keep_of(tk, trim)
    prepare = prepare_request()
    print(
        f"== a small call's fixed cost: closed loops of {SECONDS} s, {ROUNDS} interleaved rounds, "
        f"medians; load average {os.getloadavg()[0]:.2f} at the start"
    )
    for in_flight in (1, 16):
        for label, method, raw, contenders in (
            ("20-row TrimHistory", TRIM, trim, servers),
            ("20-row PrepareModelCall", PREPARE, prepare, servers[1:]),
        ):
            rates: dict[str, list[float]] = {s.name: [] for s in contenders}
            cpus: dict[str, list[float]] = {s.name: [] for s in contenders}
            for r in range(ROUNDS):
                order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
                for s in order:
                    rate, cpu = loop(s, method, raw, s.metadata(keep), in_flight)
                    rates[s.name].append(rate)
                    cpus[s.name].append(cpu)
            parts = []
            for s in contenders:
                rate = statistics.median(rates[s.name])
                cpu = statistics.median(cpus[s.name])
                share = (
                    f" = {rate / statistics.median(rates[floor.name]) * 100:.0f} % of the floor"
                    if floor in contenders and s is not floor
                    else ""
                )
                parts.append(f"{s.name} {rate:.0f}/s{share}, {cpu:.0f} µs CPU/call")
            print(f"{label}, {in_flight:>2} in flight: " + "; ".join(parts))
    print(f"   load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
