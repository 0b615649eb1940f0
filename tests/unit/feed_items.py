"""Small builders for feed payloads shared by the feed backends' tests."""

from __future__ import annotations

from turnkeeper.v1 import events_pb2, trim_pb2


def meter(session: str, used: int, runtime: str = "r1") -> events_pb2.MeterUpdate:
    """A prepared call's meter update (spec §10.5) for `session`, budget 9,000 tokens."""
    return events_pb2.MeterUpdate(
        caller=trim_pb2.CallerContext(session_id=session, runtime_id=runtime),
        meter=trim_pb2.ContextMeter(used_tokens=used, budget_tokens=9000),
    )
