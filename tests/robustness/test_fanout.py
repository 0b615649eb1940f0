"""Issues 9 and 19 "event fan-out runs on the request path": with 1,000 subscribers a trim costs
what it costs alone, within a few milliseconds, whether the trims come one at a time or back to
back, and every subscriber still gets every event, in order.

The first test times trims that each start once all 1,000 subscribers have received the previous
event (the settled case). The second sends trims back to back (each as soon as the previous answer
arrived): delivery gives way to the calls, the subscribers lag, then catch up from the ring; the
fleet runs in its own process (bench/harness/fanout.py), so what it costs to receive does not share the
trimming client's loop.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import grpc
from harness import agent_trim, chat
from harness.fanout import back_to_back
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


BACK_TO_BACK_TRIMS = 200
# The target is 5 ms (measured 0.1-1.1 ms added on a loaded 2-core machine); before issue 19 the
# fan-out of each event ran between the calls and added 106-181 ms at p50.
BACK_TO_BACK_ADDED_MS_BOUND = 25.0


def test_back_to_back_trims_stay_fast_and_every_subscriber_gets_every_event_in_order(
    server_factory: Any, figures: Any
) -> None:
    server = server_factory(unix=False)
    run = back_to_back(server.address, SUBSCRIBERS, 100, BACK_TO_BACK_TRIMS, timeout_s=240)
    alone, loaded, last_answer, outcome = run.alone, run.loaded, run.last_answer, run.outcome
    added = statistics.median(loaded) - statistics.median(alone)
    figures.add("back-to-back trim p50 alone", f"{statistics.median(alone):.2f} ms")
    figures.add("back-to-back trim p50 with 1,000", f"{statistics.median(loaded):.2f} ms")
    if outcome.caught_up_at is not None:
        figures.add(
            "all caught up after the last trim", f"{outcome.caught_up_at - last_answer:.1f} s"
        )
    figures.add("subscribers with every event in order", f"{outcome.exact} of {SUBSCRIBERS}")
    assert outcome.caught_up_at is not None, "not every subscriber got the run's last event"
    assert outcome.gaps == 0
    assert outcome.exact == SUBSCRIBERS
    assert added <= BACK_TO_BACK_ADDED_MS_BOUND, f"1,000 subscribers added {added:.2f} ms"
