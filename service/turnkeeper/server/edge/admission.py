"""Admission control: a budget of in-flight request bytes, and queues for the scarce slots.

Checked when a unary call's request has been received and before any work is done on it. The byte
budget is the hard bound on memory: a call that would pass it is refused at once, and a call still
receiving its request holds a reservation of the largest request against it (`_receive_room`).
A heavy call over the heavy-call cap waits in a FIFO queue for a slot, and a call over the
receiving-call cap in a queue that serves first the call that waited longest for its method's
cost (`SlotQueue`), up to its deadline or the configured wait, whichever is first; only then is it
refused with RESOURCE_EXHAUSTED (ErrorInfo reason OVERLOADED + RetryInfo). A call whose deadline
has passed is dropped without work. Everything runs on the event loop, so plain counters need no
lock.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from turnkeeper.server.allocator import ReturnAfterWaves
from turnkeeper.server.contract.errors import RequestError, overloaded
from turnkeeper.server.telemetry import metrics
from turnkeeper.v1 import errors_pb2

HEAVY = "heavy"
RECEIVING = "receiving"
# A kind of call's cost before its first call ends, the least a cost is taken to be (a timer's
# resolution must not make a kind look free), and the weight of each call in the average.
_FIRST_COST_SECONDS = 0.001
_LEAST_COST_SECONDS = 0.00005
_COST_WEIGHT = 0.05


@dataclass(frozen=True)
class AdmissionLimits:
    """`max_inflight_bytes`: the request bytes all admitted calls may hold together.
    `heavy_call_bytes`: a request at least this big is heavy; `max_heavy_calls` run at once, one
    more waits up to `heavy_wait_seconds` for a slot.
    `max_receiving_calls`: calls whose request is still arriving, at once (gRPC holds each whole);
    one more waits up to `receive_wait_seconds` for a slot.
    `retry_after_seconds`: the RetryInfo delay a refused client is given.
    `max_request_bytes`: a bigger request is refused (REQUEST_TOO_LARGE) before any work."""

    max_inflight_bytes: int
    heavy_call_bytes: int
    max_heavy_calls: int
    max_receiving_calls: int = 8
    receive_wait_seconds: float = 5.0
    heavy_wait_seconds: float = 5.0
    retry_after_seconds: float = 1.0
    max_request_bytes: int | None = None


class ServiceCost:
    """What one kind of call (a method) costs, as the time from taking its receiving slot to
    its end, a moving average over its recent calls: the receiving queue serves waiting calls
    by how long they waited for their cost."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float = _FIRST_COST_SECONDS) -> None:
        self.seconds = seconds

    def observe(self, seconds: float) -> None:
        self.seconds += (max(seconds, _LEAST_COST_SECONDS) - self.seconds) * _COST_WEIGHT


_ANY = ServiceCost()
"""The cost of calls that name none: one queue of them, served in FIFO order."""


