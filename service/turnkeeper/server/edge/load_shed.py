"""Load shedding: refuse calls at once when a standing queue has formed in front of the server.

Where calls wait (issue 19, measured): grpc aio takes the calls of each method from grpc core one
at a time, so past the server's capacity they queue inside grpc core, unseen by the application.
No queue length is exposed there, but channelz counts every call the server has started; the
calls the application has seen are counted here, so the n-th call it sees arrived about when
channelz's count reached n. `QueueClock` samples that count while calls arrive and gives each
call the time it waited (in grpc core and on the event loop, up to the interceptor) and the
number of calls still waiting behind it.

`LoadShedder` refuses in the manner of CoDel: only once, for `interval`, every call has waited
over `target` with `queue_calls` more behind it (a standing queue of more clients than the server
serves in time, not a burst and not a slow server with few clients) does it refuse such calls, at
once and without reading them (RESOURCE_EXHAUSTED, ErrorInfo OVERLOADED, RetryInfo), at most a
share of them; the first call that waited less, or had fewer behind it, ends that. A refused
client that honours RetryInfo stays away for the delay, so the queue shortens for the others.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import re
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from turnkeeper.server.api.errors import RequestError, overloaded
from turnkeeper.server.telemetry import metrics

log = logging.getLogger("turnkeeper.server")

T = TypeVar("T")

# channelz's two readers, the functions the grpcio-channelz service answers with (not in
# grpc's type stubs): a JSON document per server, with the calls it has started.
cygrpc: Any = importlib.import_module("grpc._cython.cygrpc")

POLL_SECONDS = 0.01
"""How often channelz is read while calls arrive (about 0.1 ms each): the sojourn's resolution."""
_MAX_SAMPLES = 1000
_CALLS_STARTED = re.compile(rb'"callsStarted":"(\d+)"')


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
    found = _CALLS_STARTED.search(document)
    return int(found.group(1)) if found else None


class QueueClock:
    """How long each call waited before the application saw it, and how many calls were still
    waiting behind it, from channelz's count of calls started (`started`, sampled every `poll`
    seconds while calls arrive) and the count of calls seen (`arrived`). Calls grpc core dropped
    before the application saw them (cancelled, expired) would pass for calls still waiting:
    when no call has arrived for two samples, none can be waiting, and the difference is written
    off."""

    def __init__(self, started: Callable[[], int | None], poll: float = POLL_SECONDS) -> None:
        self._started = started
        self._poll = poll
        self._samples: deque[tuple[float, int]] = deque(maxlen=_MAX_SAMPLES)
        self.seen = 0
        self.waited = 0.0  # the last call's sojourn, in seconds (0: after the last sample)
        self.behind = 0  # calls started after it and not seen yet, at the last sample
        self._lost = 0  # started calls that will never be seen
        self._last_started = 0
        self._seen_at_sample = 0
        self._quiet_samples = 0
        self._timer: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._longest = 0.0  # the longest sojourn since the last sample, for the gauge
        self._gauge = metrics.QUEUE_DELAY_SECONDS

    def arrived(self) -> None:
        """Counts one call seen; sets its `waited` and `behind`."""
        self.seen += 1
        if self._timer is None:
            self._start()
            self.waited, self.behind = 0.0, 0
            return
        position = self.seen + self._lost
        samples = self._samples
        while samples and samples[0][1] < position:
            samples.popleft()
        if not samples:
            self.waited, self.behind = 0.0, 0
            return
        assert self._loop is not None
        self.waited = waited = self._loop.time() - samples[0][0]
        self.behind = self._last_started - position
        if waited > self._longest:
            self._longest = waited

    def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._quiet_samples = 0
        self._timer = self._loop.call_soon(self._sample)

    def _sample(self) -> None:
        assert self._loop is not None
        started = self._started()
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
        self._samples.append((self._loop.time(), started))
        self._last_started = started
        self._gauge.set(self._longest)
        self._longest = 0.0
        if self._quiet_samples >= 2:
            self._samples.clear()
            self._timer = None  # idle: no sampling until the next call
            return
        self._timer = self._loop.call_later(self._poll, self._sample)


_RETRY_SPREAD = (0.5, 0.75, 1.0, 1.25, 1.5, 0.625, 0.875, 1.125, 1.375)
"""Refused clients are told to come back after these shares of the retry delay, in turn, so that
they do not all come back at once."""


MAX_REFUSED_SHARE = 1 / 3


class LoadShedder:
    """Refuses a unary call when a standing queue has formed: for `interval` seconds every call
    has waited over `target` with at least `queue_calls` calls still waiting behind it. With
    closed-loop clients, more than `queue_calls` waiting means more clients than the server
    serves within `target`; fewer never trigger it, however slow the server is. Within a retry
    delay it refuses at most MAX_REFUSED_SHARE of the calls. `target` 0 never refuses. Sees no
    queue until `watch` gives it the server's channelz id."""

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
        self.clock = QueueClock(lambda: calls_started(server_id))

    def arrived(self) -> None:
        """Counts a call the application sees (every call, before anything else)."""
        if self.clock is not None:
            self.clock.arrived()

    def refuses(self) -> bool:
        """Whether the call that arrived last is refused."""
        clock = self.clock
        if clock is None or clock.waited < self.target or clock.behind < self.queue_calls:
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
        # At most MAX_REFUSED_SHARE of the calls within a retry delay: a refused client that
        # honours RetryInfo is away that long (about a tenth of 192 clients must be, measured),
        # and one that does not comes straight back, so refusing all would only leave the server
        # refusing the same clients instead of serving them.
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
