"""Request bytes to messages: undecodable bytes become INVALID_ARGUMENT, never UNKNOWN.

The handlers receive raw bytes (their gRPC deserializer is None), so a request that protobuf cannot
parse is answered here with ERROR_REASON_MALFORMED_REQUEST. Both engines name the culprit with the
same function, `malformed_request`, so their error details are identical by construction.
"""

from __future__ import annotations

from typing import TypeVar

from google.protobuf import empty_pb2, unknown_fields
from google.protobuf.message import DecodeError, Message

from turnkeeper.server.contract.errors import FieldViolation, RequestError, invalid_argument
from turnkeeper.v1 import errors_pb2

M = TypeVar("M", bound=Message)

MALFORMED_REQUEST = errors_pb2.ERROR_REASON_MALFORMED_REQUEST
_LEN = 2  # the length-delimited wire type


def decode(raw: bytes, request_type: type[M]) -> M:
    try:
        return request_type.FromString(raw)
    except DecodeError:
        raise malformed_request(raw, request_type) from None


def read_varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at `at` in `data` and the offset after it; ValueError when it is truncated or
    longer than 64 bits. A one-byte varint, nearly every key and short length, returns at once."""
    byte = data[at] if at < len(data) else 0x80
    if byte < 0x80:
        return byte, at + 1
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def encode_varint(value: int) -> bytes:
    """A non-negative integer as a protobuf varint."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(number: int, payload: bytes, tail: bytes = b"") -> bytes:
    """One length-delimited field (bytes, string, message), encoded as protobuf does, followed by
    `tail`, in one copy. Appended to a message's bytes, a message field merges into the earlier
    occurrence, a repeated one adds."""
    tag = encode_varint(number << 3 | 2)
    return b"".join((tag, encode_varint(len(payload)), payload, tail))


def malformed_fields(raw: bytes, request_type: type[Message]) -> list[str]:
    """The top-level fields whose bytes do not decode, by field number; [""] for broken framing.

    The request is first split into its top-level fields (parsed as an empty message, every field
    is an unknown one); each length-delimited occurrence of a known field is then parsed alone as
    the request type, at the depth it has in the request.
    """
    try:
        occurrences = unknown_fields.UnknownFieldSet(empty_pb2.Empty.FromString(raw))
    except DecodeError:
        return [""]
    fields = request_type.DESCRIPTOR.fields_by_number
    bad: set[int] = set()
    for index in range(len(occurrences)):
        occurrence = occurrences[index]
        number = occurrence.field_number
        if number not in fields or occurrence.wire_type != _LEN or number in bad:
            continue  # a known field with another wire type is an unknown field, as protobuf has it
        data: bytes = occurrence.data
        try:
            request_type.FromString(
                encode_varint(number << 3 | _LEN) + encode_varint(len(data)) + data
            )
        except DecodeError:
            bad.add(number)
    return [fields[number].name for number in sorted(bad)] or [""]


def malformed_request(raw: bytes, request_type: type[Message]) -> RequestError:
    type_name = request_type.DESCRIPTOR.full_name
    violations = [
        FieldViolation(
            field=name,
            description=(
                f"The bytes of this field do not decode as its type in {type_name}: truncated "
                "or malformed wire data, a string that is not UTF-8, or nesting deeper than 100."
                if name
                else f"The request bytes do not decode as {type_name}: a tag or a length cannot "
                "be read or runs past the end."
            ),
        )
        for name in malformed_fields(raw, request_type)
    ]
    return invalid_argument(MALFORMED_REQUEST, violations)
