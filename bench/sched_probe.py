"""Where a loaded turnkeeper's wall time goes, per thread (issue 19 item 4): figures, never pass/fail.

Runs bench/load_probe.py's closed-loop mixed clients against turnkeeper servers started with the
given flag sets, interleaved round after round, and reads each server thread's
/proc/<pid>/task/<tid>/schedstat over the middle of the run: the share of wall time the thread
ran on a CPU, the share it was runnable but waiting for one (the run queue), and the rest
(sleeping: epoll, a futex, a condition). Also the machine's busy share (/proc/stat) and calls/s.
A thread that runs 0.5 of the time and waits 0.4 for a CPU is not idle: it is starved. The client
processes' CPU (the load generator shares the machine) is shown beside it.

    python bench/sched_probe.py --clients 192 --rounds 2 "" "--accept-ahead 1"
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness import cpu_seconds, machine_jiffies, turnkeeper_server
from harness.load import measure as load

LEAD_SECONDS = 4.0


def _threads(pid: int) -> dict[str, tuple[int, int]]:
    """Per thread group (the main thread is the event loop): ns on a CPU and ns runnable."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = "event loop" if task.name == str(pid) else (task / "comm").read_text().strip()
            ran, waited, _ = (int(v) for v in (task / "schedstat").read_text().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        out[name][0] += ran
        out[name][1] += waited
    return {name: (v[0], v[1]) for name, v in out.items()}


def _clients(servers: set[int]) -> dict[int, float]:
    """CPU seconds of this process's children that are not servers: the client processes."""
    out: dict[int, float] = {}
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in (int(p) for p in children.read_text().split()):
            if pid in servers:
                continue
            try:
                out[pid] = cpu_seconds(pid)
            except FileNotFoundError:
                continue
    return out


def measure(
    address: str, pid: int, servers: set[int], clients: int, heavy: int, seconds: float
) -> dict[str, float]:
    window: dict[str, Any] = {}

    def sample() -> None:
        time.sleep(LEAD_SECONDS)  # past the clients' start-up (spawn, imports, connections)
        window["start"] = (time.perf_counter(), _threads(pid), machine_jiffies(), _clients(servers))
        time.sleep(seconds)
        window["end"] = (time.perf_counter(), _threads(pid), machine_jiffies(), _clients(servers))

    sampler = threading.Thread(target=sample)
    sampler.start()
    report = load(address, clients, heavy, seconds + LEAD_SECONDS)
    sampler.join()
    (t0, threads0, machine0, clients0), (t1, threads1, machine1, clients1) = (
        window["start"],
        window["end"],
    )
    wall_ns = (t1 - t0) * 1e9
    out = {
        "served/s": report["served_per_s"],
        "refused %": 100 * report["refused_share"],
        "machine busy %": 100 * (machine1[0] - machine0[0]) / (machine1[1] - machine0[1]),
        "client processes cpu": sum(cpu - clients0.get(pid, cpu) for pid, cpu in clients1.items())
        / (t1 - t0),
    }
    for name, (ran, waited) in sorted(threads1.items()):
        ran0, waited0 = threads0.get(name, (0, 0))
        share = (ran - ran0) / wall_ns, (waited - waited0) / wall_ns
        if share[0] + share[1] >= 0.01:
            out[f"{name} ran"] = share[0]
            out[f"{name} waited"] = share[1]
    small = report.get("small")
    if isinstance(small, dict) and "ok" in small:
        out["small p50 ms"] = small["ok"]["p50_ms"]
        out["small p99 ms"] = small["ok"]["p99_ms"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=192)
    parser.add_argument("--heavy", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("flags", nargs="*", default=[""])
    args = parser.parse_args()
    servers = {
        flags or "default flags": turnkeeper_server(flags or "default flags", *flags.split())
        for flags in args.flags
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    try:
        for round_ in range(args.rounds):
            names = list(servers) if round_ % 2 == 0 else list(reversed(servers))
            for name in names:
                server = servers[name]
                figures = measure(
                    server.address,
                    server.process.pid,
                    {s.process.pid for s in servers.values()},
                    args.clients,
                    args.heavy,
                    args.seconds,
                )
                figures["load"] = os.getloadavg()[0]
                results[name].append(figures)
                print(
                    f"round {round_ + 1} {name}: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()),
                    flush=True,
                )
    finally:
        for server in servers.values():
            server.stop()
    for name, rounds in results.items():
        keys = [k for k in rounds[0] if all(k in r for r in rounds)]
        print(
            f"{name} (median of {len(rounds)}): "
            + ", ".join(f"{k} {statistics.median(r[k] for r in rounds):.2f}" for k in keys)
        )


if __name__ == "__main__":
    main()
