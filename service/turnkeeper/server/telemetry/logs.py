"""Logging setup: text or JSON lines, each carrying the ids of the call it was written for.

The access interceptor puts the call's request id and CallerContext ids in a context variable;
a filter copies them, and the OpenTelemetry trace and span ids, onto every record written in
that call, so the trim lines carry them as well as the access line. Times are RFC 3339 in UTC
with milliseconds (`2026-12-01T11:58:18.974Z`). JSON output is python-json-logger's.
Nothing here ever sees message text: records carry ids, counts and sizes only.

Two lines a call (the access line, the trim line) make logging a large part of a small call's
cost, so: the handler (`TurnHandler`) writes lines logged on the event loop a few at
a time, in order; the formatters take a short path for plain records; and `log_line`, which the
two statements call instead of `Logger.log`, formats the very same line without building a
LogRecord when the configuration is the one `configure_logging` set up, and is `Logger.log`
otherwise (a handler, filter, record factory or formatter of anyone else's).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import os
import re
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType, TracebackType
from typing import Literal, TextIO, TypeAlias

from opentelemetry import trace
from pythonjsonlogger.json import JsonEncoder, JsonFormatter

from turnkeeper.server.telemetry.tracing import tracing_started

LogFormat = Literal["text", "json"]
_ExcInfo: TypeAlias = (
    tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
)
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_JSON_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_JSON_RENAMES = {"asctime": "time", "levelname": "level", "name": "logger"}
# The record attributes a call's context adds (empty ones are left out).
CALL_FIELDS = ("request_id", "session_id", "runtime_id", "agent_id", "trace_id", "span_id")
_CALL_FIELD_SET = frozenset(CALL_FIELDS)
# What a record holds before its extras (which may not reuse these names) and what formatting
# adds to it.
_RECORD_ATTRIBUTES = frozenset(
    [*vars(logging.LogRecord("", 0, "", 0, "", (), None)), "message", "asctime"]
)

# The metadata key of a call's request id, in the caller's headers and in the server's trailers.
REQUEST_ID_KEY = "x-request-id"

_call_ids: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "turnkeeper_call_ids", default=MappingProxyType({})
)


def set_call_ids(ids: Mapping[str, str]) -> contextvars.Token[Mapping[str, str]]:
    """The ids of the call running in this context (non-empty ones only), for every record
    written within it. The mapping is kept, not copied: it must not change afterwards."""
    return _call_ids.set(ids)


def current_request_id() -> str | None:
    """The request id of the call running in this context, if any."""
    return _call_ids.get().get("request_id")


def reset_call_ids(token: contextvars.Token[Mapping[str, str]]) -> None:
    _call_ids.reset(token)


# A call's ids and its trace and span ids (None: no valid span).
CallContext: TypeAlias = tuple[Mapping[str, str], tuple[str, str] | None]


def _call_context() -> CallContext:
    """The current call's ids and its trace and span ids (None: no valid span)."""
    if tracing_started():
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            return _call_ids.get(), (format(span.trace_id, "032x"), format(span.span_id, "016x"))
    return _call_ids.get(), None


def _add_call_context(attributes: dict[str, object], context: CallContext | None = None) -> None:
    """A call's ids and trace context (the current one's by default) into a record's
    attributes, never replacing what they hold: an extra of the same name wins."""
    ids, spans = _call_context() if context is None else context
    if ids:
        if attributes.keys().isdisjoint(ids):  # the usual case: one C-level update
            attributes.update(ids)
        else:
            for name, value in ids.items():
                attributes.setdefault(name, value)
    if spans is not None:
        attributes.setdefault("trace_id", spans[0])
        attributes.setdefault("span_id", spans[1])


class CallContextFilter(logging.Filter):
    """Adds the current call's ids and trace context to each record (never replacing extras)."""

    def filter(self, record: logging.LogRecord) -> bool:
        _add_call_context(record.__dict__)
        return True


@functools.lru_cache(maxsize=4)
def _second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).isoformat()[:-6]


