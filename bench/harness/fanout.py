"""Back-to-back trims against a fleet of TrimEvents subscribers in another process.

Used by tests/robustness/test_fanout.py and bench/bench_fanout.py. The fleet runs in its own
process (`python -m harness.fanout`), so the work of receiving its messages does not share the trimming
client's event loop: what the driver measures is the server. Every subscriber takes the whole
feed (no filter) over its share of a dozen connections and checks what it gets: each trim's
`turn_id` is its number in the run, so a subscriber's events must be exactly the run's numbers, in
order, with no gap.

Protocol on the fleet's stdin/stdout: it prints `ready` once every subscription has its first
heartbeat; `expect FIRST COUNT` asks it to wait until every subscriber holds the events
FIRST..FIRST+COUNT-1; it answers one JSON line (see `Fleet.finish`).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import grpc
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc, trim_pb2

from harness import TRIM, child_env

CONNECTIONS = 12  # under the default 100 concurrent streams per connection
# A separate pool per channel, so the channels really are separate connections.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
ROWS = 100


def trim_requests(first: int, count: int, rows: int = ROWS) -> list[bytes]:
    """Serialized agent-path TrimHistory requests that each trim (and so publish); the caller's
    turn_id is the request's number in the run."""
    roles = (h.ROLE_USER, h.ROLE_ASSISTANT)
    history = h.History(
        chat=h.ChatHistory(
            messages=[h.ChatMessage(role=roles[i % 2], content=f"hello {i}") for i in range(rows)]
        )
    )
    out = []
    for number in range(first, first + count):
        request = svc.TrimHistoryRequest(history=history, mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET)
        request.explicit_limits.budget_tokens = 50
        request.caller.session_id = "fanout"
        request.caller.turn_id = str(number)
        out.append(request.SerializeToString())
    return out


class Trimmer:
    """One client connection sending trims back to back: each as soon as the previous answer
    arrived (not after the fan-out settled)."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self._trim: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(TRIM)

    def run(self, requests: list[bytes]) -> tuple[list[float], float]:
        """The latencies in ms, and the monotonic time of the last answer."""
        latencies = []
        for raw in requests:
            began = time.perf_counter()
            self._trim(raw, timeout=30)
            latencies.append((time.perf_counter() - began) * 1000.0)
        return latencies, time.monotonic()

    def close(self) -> None:
        self.channel.close()


@dataclass
class Outcome:
    """What the fleet saw of one run."""

    subscribers: int
    exact: int  # subscribers whose events are exactly the run's, in order
    gaps: int
    caught_up_at: float | None  # monotonic time the last subscriber had the run's last event

    @property
    def all_exact(self) -> bool:
        return self.exact == self.subscribers and self.gaps == 0


class Fleet:
    """`subscribers` TrimEvents streams in a child process; `finish` waits until they have a run."""

    def __init__(self, address: str, subscribers: int, connections: int = CONNECTIONS) -> None:
        self.subscribers = subscribers
        self.process = subprocess.Popen(
            [sys.executable, "-m", "harness.fanout", address, str(subscribers), str(connections)],
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.registered_s = self._wait_ready()

    def _wait_ready(self) -> float:
        assert self.process.stdout is not None
        began = time.monotonic()
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.close()
            raise RuntimeError(f"the subscriber fleet did not start: {line!r}")
        return time.monotonic() - began

    def finish(self, first: int, count: int, timeout_s: float) -> Outcome:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"expect {first} {count} {timeout_s}\n")
        self.process.stdin.flush()
        report = json.loads(self.process.stdout.readline())
        return Outcome(self.subscribers, report["exact"], report["gaps"], report["caught_up_at"])

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@dataclass
class BackToBack:
    """One measured run: trim latencies (ms) alone and with the fleet, and what the fleet saw."""

    alone: list[float]
    loaded: list[float]
    last_answer: float  # monotonic time of the run's last answer
    outcome: Outcome
    registered_s: float  # how long the fleet's subscriptions took to register


def back_to_back(
    address: str, subscribers: int, alone_trims: int, trims: int, timeout_s: float
) -> BackToBack:
    """`alone_trims` back-to-back trims with nobody listening, then `trims` with `subscribers`
    taking the whole feed, waiting up to `timeout_s` for every one to hold the run."""
    trimmer = Trimmer(address)
    try:
        trimmer.run(trim_requests(0, 10))  # warm the server and the connection up
        alone, _ = trimmer.run(trim_requests(0, alone_trims))
        fleet = Fleet(address, subscribers)
        try:
            loaded, last_answer = trimmer.run(trim_requests(0, trims))
            outcome = fleet.finish(0, trims, timeout_s=timeout_s)
        finally:
            fleet.close()
    finally:
        trimmer.close()
    return BackToBack(alone, loaded, last_answer, outcome, fleet.registered_s)


async def _fleet(address: str, subscribers: int, connections: int) -> None:
    channels = [
        grpc.aio.insecure_channel(address, options=OWN_CONNECTION) for _ in range(connections)
    ]
    seen: list[list[int]] = [[] for _ in range(subscribers)]
    gaps = [0]
    registered = [0]
    all_registered = asyncio.Event()
    target = [-1, 0]  # the number a complete subscriber ends with; how many reached it
    caught_up = asyncio.Event()
    caught_up_at = [0.0]

    async def subscriber(index: int) -> None:
        stub = history_service_pb2_grpc.HistoryServiceStub(channels[index % connections])
        mine = seen[index]
        first = True
        async for item in stub.TrimEvents(svc.TrimEventsRequest()):
            kind = item.WhichOneof("item")
            if kind == "event":
                number = int(item.event.trimmed.caller.turn_id)
                mine.append(number)
                if number == target[0]:
                    target[1] += 1
                    if target[1] == subscribers:
                        caught_up_at[0] = time.monotonic()
                        caught_up.set()
            elif kind == "gap":
                gaps[0] += 1
            elif kind == "heartbeat" and first:
                first = False
                registered[0] += 1
                if registered[0] == subscribers:
                    all_registered.set()

    tasks = [asyncio.create_task(subscriber(i)) for i in range(subscribers)]
    await all_registered.wait()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        _, first_s, count_s, timeout_s = line.split()
        first, count = int(first_s), int(count_s)
        expected = list(range(first, first + count))
        caught_up.clear()
        target[:] = [first + count - 1, sum(1 for s in seen if s and s[-1] == expected[-1])]
        if target[1] == subscribers:
            caught_up_at[0] = time.monotonic()
            caught_up.set()
        try:
            await asyncio.wait_for(caught_up.wait(), float(timeout_s))
            done: float | None = caught_up_at[0]
        except TimeoutError:
            done = None
        report = {
            "exact": sum(1 for s in seen if s == expected),
            "gaps": gaps[0],
            "caught_up_at": done,
        }
        print(json.dumps(report), flush=True)
        for s in seen:
            s.clear()
    for task in tasks:
        task.cancel()
    for channel in channels:
        await channel.close()


def main(argv: list[str]) -> Any:
    address, subscribers, connections = argv[0], int(argv[1]), int(argv[2])
    asyncio.run(_fleet(address, subscribers, connections))


if __name__ == "__main__":
    main(sys.argv[1:])
