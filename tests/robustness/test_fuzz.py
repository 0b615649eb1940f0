"""Issue 9 "malformed bytes get UNKNOWN": every method, fed random bytes and random well-formed
requests, answers with a documented status (never UNKNOWN, never INTERNAL) and keeps serving."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor, message_factory
from google.protobuf.message import Message
from robustness_support import error_info, rich_status
from turnkeeper.server.contract.wire import encode_varint
from turnkeeper.v1 import history_service_pb2 as svc

SERVICE = svc.DESCRIPTOR.services_by_name["HistoryService"]
UNARY = [m for m in SERVICE.methods if not m.server_streaming]
RANDOM_BYTES_PER_METHOD = 150
RANDOM_PROTOS_PER_METHOD = 60
_F = descriptor.FieldDescriptor


def _nested_unknown(depth: int) -> bytes:
    """An unknown field 15 holding a group of itself `depth` times (the probe's 2,000-deep case)."""
    inner = b""
    for _ in range(depth):
        inner = b"\x7a" + encode_varint(len(inner)) + inner
    return inner


SPECIAL = [
    b"\x08",  # a tag with no value
    b"\x0a\x03\xff\xfe\xfd",  # field 1 as a length-delimited blob of invalid UTF-8
    b"\x0a\x05\x0a\x03\xff\xfe\xfd",
    _nested_unknown(2000),
    b"\xff" * 11,  # an over-long varint tag
    b"\x0f",  # wire type 7
]


def _random_value(field: descriptor.FieldDescriptor, rng: random.Random, depth: int) -> Any:
    kind = field.type
    if kind == _F.TYPE_MESSAGE:
        return _random_message(field.message_type, rng, depth + 1)
    if kind == _F.TYPE_ENUM:
        return rng.choice([v.number for v in field.enum_type.values] + [rng.randint(0, 1000)])
    if kind == _F.TYPE_STRING:
        return rng.choice(
            ["", "a", "[Tool results] x", "[IMAGE:/x.png]", "é🦀" * rng.randint(0, 50)]
        )
    if kind == _F.TYPE_BYTES:
        return rng.randbytes(rng.randint(0, 20))
    if kind == _F.TYPE_BOOL:
        return rng.random() < 0.5
    if kind in (_F.TYPE_DOUBLE, _F.TYPE_FLOAT):
        return rng.choice([0.0, 0.5, 1.0, -1.0, 1e308, float("nan"), float("inf")])
    if kind in (_F.TYPE_UINT32, _F.TYPE_FIXED32):
        return rng.choice([0, 1, 2**32 - 1, rng.randint(0, 10**6)])
    if kind in (_F.TYPE_UINT64, _F.TYPE_FIXED64):
        return rng.choice([0, 1, 2**64 - 1, rng.randint(0, 10**6)])
    if kind in (_F.TYPE_INT32, _F.TYPE_SINT32, _F.TYPE_SFIXED32):
        return rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randint(-(10**6), 10**6)])
    return rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(-(10**6), 10**6)])


def _random_message(desc: descriptor.Descriptor, rng: random.Random, depth: int = 0) -> Message:
    message = message_factory.GetMessageClass(desc)()
    if depth > 6:
        return message
    for field in desc.fields:
        if rng.random() < 0.5 or desc.full_name.startswith("google.protobuf.Struct"):
            continue
        if field.is_repeated:
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                continue
            values = [_random_value(field, rng, depth) for _ in range(rng.randint(0, 3))]
            target = getattr(message, field.name)
            if field.type == _F.TYPE_MESSAGE:
                for value in values:
                    target.add().CopyFrom(value)
            else:
                target.extend(values)
        elif field.type == _F.TYPE_MESSAGE:
            getattr(message, field.name).CopyFrom(_random_value(field, rng, depth))
        else:
            setattr(message, field.name, _random_value(field, rng, depth))
    return message


@pytest.fixture(scope="module")
def channel(live_server: Any) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(live_server.address) as channel:
        yield channel


def _call(channel: grpc.Channel, method: descriptor.MethodDescriptor, body: bytes) -> str:
    rpc = channel.unary_unary(
        f"/{SERVICE.full_name}/{method.name}", request_serializer=None, response_deserializer=None
    )
    try:
        rpc(body, timeout=30)
        return "OK"
    except grpc.RpcError as error:
        code = error.code()
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            status = rich_status(error)
            info = error_info(status) if status is not None else None
            assert info is not None and info.domain == "turnkeeper.v1", error.details()
        return code.name


