"""edge/load_shed.py: each call's wait from channelz's count of calls started, and when to shed."""

from __future__ import annotations

import asyncio
import gc
import time

import grpc
import pytest
from turnkeeper.server.edge.admission import Admission, AdmissionLimits
from turnkeeper.server.edge.load_shed import (
    POLL_SECONDS,
    READ_SHARE,
    SLOW_POLL_SECONDS,
    LoadShedder,
    QueueClock,
    calls_started,
    channelz_id,
)
from turnkeeper.server.edge.wrapper import Edge


class Waiting:
    """A stand-in for the edge's receiving queue: `waiting` calls, the oldest for `oldest` s."""

    def __init__(self, waiting: int = 0, oldest: float = 0.0) -> None:
        self.waiting = waiting
        self.oldest = oldest

    def oldest_wait(self) -> float:
        return self.oldest


NOTHING_WAITING = Waiting()


class Started:
    """A stand-in for channelz's count of the calls a server has started."""

    def __init__(self) -> None:
        self.count = 0
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.count


async def _trickle(shedder: LoadShedder | QueueClock, polls: int) -> None:
    """One call seen per sample for `polls` samples, as a busy server takes them."""
    for _ in range(polls):
        await asyncio.sleep(POLL_SECONDS)
        shedder.arrived()


async def test_a_call_seen_after_waiting_is_given_its_wait_and_the_calls_behind_it() -> None:
    started = Started()
    clock = QueueClock(started)
    started.count = 1
    clock.arrived()  # the first call starts the sampling; it waited for nothing
    assert (clock.waited, clock.behind) == (0.0, 0)
    started.count = 101  # 100 more arrive before the first sample
    await _trickle(clock, 3)
    assert clock.waited >= 2.5 * POLL_SECONDS
    assert clock.behind == 101 - 4
    started.count = 151  # 50 more
    await _trickle(clock, 1)
    for _ in range(101 - 5):
        clock.arrived()  # the rest of the first hundred
    assert clock.behind == 50 and clock.waited >= 3.5 * POLL_SECONDS
    first_hundred = clock.waited
    clock.arrived()  # one of the 50 that arrived samples later: it waited that much less
    assert clock.waited <= first_hundred - 0.9 * POLL_SECONDS


async def test_a_call_that_started_between_two_samples_is_given_a_wait_between_theirs() -> None:
    started = Started()
    clock = QueueClock(started, poll=0.05)
    started.count = 1
    clock.arrived()  # sampled at once: 1 started
    await asyncio.sleep(0.01)
    started.count = 11  # 10 more start before the next sample (0.05 s later)
    await asyncio.sleep(0.06)
    clock.arrived()  # the 2nd call started 0.1 of the way between the two samples
    first = clock.waited
    for _ in range(8):
        clock.arrived()
    clock.arrived()  # the 11th started last: 0.9 of the way later
    last = clock.waited
    # Not the time of the sample after them (which would give all ten the same, shorter, wait).
    assert clock._before is not None
    (one, _), (eleven, _) = clock._before, clock._samples[0]
    assert eleven - one >= 0.05
    assert abs((first - last) - 0.9 * (eleven - one)) < 1e-3, (first, last, one, eleven)


async def test_channelz_is_read_often_only_while_a_queue_may_be_forming() -> None:
    started = Started()
    clock = QueueClock(started, poll=POLL_SECONDS, slow_poll=SLOW_POLL_SECONDS, busy=10)
    started.count = 1
    clock.arrived()
    begin = time.monotonic()
    for _ in range(6):  # one call waiting at a time: slow
        await asyncio.sleep(SLOW_POLL_SECONDS / 2)
        started.count += 1
        clock.arrived()
    slow = started.reads
    assert slow <= 2 + (time.monotonic() - begin) / SLOW_POLL_SECONDS, slow
    started.count += 50  # 50 waiting: fast, from the next (slow) read on
    begin = time.monotonic()
    for _ in range(20):
        await asyncio.sleep(POLL_SECONDS)
        clock.arrived()
        started.count += 1
    fast = (time.monotonic() - begin - SLOW_POLL_SECONDS) / POLL_SECONDS
    assert started.reads - slow >= fast / 2, (started.reads, slow, fast)


