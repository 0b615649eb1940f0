"""The log line formats: text or JSON, times in RFC 3339.

Times are RFC 3339 in UTC with milliseconds (`2026-12-01T11:58:18.974Z`). JSON output is
python-json-logger's; the text line is logging's classic one with the call's ids after it, its
control characters escaped so that nothing a caller sends can forge a line.

Two lines a call (the access line, the trim line) make logging a large part of a small call's
cost, so the formatters take a short path to the same bytes for plain records, and format a
`log_line` line (`deferred`) from its parts without a LogRecord.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import TypeAlias

from pythonjsonlogger.json import JsonEncoder, JsonFormatter

from turnkeeper.server.telemetry.call_ids import CALL_FIELDS, CallContext, add_call_context

_ExcInfo: TypeAlias = (
    tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
)
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_JSON_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_JSON_RENAMES = {"asctime": "time", "levelname": "level", "name": "logger"}
# What a record holds before its extras (which may not reuse these names) and what formatting
# adds to it.
RECORD_ATTRIBUTES = frozenset(
    [*vars(logging.LogRecord("", 0, "", 0, "", (), None)), "message", "asctime"]
)


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


# `.000Z` to `.999Z`, made once: formatting the milliseconds was a large part of a line's time.
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


class JsonLineFormatter(_Rfc3339Time, JsonFormatter):
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
            and set(self.rename_fields) <= self._skip <= RECORD_ATTRIBUTES
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
        """The line of a `log_line` record (its extras name no call field: log_line checks)."""
        attributes = dict(extra) if extra else {}
        add_call_context(attributes, context)
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


class TextLineFormatter(_Rfc3339Time, logging.Formatter):
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
        """The line of a `log_line` record: its extras name no call field (log_line checks)
        and the text line shows no other, so they are not read, and the ids' suffix is made
        once per call context."""
        known, suffix = self._last_suffix
        if (
            known is None
            or known[0] is not context[0]  # (identity: a mapping of ids does not change)
            or known[1] != context[1]
        ):
            ids, spans = context
            if spans is None:  # the ids alone: what add_call_context would copy
                suffix = self._ids("", ids)
            else:
                attributes: dict[str, object] = {}
                add_call_context(attributes, context)
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
