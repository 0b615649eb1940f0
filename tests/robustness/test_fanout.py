"""Issue 9 "event fan-out runs on the request path": with 1,000 subscribers a trim costs what it
costs alone, within about a millisecond, because the feed's own task fans each event out after the call
has published it in O(1).

Each trim is timed from the client, with every subscriber connected over its own share of a dozen
connections, and the next trim starts once all 1,000 have received the previous event: what is
measured is what the subscribers add to one trim, not a loop saturated by back-to-back fan-outs
(README, "Watching trims", gives that figure too).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import grpc
from robustness_support import agent_trim, chat
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc

SUBSCRIBERS = 1_000
TRIMS = 25
CONNECTIONS = 12  # under the default 100 concurrent streams per connection
# A separate pool per channel, so the channels really are separate connections.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
# After the last delivery both processes still finish the writes' completions; the next trim
# starts on a quiet server, so it meets only the fan-out of its own event.
SETTLE_SECONDS = 0.25
ADDED_MS_BOUND = 10.0


async def _median_trim_ms(stub: Any, delivered: list[int], expect_each: int) -> float:
    """The median client-side latency of TRIMS trims, each after the last one's fan-out ended."""
    request = agent_trim(chat(40), budget=50, session="fanout")
    latencies: list[float] = []
    for done in range(1, TRIMS + 1):
        start = time.perf_counter()
        response = await stub.TrimHistory(request, timeout=10)
        latencies.append((time.perf_counter() - start) * 1000.0)
        assert response.outcome.trimmed
        deadline = time.monotonic() + 20.0
        while delivered[0] < done * expect_each:
            assert time.monotonic() < deadline, f"fan-out stalled at {delivered[0]} deliveries"
            await asyncio.sleep(0.005)
        await asyncio.sleep(SETTLE_SECONDS)
    return statistics.median(latencies)


async def test_a_thousand_subscribers_add_at_most_a_millisecond_to_a_trim(
    server_factory: Any, figures: Any
) -> None:
    server = server_factory(unix=False)
    channels = [
        grpc.aio.insecure_channel(server.address, options=OWN_CONNECTION)
        for _ in range(CONNECTIONS + 1)
    ]
    delivered = [0]
    subscribed = asyncio.Semaphore(0)

    async def subscriber(index: int) -> None:
        stub = history_service_pb2_grpc.HistoryServiceStub(channels[1 + index % CONNECTIONS])
        async for item in stub.TrimEvents(svc.TrimEventsRequest(session_ids=["fanout"])):
            if item.HasField("heartbeat"):
                subscribed.release()  # the first heartbeat: the server has registered it
            elif item.HasField("event"):
                delivered[0] += 1

    try:
        stub = history_service_pb2_grpc.HistoryServiceStub(channels[0])
        for _ in range(3):  # warm the server and the connection up
            await stub.TrimHistory(agent_trim(chat(40), budget=50, session="warm-up"), timeout=10)
        alone = await _median_trim_ms(stub, delivered, 0)

        tasks = [asyncio.create_task(subscriber(i)) for i in range(SUBSCRIBERS)]
        started = time.monotonic()
        for _ in range(SUBSCRIBERS):
            await asyncio.wait_for(subscribed.acquire(), timeout=60)
        figures.add("1,000 subscriptions registered in", f"{time.monotonic() - started:.1f} s")
        with_subscribers = await _median_trim_ms(stub, delivered, SUBSCRIBERS)
        for task in tasks:
            task.cancel()
    finally:
        for channel in channels:
            await channel.close()

    added = with_subscribers - alone
    figures.add("trim p50 alone", f"{alone:.2f} ms")
    figures.add("trim p50 with 1,000 subscribers", f"{with_subscribers:.2f} ms")
    figures.add("added by 1,000 subscribers", f"{added:.2f} ms")
    assert delivered[0] == TRIMS * SUBSCRIBERS
    # The target is 1 ms (measured 0.3-0.8 ms on a quiet 2-core machine, up to 4 ms while other
    # suites load it); the bound leaves room for that noise and still fails by far if fan-out comes
    # back onto the request path (130-160 ms with 1,000 subscribers before issue 9).
    assert added <= ADDED_MS_BOUND, f"1,000 subscribers added {added:.2f} ms to a trim"
