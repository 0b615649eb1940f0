"""The log lines, byte for byte, however they are produced, and when they are written.

The access and trim lines go through `log_line` (no LogRecord when only the configured handler
listens), other records through `logging`; both must give the same bytes in both formats as
python-json-logger and `logging.Formatter` would. The handler writes a loop turn's lines with
one write; every line still comes out, in order, and WARNING at once.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import io
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pythonjsonlogger.json import JsonFormatter
from turnkeeper.server.telemetry import call_ids, log_handler, logs
from turnkeeper.server.telemetry.log_format import (
    _TEXT_FORMAT,
    JsonLineFormatter,
    TextLineFormatter,
    _Rfc3339Time,
)

NOW = 1764590298.9745
ACCESS = (
    "rpc method=%s status=%s duration_ms=%.2f request_bytes=%d response_bytes=%d requests=%d "
    "responses=%d"
)
TRIM = (
    "trimmed path=%s mode=%s reason=%s dropped_messages=%d dropped_turns=%d "
    "kept_turns=%d tokens_before=%d tokens_after=%d"
)
IDS = {
    "request_id": "lb-7f3a.91",
    "session_id": "s-1",
    "runtime_id": "checkout-agent",
    "agent_id": "planner",
}
# The lines as the sidecar wrote them before log_line and the batching handler (issue 19).
PINNED = {
    "text": (
        "2025-12-01T11:58:18.974Z INFO turnkeeper.access: rpc "
        "method=/turnkeeper.v1.HistoryService/TrimHistory status=OK duration_ms=1.84 "
        "request_bytes=5123 response_bytes=2270 requests=1 responses=1 request_id=lb-7f3a.91 "
        "session_id=s-1 runtime_id=checkout-agent agent_id=planner\n"
        "2025-12-01T11:58:18.974Z INFO turnkeeper.trim: trimmed path=CALLER_PATH_AGENT "
        "mode=TRIM_MODE_TOKEN_BUDGET reason=token_budget dropped_messages=14 dropped_turns=2 "
        "kept_turns=1 tokens_before=2408 tokens_after=924 request_id=lb-7f3a.91 session_id=s-1 "
        "runtime_id=checkout-agent agent_id=planner\n"
        "2025-12-01T11:58:18.974Z DEBUG turnkeeper.access: rpc "
        "method=/turnkeeper.v1.HistoryService/EstimateTokens status=INVALID_ARGUMENT "
        "duration_ms=0.30 request_bytes=0 response_bytes=0 requests=1 responses=0 "
        "request_id=own session_id=s-1 runtime_id=checkout-agent agent_id=planner\n"
        # Control characters escaped as JSON escapes them: nothing a caller sends ends a line.
        '2025-12-01T11:58:18.974Z WARNING turnkeeper.server: odd "text" é\\u2028 \\u0001 tab\\t2.5\n'
    ),
    "json": (
        '{"time": "2025-12-01T11:58:18.974Z", "level": "INFO", "logger": "turnkeeper.access", '
        '"message": "rpc method=/turnkeeper.v1.HistoryService/TrimHistory status=OK '
        'duration_ms=1.84 request_bytes=5123 response_bytes=2270 requests=1 responses=1", '
        '"method": "/turnkeeper.v1.HistoryService/TrimHistory", "status": "OK", '
        '"duration_ms": 1.84, "request_bytes": 5123, "response_bytes": 2270, "requests": 1, '
        '"responses": 1, "request_id": "lb-7f3a.91", "session_id": "s-1", '
        '"runtime_id": "checkout-agent", "agent_id": "planner"}\n'
        '{"time": "2025-12-01T11:58:18.974Z", "level": "INFO", "logger": "turnkeeper.trim", '
        '"message": "trimmed path=CALLER_PATH_AGENT mode=TRIM_MODE_TOKEN_BUDGET '
        "reason=token_budget dropped_messages=14 dropped_turns=2 kept_turns=1 "
        'tokens_before=2408 tokens_after=924", "request_id": "lb-7f3a.91", "session_id": "s-1", '
        '"runtime_id": "checkout-agent", "agent_id": "planner"}\n'
        '{"time": "2025-12-01T11:58:18.974Z", "level": "DEBUG", "logger": "turnkeeper.access", '
        '"message": "rpc method=/turnkeeper.v1.HistoryService/EstimateTokens '
        "status=INVALID_ARGUMENT duration_ms=0.30 request_bytes=0 response_bytes=0 requests=1 "
        'responses=0", "method": "/turnkeeper.v1.HistoryService/EstimateTokens", '
        '"status": "INVALID_ARGUMENT", "duration_ms": 0.3, "request_bytes": 0, '
        '"response_bytes": 0, "requests": 1, "responses": 0, "error_reason": "EMPTY_HISTORY", '
        '"request_id": "own", "session_id": "s-1", "runtime_id": "checkout-agent", '
        '"agent_id": "planner"}\n'
        '{"time": "2025-12-01T11:58:18.974Z", "level": "WARNING", "logger": "turnkeeper.server", '
        '"message": "odd \\"text\\" \\u00e9\\u2028 \\u0001 tab\\t2.5"}\n'
    ),
}
Log = Callable[..., None]


def logger_log(logger: logging.Logger, level: int, msg: str, *args: object, **kw: Any) -> None:
    logger.log(level, msg, *args, **kw)


class Writes(io.StringIO):
    """A stream that remembers each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


