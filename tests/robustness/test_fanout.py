"""Issue 9 "event fan-out runs on the request path": with many subscribers (300 here, so that the
suite stays short on 2 cores; TK_FANOUT_SUBSCRIBERS=1000 for the issue's figure) the trim handler costs
what it costs with none (publishing is O(1); the feed's own task fans out), and every subscriber
still gets every event. The client-side latencies are printed too: deliveries share the server's
one event loop with the calls, so a trim issued right after another waits for part of them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import grpc
from robustness_support import agent_trim, chat, percentile
from turnkeeper.v1 import history_service_pb2_grpc

SUBSCRIBERS = int(os.environ.get("TK_FANOUT_SUBSCRIBERS", "300"))
TRIMS = 30

# Holds SUBSCRIBERS TrimEvents streams (50 per connection, under the server's stream limit), prints
# "ready" once each has its opening heartbeat, then, after TRIMS events each, the totals.
_SUBSCRIBERS = """
import asyncio, sys, grpc
from turnkeeper.v1 import history_service_pb2 as svc, history_service_pb2_grpc
address, count, expected = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
async def main():
    channels = [grpc.aio.insecure_channel(address) for _ in range(count // 50 + 1)]
    ready = asyncio.Semaphore(0)
    async def follow(i):
        stub = history_service_pb2_grpc.HistoryServiceStub(channels[i // 50])
        events, subscribed = 0, False
        async for item in stub.TrimEvents(svc.TrimEventsRequest()):
            if not subscribed:
                subscribed = True
                ready.release()
            if item.HasField("event"):
                events += 1
                if events == expected:
                    return events
        return events
    tasks = [asyncio.ensure_future(follow(i)) for i in range(count)]
    for _ in range(count):
        await ready.acquire()
    print("ready", flush=True)
    done = await asyncio.wait_for(asyncio.gather(*tasks), 120)
    print("events", min(done), max(done), flush=True)
asyncio.run(main())
"""


def _trim_latencies(stub: history_service_pb2_grpc.HistoryServiceStub, n: int) -> list[float]:
    request = agent_trim(chat(100), budget=200)
    latencies = []
    for _ in range(n):
        began = time.perf_counter()
        response = stub.TrimHistory(request, timeout=30)
        latencies.append(time.perf_counter() - began)
        assert response.outcome.trimmed
    return latencies


def _handler_ms(log: str) -> list[float]:
    """The server-side duration of each TrimHistory call, from the access log."""
    pattern = r"HistoryService/TrimHistory status=OK duration_ms=([0-9.]+)"
    return [float(ms) for ms in re.findall(pattern, log)]


def test_many_subscribers_add_nothing_to_the_trim_handler(
    server_factory: Callable[..., Any], figures: Any
) -> None:
    server = server_factory(unix=False)
    with grpc.insecure_channel(server.address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        _trim_latencies(stub, 20)  # warm up
        alone = _trim_latencies(stub, TRIMS)
        handler_alone = _handler_ms(server.log_text())[-TRIMS:]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        followers = subprocess.Popen(
            [sys.executable, "-c", _SUBSCRIBERS, server.address, str(SUBSCRIBERS), str(TRIMS)],
            stdout=subprocess.PIPE,
            env=env,
        )
        try:
            assert followers.stdout is not None
            assert followers.stdout.readline() == b"ready\n"
            crowded = _trim_latencies(stub, TRIMS)
            summary = followers.stdout.readline().split()
        finally:
            followers.kill()
            followers.wait()
    handler_crowded = _handler_ms(server.log_text())[-TRIMS:]
    assert summary[0] == b"events" and int(summary[1]) == TRIMS, summary
    added_ms = percentile(handler_crowded, 50) - percentile(handler_alone, 50)
    figures.add(
        f"handler p50 ms, 0 / {SUBSCRIBERS} subscribers",
        f"{percentile(handler_alone, 50):.2f} / {percentile(handler_crowded, 50):.2f}",
    )
    figures.add(
        f"client p50 ms, 0 / {SUBSCRIBERS} subscribers",
        f"{percentile(alone, 50) * 1e3:.2f} / {percentile(crowded, 50) * 1e3:.2f}",
    )
    figures.add("events per subscriber min / max", f"{int(summary[1])} / {int(summary[2])}")
    assert added_ms <= 1.0
