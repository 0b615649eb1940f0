"""The C allocator's freed memory: glibc keeps freed heap pages in its arenas (one per thread that
allocated them), and `malloc_trim` hands them back to the system."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

RETURN_BEFORE_WORK_BYTES = 8 * 1024 * 1024
"""A request at least this big has its receive path's freed memory handed back before the engine
works on it. gRPC's buffer of the request was freed into the arenas of gRPC's threads, which the
engine's worker thread does not allocate from: left there, it held the call's peak RSS at 3.3-3.7x
the request instead of the receive path's own 3.0x (100k rows, issue 19). The trim costs about
2-5 ms at 40 MB, against a call of 100 ms or more; smaller requests leave too little to matter."""


def _libc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None (another C library, another platform)."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


MALLOC_TRIM = _libc_malloc_trim()


def return_freed_memory() -> None:
    """Hands the free pages of every arena back to the system (ctypes releases the GIL)."""
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


def before_work(request_bytes: int) -> None:
    """Called by an engine, on its worker thread, before it reads a request of this size."""
    if request_bytes >= RETURN_BEFORE_WORK_BYTES:
        return_freed_memory()
