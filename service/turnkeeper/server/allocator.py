"""The C allocator (glibc): fixed mmap and trim thresholds, and `malloc_trim` to hand freed pages
back to the system, before the engine works on a big request and after a wave of them."""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Any

RETURN_BEFORE_WORK_BYTES = 8 * 1024 * 1024
QUIET_SECONDS = 5.0
"""Big requests that come within `QUIET_SECONDS` of each other reuse the memory the one before
freed; the allocator's free pages go back to the system only after `QUIET_SECONDS` without one
(here, and after a wave: `edge/admission.py`), or whenever the process holds half its memory
limit or more. A request of at least `RETURN_BEFORE_WORK_BYTES` has its receive path's freed
memory handed back before the engine works on it when it is the first such request after
`QUIET_SECONDS` without one, or under that pressure. gRPC frees its buffer of the request (as big
as the request) into the arenas of its own threads, which the engine's worker thread does not
allocate from: left there, it held one 100k-row request's peak at 3.3-3.8x its size instead of the
3.0x of gRPC's receive path alone. Between big requests, though, a trim makes the next one fault
the same pages in again: trimming before every big request made back-to-back 100k-row calls 15-30 %
slower, and with the 1 s and 0.5 s of before, a 100k-row TrimHistory that came 1.2 s after the last
took 122 ms instead of 94 (issue 19). Under a limit, a wave of 16 x 60 MB peaked 120-230 MiB higher
without the trims that pressure brings."""

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
    dynamic, freeing one big block raises them (to up to 32 and 64 MiB): after a wave of big
    responses, blocks of up to 32 MiB came from the threads' arenas, and what was freed at the
    top of a thread's arena stayed resident, since malloc_trim never trims it: RSS stayed 40-90
    MiB over idle after 16 x 60 MB TrimHistory calls. Pinned, a block of 8 MiB or more is a
    mapping of its own, unmapped when freed, and an arena's free top is handed back past 16 MiB:
    RSS returns within about 20 MiB of idle. Requests and responses under 8 MiB (10k rows and
    less) still come from the arenas: their round trips did not change. (One arena for all
    threads, M_ARENA_MAX=1, returned RSS exactly to idle and made the per-request trim needless,
    but 1k-row round trips were 0-15 % slower in three interleaved runs.)"""
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
