"""The handler that writes a loop turn's log lines together, and `log_line`, its fast path.

Two lines a call (the access line, the trim line) make logging a large part of a small call's
cost, so: the handler (`TurnHandler`) writes lines logged on the event loop a few at a time, in
order (a write costs as much as formatting several lines); and `log_line`, which the two
statements call instead of `Logger.log`, formats the very same line without building a
LogRecord when the configuration is the one `configure_logging` set up, and is `Logger.log`
otherwise (a handler, filter, record factory or formatter of anyone else's).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
import weakref
from collections.abc import Mapping
from typing import TextIO

from turnkeeper.server.telemetry.call_ids import (
    CALL_FIELD_SET,
    CallContext,
    CallContextFilter,
    call_context,
)
from turnkeeper.server.telemetry.log_format import (
    RECORD_ATTRIBUTES,
    JsonLineFormatter,
    TextLineFormatter,
    rfc3339,
)

# A log_line line to format when it is written: formatter, time, level, logger name, message,
# arguments, extras, the call's ids and trace context.
_Deferred = tuple[
    "TextLineFormatter | JsonLineFormatter",
    float,
    int,
    str,
    str,
    tuple[object, ...],
    Mapping[str, object] | None,
    CallContext,
]
# At most this many lines wait; a call's two lines wait at most this long (seconds).
_MAX_PENDING = 256
_WINDOW = 0.005
_handlers: weakref.WeakSet[TurnHandler] = weakref.WeakSet()


class TurnHandler(logging.StreamHandler[TextIO]):
    """A StreamHandler that writes the lines logged on an event loop a few at a time.

    A line logged on a running event loop is formatted at once and kept. An ordinary record's line
    is written at the end of the loop turn that logged it (`call_soon`: after the callbacks ready
    now, before the loop next waits for I/O); the access and trim lines (`log_line`) wait up to
    `_WINDOW` for others, so that a busy server writes a batch of calls' lines at once (a write
    costs as much as formatting several lines, and under load a loop turn finishes about one call).
    WARNING and above, the `_MAX_PENDING`th pending line and a line logged where no loop runs
    (startup, a worker thread when nothing is pending) write everything pending, then themselves, at
    once; a worker thread's line joins the pending ones while a write is due on a running loop. So
    lines come out in the order they were logged. `flush` (logging.shutdown at exit, `setStream`)
    and the hooks that print a traceback write what is pending first; a forked child drops its copy
    of it (the parent writes it).
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.ids = CallContextFilter()
        self.addFilter(self.ids)
        self._lines: list[str | _Deferred] = []
        self._last: logging.LogRecord | None = None  # for handleError, should a write fail
        # The loop on which a write is due, and on which one is due at the end of this turn.
        self._due: asyncio.AbstractEventLoop | None = None
        self._due_soon: asyncio.AbstractEventLoop | None = None
        _handlers.add(self)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except RecursionError:  # as StreamHandler.emit: a stack overflow is not a bad record
            raise
        except Exception:
            self.handleError(record)
            return
        self._last = record
        self.add(line, record.levelno)

    def add(self, line: str | _Deferred, levelno: int, wait: bool = False) -> None:
        """Writes a formatted line now, at the end of this loop turn, or (`wait`) within
        `_WINDOW`; the lock held."""
        lines = self._lines
        lines.append(line)
        if levelno >= logging.WARNING or len(lines) >= _MAX_PENDING:
            self.flush()
            return
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # no loop runs in this thread
            loop = None
        if loop is None:
            due = self._due
            if due is None or not due.is_running():
                self.flush()
        elif wait:
            if self._due is not loop:
                self._due = loop
                loop.call_later(_WINDOW, self._write_due, loop)
        elif self._due_soon is not loop:
            self._due = self._due_soon = loop
            loop.call_soon(self._write_due, loop)

    def _write_due(self, loop: asyncio.AbstractEventLoop) -> None:
        with self.lock or contextlib.nullcontext():
            # Any write due on this loop may go now: the callbacks still to come find less.
            if self._due is loop:
                self._due = None
            if self._due_soon is loop:
                self._due_soon = None
            self.flush()

    def flush(self) -> None:
        with self.lock or contextlib.nullcontext():
            lines = self._lines
            if not lines:
                super().flush()
                return
            out = []
            for line in lines:
                text = line if type(line) is str else self._format(line)
                if text is not None:
                    out.append(text)
            lines.clear()
            record, self._last = self._last, None
            if not out:
                super().flush()
                return
            text = "\n".join(out) + self.terminator
            try:
                self.stream.write(text)
                super().flush()
            except RecursionError:
                raise
            except Exception:
                self.handleError(record or logging.makeLogRecord({"msg": text}))

    def _format(self, entry: str | _Deferred) -> str | None:
        """A log_line entry's line, formatted here: a batch's lines are formatted together, the
        formatting code hot in the CPU's caches (one at a time in a busy server, where each
        call's work evicts it, a line cost several times as much)."""
        assert not isinstance(entry, str)
        formatter, created, level, name, msg, args, extra, context = entry
        try:
            message = str(msg) % args if args else str(msg)
            levelname = logging.getLevelName(level)
            return formatter.deferred(rfc3339(created), levelname, name, message, extra, context)
        except Exception:  # as logging reports a record it cannot format; the line is dropped
            record = logging.LogRecord(name, level, "(unknown file)", 0, msg, args, None)
            record.__dict__.update(extra or {})
            self.handleError(record)
            return None

    def forget_pending(self) -> None:
        self._lines.clear()
        self._last = self._due = self._due_soon = None


