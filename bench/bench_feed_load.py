"""The TrimEvents feed of a loaded sidecar: what each subscriber receives while calls keep coming.

Prints figures, never pass/fail. Starts a sidecar from `--service` (default this tree's), then
`--subscribers` TrimEvents streams (spread over `--subscriber-procs` processes, each reading raw
bytes and counting what it parses) and `--clients` client threads (in `--client-procs` processes)
that together send `--rate` calls/s for `--seconds`: 80 % small agent-path TrimHistory calls that
publish an event, 20 % small EstimateTokens. `--batch N` asks for `max_batch_events` N (0: the
stream of one item per message that subscribers get by default). `--events redis://...` runs the
sidecar on a Redis feed.

Prints calls/s, the small-call p50/p99, events published, and per subscriber the delivered share
(min / median), gaps, gaps that follow a gap with no event between, gaps whose `before_cursor` is
not the next event delivered, and the delivery latency p99 (receipt minus the event's time, for the first event of each message).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from harness import ESTIMATE, EVENTS, SERVICE_DIR, TRIM, Sidecar, agent_trim, chat, cpu_seconds
from harness import inclusive_percentile as percentile
from turnkeeper.v1 import history_service_pb2 as svc

SESSION = "feed-load"


def follow(address: str, batch: int, stop_at: float, out: Any) -> None:
    """One subscriber of every event: counts events and gaps, and checks their order."""
    request = svc.TrimEventsRequest(max_batch_events=batch)
    events = gaps = gap_after_gap = wrong_before = messages = 0
    latencies: list[float] = []
    last_was_gap = False
    expected_before: str | None = None
    with grpc.insecure_channel(address) as channel:
        follow: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(EVENTS)
        call = follow(request.SerializeToString(), timeout=stop_at - time.time())
        try:
            for raw in call:
                messages += 1
                message = svc.TrimEventsResponse.FromString(raw)
                items = message.batch.items if message.HasField("batch") else [message]
                oldest = None  # the first event of the message waited longest: its latency
                for item in items:
                    kind = item.WhichOneof("item")
                    if kind == "event":
                        if expected_before is not None:
                            wrong_before += item.event.cursor != expected_before
                            expected_before = None
                        if oldest is None:
                            oldest = item.event
                        events += 1
                        last_was_gap = False
                    elif kind == "gap":
                        if expected_before is not None:  # the event it named never came
                            wrong_before += 1
                        gaps += 1
                        gap_after_gap += last_was_gap
                        last_was_gap = True
                        expected_before = item.gap.before_cursor or None
                if oldest is not None:
                    latencies.append(time.time() - oldest.time.ToNanoseconds() / 1e9)
        except grpc.RpcError:
            pass
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))] if latencies else float("nan")
    out.put((events, gaps, gap_after_gap, wrong_before, messages, p99))


def subscribers(address: str, count: int, batch: int, stop_at: float, out: Any) -> None:
    threads = [
        threading.Thread(target=follow, args=(address, batch, stop_at, out)) for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def clients(address: str, threads: int, rate: float, seconds: float, out: Any) -> None:
    trim = agent_trim(chat(12), budget=20, session=SESSION).SerializeToString()
    estimate = svc.EstimateTokensRequest(history=chat(12)).SerializeToString()
    lock = threading.Lock()
    latencies: list[float] = []
    published = [0]
    failed = [0]

    def run(seed: int) -> None:
        interval = threads / rate
        with grpc.insecure_channel(address) as channel:
            calls: dict[str, grpc.UnaryUnaryMultiCallable[bytes, bytes]] = {
                TRIM: channel.unary_unary(TRIM),
                ESTIMATE: channel.unary_unary(ESTIMATE),
            }
            began = time.monotonic()
            due = began + seed * interval / threads
            mine: list[float] = []
            n = 0
            while time.monotonic() - began < seconds:
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                due += interval
                n += 1
                method, raw = (ESTIMATE, estimate) if n % 5 == 0 else (TRIM, trim)
                start = time.perf_counter()
                try:
                    calls[method](raw, timeout=30)
                except grpc.RpcError:
                    with lock:
                        failed[0] += 1
                    continue
                mine.append(time.perf_counter() - start)
                if method == TRIM:
                    with lock:
                        published[0] += 1
            with lock:
                latencies.extend(mine)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    out.put(("calls", latencies, published[0], failed[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", type=Path, default=SERVICE_DIR)
    parser.add_argument("--events", default="memory")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--subscriber-procs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=0)
    args = parser.parse_args()

    server = Sidecar("--events", args.events, service=args.service)
    address = server.address
    print(f"sidecar pid {server.pid}", file=sys.stderr, flush=True)
    cpu_start = cpu_seconds(server.pid)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    try:
        stop_at = time.time() + args.seconds + 6
        per_proc = [
            args.subscribers // args.subscriber_procs
            + (i < args.subscribers % args.subscriber_procs)
            for i in range(args.subscriber_procs)
        ]
        followers = [
            context.Process(target=subscribers, args=(address, n, args.batch, stop_at, out))
            for n in per_proc
        ]
        for process in followers:
            process.start()
        time.sleep(3)  # every stream subscribed
        senders = [
            context.Process(
                target=clients,
                args=(
                    address,
                    args.clients // args.client_procs,
                    args.rate / args.client_procs,
                    args.seconds,
                    out,
                ),
            )
            for _ in range(args.client_procs)
        ]
        for process in senders:
            process.start()
        results = [out.get() for _ in range(args.client_procs)]
        cpu = cpu_seconds(server.pid) - cpu_start
        results += [out.get() for _ in range(args.subscribers)]
        for process in [*senders, *followers]:
            process.join()
    finally:
        log = server.log()
        server.stop()

    calls = [r for r in results if r[0] == "calls"]
    subs = [r for r in results if r[0] != "calls"]
    latencies = sorted(x for r in calls for x in r[1])
    published = sum(r[2] for r in calls)
    failed = sum(r[3] for r in calls)
    shares = sorted(r[0] / published if published else float("nan") for r in subs)
    print(
        f"feed load: {args.seconds:.0f} s, target {args.rate:.0f} calls/s, "
        f"{args.subscribers} subscribers, batch {args.batch}, events {args.events}"
    )
    print(
        f"calls {len(latencies)} ({len(latencies) / args.seconds:.0f}/s), failed {failed}, "
        f"p50 {percentile(latencies, 50) * 1e3:.1f} ms, p99 {percentile(latencies, 99) * 1e3:.1f} ms"
    )
    print(f"events published {published} ({published / args.seconds:.0f}/s)")
    print(f"sidecar CPU while the calls ran: {cpu / args.seconds:.2f} cores")
    print(
        f"delivered share min {shares[0]:.4f} median {shares[len(shares) // 2]:.4f}; "
        f"gaps max {max(r[1] for r in subs)}, gap after gap {sum(r[2] for r in subs)}, "
        f"wrong before_cursor {sum(r[3] for r in subs)}"
    )
    print(
        f"messages per subscriber median {sorted(r[4] for r in subs)[len(subs) // 2]}; "
        f"delivery p99 max {max(r[5] for r in subs):.3f} s, "
        f"median {sorted(r[5] for r in subs)[len(subs) // 2]:.3f} s"
    )
    print(f"server log: {log.count('Traceback')} tracebacks, {log.count(' ERROR ')} errors")


if __name__ == "__main__":
    main()
