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
import json

from harness.load import MIXES, format_report, measure


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


if __name__ == "__main__":
    main()
