"""Issue 19 item 5: what 1,000 idle TrimEvents subscribers add to back-to-back trims.

Prints figures, never pass/fail. One client sends 100-row agent-path TrimHistory calls back to
back (each as soon as the previous answer arrived), first with no subscriber, then with 1,000
subscribers (every one receiving every event, in another process, over 12 connections), round
after round. For each run: p50/p99 of the round trip, how long after the last answer every
subscriber had every event, and whether each subscriber got exactly the run's events in order.

`--service DIR` (repeatable) compares source trees, interleaved round by round (e.g. main's and a
branch's `service/`); default this tree's. `--events redis://HOST:PORT` runs the servers on a Redis
feed (give each tree its own Redis, or run them one at a time). `BENCH_QUICK=1` runs one round.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from harness import QUICK, SERVICE_DIR, Server, turnkeeper_server
from harness.fanout import back_to_back

SUBSCRIBERS = 1_000
ALONE_TRIMS = 100
TRIMS = 200


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def one_round(server: Server) -> dict[str, float | bool]:
    run = back_to_back(server.address, SUBSCRIBERS, ALONE_TRIMS, TRIMS, timeout_s=300)
    alone, loaded, last_answer, outcome = run.alone, run.loaded, run.last_answer, run.outcome
    caught_up = outcome.caught_up_at - last_answer if outcome.caught_up_at else float("nan")
    return {
        "alone_p50": statistics.median(alone),
        "alone_p99": pct(alone, 99),
        "with_p50": statistics.median(loaded),
        "with_p99": pct(loaded, 99),
        "catch_up_s": max(0.0, caught_up),
        "exact": outcome.all_exact,
        "registered_s": run.registered_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", action="append", type=Path, help="a service/ tree to run")
    parser.add_argument("--rounds", type=int, default=1 if QUICK else 3)
    parser.add_argument("--events", default="memory", help="the servers' --events")
    args = parser.parse_args()
    trees = args.service or [SERVICE_DIR]
    servers = [
        turnkeeper_server(
            str(tree), "--events", args.events, env={"PYTHONPATH": str(tree.resolve())}
        )
        for tree in trees
    ]
    results: dict[str, list[dict[str, float | bool]]] = {s.name: [] for s in servers}
    try:
        for number in range(args.rounds):
            order = servers[number % len(servers) :] + servers[: number % len(servers)]
            for server in order:
                results[server.name].append(one_round(server))
                print(f"round {number + 1} {server.name}: {results[server.name][-1]}", flush=True)
    finally:
        for server in servers:
            server.stop()
    load = os.getloadavg()
    print(
        f"\n## 1,000 TrimEvents subscribers, back-to-back 100-row trims ({ALONE_TRIMS} alone, "
        f"{TRIMS} with; events {args.events}; medians of {args.rounds} rounds; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f})\n"
    )
    print(
        "| tree | alone p50 / p99 ms | with 1,000 p50 / p99 ms | added p50 ms "
        "| all caught up after | every subscriber exact |"
    )
    print("|---|---|---|---|---|---|")
    for name, rounds in results.items():

        def med(key: str, rounds: list[dict[str, float | bool]] = rounds) -> float:
            return statistics.median(float(r[key]) for r in rounds)

        print(
            f"| {name} | {med('alone_p50'):.2f} / {med('alone_p99'):.2f} "
            f"| {med('with_p50'):.2f} / {med('with_p99'):.2f} "
            f"| {med('with_p50') - med('alone_p50'):.2f} | {med('catch_up_s'):.2f} s "
            f"| {sum(bool(r['exact']) for r in rounds)} of {len(rounds)} runs |"
        )


if __name__ == "__main__":
    main()