async def test_reading_channelz_takes_at_most_its_share_of_the_loop() -> None:
    """A read as dear as channelz's on a server with hundreds of connections (several ms) is
    made that much less often, however long the queue."""
    started = Started()

    def dear() -> int:
        spin = time.thread_time() + 0.004
        while time.thread_time() < spin:
            pass
        return started()

    clock = QueueClock(dear, poll=0.001, slow_poll=0.001)
    started.count = 1
    clock.arrived()
    begin = time.monotonic()
    while time.monotonic() - begin < 0.6:
        await asyncio.sleep(0.001)
        started.count += 2  # a queue that keeps growing: sampled as often as allowed
        clock.arrived()
    elapsed = time.monotonic() - begin
    assert started.reads >= 2
    # Each read took at least 4 ms of CPU, so the next came at least 4 ms / READ_SHARE later.
    assert started.reads <= 1 + elapsed / (0.004 / READ_SHARE) + 1, started.reads


async def test_an_isolated_call_costs_two_reads_of_channelz() -> None:
    started = Started()
    clock = QueueClock(started, poll=0.01, slow_poll=0.01)
    started.count = 1
    clock.arrived()
    await asyncio.sleep(0.1)
    # At once (1 started), then nothing arrived and nothing waits: idle.
    assert started.reads == 2


async def test_calls_grpc_dropped_before_they_were_seen_are_written_off_once_quiet() -> None:
    started = Started()
    clock = QueueClock(started)
    started.count = 1
    clock.arrived()
    started.count = 31  # 30 calls that expire in grpc core: never seen
    await asyncio.sleep(POLL_SECONDS * 4)  # no arrival for two samples: none is waiting
    started.count = 32
    clock.arrived()
    started.count = 33
    await _trickle(clock, 2)
    # Had the 30 not been written off, this call would pass for one that waited 2 samples.
    assert clock.waited < 1.5 * POLL_SECONDS
    assert clock.behind == 0


async def test_sheds_only_a_standing_queue_of_more_calls_than_its_floor() -> None:
    started = Started()
    shedder = LoadShedder(target=0.02, queue_calls=64, interval=0.05, retry_after_seconds=1.0)
    clock = shedder.clock = QueueClock(started)
    started.count = 1
    shedder.arrived()
    started.count = 301  # 300 calls waiting
    await _trickle(shedder, 2)
    assert not shedder.refuses(NOTHING_WAITING)  # the oldest has not waited past the target yet
    await _trickle(shedder, 1)
    assert clock.waited >= 0.02 and not shedder.refuses(
        NOTHING_WAITING
    )  # past the target, but not for a whole interval yet
    await _trickle(shedder, 6)
    assert clock.behind >= 64 and clock.waited >= 0.07
    assert shedder.refuses(NOTHING_WAITING)
    error = shedder.refusal()
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.metadata["limit"] == "queue_delay"
    # At the floor of calls waiting behind (64 clients and more), however long they waited:
    # served.
    while clock.behind > 64:
        shedder.arrived()
    assert clock.behind == 64 and clock.waited >= 0.07 and not shedder.refuses(NOTHING_WAITING)


async def test_a_call_of_unknown_wait_neither_starts_nor_ends_a_standing_queue() -> None:
    started = Started()
    shedder = LoadShedder(target=0.02, queue_calls=64, interval=0.05, retry_after_seconds=1.0)
    clock = shedder.clock = QueueClock(started)
    started.count = 1
    shedder.arrived()
    started.count = 301
    refused = []
    for _ in range(9):
        await _trickle(shedder, 1)
        refused.append(
            shedder.refuses(NOTHING_WAITING)
        )  # (the standing queue is timed from the first over)
    assert clock.known and any(refused)
    # A call that started after channelz's last read (when reads are far apart): not refused,
    # and the queue still stands for the next call whose wait is known.
    standing_since = shedder._above_since
    clock.known = False
    assert not shedder.refuses(NOTHING_WAITING)
    assert shedder._above_since == standing_since is not None
    for _ in range(3):  # (past the refused share)
        shedder.arrived()
    assert clock.known and shedder.refuses(NOTHING_WAITING)


