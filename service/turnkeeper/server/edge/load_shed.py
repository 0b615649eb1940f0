"""Load shedding: refuse calls at once when a standing queue has formed in front of the server.

Where calls wait: grpc aio takes the calls of each method from grpc core one at a time, so past
the server's capacity they queue inside grpc core, unseen by the application, unless the server
takes them ahead (edge/accept_ahead.py) into the edge's receiving queue, which the shedder reads
directly (`refuses`).
No queue length is exposed there, but channelz counts every call the server has started; the
calls the application has seen are counted here, so the n-th call it sees arrived about when
channelz's count reached n. `QueueClock` samples that count while calls arrive and gives each
call the time it waited (in grpc core and on the event loop, up to the edge) and the
number of calls still waiting behind it.

`LoadShedder` refuses in the manner of CoDel: only once, for `interval`, every call has waited
over `target` with more than `queue_calls` behind it (a standing queue of more clients than the
server serves in time, not a burst and not a slow server with few clients) does it refuse such
calls, at once and without reading them (RESOURCE_EXHAUSTED, ErrorInfo OVERLOADED, RetryInfo), at
most a share of them; the first call that waited less, or had fewer behind it, ends that. A
refused client that honours RetryInfo stays away for the delay, so the queue shortens for the
others, down to `queue_calls` and no further. Under overload this queue's wait is nearly all of
the latency the clients see, so holding it short is what keeps their calls fast (docs/benchmarks.md,
"Overload: load shedding").
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from turnkeeper.server.contract.errors import RequestError, overloaded
from turnkeeper.server.telemetry import metrics

log = logging.getLogger("turnkeeper.server")

T = TypeVar("T")

# channelz's two readers, the functions the grpcio-channelz service answers with (not in
# grpc's type stubs): a JSON document per server, with the calls it has started.
cygrpc: Any = importlib.import_module("grpc._cython.cygrpc")

POLL_SECONDS = 0.02
"""How often channelz is read while a queue may be forming. A read costs the event loop CPU in
proportion to the server's connections (grpc core visits each one, so a read on a server with
many connections is dear), so it is read no more often than the sojourn needs (a call's arrival
is interpolated between the two reads around it), and never for more than READ_SHARE of the
time."""
SLOW_POLL_SECONDS = 0.1
"""How often channelz is read while calls arrive but few wait (under `busy`)."""
READ_SHARE = 0.025
"""At most this share of the event loop's time goes to reading channelz: after a read that took
t seconds of CPU, the next comes no sooner than t / READ_SHARE later."""
_MAX_SAMPLES = 1000
_CALLS_STARTED = b'"callsStarted":"'


def _channelz_server_ids() -> set[int]:
    ids: set[int] = set()
    start = 0
    while True:
        page = json.loads(cygrpc.channelz_get_servers(start))
        servers = page.get("server", [])
        ids.update(int(server["ref"]["serverId"]) for server in servers)
        if page.get("end", True) or not servers:
            return ids
        start = max(ids) + 1


def channelz_id(create: Callable[[], T]) -> tuple[T, int | None]:
    """Calls `create` (which makes one grpc server) and returns it with its channelz id: the one
    server that was not there before (None when that is not exactly one, or channelz is off)."""
    before = _channelz_server_ids()
    created = create()
    new = _channelz_server_ids() - before
    return created, (new.pop() if len(new) == 1 else None)


def calls_started(server_id: int) -> int | None:
    """The calls grpc core has started on that server, seen or not by the application; None
    once the server is gone."""
    try:
        document = cygrpc.channelz_get_server(server_id)
    except ValueError:
        return None
    at = document.find(_CALLS_STARTED)
    if at < 0:
        return 0  # channelz leaves out counts that are 0
    at += len(_CALLS_STARTED)
    return int(document[at : document.index(b'"', at)])


class QueueClock:
    """How long each call waited before the application saw it, and how many calls were still
    waiting behind it, from channelz's count of calls started (`started`, sampled while calls
    arrive: every `poll` seconds while at least `busy` calls wait, else every `slow_poll`, and
    further apart when a read is dear: see READ_SHARE) and the count of calls seen (`arrived`).
    The n-th call seen is taken to have arrived when the count reached n, interpolated between
    the two samples around it. Calls grpc core dropped before the application saw them
    (cancelled, expired) would pass for calls still waiting: when no call has arrived for two
    samples, none can be waiting, and the difference is written off. Sampling stops once no call
    arrived since the last sample and none waits."""

    def __init__(
        self,
        started: Callable[[], int | None],
        poll: float = POLL_SECONDS,
        slow_poll: float = SLOW_POLL_SECONDS,
        busy: int = 0,
    ) -> None:
        self._started = started
        self._poll = poll
        self._slow_poll = slow_poll
        self._busy = busy
        self._samples: deque[tuple[float, int]] = deque(maxlen=_MAX_SAMPLES)
        self._before: tuple[float, int] | None = None  # the last sample dropped from _samples
        self.seen = 0
        self.waited = 0.0  # the last call's sojourn, in seconds (0: after the last sample)
        self.known = True  # whether it is known (not for a call started after the last sample)
        self.behind = 0  # calls started after it and not seen yet, at the last sample
        self._lost = 0  # started calls that will never be seen
        self._last_started = 0
        self._seen_at_sample = 0
        self._quiet_samples = 0
        self._timer: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._longest = 0.0  # the longest sojourn since the last sample, for the gauge
        self._gauge = metrics.QUEUE_DELAY_SECONDS
        self._waits = 0.0  # the sojourns since the last sample, for the counter
        self._counter = metrics.QUEUE_WAIT_SECONDS

    def arrived(self) -> None:
        """Counts one call seen; sets its `waited` and `behind`."""
        self.seen += 1
        if self._timer is None:
            self._start()  # idle until now: it did not wait
            self.waited, self.behind, self.known = 0.0, 0, True
            return
        position = self.seen + self._lost
        samples = self._samples
        if not samples or samples[-1][1] < position:
            # It started after the last sample: its wait is not known yet.
            self.waited, self.behind, self.known = 0.0, 0, False
            return
        self.known = True
        before = self._before
        while samples[0][1] < position:
            before = samples.popleft()
        self._before = before
        at, count = samples[0]
        if before is not None:
            # Calls started evenly between the two samples.
            at -= (at - before[0]) * (count - position) / (count - before[1])
        assert self._loop is not None
        self.waited = waited = self._loop.time() - at
        self.behind = self._last_started - position
        self._waits += waited
        if waited > self._longest:
            self._longest = waited

    def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._quiet_samples = 0
        self._timer = self._loop.call_soon(self._sample)

    def _sample(self) -> None:
        assert self._loop is not None
        cost = time.thread_time()
        started = self._started()
        cost = time.thread_time() - cost
        if started is None:
            self._timer = None
            return
        seen = self.seen
        if seen == self._seen_at_sample:
            self._quiet_samples += 1
        else:
            self._quiet_samples = 0
        self._seen_at_sample = seen
        waiting = started - seen - self._lost
        # Nothing arrived for two samples: whatever channelz still counts is gone, not waiting.
        # (A call cannot be seen before it started: a negative count is a write-off too large.)
        if waiting < 0 or (waiting and self._quiet_samples >= 2):
            self._lost += waiting
            waiting = 0
        self._samples.append((self._loop.time(), started))
        self._last_started = started
        self._gauge.set(self._longest)
        self._longest = 0.0
        if self._waits:
            self._counter.inc(self._waits)
            self._waits = 0.0
        if self._quiet_samples >= 2 or (self._quiet_samples and not waiting):
            # Idle (none arrived, none waits): no sampling until the next call.
            self._samples.clear()
            self._before = None
            self._timer = None
            return
        poll = self._poll if waiting >= self._busy else self._slow_poll
        self._timer = self._loop.call_later(max(poll, cost / READ_SHARE), self._sample)


_RETRY_SPREAD = (0.5, 0.75, 1.0, 1.25, 1.5, 0.625, 0.875, 1.125, 1.375)
"""Refused clients are told to come back after these shares of the retry delay, in turn, so that
they do not all come back at once."""


MAX_REFUSED_SHARE = 0.4
"""Of the calls seen within a retry delay, at most this share is refused: a client that ignores
RetryInfo comes straight back, and refusing it again and again would leave the server refusing
instead of serving. (Clients that honour it need far fewer refusals, so the bound binds only on
clients that do not.)"""


class WaitingCalls(Protocol):
    """A queue of calls the application has seen and not served yet (edge/admission.py)."""

    @property
    def waiting(self) -> int: ...

    def oldest_wait(self) -> float: ...


class LoadShedder:
    """Refuses a unary call when a standing queue has formed, in the manner of CoDel: once for
    `interval` seconds every call has waited over `target` with more than `queue_calls` calls
    still waiting behind it, every such call is refused, until one waits less or has fewer
    behind. With closed-loop clients, more than `queue_calls` waiting means more clients than
    the server serves in time; `queue_calls` clients never see a refusal, however slow the
    server. Refusing stops by itself at `queue_calls` behind, so the queue is held there, not
    emptied: a refused client that honours RetryInfo stays away for its delay, and the clients
    left are those the server serves in time. Within a retry delay at most MAX_REFUSED_SHARE of
    the calls are refused. `target` 0 never refuses. Sees no queue until `watch` gives it the
    server's channelz id."""

    def __init__(
        self, target: float, queue_calls: int, interval: float, retry_after_seconds: float
    ) -> None:
        self.target = target
        self.queue_calls = queue_calls
        self.interval = interval
        self.clock: QueueClock | None = None
        self._above_since: float | None = None
        self._refused_at = -float("inf")
        self.retry_after_seconds = retry_after_seconds
        # (time, calls seen) of the refusals within the last retry delay, for their share.
        self._recent: deque[tuple[float, int]] = deque()
        self.refused = 0
        message = (
            f"over {queue_calls} calls have waited over {target * 1e3:.0f} ms for this server "
            f"for {interval * 1e3:.0f} ms (--shed-queue-calls, --shed-queue-ms, "
            "--shed-interval-ms)"
        )
        self._errors = [
            overloaded("queue_delay", message, retry_after_seconds * share)
            for share in _RETRY_SPREAD
        ]
        self._counter = metrics.CALLS_SHED

    def watch(self, server_id: int | None) -> None:
        if not self.target:
            return
        if server_id is None:
            log.warning(
                "channelz does not show this server: load shedding (--shed-queue-ms) is off"
            )
            return
        # Sampled often only while the queue is near the size that refuses.
        self.clock = QueueClock(lambda: calls_started(server_id), busy=self.queue_calls // 2)

    def arrived(self) -> None:
        """Counts a call the application sees (every call, before anything else)."""
        if self.clock is not None:
            self.clock.arrived()

    def refuses(self, queue: WaitingCalls) -> bool:
        """Whether the call that arrived last is refused. `queue`: the calls that wait in the
        edge, already seen (they wait there when the server takes calls ahead of grpc's serving
        loop, edge/accept_ahead.py): the call waits behind them, as long as the oldest of them
        has waited so far at least, after its own wait in grpc core."""
        clock = self.clock
        if clock is None:
            return False
        waiting = queue.waiting
        if waiting:
            waited = queue.oldest_wait() + (clock.waited if clock.known else 0.0)
            behind = waiting + clock.behind
        elif clock.known:
            waited, behind = clock.waited, clock.behind
        else:
            return False  # (an unknown wait neither starts nor ends a standing queue)
        if waited < self.target or behind <= self.queue_calls:
            self._above_since = None
            return False
        now = asyncio.get_running_loop().time()
        if self._above_since is None:
            # A queue that stood until just now stands still (as CoDel re-enters its dropping
            # state): no new interval of grace.
            stood = now - self._refused_at < self.interval
            self._above_since = now - self.interval if stood else now
        if now - self._above_since < self.interval:
            return False
        recent = self._recent
        while recent and recent[0][0] < now - self.retry_after_seconds:
            recent.popleft()
        if recent and len(recent) >= MAX_REFUSED_SHARE * (clock.seen - recent[0][1]):
            return False
        recent.append((now, clock.seen))
        self._refused_at = now
        self.refused += 1
        self._counter.inc()
        return True

    def refusal(self) -> RequestError:
        return self._errors[self.refused % len(self._errors)]
