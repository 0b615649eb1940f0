"""The servicer's own work per call, in-process (issue 19 item 1): µs per 20-row call of the
registered HistoryService handler (engine read, validation, plan, response, publish to the ring
feed, metrics; logging as configured: off here), driven with a stand-in context and no gRPC,
against the floor's own Python work (parse, `del rows[1:keep]`, insert the breadcrumb, `CopyFrom`,
serialize; see floor_server.py).

Prints figures, never pass/fail: the fastest of 40 blocks of `BENCH_CALLS / 40` calls each (the
least disturbed by other work on the machine) and the median block. To compare two checkouts, run
it once with each one's `service/` first on `PYTHONPATH` (each checkout holds its own native build).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

from harness import BREADCRUMB_ROW, prepare_request, trim_request, workload
from turnkeeper.server.api.servicer import HistoryServicer
from turnkeeper.server.engine import create_engine
from turnkeeper.server.events.metered import MeteredFeed
from turnkeeper.server.events.ring import RingFeed
from turnkeeper.v1 import history_service_pb2 as svc

CALLS = int(os.environ.get("BENCH_CALLS", "20000"))
BLOCKS = 40


class _Context:
    """What the handler asks of its context on success: no deadline."""

    def time_remaining(self) -> float | None:
        return None


Handler = Callable[[bytes, Any], Coroutine[Any, Any, bytes]]


def _run(coroutine: Coroutine[Any, Any, bytes]) -> bytes:
    """Drives a handler that never suspends (an inline call) to its answer."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return bytes(stop.value)
    raise RuntimeError("the handler suspended: the request was not served inline")


def timed(call: Callable[[], object]) -> tuple[float, float]:
    """(fastest, median) µs per call over the blocks."""
    for _ in range(500):
        call()
    per_block = CALLS // BLOCKS
    blocks = []
    for _ in range(BLOCKS):
        start = time.perf_counter_ns()
        for _ in range(per_block):
            call()
        blocks.append((time.perf_counter_ns() - start) / per_block / 1000)
    return min(blocks), statistics.median(blocks)


async def main() -> None:
    feed = MeteredFeed(RingFeed(10_000))
    await feed.start()
    servicer = HistoryServicer(feed, 100_000, create_engine(None), workers=1)
    handlers = servicer.method_handlers()
    trim = cast(Handler, handlers["TrimHistory"].unary_unary)
    prepare = cast(Handler, handlers["PrepareModelCall"].unary_unary)
    context = _Context()
    trim_raw, prepare_raw = trim_request(workload(20)), prepare_request()
    answer = svc.TrimHistoryResponse.FromString(_run(trim(trim_raw, context)))
    keep = 1 + answer.outcome.dropped_messages

    def floor() -> bytes:
        request = svc.TrimHistoryRequest.FromString(trim_raw)
        rows = request.history.chat.messages
        del rows[1:keep]
        rows.insert(1, BREADCRUMB_ROW)
        response = svc.TrimHistoryResponse()
        response.history.CopyFrom(request.history)
        return response.SerializeToString()

    print(f"engine {servicer.engine.name}, {CALLS} calls each, load {os.getloadavg()[0]:.2f}")
    for name, call in (
        ("floor's Python work (20-row trim)", floor),
        ("TrimHistory, 20 rows", lambda: _run(trim(trim_raw, context))),
        ("PrepareModelCall, 20 rows", lambda: _run(prepare(prepare_raw, context))),
    ):
        fastest, median = timed(call)
        print(f"{name:36} {fastest:6.1f} µs per call (median block {median:.1f})")
    servicer.close()
    await feed.close()


if __name__ == "__main__":
    asyncio.run(main())
