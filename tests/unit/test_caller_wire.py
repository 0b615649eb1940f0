"""`caller_from_wire` (every call's edge reads the CallerContext with it) reads what protobuf
parsing reads: one-byte and longer keys and lengths, repeated occurrences in any order, unknown
fields of every wire type; and bytes that do not parse are a ValueError, never another error."""

from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError
from turnkeeper.server.contract import wire
from turnkeeper.server.contract.caller import MAX_ID_BYTES, caller_from_wire, shown_id
from turnkeeper.server.edge import access_log
from turnkeeper.v1 import history_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

NUMBER = svc.TrimHistoryRequest.DESCRIPTOR.fields_by_name["caller"].number
# Field 1000 (a two-byte key) as fixed64, fixed32 and length-delimited (a two-byte length).
UNKNOWN = (
    bytes([0x81, 0x3E]) + bytes(8) + bytes([0x85, 0x3E]) + bytes(4)
    + bytes([0x82, 0x3E, 0x80, 0x01]) + bytes(128)
)  # fmt: skip


def request(rng: random.Random) -> bytes:
    """One or more serialized TrimHistoryRequests (and unknown fields) concatenated: protobuf
    merges them, the callers included."""
    parts = []
    for _ in range(rng.randint(1, 4)):
        message = svc.TrimHistoryRequest(mode=rng.randint(0, 4), caller_path=rng.randint(0, 3))
        if rng.random() < 0.7:
            message.caller.runtime_id = "r" * rng.choice([0, 1, 127, 128, 300])
        if rng.random() < 0.5:
            message.caller.session_id = rng.choice(["s", "é", "x" * 200])
        if rng.random() < 0.5:
            message.history.chat.messages.extend(
                history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="x" * size)
                for size in rng.choices([0, 1, 100, 200, 20_000], k=rng.randint(0, 5))
            )
        parts.append(message.SerializeToString())
    if rng.random() < 0.3:
        parts.append(UNKNOWN)
    rng.shuffle(parts)
    return b"".join(parts)


def parsed(data: bytes) -> trim_pb2.CallerContext | None:
    try:
        return svc.TrimHistoryRequest.FromString(data).caller
    except DecodeError:
        return None


@pytest.mark.parametrize("seed", range(4))
def test_the_caller_is_what_protobuf_parses(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(250):
        data = request(rng)
        assert caller_from_wire(data, NUMBER) == svc.TrimHistoryRequest.FromString(data).caller


@pytest.mark.parametrize("seed", range(4))
def test_cut_or_damaged_bytes_are_a_value_error_or_what_protobuf_parses(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(250):
        data = bytearray(request(rng))
        if rng.random() < 0.5:
            del data[rng.randint(0, len(data)) :]
        elif data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            caller = caller_from_wire(bytes(data), NUMBER)
        except ValueError:
            continue
        # Only the top level is scanned: what reads must be what protobuf reads, when it parses.
        expected = parsed(bytes(data))
        if expected is not None:
            assert caller == expected


def test_a_field_numbered_past_fifteen_is_skipped_whole() -> None:
    """Its key takes two bytes; read as one, the scan would take 0x3E for a length."""
    message = svc.TrimHistoryRequest(caller=trim_pb2.CallerContext(runtime_id="r"))
    for data in (
        message.SerializeToString() + bytes([0x82, 0x3E, 0x02, 0x32, 0x00]),
        bytes([0x81, 0x3E]) + bytes(8) + message.SerializeToString(),
    ):
        assert caller_from_wire(data, NUMBER) == svc.TrimHistoryRequest.FromString(data).caller


def test_an_id_over_the_limit_is_logged_cut_short() -> None:
    """A refused call's log lines stay small: its long ids are shown by their start and size."""
    fits = "€" * (MAX_ID_BYTES // 3) + "x"
    assert shown_id(fits) == fits
    assert shown_id("s" * 65_536) == "s" * 32 + "...(65536 bytes)"
    telemetry = access_log.MethodTelemetry("/turnkeeper.v1.HistoryService/TrimHistory", "unary")
    stats = access_log.CallStats(telemetry, "r")
    request = svc.TrimHistoryRequest(
        caller=trim_pb2.CallerContext(session_id="s" * 65_536, runtime_id=fits)
    )
    access_log._read_caller(stats, request.SerializeToString())
    assert dict(stats.call_ids) == {
        "request_id": "r",
        "session_id": "s" * 32 + "...(65536 bytes)",
        "runtime_id": fits,
    }


@pytest.mark.parametrize(
    ("data", "value", "after"),
    [(b"\x05", 5, 1), (b"\x96\x01", 150, 2), (b"\xff\xff\xff\xff\x0f", 2**32 - 1, 5)],
)
def test_read_varint_reads_one_and_multi_byte_varints(data: bytes, value: int, after: int) -> None:
    assert wire.read_varint(b"\x00" + data, 1) == (value, after + 1)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff" * 11])
def test_read_varint_refuses_truncated_and_overlong_varints(data: bytes) -> None:
    with pytest.raises(ValueError):
        wire.read_varint(data, 0)
