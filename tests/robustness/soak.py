"""`make soak`: a long mixed run against a real sidecar, not part of `make test` or CI.

Runs SOAK_SECONDS (default 120) of concurrent traffic from SOAK_CLIENTS threads (default 8):
valid trims that publish, estimates, bad requests, random bytes, calls cancelled mid-flight and
calls with tiny deadlines, while SOAK_SUBSCRIBERS TrimEvents streams (default 50) follow the feed.
Prints calls, errors by status, latency p50 and p99, server RSS at start and end, and, per
subscriber, events delivered against events published. Exits 1 if an UNKNOWN or INTERNAL was
seen, the server died, or a subscriber missed an event without being told by a gap. It imports
`harness` (bench/) and `live` (tests/support/), which `make soak` puts on PYTHONPATH.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections import Counter

import grpc
import live
from harness import agent_trim, chat, inclusive_percentile
from robustness_support import BIG_MESSAGES, rss_kib
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc

SECONDS = float(os.environ.get("SOAK_SECONDS", "120"))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "8"))
SUBSCRIBERS = int(os.environ.get("SOAK_SUBSCRIBERS", "50"))
METHODS = [
    name
    for name in svc.DESCRIPTOR.services_by_name["HistoryService"].methods_by_name
    if name != "TrimEvents"
]


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: Counter[str] = Counter()
        self.latencies: list[float] = []
        self.published = 0

    def add(self, status: str, seconds: float, published: bool = False) -> None:
        with self.lock:
            self.statuses[status] += 1
            self.latencies.append(seconds)
            self.published += published


def client(address: str, tally: Tally, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    trim = agent_trim(chat(200), budget=300, session=f"soak-{seed}")
    estimate = svc.EstimateTokensRequest(history=chat(2000))
    with grpc.insecure_channel(address, options=BIG_MESSAGES) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        raw = {
            m: channel.unary_unary(
                f"/turnkeeper.v1.HistoryService/{m}",
                request_serializer=None,
                response_deserializer=None,
            )
            for m in METHODS
        }
        while not stop.is_set():
            kind = rng.random()
            began = time.perf_counter()
            published = False
            try:
                if kind < 0.4:
                    stub.TrimHistory(trim, timeout=30)
                    published = True
                elif kind < 0.6:
                    stub.EstimateTokens(estimate, timeout=30)
                elif kind < 0.75:
                    method = rng.choice(METHODS)
                    raw[method](rng.randbytes(rng.randint(1, 2000)), timeout=30)
                elif kind < 0.85:
                    stub.TrimHistory(svc.TrimHistoryRequest(), timeout=30)
                elif kind < 0.95:
                    future = stub.TrimHistory.future(agent_trim(chat(20_000)), timeout=30)
                    time.sleep(rng.uniform(0, 0.05))
                    future.cancel()
                    future.result()
                else:
                    stub.TrimHistory(agent_trim(chat(20_000)), timeout=0.005)
                status = "OK"
            except grpc.FutureCancelledError:
                status = "CANCELLED (by us)"
            except grpc.RpcError as error:
                status = error.code().name
            tally.add(status, time.perf_counter() - began, published and status == "OK")


def subscriber(address: str, seen: list[int], gaps: list[int], index: int) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        try:
            for item in stub.TrimEvents(svc.TrimEventsRequest()):
                if item.HasField("event") and item.event.trimmed.caller.session_id.startswith(
                    "soak-"
                ):
                    seen[index] += 1
                elif item.HasField("gap"):
                    gaps[index] += item.gap.missed_events
        except grpc.RpcError:
            pass


def main() -> int:
    server = live.start_server("--subscriber-queue", "100000", unix=False)
    try:
        rss_start = rss_kib(server.pid)
        tally = Tally()
        stop = threading.Event()
        seen, gaps = [0] * SUBSCRIBERS, [0] * SUBSCRIBERS
        followers = [
            threading.Thread(target=subscriber, args=(server.address, seen, gaps, i), daemon=True)
            for i in range(SUBSCRIBERS)
        ]
        for follower in followers:
            follower.start()
        time.sleep(2)
        workers = [
            threading.Thread(target=client, args=(server.address, tally, stop, i))
            for i in range(CLIENTS)
        ]
        for worker in workers:
            worker.start()
        time.sleep(SECONDS)
        stop.set()
        for worker in workers:
            worker.join()
        time.sleep(2)  # the last events reach the subscribers
        rss_end = rss_kib(server.pid)
        alive = server.alive()
    finally:
        server.stop()
    calls = sum(tally.statuses.values())
    print(f"soak: {SECONDS:.0f} s, {CLIENTS} clients, {SUBSCRIBERS} subscribers")
    print(f"calls {calls} ({calls / SECONDS:.0f}/s)")
    for status, count in tally.statuses.most_common():
        print(f"  {status:<20} {count}")
    print(
        f"latency p50 {inclusive_percentile(tally.latencies, 50) * 1e3:.1f} ms, "
        f"p99 {inclusive_percentile(tally.latencies, 99) * 1e3:.1f} ms"
    )
    print(f"server RSS start {rss_start / 1024:.0f} MiB, end {rss_end / 1024:.0f} MiB")
    print(f"events published (OK agent trims) {tally.published}")
    print(
        f"events delivered per subscriber: min {min(seen)} max {max(seen)}; gaps announced "
        f"max {max(gaps)}"
    )
    unannounced = [i for i in range(SUBSCRIBERS) if seen[i] + gaps[i] < tally.published]
    bad = tally.statuses["UNKNOWN"] + tally.statuses["INTERNAL"]
    ok = alive and not bad and not unannounced
    print(
        "RESULT",
        "ok"
        if ok
        else f"FAILED (alive={alive}, unknown+internal={bad}, "
        f"subscribers missing events={len(unannounced)})",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
