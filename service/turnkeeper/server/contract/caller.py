"""The CallerContext of a request (session, runtime, agent ids), from a message or raw bytes.

Authentication holds a token to its runtime with it; logs and spans name the call with it.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import message_factory
from google.protobuf.message import DecodeError, Message

from turnkeeper.server.contract.methods import SERVICE, method_path
from turnkeeper.server.contract.wire import read_varint
from turnkeeper.v1 import trim_pb2


def _caller_fields() -> dict[str, int]:
    """Method path -> field number of its request's CallerContext, for every method with one."""
    fields = {}
    for method in SERVICE.methods:
        for field in method.input_type.fields:
            if field.message_type is trim_pb2.CallerContext.DESCRIPTOR:
                fields[method_path(method.name)] = field.number
    return fields


CALLER_FIELDS = _caller_fields()
# Method path -> its request type, for the methods of CALLER_FIELDS.
CALLER_REQUESTS: dict[str, type[Message]] = {
    method_path(method.name): message_factory.GetMessageClass(method.input_type)
    for method in SERVICE.methods
    if method_path(method.name) in CALLER_FIELDS
}

MAX_ID_BYTES = 256
"""The longest id a CallerContext (or a TrimEvents filter) may hold, in bytes of UTF-8: ids are
copied into every log line, span and event of the call, which must stay small."""
CALLER_IDS = ("session_id", "runtime_id", "agent_id", "turn_id")


def id_too_long(value: str) -> bool:
    """Whether an id is over MAX_ID_BYTES (a UTF-8 character is at most 4 bytes, so a short one
    is not encoded)."""
    return len(value) * 4 > MAX_ID_BYTES and len(value.encode()) > MAX_ID_BYTES


def too_long_ids(caller: trim_pb2.CallerContext) -> list[str]:
    """The names of the caller's ids that are over MAX_ID_BYTES, in field order."""
    return [name for name in CALLER_IDS if id_too_long(getattr(caller, name))]


def shown_id(value: str) -> str:
    """An id as logs and errors show it: whole when it is within MAX_ID_BYTES, else its start and
    its length (the call is refused; its log lines must stay small)."""
    if not id_too_long(value):
        return value
    return f"{value[:32]}...({len(value.encode())} bytes)"


def caller_from_wire(data: bytes, number: int) -> trim_pb2.CallerContext:
    """The request's CallerContext from its raw bytes, skipping every other top-level field.

    Occurrences are concatenated, which merges them exactly as protobuf parsing does. Raises
    ValueError when the bytes cannot be read.
    """
    parts = []
    at = 0
    end = len(data)
    while at < end:
        key, at = read_varint(data, at)
        wire_type = key & 7
        if wire_type == 2:
            length, at = read_varint(data, at)
            if key >> 3 == number:
                parts.append(data[at : at + length])
            at += length
        elif wire_type == 0:
            _, at = read_varint(data, at)
        elif wire_type == 1:
            at += 8
        elif wire_type == 5:
            at += 4
        else:
            raise ValueError(f"unexpected wire type {wire_type}")
        if at > end:
            raise ValueError("truncated field")
    if not parts:
        return trim_pb2.CallerContext()
    try:
        return trim_pb2.CallerContext.FromString(parts[0] if len(parts) == 1 else b"".join(parts))
    except DecodeError as error:  # protobuf's DecodeError is not a ValueError (a bad string)
        raise ValueError(f"the CallerContext does not decode: {error}") from None


def caller_of(request: Any, number: int) -> trim_pb2.CallerContext:
    if isinstance(request, bytes):
        return caller_from_wire(request, number)
    caller: trim_pb2.CallerContext = request.caller
    return caller