def flush_logs() -> None:
    """Writes the lines every TurnHandler holds (before anything else writes to stderr)."""
    for handler in list(_handlers):
        handler.flush()


def _forget_pending_after_fork() -> None:
    for handler in list(_handlers):
        handler.forget_pending()


os.register_at_fork(after_in_child=_forget_pending_after_fork)

# The formatters that format log_line's lines when they are written.
_DEFERRING_FORMATTERS = (TextLineFormatter, JsonLineFormatter)
# The handler configure_logging installed (`install`), for log_line.
installed: TurnHandler | None = None


def install(handler: TurnHandler) -> None:
    """Makes `handler` the one log_line may write to directly (configure_logging's)."""
    global installed
    installed = handler


def _direct_handler(logger: logging.Logger, level: int) -> TurnHandler | None:
    """The handler a record of `logger` at `level` would reach, when it is the only one and
    nothing but its own filter and formatter stands between (else None: take Logger.log)."""
    handler = installed
    if (
        handler is None
        or logger.filters
        or logger.disabled
        or type(logger) is not logging.Logger
        or logging.getLogRecordFactory() is not logging.LogRecord
    ):
        return None
    current = logger
    while (parent := current.parent) is not None:
        if current.handlers or not current.propagate:
            return None
        current = parent
    handlers = current.handlers
    formatter = handler.formatter
    if (
        len(handlers) != 1
        or handlers[0] is not handler
        or handler.level > level
        or len(handler.filters) != 1
        or handler.filters[0] is not handler.ids
        or type(formatter) not in _DEFERRING_FORMATTERS
        or not formatter.short  # type: ignore[union-attr]
    ):
        return None
    return handler


def log_line(
    logger: logging.Logger,
    level: int,
    msg: str,
    *args: object,
    extra: Mapping[str, object] | None = None,
) -> None:
    """`logger.log(level, msg, *args, extra=extra)`: the same line, without a LogRecord when
    the record would reach only the handler configure_logging installed. Then the line is
    formatted when it is written, with the batch it joins: `args` and `extra` must not change
    afterwards (the two statements pass numbers, strings and a dict made for the line)."""
    if not logger.isEnabledFor(level):
        return
    handler = _direct_handler(logger, level)
    if (
        handler is None
        or (extra and not _plain_extras(tuple(extra)))
        or (len(args) == 1 and isinstance(args[0], Mapping))  # LogRecord's `%(name)s` case
    ):
        logger.log(level, msg, *args, extra=extra, stacklevel=2)
        return
    # Formatted when the batch is written (TurnHandler._format): what it reads is taken now.
    entry = (handler.formatter, time.time(), level, logger.name, msg, args, extra, call_context())
    with handler.lock or contextlib.nullcontext():
        handler.add(entry, level, True)  # type: ignore[arg-type]  # (wait)


@functools.lru_cache(maxsize=64)
def _plain_extras(names: tuple[str, ...]) -> bool:
    """Extras that makeRecord accepts (no record attribute's name), that a JSON line keeps
    (none named `_...`) and that name no call field (which they would replace): their
    record's line is log_line's."""
    return (
        RECORD_ATTRIBUTES.isdisjoint(names)
        and CALL_FIELD_SET.isdisjoint(names)
        and not any(not isinstance(name, str) or name.startswith("_") for name in names)
    )