class SlotQueue:
    """`limit` slots and the calls waiting for one. A freed slot goes to the call that has waited
    longest for its cost (its kind's `ServiceCost`): of each kind the oldest, and among the
    kinds the one whose wait is the greatest multiple of its cost, so that under a flood of one
    kind the others wait about as many times their own cost, not the flood's queue, and a kind's
    share of the traffic does not set its wait. Calls of one kind are served in FIFO order.
    `room`, when given, must also hold for a slot to be taken (the receiving queue's bytes)."""

    def __init__(self, name: str, limit: int, room: Callable[[], bool] | None = None) -> None:
        self.name = name
        self.limit = limit
        self.used = 0
        self._room = room
        # (when it began to wait, its future) by kind of call, oldest first.
        self._waiters: dict[ServiceCost, deque[tuple[float, asyncio.Future[None]]]] = {}
        self.waiting = 0  # waiters still in the queue (cancelled ones are skipped lazily)
        self._length = metrics.ADMISSION_QUEUE_LENGTH.labels(name)

    def try_take(self) -> bool:
        """Takes a slot when one is free and nobody queued before us."""
        if self.used < self.limit and not self.waiting and (self._room is None or self._room()):
            self.used += 1
            return True
        return False

    def oldest_wait(self) -> float:
        """How long the call that has waited longest has waited so far, in seconds."""
        if not self.waiting:
            return 0.0
        now = time.monotonic()
        return max((now - queue[0][0] for queue in self._waiters.values() if queue), default=0.0)

    async def take(self, wait: float, cost: ServiceCost = _ANY) -> bool:
        """Waits up to `wait` seconds for a slot; False when none came free. Cancelling the
        waiting call takes it out of the queue."""
        if self.try_take():
            return True
        started = time.monotonic()
        outcome = "refused"
        granted = False
        if wait > 0:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            queue = self._waiters.get(cost)
            if queue is None:
                queue = self._waiters[cost] = deque()
            queue.append((started, future))
            self.waiting += 1
            self._length.set(self.waiting)
            try:
                await asyncio.wait((future,), timeout=wait)
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            finally:
                if future.done():
                    granted = outcome != "cancelled"
                    if not granted:  # handed a slot while being cancelled: pass it on
                        self.give()
                else:
                    future.cancel()
                    self.waiting -= 1
                    self._length.set(self.waiting)
                metrics.ADMISSION_WAIT_SECONDS.labels(
                    self.name, "admitted" if granted else outcome
                ).observe(time.monotonic() - started)
        return granted

    def give(self) -> None:
        """Frees a slot: it goes to the waiter that has waited longest for its cost, or back to
        the pool."""
        self.used -= 1
        if self.waiting:  # (what wake would find, without its call)
            self.wake()

    def wake(self) -> None:
        """Hands free slots to waiters while there is room (after `give`, or when what `room`
        depends on changed)."""
        room = self._room
        while self.waiting and self.used < self.limit and (room is None or room()):
            future = self._next()
            if future is None:
                return
            self.waiting -= 1
            self._length.set(self.waiting)
            self.used += 1
            future.set_result(None)

    def _next(self) -> asyncio.Future[None] | None:
        """Takes out the waiter whose wait is the greatest multiple of its kind's cost."""
        now = time.monotonic()
        best: deque[tuple[float, asyncio.Future[None]]] | None = None
        best_ratio = -1.0
        for cost, queue in self._waiters.items():
            while queue and queue[0][1].done():  # cancelled or timed out: already counted out
                queue.popleft()
            if queue:
                ratio = (now - queue[0][0]) / cost.seconds
                if ratio > best_ratio:
                    best, best_ratio = queue, ratio
        return None if best is None else best.popleft()[1]


