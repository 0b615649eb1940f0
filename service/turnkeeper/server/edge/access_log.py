"""Per-RPC telemetry: one access-log line and the grpc_server_* metrics — never content.

Both carry the method, status, duration and sizes only. Every call has a request id: the
caller's `x-request-id` metadata when it sends a usable one, else a new random (version 4) UUID
(`new_request_id`). Every log line of
the call carries it, and the call's trailers return it (`x-request-id`), so a runtime can quote
it and an operator find the call's lines. `edge/pipeline.py` runs them for every call, in the same
pass as authentication and admission control. What a method's calls share (metric
series, log level) is resolved once per method, not per call.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import random
import re
import time
from collections.abc import Mapping
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from turnkeeper.server.contract.caller import CALLER_FIELDS, caller_of, shown_id
from turnkeeper.server.contract.methods import PROBE_PREFIXES
from turnkeeper.server.telemetry import metrics, tracing
from turnkeeper.server.telemetry.call_ids import REQUEST_ID_KEY, set_call_ids
from turnkeeper.server.telemetry.log_handler import log_line

log = logging.getLogger("turnkeeper.access")

Req = TypeVar("Req")
Resp = TypeVar("Resp")

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
# Built once: `A | B` in an isinstance check makes a union object on every call.
_ENDED = (asyncio.CancelledError, GeneratorExit)
_READABLE = (bytes, Message)
# What a caller's request id may be: a UUID, a trace or span id, a load balancer's id.
_USABLE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")


class MethodTelemetry:
    """What every call of one method shares, resolved once when it is registered: its metric
    series, its log level, where its request keeps its CallerContext."""

    __slots__ = ("caller_field", "level", "method", "rpc_type", "series")

    def __init__(self, method: str, rpc_type: str) -> None:
        self.method = method
        # go-grpc-prometheus grpc_type: unary, server_stream, client_stream or bidi_stream.
        self.rpc_type = rpc_type
        self.series = metrics.RpcSeries(method, rpc_type)
        self.caller_field = CALLER_FIELDS.get(method)
        # Probes poll constantly; at DEBUG they do not drown real traffic.
        self.level = logging.DEBUG if method.startswith(PROBE_PREFIXES) else logging.INFO


class CallStats:
    """One call's figures, from its start (`started` then counts it) to `finish`."""

    __slots__ = (
        "call_ids",
        "request_bytes",
        "request_id",
        "requests",
        "response_bytes",
        "responses",
        "started",
        "telemetry",
    )

    def __init__(self, telemetry: MethodTelemetry, request_id: str) -> None:
        self.telemetry = telemetry
        self.request_id = request_id
        # The ids on every log line of the call: the request id and the caller's, once read.
        self.call_ids: Mapping[str, str] = {"request_id": request_id}
        self.started = time.perf_counter()
        self.request_bytes = 0
        self.response_bytes = 0
        self.requests = 0
        self.responses = 0

    @property
    def method(self) -> str:
        return self.telemetry.method

    def count_request(self, size: int) -> None:
        self.request_bytes += size
        self.requests += 1

    def count_response(self, response: Any) -> None:
        # Raw-bytes handlers (every HistoryService method) answer bytes: their size is free.
        self.responses += 1
        if isinstance(response, bytes):
            self.response_bytes += len(response)
        elif isinstance(response, Message):
            self.response_bytes += response.ByteSize()


# A call ended by its client this close to its deadline ended at the deadline: the client's
# clock started before the server received the call, so its timer fires first and cancels the
# call (RST_STREAM) while the server's own deadline is still a transit time away.
DEADLINE_SLACK_S = 0.1


def _status_of(context: grpc.aio.ServicerContext[Any, Any], error: BaseException | None) -> str:
    if isinstance(error, _ENDED):
        # grpc cancels the handler both when the client cancels and when the deadline passes; a
        # stream's generator that grpc stops iterating is closed at its yield (GeneratorExit).
        remaining = context.time_remaining()
        if remaining is not None and remaining <= DEADLINE_SLACK_S:
            return "DEADLINE_EXCEEDED"
        return "CANCELLED"
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if code is not None:  # some grpc versions report the raw integer code
        return next((c.name for c in grpc.StatusCode if c.value[0] == code), str(code))
    return "UNKNOWN" if error is not None and not isinstance(error, grpc.aio.AbortError) else "OK"