async def test_a_standing_queue_in_the_edge_is_shed_though_grpc_core_holds_none() -> None:
    """Calls taken ahead of grpc's serving loop wait in the edge's receiving queue: channelz's
    count then shows none waiting, and the shedder reads that queue instead."""
    started = Started()
    shedder = LoadShedder(target=0.02, queue_calls=64, interval=0.05, retry_after_seconds=1.0)
    shedder.clock = QueueClock(started)
    queue = Waiting(waiting=200, oldest=0.03)
    refused = []
    for _ in range(8):
        started.count += 1
        shedder.arrived()  # each one seen at once: nothing waits in grpc core
        refused.append(shedder.refuses(queue))
        await asyncio.sleep(POLL_SECONDS)
    assert not refused[0] and any(refused)  # once it has stood for the interval
    assert not shedder.refuses(Waiting(waiting=64, oldest=0.5))  # at the floor: served
    assert not shedder.refuses(Waiting(waiting=200, oldest=0.01))  # short waits: served


async def test_refused_clients_are_told_different_delays() -> None:
    shedder = LoadShedder(target=0.05, queue_calls=64, interval=0.1, retry_after_seconds=1.0)
    delays = set()
    for refused in range(9):
        shedder.refused = refused
        retry_info = shedder.refusal().details[0]
        delays.add(retry_info.retry_delay.ToNanoseconds())  # type: ignore[attr-defined]
    assert len(delays) == 9 and min(delays) == 500_000_000 and max(delays) == 1_500_000_000


async def test_off_never_refuses() -> None:
    shedder = LoadShedder(target=0.0, queue_calls=0, interval=0.1, retry_after_seconds=1.0)
    shedder.watch(1)
    shedder.arrived()
    assert shedder.clock is None and not shedder.refuses(NOTHING_WAITING)


async def test_channelz_counts_the_calls_a_server_started() -> None:
    server, server_id = channelz_id(lambda: grpc.aio.server(options=[("grpc.so_reuseport", 0)]))
    assert server_id is not None
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        assert calls_started(server_id) == 0
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError):
                await channel.unary_unary("/no.Such/Method")(b"", timeout=5)
        assert calls_started(server_id) == 1
    finally:
        await server.stop(0)
    del server
    gc.collect()
    assert calls_started(server_id) is None


class _ExpiredContext:
    """A servicer context whose call's deadline has already passed (grpc's race: the call was
    handed to the server just before grpc noticed its deadline)."""

    def __init__(self) -> None:
        self.aborted: grpc.StatusCode | None = None
        self._trailers: tuple[tuple[str, str], ...] = ()

    def time_remaining(self) -> float:
        return -0.5

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    async def read(self) -> bytes:
        return b""

    def set_trailing_metadata(self, trailers: tuple[tuple[str, str], ...]) -> None:
        self._trailers = trailers

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailers

    def code(self) -> grpc.StatusCode | None:
        return self.aborted

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = code
        raise grpc.aio.AbortError(details)


async def test_a_call_handed_over_after_its_deadline_is_dropped_without_work() -> None:
    worked: list[bytes] = []

    async def behavior(request: bytes, context: object) -> bytes:
        worked.append(request)
        return b""

    admission = Admission(
        AdmissionLimits(max_inflight_bytes=1 << 20, heavy_call_bytes=1 << 20, max_heavy_calls=1)
    )
    shedder = LoadShedder(target=0.05, queue_calls=64, interval=0.1, retry_after_seconds=1.0)
    edge = Edge(admission, (), shedder)
    handler = edge.wrap(
        "/turnkeeper.v1.HistoryService/ResolveBudget", grpc.unary_unary_rpc_method_handler(behavior)
    )
    # The wrapper reads the one request message itself (from the context).
    assert handler.request_streaming and handler.request_deserializer is None
    context = _ExpiredContext()
    with pytest.raises(grpc.aio.AbortError):
        await handler.stream_unary(iter(()), context)  # type: ignore[arg-type,misc]
    assert context.aborted == grpc.StatusCode.DEADLINE_EXCEEDED
    assert worked == [] and admission.calls == 0
