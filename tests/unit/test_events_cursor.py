"""Cursor encoding: opaque, round-trips, rejects what the server did not write."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from turnkeeper.server.events import cursor as cursors
from turnkeeper.server.events.common import heartbeat_interval
from turnkeeper.v1 import history_service_pb2

epochs = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)
counts = st.integers(min_value=1, max_value=2**63)


@given(epochs, counts)
def test_ring_cursor_round_trips(epoch: str, seq: int) -> None:
    text = cursors.encode_ring(epoch, seq)
    assert text.startswith("tk1.")
    assert cursors.decode(text) == cursors.RingCursor(epoch, seq)


@given(epochs, counts, counts, counts)
def test_redis_cursor_round_trips(epoch: str, ms: int, part: int, n: int) -> None:
    stream_id = f"{ms}-{part}"
    decoded = cursors.decode(cursors.encode_redis(epoch, stream_id, n))
    assert decoded == cursors.RedisCursor(epoch, stream_id, n)
    assert isinstance(decoded, cursors.RedisCursor)
    assert decoded.id_key() == (ms, part)


@given(st.text(max_size=80))
def test_arbitrary_text_never_crashes_decode(text: str) -> None:
    decoded = cursors.decode(text)
    if decoded is not None:  # only canonical spellings of records we write are accepted
        again = (
            cursors.encode_ring(decoded.epoch, decoded.seq)
            if isinstance(decoded, cursors.RingCursor)
            else cursors.encode_redis(decoded.epoch, decoded.stream_id, decoded.n)
        )
        assert again == text


def test_rejects_bad_epochs() -> None:
    assert cursors.decode(cursors.encode_ring("XYZ", 1)) is None
    assert cursors.decode(cursors.encode_redis("0" * 16, "12", 1)) is None


def test_heartbeat_interval_default_and_clamp() -> None:
    def interval(seconds: int | None, nanos: int = 0) -> float:
        req = history_service_pb2.TrimEventsRequest()
        if seconds is not None:
            req.heartbeat_interval.seconds = seconds
            req.heartbeat_interval.nanos = nanos
        return heartbeat_interval(req)

    assert interval(None) == 15.0
    assert interval(0) == 15.0
    assert interval(0, 500_000_000) == 1.0
    assert interval(7) == 7.0
    assert interval(3600) == 300.0
    assert interval(-5) == 1.0
