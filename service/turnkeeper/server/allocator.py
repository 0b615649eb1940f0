"""The C allocator (glibc): fixed mmap and trim thresholds, and `malloc_trim` to hand freed pages
back to the system, before the engine works on a big request (`before_work`) and after a wave of
them (`ReturnAfterWaves`, which admission tells when a heavy call let go of its memory). When
memory goes back is decided here alone.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import time
from collections.abc import Callable
from typing import Any

RETURN_BEFORE_WORK_BYTES = 8 * 1024 * 1024
QUIET_SECONDS = 5.0
"""Big requests that come within `QUIET_SECONDS` of each other reuse the memory the one before
freed; the allocator's free pages go back to the system only after `QUIET_SECONDS` without one
(before a big request's work here, and after a wave: `ReturnAfterWaves`), or whenever the process
holds half its memory limit or more. A request of at least `RETURN_BEFORE_WORK_BYTES` has its
receive path's freed memory handed back before the engine works on it when it is the first such
request after `QUIET_SECONDS` without one, or under that pressure: gRPC frees its buffer of the
request (as big as the request) into the arenas of its own threads, which the engine's worker
thread does not allocate from, so left there it adds a second copy of the request to the peak.
Between big requests, though, a trim makes the next one fault the same pages in again, which
made back-to-back big calls measurably slower, and so did a quiet time shorter than the gap
between calls that follow each other; under a memory limit, a wave of big calls peaks well higher
without the trims that pressure brings (docs/benchmarks.md has the measurements)."""

MMAP_THRESHOLD_BYTES = 8 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 16 * 1024 * 1024
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def _libc(name: str) -> Any:
    """A glibc function (a ctypes one), or None (another C library, another platform)."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


MALLOC_TRIM: Callable[[int], int] | None = _libc("malloc_trim")
_MALLOPT: Callable[[int, int], int] | None = _libc("mallopt")


def configure(memory_limit: int | None) -> None:
    """Called once, before the server starts: pins the thresholds and notes the memory limit
    (the cgroup's, None without one) under which big requests always trim first."""
    global _pressure_bytes
    _pressure_bytes = memory_limit // 2 if memory_limit else None
    pin_thresholds()


def pin_thresholds() -> None:
    """Fixes glibc's mmap and trim thresholds; called once, before the server starts. Left
    dynamic, freeing one big block raises them, so after a wave of big responses blocks of that
    size came from the threads' arenas, and what was freed at the top of a thread's arena stayed
    resident, since malloc_trim never trims it: RSS stayed well over idle after a wave of big
    TrimHistory calls. Pinned, a block of `MMAP_THRESHOLD_BYTES` or more is a mapping of its own,
    unmapped when freed, and an arena's free top is handed back past `TRIM_THRESHOLD_BYTES`, so
    RSS returns close to idle, while smaller requests and responses still come from the arenas
    and their round trips did not change. (One arena for all threads, M_ARENA_MAX=1, returned RSS
    exactly to idle and made the per-request trim needless, but made small round trips slower.)"""
    if _MALLOPT is not None:
        _MALLOPT(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        _MALLOPT(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)


def return_freed_memory() -> None:
    """Hands the free pages of every arena back to the system (ctypes releases the GIL)."""
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


_last_big_work = -QUIET_SECONDS
_pressure_bytes: int | None = None
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_bytes() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * _PAGE


def under_pressure() -> bool:
    """Whether the process holds half its memory limit or more (never without a limit)."""
    pressure = _pressure_bytes
    return pressure is not None and _rss_bytes() >= pressure


def before_work(request_bytes: int) -> None:
    """Called by an engine, on its worker thread, before it reads a request of this size."""
    global _last_big_work
    if request_bytes < RETURN_BEFORE_WORK_BYTES:
        return
    now = time.monotonic()
    quiet = now - _last_big_work > QUIET_SECONDS
    _last_big_work = now  # (worker threads race on it harmlessly: a trim more or less)
    if quiet or under_pressure():
        return_freed_memory()


# After a wave, under pressure: once the call has ended and grpc has let go of its request and
# response bytes.
_TRIM_DELAY_SECONDS = 0.5
# The trim after that, for the send buffers gRPC frees only once slow readers took big responses.
_LATE_TRIM_SECONDS = 5.0


class ReturnAfterWaves:
    """Once big requests stop arriving, hands the memory the allocator kept back to the system, so
    RSS falls back near idle after a wave of them (glibc keeps freed heap pages in its arenas
    otherwise). `QUIET_SECONDS` after the last heavy call let go of its memory (so that big calls
    that follow each other reuse the pages), or `_TRIM_DELAY_SECONDS` after it when the process
    is under pressure; on a worker thread (ctypes releases the GIL), one at a time; and once more
    `_LATE_TRIM_SECONDS` later, for the send buffers gRPC frees only once slow readers have taken
    big responses. `heavy_running` says whether a heavy call still runs: the wave is not over
    while one does."""

    def __init__(self, heavy_running: Callable[[], bool]) -> None:
        self._heavy_running = heavy_running
        self._timer: asyncio.TimerHandle | None = None  # the trim after a wave, when armed
        self._at = 0.0
        self._trimming: asyncio.Future[int] | None = None

    def heavy_call_ended(self) -> None:
        """A heavy call let go of its memory (it ended, its response was sent, or it was
        refused): the trim comes once the wave is over."""
        if MALLOC_TRIM is None:
            return
        loop = asyncio.get_running_loop()
        delay = _TRIM_DELAY_SECONDS if under_pressure() else QUIET_SECONDS
        self._at = at = loop.time() + delay
        timer = self._timer
        if timer is not None:
            if timer.when() <= at:
                return  # the timer re-arms itself until the wave is over
            timer.cancel()  # pressure came: the trim comes sooner
        self._timer = loop.call_at(at, self._after_wave)

    def _after_wave(self) -> None:
        trim = MALLOC_TRIM
        assert trim is not None  # (armed only with it)
        loop = asyncio.get_running_loop()
        wait = self._at - loop.time()
        running = self._trimming
        if wait > 0 or self._heavy_running() or (running is not None and not running.done()):
            self._timer = loop.call_later(max(wait, _TRIM_DELAY_SECONDS / 5), self._after_wave)
            return
        self._timer = None
        self._trimming = loop.run_in_executor(None, trim, 0)
        loop.call_later(_LATE_TRIM_SECONDS, self._late)

    def _late(self) -> None:
        trim = MALLOC_TRIM
        assert trim is not None  # (armed only with it)
        running = self._trimming
        if self._heavy_running() or self._timer is not None or (running and not running.done()):
            return  # another wave began: its own trims follow it
        self._trimming = asyncio.get_running_loop().run_in_executor(None, trim, 0)
