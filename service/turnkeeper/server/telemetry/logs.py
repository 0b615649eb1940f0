"""Logging setup: text or JSON lines on stderr, each carrying the ids of the call it was written
for (`call_ids.py`), in the formats of `log_format.py`, written by `log_handler.py`'s handler.

Nothing here ever sees message text: records carry ids, counts and sizes only.
"""

from __future__ import annotations

import logging
import sys
import threading
from types import TracebackType
from typing import Literal

from turnkeeper.server.telemetry.log_format import JsonLineFormatter, TextLineFormatter
from turnkeeper.server.telemetry.log_handler import TurnHandler, flush_logs, install

LogFormat = Literal["text", "json"]

_hooked = False


def _flush_before_tracebacks() -> None:
    """An uncaught exception's traceback (main thread, other threads, `__del__`) comes out
    after the lines logged before it."""
    global _hooked
    if _hooked:
        return
    _hooked = True
    previous_excepthook = sys.excepthook
    previous_thread_hook = threading.excepthook
    previous_unraisable_hook = sys.unraisablehook

    def excepthook(
        kind: type[BaseException], value: BaseException, tb: TracebackType | None
    ) -> None:
        flush_logs()
        previous_excepthook(kind, value, tb)

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        flush_logs()
        previous_thread_hook(args)

    def unraisable_hook(unraisable: sys.UnraisableHookArgs) -> None:
        flush_logs()
        previous_unraisable_hook(unraisable)

    sys.excepthook = excepthook
    threading.excepthook = thread_hook
    sys.unraisablehook = unraisable_hook


def configure_logging(level: str, log_format: LogFormat) -> None:
    """Root logging to stderr in the chosen format; safe to call more than once."""
    handler = TurnHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter() if log_format == "json" else TextLineFormatter())
    # No format here names the thread or process, so records skip finding them (the logging
    # HOWTO's "Optimization"). The caller's frame is still found: the hot lines build no record.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
        existing.flush()
    root.addHandler(handler)
    root.setLevel(level)
    install(handler)
    _flush_before_tracebacks()