def _error_reason(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    """The ErrorInfo reason of a rich error status (set by abort_with_status), if any."""
    for key, value in context.trailing_metadata() or ():
        if key != _STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        for detail in status_pb2.Status.FromString(value).details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return str(info.reason)
    return None


# Request ids are drawn from a generator of their own, seeded from os.urandom (and again in a
# forked child): `uuid.uuid4()` makes a system call and a UUID object per call, and the module's
# shared generator may be seeded by anything in the process (tests seed it), repeating ids.
_ids = random.Random()
os.register_at_fork(after_in_child=_ids.seed)
_random_bits = _ids.getrandbits
# The version (4) and variant (RFC 9562) bits of a UUID, as uuid.UUID(version=4) sets them.
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def new_request_id() -> str:
    """A new random version 4 UUID in its canonical form (122 random bits, as `uuid.uuid4()`):
    unique, not a secret."""
    # Its 16 bytes in hex, a dash every 2 bytes: 8-4-4-4-12 digits once 3 of the 7 dashes go.
    digits = (_random_bits(128) & _UUID4_CLEAR | _UUID4_SET).to_bytes(16, "big").hex("-", 2)
    return f"{digits[:4]}{digits[5:29]}{digits[30:34]}{digits[35:]}"


def request_id_of(metadata: Any) -> str:
    """The caller's `x-request-id` when usable, else a new UUID."""
    for key, value in metadata or ():
        if key == REQUEST_ID_KEY and isinstance(value, str) and _USABLE_REQUEST_ID.fullmatch(value):
            return value
    return new_request_id()


def return_request_id(context: grpc.aio.ServicerContext[Any, Any], request_id: str) -> None:
    # Set before the handler runs: grpc sends the trailers of an abort at once, and a plain
    # abort or a success sends these. A rich error replaces them, so RequestError.to_status
    # adds the id itself (contract/errors.py).
    context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))


def started(
    stats: CallStats, request: Any, context: grpc.aio.ServicerContext[Any, Any]
) -> contextvars.Token[Mapping[str, str]]:
    """A call begins: it is counted, its caller read, its ids put on every log line written in
    this context and its request id returned to the caller. `finish` and `reset_call_ids` (with
    the token returned) end it."""
    stats.telemetry.series.start()
    _read_caller(stats, request)
    ids = set_call_ids(stats.call_ids)
    return_request_id(context, stats.request_id)
    return ids


def _read_caller(stats: CallStats, request: Any) -> None:
    number = stats.telemetry.caller_field
    # A refusal that never reads its request has no caller to read.
    if number is not None and isinstance(request, _READABLE):
        try:
            caller = caller_of(request, number)
        except ValueError:  # unreadable bytes: the handler reports them
            return
        session_id, runtime_id, agent_id = caller.session_id, caller.runtime_id, caller.agent_id
        if not (session_id or runtime_id or agent_id):
            return  # the request id alone, as the call began
        # An id over the limit is shown cut short: the call is refused, its lines stay small.
        ids = {"request_id": stats.request_id}
        if session_id:
            ids["session_id"] = shown_id(session_id)
        if runtime_id:
            ids["runtime_id"] = shown_id(runtime_id)
        if agent_id:
            ids["agent_id"] = shown_id(agent_id)
        stats.call_ids = ids


def finish(
    stats: CallStats, context: grpc.aio.ServicerContext[Any, Any], error: BaseException | None
) -> None:
    status = _status_of(context, error)
    seconds = time.perf_counter() - stats.started
    reason = _error_reason(context) if status != "OK" else None
    telemetry = stats.telemetry
    if tracing.tracing_started():  # (without a span, two calls less)
        tracing.annotate_call(
            stats.request_bytes,
            stats.response_bytes,
            stats.requests,
            stats.responses,
            status,
            reason,
        )
    telemetry.series.finished(
        status,
        seconds,
        stats.request_bytes,
        stats.response_bytes,
        stats.requests,
        stats.responses,
        reason,
    )
    level = telemetry.level
    if not log.isEnabledFor(level):
        return
    duration_ms = round(seconds * 1000.0, 2)
    extra = {
        "method": telemetry.method,
        "status": status,
        "duration_ms": duration_ms,
        "request_bytes": stats.request_bytes,
        "response_bytes": stats.response_bytes,
        "requests": stats.requests,
        "responses": stats.responses,
    }
    if reason:
        extra["error_reason"] = reason
    log_line(
        log,
        level,
        "rpc method=%s status=%s duration_ms=%.2f request_bytes=%d response_bytes=%d requests=%d "
        "responses=%d",
        telemetry.method,
        status,
        duration_ms,
        stats.request_bytes,
        stats.response_bytes,
        stats.requests,
        stats.responses,
        extra=extra,
    )
