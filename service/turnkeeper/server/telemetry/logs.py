"""Logging setup: text or JSON lines, each carrying the ids of the call it was written for.

The access interceptor puts the call's request id and CallerContext ids in a context variable;
a filter copies them, and the OpenTelemetry trace and span ids, onto every record written in
that call, so the trim lines carry them as well as the access line. Times are RFC 3339 in UTC
with milliseconds (`2026-12-01T11:58:18.974Z`). JSON output comes from python-json-logger.
Nothing here ever sees message text: records carry ids, counts and sizes only.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Literal

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter

from turnkeeper.server.telemetry.tracing import tracing_started

LogFormat = Literal["text", "json"]
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_JSON_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# The record attributes a call's context adds (empty ones are left out).
CALL_FIELDS = ("request_id", "session_id", "runtime_id", "agent_id", "trace_id", "span_id")

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


class CallContextFilter(logging.Filter):
    """Adds the current call's ids and trace context to each record (never replacing extras)."""

    def filter(self, record: logging.LogRecord) -> bool:
        attributes = record.__dict__
        for name, value in _call_ids.get().items():
            attributes.setdefault(name, value)
        if tracing_started():
            span = trace.get_current_span().get_span_context()
            if span.is_valid:
                attributes.setdefault("trace_id", format(span.trace_id, "032x"))
                attributes.setdefault("span_id", format(span.span_id, "016x"))
        return True


@functools.lru_cache(maxsize=4)
def _second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).isoformat()[:-6]


def rfc3339(created: float) -> str:
    """A record's time as RFC 3339 in UTC, to the millisecond: `2026-12-01T11:58:18.974Z`.
    The part up to the second is formatted once per second (a record's one date formatting was
    a tenth of its cost)."""
    # As datetime.fromtimestamp rounds: to the microsecond, half to even, then truncated.
    second = int(created)
    micro = round((created - second) * 1e6)
    if micro >= 1_000_000:
        second, micro = second + 1, micro - 1_000_000
    return f"{_second(second)}.{micro // 1000:03d}Z"


class _Rfc3339Time:
    """`%(asctime)s` as RFC 3339 (logging's default is `2026-12-01 11:58:18,974`, local time)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return rfc3339(record.created)


class _JsonFormatter(_Rfc3339Time, JsonFormatter):
    pass


class _TextFormatter(_Rfc3339Time, logging.Formatter):
    """The classic line, then ` key=value` for each call id the record carries."""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            line = super().format(record)
        else:
            # logging.Formatter.format without what a plain record does not need (two log lines
            # a call: their formatting is on every call's path).
            record.message = record.getMessage()
            record.asctime = rfc3339(record.created)
            line = self.formatMessage(record)
        attributes = record.__dict__
        extra = " ".join(
            [f"{name}={attributes[name]}" for name in CALL_FIELDS if attributes.get(name)]
        )
        return f"{line} {extra}" if extra else line


def configure_logging(level: str, log_format: LogFormat) -> None:
    """Root logging to stderr in the chosen format; safe to call more than once."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(CallContextFilter())
    if log_format == "json":
        handler.setFormatter(
            _JsonFormatter(
                _JSON_FORMAT,
                rename_fields={"levelname": "level", "name": "logger", "asctime": "time"},
            )
        )
    else:
        handler.setFormatter(_TextFormatter(_TEXT_FORMAT))
    # No format here names the source file, line, function, thread or process, so records skip
    # finding them (the logging HOWTO's "Optimization": a frame walk and system calls per record).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