def rfc3339(created: float) -> str:
    """A record's time as RFC 3339 in UTC, to the millisecond: `2026-12-01T11:58:18.974Z`.
    The part up to the second is formatted once per second: formatting a date is a noticeable
    part of a record's cost, and most records of a busy second share it."""
    # As datetime.fromtimestamp rounds: to the microsecond, half to even, then truncated.
    second = int(created)
    micro = round((created - second) * 1e6)
    if micro >= 1_000_000:
        second, micro = second + 1, micro - 1_000_000
    return _second(second) + _MILLISECONDS[micro // 1000]


# `.000Z` to `.999Z`: formatting the milliseconds was a third of a line's time.
_MILLISECONDS = tuple(f".{millisecond:03d}Z" for millisecond in range(1000))


class _Rfc3339Time:
    """`%(asctime)s` as RFC 3339 (logging's default is `2026-12-01 11:58:18,974`, local time)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return rfc3339(record.created)


def _plain(record: logging.LogRecord) -> bool:
    """A record without exception, stack or dict message: the formatters' short path."""
    return not (
        record.exc_info or record.exc_text or record.stack_info or isinstance(record.msg, dict)
    )


_CEncoder: TypeAlias = Callable[[object, int], list[str] | tuple[str, ...]]


def _c_encoder(encoder: json.JSONEncoder) -> _CEncoder | None:
    """json's C encoder for `encoder`'s settings, as JSONEncoder.iterencode builds it per call,
    built once and without the circular-reference markers; None (the pure-Python encoder) when
    this Python has none, the settings are ones it does not take, or its signature changed."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None or not encoder.ensure_ascii or encoder.indent is not None:
        return None
    try:
        built: _CEncoder = make(
            None,
            encoder.default,
            json.encoder.encode_basestring_ascii,
            None,
            encoder.key_separator,
            encoder.item_separator,
            encoder.sort_keys,
            encoder.skipkeys,
            encoder.allow_nan,
        )
    except Exception:  # a different json: the pure-Python encoder gives the same bytes
        return None
    return built


class _JsonFormatter(_Rfc3339Time, JsonFormatter):
    """python-json-logger's object, byte for byte. A plain record takes a shorter path to the
    same dict (its add_fields and merge_record_extra are most of a line's cost), and
    the encoder json.dumps would build per record is built once."""

    def __init__(self) -> None:
        super().__init__(_JSON_FORMAT, rename_fields=_JSON_RENAMES)
        self._encoder = JsonEncoder(ensure_ascii=self.json_ensure_ascii, indent=self.json_indent)
        # json.dumps' own C encoder for this JSONEncoder, built once (JSONEncoder.iterencode
        # builds one per call), without the circular-reference markers: should it fail, the
        # record is encoded again the standard way, which reports what failed as ever.
        self._encode_c = _c_encoder(self._encoder)
        # The attributes merge_record_extra leaves out: the format's fields and the reserved ones.
        self._skip = frozenset(self.parse()) | frozenset(self.reserved_attrs)
        # What the short path assumes of the configuration (else every record takes the long).
        self.short = (
            self.parse() == [*_JSON_RENAMES, "message"]
            and set(self.rename_fields) <= self._skip <= _RECORD_ATTRIBUTES
            and self.json_default is None
            and self.json_encoder is JsonEncoder
            and self.json_serializer is json.dumps
            and not (self.defaults or self.static_fields or self.timestamp or self.prefix)
            and not self.rename_fields_keep_missing
            and type(self).process_log_record is JsonFormatter.process_log_record
        )

    def format(self, record: logging.LogRecord) -> str:
        if not (self.short and _plain(record)):
            return super().format(record)
        record.message = message = record.getMessage()
        record.asctime = asctime = rfc3339(record.created)
        skip = self._skip
        # merge_record_extra's rule: every attribute neither reserved nor named `_...`.
        extras = {
            key: value
            for key, value in record.__dict__.items()
            if key not in skip and not (hasattr(key, "startswith") and key.startswith("_"))
        }
        return self.line(asctime, record.levelname, record.name, message, extras)

    def line(
        self, asctime: str, levelname: str, name: str, message: str, extras: Mapping[str, object]
    ) -> str:
        """add_fields' object of a plain record with these extras (neither reserved nor
        `_...`: merge_record_extra's rule), encoded as json.dumps encodes it."""
        data: dict[str, object] = {
            "time": asctime,
            "level": levelname,
            "logger": name,
            "message": message,
        }
        data.update(extras)
        if self._encode_c is not None:
            try:
                return "".join(self._encode_c(data, 0))
            except Exception:  # encoded again below, which raises what failed
                pass
        return self._encoder.encode(data)

    def deferred(
        self,
        asctime: str,
        levelname: str,
        name: str,
        message: str,
        extra: Mapping[str, object] | None,
        context: CallContext,
    ) -> str:
        """The line of a `log_line` record (its extras name no call field: `_plain_extras`)."""
        attributes = dict(extra) if extra else {}
        _add_call_context(attributes, context)
        return self.line(asctime, levelname, name, message, attributes)


# What the text format escapes in what a record says (its message and ids): every control
# character and the two Unicode line separators, so that nothing a caller sends (a session id, a
# model name quoted in a message) can end a line and start a forged one.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def escape_controls(text: str) -> str:
    """`text` with its control characters escaped as JSON escapes them (`\\n`, `\\u001b`)."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escape_one, text)


# A record's traceback or stack in the text format: each of its lines indented, so that only a
# record's first line starts at the margin (with its time).
_CONTINUATION = "\n  "


class _TextFormatter(_Rfc3339Time, logging.Formatter):
    """The classic line, then ` key=value` for each call id the record carries. Control
    characters in the message and the ids are escaped; a traceback's lines are indented."""

    short = True

    def __init__(self) -> None:
        super().__init__(_TEXT_FORMAT)
        # The last call context's ` key=value` suffix: a call's lines share its ids mapping.
        self._last_suffix: tuple[CallContext | None, str] = (None, "")

    def format(self, record: logging.LogRecord) -> str:
        if not _plain(record):
            return self._ids(super().format(record), record.__dict__)
        record.message = message = record.getMessage()
        record.asctime = asctime = rfc3339(record.created)
        return self.line(asctime, record.levelname, record.name, message, record.__dict__)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: _ExcInfo) -> str:  # noqa: N802
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return _indented(super().formatStack(stack_info))

    def line(
        self,
        asctime: str,
        levelname: str,
        name: str,
        message: str,
        attributes: Mapping[str, object],
    ) -> str:
        """_TEXT_FORMAT's line of a plain record with these attributes (without
        logging.Formatter's general path: two lines a call take this one)."""
        return self._ids(
            f"{asctime} {levelname!s} {name!s}: {escape_controls(message)}", attributes
        )

    def deferred(
        self,
        asctime: str,
        levelname: str,
        name: str,
        message: str,
        extra: Mapping[str, object] | None,
        context: CallContext,
    ) -> str:
        """The line of a `log_line` record: its extras name no call field (`_plain_extras`)
        and the text line shows no other, so they are not read, and the ids' suffix is made
        once per call context."""
        known, suffix = self._last_suffix
        if (
            known is None
            or known[0] is not context[0]  # (identity: a mapping of ids does not change)
            or known[1] != context[1]
        ):
            ids, spans = context
            if spans is None:  # the ids alone: what _add_call_context would copy
                suffix = self._ids("", ids)
            else:
                attributes: dict[str, object] = {}
                _add_call_context(attributes, context)
                suffix = self._ids("", attributes)
            self._last_suffix = (context, suffix)
        return f"{asctime} {levelname} {name}: {escape_controls(message)}{suffix}"

    @staticmethod
    def _ids(line: str, attributes: Mapping[str, object]) -> str:
        extra = " ".join(
            [
                f"{name}={escape_controls(str(value))}"
                for name in CALL_FIELDS
                if (value := attributes.get(name))
            ]
        )
        return f"{line} {extra}" if extra else line


def _indented(text: str) -> str:
    """A traceback's lines after the first line of its record, each indented, with control
    characters other than line ends escaped."""
    return "  " + _CONTINUATION.join(escape_controls(line) for line in text.split("\n"))


# A log_line line to format when it is written: formatter, time, level, logger name, message,
# arguments, extras, the call's ids and trace context.
_Deferred = tuple[
    "_TextFormatter | _JsonFormatter",
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
_DEFERRING_FORMATTERS = (_TextFormatter, _JsonFormatter)
# The handler configure_logging installed, for log_line.
_installed: TurnHandler | None = None


def _direct_handler(logger: logging.Logger, level: int) -> TurnHandler | None:
    """The handler a record of `logger` at `level` would reach, when it is the only one and
    nothing but its own filter and formatter stands between (else None: take Logger.log)."""
    handler = _installed
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
    entry = (handler.formatter, time.time(), level, logger.name, msg, args, extra, _call_context())
    with handler.lock or contextlib.nullcontext():
        handler.add(entry, level, True)  # type: ignore[arg-type]  # (wait)


@functools.lru_cache(maxsize=64)
def _plain_extras(names: tuple[str, ...]) -> bool:
    """Extras that makeRecord accepts (no record attribute's name), that a JSON line keeps
    (none named `_...`) and that name no call field (which they would replace): their
    record's line is log_line's."""
    return (
        _RECORD_ATTRIBUTES.isdisjoint(names)
        and _CALL_FIELD_SET.isdisjoint(names)
        and not any(not isinstance(name, str) or name.startswith("_") for name in names)
    )


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
    global _installed
    handler = TurnHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if log_format == "json" else _TextFormatter())
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
    _installed = handler
    _flush_before_tracebacks()