@pytest.fixture
def configure(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Writes]]:
    """configure_logging as the sidecar calls it, onto a fresh stream; undone afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    for name in ("logThreads", "logProcesses", "logMultiprocessing"):
        monkeypatch.setattr(logging, name, getattr(logging, name))
    for module, name in ((sys, "excepthook"), (threading, "excepthook"), (sys, "unraisablehook")):
        monkeypatch.setattr(module, name, getattr(module, name))
    monkeypatch.setattr(logs, "_hooked", False)
    monkeypatch.setattr(log_handler, "installed", None)

    def configure(log_format: str) -> Writes:
        stream = Writes()
        monkeypatch.setattr(sys, "stderr", stream)
        logs.configure_logging("DEBUG", log_format)  # type: ignore[arg-type]
        return stream

    yield configure
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: NOW)
    monkeypatch.setattr(time, "time_ns", lambda: int(NOW * 1e9))


def write_pinned(log: Log) -> None:
    token = call_ids.set_call_ids(IDS)
    try:
        extra: dict[str, object] = {
            "method": "/turnkeeper.v1.HistoryService/TrimHistory",
            "status": "OK",
            "duration_ms": 1.84,
            "request_bytes": 5123,
            "response_bytes": 2270,
            "requests": 1,
            "responses": 1,
        }
        access = logging.getLogger("turnkeeper.access")
        log(
            access, logging.INFO, ACCESS, extra["method"], "OK", 1.84, 5123, 2270, 1, 1, extra=extra
        )
        trim = logging.getLogger("turnkeeper.trim")
        args: tuple[object, ...] = (
            "CALLER_PATH_AGENT",
            "TRIM_MODE_TOKEN_BUDGET",
            "token_budget",
            14,
            2,
            1,
            2408,
            924,
        )
        log(trim, logging.INFO, TRIM, *args)
        extra = {
            "method": "/turnkeeper.v1.HistoryService/EstimateTokens",
            "status": "INVALID_ARGUMENT",
            "duration_ms": 0.3,
            "request_bytes": 0,
            "response_bytes": 0,
            "requests": 1,
            "responses": 0,
            "error_reason": "EMPTY_HISTORY",
            "request_id": "own",  # an extra wins over the call's id
        }
        args = (extra["method"], extra["status"], 0.3, 0, 0, 1, 0)
        log(access, logging.DEBUG, ACCESS, *args, extra=extra)
    finally:
        call_ids.reset_call_ids(token)
    log(
        logging.getLogger("turnkeeper.server"),
        logging.WARNING,
        'odd "text" é\u2028 \x01 tab\t%s',
        2.5,
    )


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("log", [log_handler.log_line, logger_log], ids=["log_line", "Logger.log"])
@pytest.mark.usefixtures("frozen")
def test_the_lines_are_the_pinned_bytes(
    configure: Callable[[str], Writes], log_format: str, log: Log
) -> None:
    stream = configure(log_format)
    write_pinned(log)
    assert stream.getvalue() == PINNED[log_format]


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.usefixtures("frozen")
def test_log_line_makes_no_record_alone_and_a_record_for_anyone_else(
    configure: Callable[[str], Writes], log_format: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = configure(log_format)
    made: list[logging.LogRecord] = []
    for name in ("turnkeeper.access", "turnkeeper.trim", "turnkeeper.server"):
        logger = logging.getLogger(name)
        make = logger.makeRecord

        def counting(*args: Any, make: Any = make, **kw: Any) -> logging.LogRecord:
            record: logging.LogRecord = make(*args, **kw)
            made.append(record)
            return record

        monkeypatch.setattr(logger, "makeRecord", counting)
    write_pinned(log_handler.log_line)
    # Only the line whose extras name a call field (request_id) is a record: the short path
    # never reads extras for the ids.
    assert [getattr(record, "request_id", None) for record in made] == ["own"]
    assert stream.getvalue() == PINNED[log_format]
    # Someone else's handler (a user's config, pytest's capture) gets records, the same bytes.
    made.clear()
    other = _Collect()
    logging.getLogger().addHandler(other)
    stream.seek(0)
    stream.truncate()
    write_pinned(log_handler.log_line)
    assert len(made) == len(other.records) == 4
    assert stream.getvalue() == PINNED[log_format]
    assert other.records[0].request_id == "lb-7f3a.91"  # type: ignore[attr-defined]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.usefixtures("frozen")
def test_log_line_honours_what_logging_would(
    configure: Callable[[str], Writes], monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = configure("json")
    access = logging.getLogger("turnkeeper.access")
    # An extra that makeRecord refuses raises as it does.
    for name in ("message", "levelname", "created"):
        with pytest.raises(KeyError, match="overwrite"):
            log_handler.log_line(access, logging.INFO, "m", extra={name: 1})
    # A filter on the logger, a level above the record's, logging.disable: no line.
    monkeypatch.setattr(access, "filters", [lambda record: False])
    log_handler.log_line(access, logging.INFO, "filtered")
    monkeypatch.setattr(access, "filters", [])
    monkeypatch.setattr(access, "level", logging.WARNING)
    access.manager._clear_cache()  # type: ignore[attr-defined]
    log_handler.log_line(access, logging.INFO, "below the level")
    monkeypatch.setattr(access, "level", logging.NOTSET)
    access.manager._clear_cache()  # type: ignore[attr-defined]
    logging.disable(logging.INFO)
    try:
        log_handler.log_line(access, logging.INFO, "disabled")
    finally:
        logging.disable(logging.NOTSET)
    assert stream.getvalue() == ""
    # `_...` extras stay out of JSON; a single mapping argument is logging's `%(name)s` case.
    log_handler.log_line(
        access, logging.INFO, "a %(b)s", {"b": "mapped"}, extra={"_private": 1, "x": 2}
    )
    assert json.loads(stream.getvalue())["message"] == "a mapped"
    assert "_private" not in json.loads(stream.getvalue())


class Colour(enum.Enum):
    RED = "red"


class Opaque:
    def __str__(self) -> str:
        return "opaque"


def _stock_json() -> logging.Formatter:
    """python-json-logger as the sidecar configured it before issue 19."""

    class Stock(_Rfc3339Time, JsonFormatter):
        pass

    return Stock(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger", "asctime": "time"},
    )


def _records() -> Iterator[logging.LogRecord]:
    extras: list[dict[str, Any]] = [
        {},
        {"text": 'é \u2028 \x00 "q" \\ \U0001f600', "n": -(2**70), "f": 0.1 + 0.2, "t": True},
        {"nan": math.nan, "inf": -math.inf, "none": None, "nested": {"a": [1, (2, 3)], "b": {}}},
        {
            "when": datetime.datetime(2026, 12, 1, 8, 0, tzinfo=datetime.UTC),
            "day": datetime.date.today(),
        },
        {"colour": Colour.RED, "raw": b"\x00\xff", "kind": int, "obj": Opaque(), "_hidden": 1},
        {"time": "an extra named like a field", "logger": "and another", "level": 3},
    ]
    for extra in extras:
        record = logging.LogRecord("a.b", logging.INFO, __file__, 1, "m %s %d", ("x", 7), None)
        record.__dict__.update(extra)
        yield record
        yield logging.makeLogRecord({"name": "c", "msg": {"dict": "message", "n": 1}, **extra})
    try:
        raise ValueError("boom")
    except ValueError:
        yield logging.LogRecord("e", logging.ERROR, __file__, 2, "failed", (), sys.exc_info())
    yield logging.LogRecord("s", logging.INFO, __file__, 3, "stack", (), None, sinfo="Stack:\n x")


@pytest.mark.parametrize("ids", [{}, IDS], ids=["no call", "in a call"])
def test_json_is_python_json_loggers_for_any_record(ids: dict[str, str]) -> None:
    ours, stock = JsonLineFormatter(), _stock_json()
    assert ours.short
    call_context = call_ids.CallContextFilter()
    token = call_ids.set_call_ids(ids)
    try:
        for record in _records():
            call_context.filter(record)
            copy = logging.makeLogRecord(dict(record.__dict__))
            assert ours.format(record) == stock.format(copy)
    finally:
        call_ids.reset_call_ids(token)


def test_text_with_an_exception_is_logging_formatters_indented_then_the_ids() -> None:
    class Reference(_Rfc3339Time, logging.Formatter):
        pass

    ours, reference = TextLineFormatter(), Reference(_TEXT_FORMAT)
    token = call_ids.set_call_ids(IDS)
    try:
        for record in _records():
            call_ids.CallContextFilter().filter(record)
            copy = logging.makeLogRecord(dict(record.__dict__))
            ids = " ".join(f"{k}={v}" for k, v in IDS.items())
            first, *rest = reference.format(copy).split("\n")
            expected = "\n".join([first, *(f"  {line}" for line in rest)])
            assert ours.format(record) == f"{expected} {ids}"
    finally:
        call_ids.reset_call_ids(token)


FORGED = "\n2026-12-01T00:00:00.000Z INFO turnkeeper.access: forged"


@pytest.mark.parametrize("log", [log_handler.log_line, logger_log], ids=["log_line", "Logger.log"])
@pytest.mark.usefixtures("frozen")
def test_nothing_a_caller_sends_starts_a_text_line(
    configure: Callable[[str], Writes], log: Log
) -> None:
    stream = configure("text")
    ids = {"request_id": "r", "session_id": f"s{FORGED}", "runtime_id": "rt\r\x1b[2K"}
    token = call_ids.set_call_ids(ids)
    try:
        log(logging.getLogger("turnkeeper.trim"), logging.INFO, "model=%s", f"m{FORGED}\u2028x")
        try:
            raise ValueError(f"bad{FORGED}")
        except ValueError:
            logging.getLogger("turnkeeper.server").exception("failed for %s", f"q{FORGED}")
    finally:
        call_ids.reset_call_ids(token)
    text = stream.getvalue()
    lines = text.splitlines()
    # Only the two records' own first lines start at the margin; a traceback's lines are indented.
    assert [line for line in lines if not line.startswith(" ")] == [lines[0], lines[1]]
    assert not any("forged" in line and line.startswith("2026") for line in lines)
    assert lines[0] == (
        "2025-12-01T11:58:18.974Z INFO turnkeeper.trim: model=m\\n2026-12-01T00:00:00.000Z INFO "
        "turnkeeper.access: forged\\u2028x request_id=r session_id=s\\n2026-12-01T00:00:00.000Z "
        "INFO turnkeeper.access: forged runtime_id=rt\\r\\u001b[2K"
    )
    assert lines[1].startswith("2025-12-01T11:58:18.974Z ERROR turnkeeper.server: failed for q\\n")
    assert "  ValueError: bad" in text
    assert "\r" not in text and "\x1b" not in text and "\u2028" not in text


# When lines are written.


async def test_a_loop_turns_lines_are_written_at_its_end_in_one_write(
    configure: Callable[[str], Writes],
) -> None:
    stream = configure("text")
    log = logging.getLogger("turnkeeper.access")
    for index in range(3):
        log_handler.log_line(log, logging.INFO, "line %d", index)
    log.info("line 3")  # an ordinary record: written at the end of this turn, with the others
    assert stream.writes == []
    await asyncio.sleep(0)
    assert len(stream.writes) == 1
    assert [line.split(": ")[1] for line in stream.getvalue().splitlines()] == [
        f"line {index}" for index in range(4)
    ]


async def test_access_and_trim_lines_wait_a_few_milliseconds_for_others(
    configure: Callable[[str], Writes],
) -> None:
    stream = configure("json")
    log = logging.getLogger("turnkeeper.access")
    log_handler.log_line(log, logging.INFO, "call 1")
    await asyncio.sleep(0)
    log_handler.log_line(log, logging.INFO, "call 2")  # a later turn: joins the same write
    await asyncio.sleep(0)
    assert stream.writes == []
    await asyncio.sleep(log_handler._WINDOW * 3)
    assert len(stream.writes) == 1
    assert [json.loads(line)["message"] for line in stream.writes[0].splitlines()] == [
        "call 1",
        "call 2",
    ]


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_the_lines_of_interleaved_calls_in_one_batch_carry_their_own_ids(
    configure: Callable[[str], Writes], log_format: str
) -> None:
    stream = configure(log_format)
    log = logging.getLogger("turnkeeper.trim")
    first = {"request_id": "r-1", "session_id": "s-1"}
    second = {"request_id": "r-2", "agent_id": "a-2"}
    for ids in (first, second, first, {}, second):
        token = call_ids.set_call_ids(ids)
        log_handler.log_line(log, logging.INFO, "call %s", ids.get("request_id", "none"))
        call_ids.reset_call_ids(token)
    log_handler.flush_logs()
    assert len(stream.writes) == 1  # one batch
    lines = stream.writes[0].splitlines()
    if log_format == "json":
        assert [json.loads(line) for line in lines] == [
            {**json.loads(line), "message": f"call {ids.get('request_id', 'none')}", **ids}
            for line, ids in zip(lines, (first, second, first, {}, second), strict=True)
        ]
        assert "request_id" not in json.loads(lines[3])
        return
    assert [line.split(": ", 1)[1] for line in lines] == [
        "call r-1 request_id=r-1 session_id=s-1",
        "call r-2 request_id=r-2 agent_id=a-2",
        "call r-1 request_id=r-1 session_id=s-1",
        "call none",
        "call r-2 request_id=r-2 agent_id=a-2",
    ]


async def test_warning_writes_at_once_after_what_was_pending(
    configure: Callable[[str], Writes],
) -> None:
    stream = configure("json")
    log = logging.getLogger("turnkeeper.server")
    log.info("first")
    log.warning("second")
    assert [json.loads(line)["message"] for line in stream.getvalue().splitlines()] == [
        "first",
        "second",
    ]


async def test_a_threads_lines_keep_their_place_among_the_loops(
    configure: Callable[[str], Writes],
) -> None:
    stream = configure("text")
    log = logging.getLogger("turnkeeper.server")
    log.info("loop 1")
    # While a write is due on the loop, a worker's line joins it (the loop is blocked here).
    worker = threading.Thread(target=log.info, args=("worker 1",))
    worker.start()
    worker.join()
    log.info("loop 2")
    await asyncio.sleep(0)
    # With nothing due, a worker's line is written at once.
    await asyncio.to_thread(log.info, "worker 2")
    messages = [line.split(": ")[1] for line in stream.getvalue().splitlines()]
    assert messages == ["loop 1", "worker 1", "loop 2", "worker 2"]
    assert len(stream.writes) == 2


def test_without_a_loop_every_line_is_written_at_once(configure: Callable[[str], Writes]) -> None:
    stream = configure("text")
    logging.getLogger("x").info("one")
    log_handler.log_line(logging.getLogger("x"), logging.INFO, "two")
    assert len(stream.writes) == 2


async def test_pending_lines_are_bounded(configure: Callable[[str], Writes]) -> None:
    stream = configure("text")
    log = logging.getLogger("x")
    for index in range(log_handler._MAX_PENDING + 10):
        log_handler.log_line(log, logging.INFO, "%d", index)
    assert len(stream.writes) == 1 and stream.getvalue().count("\n") == log_handler._MAX_PENDING
    await asyncio.sleep(log_handler._WINDOW * 2)
    assert stream.getvalue().count("\n") == log_handler._MAX_PENDING + 10


def test_lines_left_by_a_closed_loop_are_written_by_flush(
    configure: Callable[[str], Writes],
) -> None:
    stream = configure("text")
    loop = asyncio.new_event_loop()

    async def log_and_return() -> None:
        logging.getLogger("x").info("left behind")

    try:
        loop.run_until_complete(log_and_return())
    finally:
        loop.close()  # the end-of-turn write may not have run
    log_handler.flush_logs()  # as logging.shutdown does at exit
    assert stream.getvalue().count("left behind") == 1


# At exit and at a crash (a child process configured as the sidecar is).

CHILD = """
import asyncio, logging, sys, threading
from turnkeeper.server.telemetry.log_handler import log_line
from turnkeeper.server.telemetry.logs import configure_logging

