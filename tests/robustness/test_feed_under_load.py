"""A TrimEvents subscriber of a loaded server receives events, not gap after gap.

Closed-loop clients in another process (this file run as a script) send trims that each publish an
event, as fast as the server answers, until they have published LOAD_EVENTS events; meanwhile
SUBSCRIBERS streams in the test's process follow the whole feed, every other one asking for
batched delivery (`max_batch_events`). The ring retains RING_SIZE events, a small part of the load,
so a subscriber that falls behind the calls for good is told so by gaps.

What is checked:
- every subscriber: after a gap, the next item that is an event or a gap is an event: a
  subscriber that fell behind resumes where it can still receive, rather than at an event evicted
  before its next turn;
- a batched subscriber receives at least MIN_SHARE of the events published while it was
  subscribed (one message per event cannot keep up with a loaded server's loop: that is what
  batches are for).

Nothing here is a timing threshold. The clients wait for each answer, so the rate at which events
are published is the rate at which this machine's server can trim, and what delivery must keep up
with scales with it: the share is a ratio of two amounts of work done by the same CPU, on a fast
machine or a slow one. The run ends on a count of events, not a duration, and the subscribers stop
at a marker event published once the load is over: everything published before it has then reached
them or been announced lost. The timeouts only keep a broken feed from hanging the suite.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import grpc
from harness import TRIM, agent_trim, chat, child_env
from turnkeeper.v1 import history_service_pb2 as svc

RING_SIZE = 300
LOAD_EVENTS = 20 * RING_SIZE
LOAD_CLIENTS = 8
SUBSCRIBERS = 8
BATCH = 100
# Half: a subscriber stuck behind the ring still gets the RING_SIZE events it retains once the load
# is over, a twentieth of the run; one that keeps up receives them all, or loses little more than a
# ring's worth to each long stall of its own process. The bound sits far from both.
MIN_SHARE = 0.5
MARKER_SESSION = "after-the-load"
# Hang guards for a broken feed or server, far beyond what a correct one takes.
REGISTER_TIMEOUT_S = 60.0
LOAD_TIMEOUT_S = 600.0
MARKER_TIMEOUT_S = 120.0


def _trim_request(session: str) -> bytes:
    request: svc.TrimHistoryRequest = agent_trim(chat(40), budget=50, session=session)
    return request.SerializeToString()


async def _publish_until(address: str, clients: int, events: int) -> dict[str, Any]:
    """Closed-loop trims from `clients` connections until `events` were published; returns the
    count of published events and of each status code."""
    published = 0
    codes: dict[str, int] = {}

    async def client(number: int) -> None:
        nonlocal published
        options = [("grpc.use_local_subchannel_pool", 1)]
        async with grpc.aio.insecure_channel(address, options=options) as channel:
            trim: grpc.aio.UnaryUnaryMultiCallable[bytes, svc.TrimHistoryResponse]
            trim = channel.unary_unary(
                TRIM, response_deserializer=svc.TrimHistoryResponse.FromString
            )
            request = _trim_request(f"load-{number}")
            while published < events:
                try:
                    response = await trim(request, timeout=60)
                except grpc.aio.AioRpcError as error:
                    codes[error.code().name] = codes.get(error.code().name, 0) + 1
                    await asyncio.sleep(0.05)  # a refusal: not sent again at once
                    continue
                codes["OK"] = codes.get("OK", 0) + 1
                published += response.HasField("history_trimmed")

    await asyncio.gather(*(client(number) for number in range(clients)))
    return {"published": published, "codes": codes}


@dataclass
class Followed:
    """What one subscriber received: the kinds of its items in order ("event" or "gap"; heartbeats
    left out), and how many events not counting the marker."""

    batch: int  # the request's max_batch_events (0: one event a message, as before batches)
    kinds: list[str] = field(default_factory=list)
    events: int = 0
    missed: int = 0


async def _follow(
    stub: grpc.aio.UnaryStreamMultiCallable[bytes, svc.TrimEventsResponse],
    followed: Followed,
    registered: asyncio.Event,
) -> None:
    request = svc.TrimEventsRequest(max_batch_events=followed.batch)
    async for message in stub(request.SerializeToString()):
        if message.HasField("heartbeat"):
            registered.set()  # the first one: the server has registered the subscription
        items = message.batch.items if message.HasField("batch") else [message]
        for item in items:
            if item.HasField("gap"):
                followed.kinds.append("gap")
                followed.missed += item.gap.missed_events
            elif item.HasField("event"):
                followed.kinds.append("event")
                if item.event.trimmed.caller.session_id == MARKER_SESSION:
                    return
                followed.events += 1


def gaps_after_gaps(kinds: list[str]) -> int:
    """How many gaps come right after a gap, with no event in between."""
    return sum(1 for before, after in itertools.pairwise(kinds) if before == after == "gap")


async def test_a_subscriber_of_a_loaded_server_receives_events_not_gap_after_gap(
    server_factory: Any, figures: Any
) -> None:
    server = server_factory("--ring-size", str(RING_SIZE), unix=False)
    options = [("grpc.use_local_subchannel_pool", 1)]
    channel = grpc.aio.insecure_channel(server.address, options=options)
    subscribe: grpc.aio.UnaryStreamMultiCallable[bytes, svc.TrimEventsResponse]
    subscribe = channel.unary_stream(
        "/turnkeeper.v1.HistoryService/TrimEvents",
        response_deserializer=svc.TrimEventsResponse.FromString,
    )
    followed = [Followed(BATCH if i % 2 else 0) for i in range(SUBSCRIBERS)]
    registered = [asyncio.Event() for _ in followed]
    tasks = [
        asyncio.create_task(_follow(subscribe, one, ready))
        for one, ready in zip(followed, registered, strict=True)
    ]
    try:
        await asyncio.wait_for(
            asyncio.gather(*(ready.wait() for ready in registered)), REGISTER_TIMEOUT_S
        )
        load = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            server.address,
            str(LOAD_CLIENTS),
            str(LOAD_EVENTS),
            stdout=subprocess.PIPE,
            env=child_env(),  # bench/ on the path, as pytest's `pythonpath` puts it for this file
        )
        output, _ = await asyncio.wait_for(load.communicate(), LOAD_TIMEOUT_S)
        assert load.returncode == 0, "the load process failed"
        outcome = json.loads(output)
        published: int = outcome["published"]

        marker: grpc.aio.UnaryUnaryMultiCallable[bytes, svc.TrimHistoryResponse]
        marker = channel.unary_unary(TRIM, response_deserializer=svc.TrimHistoryResponse.FromString)
        answer = await marker(_trim_request(MARKER_SESSION), timeout=60)
        assert answer.HasField("history_trimmed"), "the marker trim must publish its event"
        await asyncio.wait_for(asyncio.gather(*tasks), MARKER_TIMEOUT_S)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await channel.close()

    shares = [one.events / published for one in followed]
    batched = [share for one, share in zip(followed, shares, strict=True) if one.batch]
    repeated = [gaps_after_gaps(one.kinds) for one in followed]
    figures.add("calls by status", outcome["codes"])
    figures.add("events published", published)
    figures.add("share received, lowest, one event a message", f"{min(shares[0::2]):.1%}")
    figures.add("share received, lowest, batched", f"{min(batched):.1%}")
    figures.add("gaps, all subscribers", sum(one.kinds.count("gap") for one in followed))
    figures.add("gaps right after a gap", sum(repeated))
    assert published >= LOAD_EVENTS
    for number, one in enumerate(followed):
        assert repeated[number] == 0, (
            f"subscriber {number} got {repeated[number]} gaps right after a gap "
            f"({one.kinds.count('gap')} gaps, {one.events} events)"
        )
    for number, share in enumerate(shares):
        assert share >= MIN_SHARE or not followed[number].batch, (
            f"subscriber {number} received {followed[number].events} of {published} events "
            f"({share:.1%}; {followed[number].missed} announced missed)"
        )


if __name__ == "__main__":
    address, clients, events = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(asyncio.run(_publish_until(address, clients, events))))