class Admission:
    """The shared counters: `admit` when a call's request is in, `release` when it ends."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self.inflight_bytes = 0
        self.calls = 0
        self.heavy = SlotQueue(HEAVY, limits.max_heavy_calls)
        # What one receiving call may hold before its size is known: the largest request.
        self.receive_reserve = limits.max_request_bytes or 0
        self.receiving = SlotQueue(RECEIVING, limits.max_receiving_calls, self._receive_room)
        self.refused = 0
        # Set when the server begins to drain: calls that arrive from then on are refused with
        # UNAVAILABLE (retry elsewhere), never cancelled half-way by the shutdown.
        self.draining = False
        # When the memory a wave of heavy calls freed goes back is the allocator's to decide.
        self._memory_return = ReturnAfterWaves(lambda: self.heavy.used > 0)
        # wait_idle's callers (the drain at shutdown), woken when the last admitted call ends: an
        # asyncio.Event cleared and set again by every call cost each one two calls.
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._last_activity = 0.0  # time.monotonic() of the last call start or end

    @property
    def heavy_calls(self) -> int:
        return self.heavy.used

    @property
    def reserved_bytes(self) -> int:
        """What the calls still receiving their request hold of the budget."""
        return self.receiving.used * self.receive_reserve

    def _receive_room(self) -> bool:
        """Whether one more call may start receiving: gRPC sends no length before the message,
        so each receiving call reserves the largest request against the in-flight budget until
        its bytes are in and counted. The first one always may (what is admitted was admitted
        under the budget, so memory stays within the budget plus one largest request), so a
        small call never waits for big ones to finish, only for one to arrive."""
        if not self.receive_reserve or not self.receiving.used:
            return True
        return (
            self.inflight_bytes + (self.receiving.used + 1) * self.receive_reserve
            <= self.limits.max_inflight_bytes
        )

    async def admit(
        self, request_bytes: int, remaining: float | None = None, receiving: bool = False
    ) -> bool:
        """Counts the call in (`count_in`), then waits in the heavy-call queue when the call is
        heavy and every slot is taken (`heavy_slot`). Returns whether the call is heavy, for
        `release`."""
        heavy = self.count_in(request_bytes, receiving)
        if heavy:
            await self.heavy_slot(request_bytes, remaining)
        return heavy

    def count_in(self, request_bytes: int, receiving: bool = False) -> bool:
        """Counts a received request's bytes in, at once; whether the call is heavy (it then
        takes a heavy slot, `heavy_slot`, before it runs). Raises RequestError
        (RESOURCE_EXHAUSTED) when the request would pass the byte budget. `receiving`: the call
        holds a receiving slot, given back once its bytes are counted in (or refused), so that
        its reservation and its bytes never both leave the budget free."""
        limits = self.limits
        try:
            if limits.max_request_bytes is not None and request_bytes > limits.max_request_bytes:
                raise RequestError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    errors_pb2.ERROR_REASON_REQUEST_TOO_LARGE,
                    f"the request is {request_bytes} bytes; this server accepts at most "
                    f"{limits.max_request_bytes} (--max-receive-bytes)",
                    metadata={
                        "limit": "max_receive_bytes",
                        "max_bytes": str(limits.max_request_bytes),
                    },
                )
            # A call alone over the budget would never be admitted: let it run when nothing else
            # does.
            inflight = self.inflight_bytes
            if inflight and inflight + request_bytes > limits.max_inflight_bytes:
                if request_bytes >= limits.heavy_call_bytes:
                    self._return_freed_memory()
                raise self._refusal(
                    "max_inflight_request_bytes",
                    f"{inflight} request bytes are in flight; {request_bytes} more would "
                    f"pass this server's budget of {limits.max_inflight_bytes}",
                )
            # The bytes are held from here on, waiting or running, so they count from here on.
            self._count_in(request_bytes)
        finally:
            if receiving:
                self.receiving.give()
        return request_bytes >= limits.heavy_call_bytes

    async def heavy_slot(self, request_bytes: int, remaining: float | None) -> None:
        """Waits in FIFO order for a heavy slot, for a heavy call counted in (`count_in`), up to
        `remaining` (the call's time left before its deadline, if it has one) or the configured
        wait. Counts the call out and raises RequestError(RESOURCE_EXHAUSTED) when none came
        free in time."""
        limits = self.limits
        wait = (
            limits.heavy_wait_seconds
            if remaining is None
            else min(limits.heavy_wait_seconds, remaining)
        )
        try:
            granted = await self.heavy.take(wait)
        except BaseException:
            self._count_out(request_bytes)
            raise
        if not granted:
            self._count_out(request_bytes)
            self._return_freed_memory()
            raise self._refusal(
                "max_heavy_calls",
                f"{self.heavy.used} requests of {limits.heavy_call_bytes} bytes or more are "
                f"running and {self.heavy.waiting} are waiting; this server runs at most "
                f"{limits.max_heavy_calls} at once and none came free in {wait:.1f} s",
            )

    def release(self, request_bytes: int, heavy: bool) -> None:
        if heavy:
            self.heavy.give()
        self._count_out(request_bytes)
        if heavy and not self.heavy.used:
            self._return_freed_memory()

    def sent(self, _context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """A heavy call's RPC ended (gRPC's done callback): its response has been sent and gRPC
        let go of it, which can be well after `release` when big responses go to slow readers,
        so the trim after a wave waits for this too."""
        if not self.heavy.used:
            self._return_freed_memory()

    def _return_freed_memory(self) -> None:
        """A heavy call let go of its memory (or was refused: grpc lets go of its bytes after
        that), for the trim once the wave is over."""
        self._memory_return.heavy_call_ended()

    def _count_in(self, request_bytes: int) -> None:
        self.inflight_bytes += request_bytes
        self.calls += 1
        self._last_activity = time.monotonic()

    def _count_out(self, request_bytes: int) -> None:
        self.inflight_bytes -= request_bytes
        self.calls -= 1
        receiving = self.receiving
        if receiving.waiting:  # (what wake would find, without its call)
            receiving.wake()
        self._last_activity = time.monotonic()
        if not self.calls and self._idle_waiters:
            for waiter in self._idle_waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def draining_refusal(self) -> RequestError:
        """The answer to a call that arrived while draining. It counts as activity: the drain
        waits until calls stop arriving (`wait_quiet`), since grpc cancels the calls it still
        holds unseen when the server stops, and a loaded server takes them a while."""
        self._last_activity = time.monotonic()
        return shutting_down_refusal()

    def quiet_for(self) -> float:
        """Seconds since a call last started or ended (TrimEvents delivery gives way to calls,
        events/common.py `Pacer`)."""
        return time.monotonic() - self._last_activity

    async def wait_quiet(self, quiet: float, limit: float) -> None:
        """Waits until no call has started or ended for `quiet` seconds, or `limit` passed."""
        end = time.monotonic() + limit
        while (now := time.monotonic()) < end:
            pause = self._last_activity + quiet - now
            if pause <= 0:
                return
            await asyncio.sleep(min(pause, end - now))

    async def wait_idle(self, limit: float) -> bool:
        """Waits up to `limit` seconds for every admitted call to end; True if they did."""
        if self.calls:
            idle: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(idle)
            try:
                await asyncio.wait((idle,), timeout=limit)
            finally:
                self._idle_waiters.remove(idle)
        return not self.calls

    async def receiving_slot(self, cost: ServiceCost = _ANY) -> bool:
        """Waits (up to `receive_wait_seconds`; among calls of its kind, `cost`, in FIFO order,
        see `SlotQueue`) until fewer than `max_receiving_calls` calls are receiving their
        request and the budget has room for one more reservation (`_receive_room`); False when
        none came free. A waiting call's bytes stay in the client: the server has not asked for
        them."""
        return await self.receiving.take(self.limits.receive_wait_seconds, cost)

    def receiving_refusal(self) -> RequestError:
        if self.receiving.used < self.limits.max_receiving_calls:
            return self._refusal(
                "max_inflight_request_bytes",
                f"{self.inflight_bytes} request bytes are in flight and {self.receiving.used} "
                f"requests are arriving, each holding {self.receive_reserve} bytes (the largest "
                f"request) until it is in; this server's budget is "
                f"{self.limits.max_inflight_bytes}",
            )
        return self._refusal(
            "max_receiving_calls",
            f"{self.receiving.used} requests are arriving and {self.receiving.waiting} are "
            f"waiting; this server receives at most {self.limits.max_receiving_calls} at once",
        )

    def _refusal(self, limit: str, message: str) -> RequestError:
        self.refused += 1
        return overloaded(limit, message, self.limits.retry_after_seconds)


def shutting_down_refusal() -> RequestError:
    return RequestError(
        grpc.StatusCode.UNAVAILABLE,
        errors_pb2.ERROR_REASON_SHUTTING_DOWN,
        "the sidecar is shutting down; send the call to another replica or after it restarts",
    )