configure_logging("INFO", sys.argv[1])
log = logging.getLogger("child")

def lines():
    for index in range(100):
        if index % 2:
            log_line(log, logging.INFO, "line %d", index)
        else:
            log.info("line %d", index)

def crash_in_a_thread():
    raise RuntimeError("thread crash")

async def main(end):
    lines()
    if end == "crash":  # out of the loop at once: no later turn writes what is pending
        raise KeyboardInterrupt("loop crash")
    if end == "exit":
        sys.exit(3)
    if end == "thread":
        worker = threading.Thread(target=crash_in_a_thread)
        worker.start()
        worker.join()
        log.info("after the thread")
    if end == "closed":
        asyncio.get_running_loop().stop()

if sys.argv[2] == "closed":
    loop = asyncio.new_event_loop()
    loop.run_until_complete(main("closed"))
    loop.close()
elif sys.argv[2] == "crash":  # no asyncio.run, whose cleanup would run more loop turns
    asyncio.new_event_loop().run_until_complete(main("crash"))
else:
    asyncio.run(main(sys.argv[2]))
"""


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize(
    ("end", "code", "after"),
    [
        ("crash", -signal.SIGINT, "KeyboardInterrupt: loop crash"),
        ("exit", 3, None),
        ("thread", 0, "RuntimeError: thread crash"),
        ("closed", 0, None),
    ],
)
def test_no_line_is_lost_and_a_traceback_comes_after_the_lines(
    log_format: str, end: str, code: int, after: str | None
) -> None:
    import subprocess
    from pathlib import Path

    service = Path(logs.__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, log_format, end],
        env={"PYTHONPATH": str(service), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == code, done.stderr
    output = done.stderr.splitlines()
    if log_format == "json":
        lines = [json.loads(line)["message"] for line in output if line.startswith("{")]
    else:
        lines = [line.split(": ", 1)[1] for line in output if " INFO child: " in line]
    assert lines[:100] == [f"line {index}" for index in range(100)], done.stderr
    if after is not None:
        last_line = max(i for i, line in enumerate(output) if "line 99" in line)
        traceback = output.index("Traceback (most recent call last):")
        assert last_line < traceback and after in done.stderr, done.stderr
    if end == "thread":
        assert "after the thread" in output[-1]


async def test_a_line_that_cannot_be_formatted_is_reported_and_the_others_written(
    configure: Callable[[str], Writes],
) -> None:
    stream = configure("text")
    log = logging.getLogger("turnkeeper.trim")
    log_handler.log_line(log, logging.INFO, "before")
    log_handler.log_line(log, logging.INFO, "bad %d", "not a number")  # formatted with its batch
    log_handler.log_line(log, logging.INFO, "after")
    log_handler.flush_logs()
    text = stream.getvalue()
    assert "--- Logging error ---" in text and "bad %d" in text
    lines = [line for line in text.splitlines() if " INFO turnkeeper.trim: " in line]
    assert [line.split(": ", 1)[1] for line in lines] == ["before", "after"]


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_span_in_progress_names_its_trace_on_the_line(
    configure: Callable[[str], Writes], log_format: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from turnkeeper.server.telemetry import tracing

    stream = configure(log_format)
    monkeypatch.setattr(tracing, "_started", True)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("call") as span:
        log_handler.log_line(logging.getLogger("turnkeeper.access"), logging.INFO, "in a span")
        context = span.get_span_context()
    log_handler.log_line(logging.getLogger("turnkeeper.access"), logging.INFO, "after it")
    log_handler.flush_logs()
    first, second = stream.getvalue().splitlines()
    trace_id, span_id = format(context.trace_id, "032x"), format(context.span_id, "016x")
    if log_format == "json":
        assert (json.loads(first)["trace_id"], json.loads(first)["span_id"]) == (trace_id, span_id)
        assert "trace_id" not in json.loads(second)
    else:
        assert first.endswith(f"in a span trace_id={trace_id} span_id={span_id}")
        assert second.endswith(": after it")


# log_line's calls for the check against a real record: message, arguments, extras, level.
_FAST_CALLS: list[tuple[str, tuple[object, ...], dict[str, object] | None, int]] = [
    (ACCESS, ("/m", "OK", 1.84, 5123, 2270, 1, 1), {"method": "/m", "duration_ms": 1.84}, 20),
    (TRIM, ("CALLER_PATH_AGENT", "TRIM_MODE_TOKEN_BUDGET", "r", 14, 2, 1, 2408, 924), None, 20),
    ("plain é %s", ("\U0001f600",), {"n": -(2**70), "f": 0.1 + 0.2, "none": None}, 10),
    ("no arguments 100%", (), {"nested": {"a": [1, (2, 3)]}, "nan": math.nan}, 20),
    ("a level without a name", (), None, 23),
]


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("ids", [{}, IDS], ids=["no call", "in a call"])
@pytest.mark.usefixtures("frozen")
def test_log_line_without_a_record_is_the_formatters_line_of_a_real_record(
    configure: Callable[[str], Writes], log_format: str, ids: dict[str, str]
) -> None:
    """log_line's short path rebuilds what logging does (the record's attributes, getMessage,
    getLevelName, the filter's ids) without a LogRecord: a change of any of these in a new
    Python or python-json-logger shows here, against the stock formatter given a real record."""
    stream = configure(log_format)
    logger = logging.getLogger("turnkeeper.access")

    class Text(_Rfc3339Time, logging.Formatter):
        pass

    reference = _stock_json() if log_format == "json" else Text(_TEXT_FORMAT)
    token = call_ids.set_call_ids(ids)
    try:
        for msg, args, extra, level in _FAST_CALLS:
            assert log_handler._direct_handler(logger, level) is not None, (
                "log_line no longer takes its short path under configure_logging's own setup: "
                "see what _direct_handler checks of logging's loggers and handlers"
            )
            stream.seek(0)
            stream.truncate()
            log_handler.log_line(logger, level, msg, *args, extra=extra)
            log_handler.flush_logs()
            record = logger.makeRecord(
                logger.name, level, __file__, 1, msg, args, None, extra=extra
            )
            record.created = NOW
            call_ids.CallContextFilter().filter(record)
            expected = reference.format(record)
            if log_format == "text":
                suffix = " ".join(f"{k}={v}" for k in call_ids.CALL_FIELDS if (v := ids.get(k)))
                expected = f"{expected} {suffix}" if suffix else expected
            assert stream.getvalue() == expected + "\n", (
                f"log_line's line for {msg!r} differs from the {log_format} formatter's line "
                "of a real LogRecord: what the short path copies of logging or "
                "python-json-logger (record attributes, getMessage, level names, reserved "
                "fields) has changed shape"
            )
    finally:
        call_ids.reset_call_ids(token)


_C_MAKE_ENCODER = json.encoder.c_make_encoder  # type: ignore[attr-defined]


def _changed_c_encoder(markers: object, *args: object) -> object:
    """A C encoder that refuses the call without circular-reference markers (json's own
    encoding, which passes them, still works)."""
    if markers is None:
        raise TypeError("a changed signature")
    return _C_MAKE_ENCODER(markers, *args)


@pytest.mark.parametrize("make", [None, _changed_c_encoder], ids=["absent", "changed"])
def test_json_without_the_c_encoder_falls_back_to_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch, make: object
) -> None:
    with_c = JsonLineFormatter()
    assert with_c._encode_c is not None
    # (None is how json.encoder says a Python has no C encoder.)
    monkeypatch.setattr(json.encoder, "c_make_encoder", make)
    without = JsonLineFormatter()
    assert without._encode_c is None
    assert without.short
    for record in _records():
        copy = logging.makeLogRecord(dict(record.__dict__))
        assert without.format(record) == with_c.format(copy)