def test_random_bytes_and_random_requests_never_get_unknown(
    channel: grpc.Channel, live_server: Any, figures: Any
) -> None:
    rng = random.Random(9)
    statuses: Counter[str] = Counter()
    for method in UNARY:
        bodies = list(SPECIAL)
        bodies += [rng.randbytes(rng.randint(1, 400)) for _ in range(RANDOM_BYTES_PER_METHOD)]
        bodies += [
            _random_message(method.input_type, rng).SerializeToString()
            for _ in range(RANDOM_PROTOS_PER_METHOD)
        ]
        for body in bodies:
            statuses[_call(channel, method, body)] += 1
    # The server still answers a plain call.
    assert _call(channel, SERVICE.methods_by_name["ResolveBudget"], b"") == "OK"
    figures.add("calls", sum(statuses.values()))
    figures.add("by status", dict(statuses.most_common()))
    figures.add("UNKNOWN / INTERNAL", f"{statuses['UNKNOWN']} / {statuses['INTERNAL']}")
    assert statuses["UNKNOWN"] == 0 and statuses["INTERNAL"] == 0, statuses
    assert set(statuses) <= {"OK", "INVALID_ARGUMENT", "FAILED_PRECONDITION"}, statuses
    assert "Traceback" not in live_server.log_text()


_MARKER = "Zq9Zq9"
_NOT_UTF8 = b"\xff\xfe\xc0\xaf\xff\xfe"  # as long as the marker, so every length stays right


def _string_paths(
    desc: descriptor.Descriptor, prefix: tuple[descriptor.FieldDescriptor, ...] = ()
) -> Iterator[tuple[descriptor.FieldDescriptor, ...]]:
    """Every path from the request root to a string field, through messages (not maps, not the
    well-known types, no type twice on one path)."""
    for field in desc.fields:
        if field.type == _F.TYPE_STRING:
            yield (*prefix, field)
        elif field.type == _F.TYPE_MESSAGE:
            inner = field.message_type
            if inner.GetOptions().map_entry or inner.full_name.startswith("google."):
                continue
            if any(f.message_type is inner for f in prefix) or inner is desc:
                continue
            yield from _string_paths(inner, (*prefix, field))


def _with_marker(
    desc: descriptor.Descriptor, path: tuple[descriptor.FieldDescriptor, ...]
) -> bytes:
    message = message_factory.GetMessageClass(desc)()
    target: Any = message
    for field in path[:-1]:
        target = getattr(target, field.name)
        if field.is_repeated:
            target = target.add()
    last = path[-1]
    if last.is_repeated:
        getattr(target, last.name).append(_MARKER)
    else:
        setattr(target, last.name, _MARKER)
    raw = message.SerializeToString()
    assert raw.count(_MARKER.encode()) == 1
    return raw.replace(_MARKER.encode(), _NOT_UTF8)


@pytest.mark.parametrize("method", list(SERVICE.methods), ids=lambda m: m.name)
def test_a_string_that_is_not_utf8_anywhere_in_a_request_is_invalid_argument(
    channel: grpc.Channel, live_server: Any, method: descriptor.MethodDescriptor, figures: Any
) -> None:
    """The probe: TrimHistory with caller.session_id = b"\\xff\\xfe\\xc0\\xaf" got UNKNOWN
    ("Unexpected DecodeError", protobuf 7's DecodeError is not a ValueError). Every string field of
    every request message, CallerContext's included, now names its top-level field."""
    paths = list(_string_paths(method.input_type))
    assert paths, method.name
    path_name = f"/{SERVICE.full_name}/{method.name}"
    for path in paths:
        body = _with_marker(method.input_type, path)
        where = ".".join(f.name for f in path)
        try:
            if method.server_streaming:
                stream = channel.unary_stream(
                    path_name, request_serializer=None, response_deserializer=None
                )
                next(iter(stream(body, timeout=30)))
            else:
                channel.unary_unary(path_name, request_serializer=None, response_deserializer=None)(
                    body, timeout=30
                )
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (where, error.details())
            status = rich_status(error)
            info = error_info(status) if status is not None else None
            assert info is not None and info.reason == "ERROR_REASON_MALFORMED_REQUEST", where
            assert path[0].name in error.details(), (where, error.details())
        else:
            raise AssertionError(f"{method.name} {where}: not-UTF-8 bytes were accepted")
    figures.add(f"{method.name}: string fields probed", len(paths))
    assert "Traceback" not in live_server.log_text()
