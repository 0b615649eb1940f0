"""The watch logic both faces share (`_watch.WatchLoop`), driven without a server."""

from __future__ import annotations

import grpc
import grpc.aio
import pytest
from turnkeeper.v1 import events_pb2
from turnkeeper.v1 import history_service_pb2 as svc

from turnkeeper_client import Backoff, TurnkeeperError
from turnkeeper_client._watch import CursorState, WatchLoop, build_request

NO_WAIT = Backoff(initial=0.0, maximum=0.0, jitter=0.0)


def _loop(backoff: Backoff = NO_WAIT, after_cursor: str = "") -> WatchLoop:
    base = build_request(
        session_ids=(),
        runtime_ids=(),
        reasons=(),
        heartbeat_interval=None,
        include_meter_updates=False,
    )
    return WatchLoop(CursorState(base, after_cursor), backoff, None)


def _event(cursor: str) -> svc.TrimEventsResponse:
    return svc.TrimEventsResponse(event=events_pb2.TrimEvent(cursor=cursor))


def _batch(*cursors: str) -> svc.TrimEventsResponse:
    message = svc.TrimEventsResponse()
    message.batch.items.extend(_event(cursor) for cursor in cursors)
    return message


def _failure(code: grpc.StatusCode) -> grpc.RpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "test")


def test_a_batch_moves_the_cursor_only_as_far_as_the_items_handed_out() -> None:
    loop = _loop()
    items = loop.received(_batch("1-0", "2-0", "3-0"))
    assert next(items).event.cursor == "1-0"
    # A resume now must not skip the two items the consumer has not seen.
    assert loop.cursor == "1-0"
    assert loop.request().after_cursor == "1-0"
    assert [item.event.cursor for item in items] == ["2-0", "3-0"]
    assert loop.cursor == "3-0"


def test_a_redelivered_event_is_dropped() -> None:
    loop = _loop()
    assert len(list(loop.received(_batch("1-0", "2-0")))) == 2
    # After a resume the server may send an event again; the consumer sees it once.
    assert [item.event.cursor for item in loop.received(_batch("2-0", "3-0"))] == ["3-0"]


def test_a_gap_does_not_move_the_cursor() -> None:
    loop = _loop(after_cursor="5-0")
    gap = svc.TrimEventsResponse()
    gap.gap.before_cursor = "9-0"
    assert list(loop.received(gap)) == [gap]
    assert loop.cursor == "5-0"


def test_an_error_not_worth_retrying_is_raised() -> None:
    with pytest.raises(TurnkeeperError) as raised:
        _loop().ended(_failure(grpc.StatusCode.INVALID_ARGUMENT))
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_attempts_run_out_unless_a_stream_delivers_in_between() -> None:
    loop = _loop(Backoff(initial=0.0, jitter=0.0, max_attempts=2))
    unavailable = _failure(grpc.StatusCode.UNAVAILABLE)
    assert loop.ended(unavailable) == 0.0
    assert loop.ended(unavailable) == 0.0
    # A stream that delivers anything resets the count of consecutive failures.
    list(loop.received(_event("1-0")))
    assert loop.ended(unavailable) == 0.0
    assert loop.ended(None) == 0.0
    assert loop.ended(None) is None
    with pytest.raises(TurnkeeperError) as raised:
        loop.ended(unavailable)
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE


def test_the_disconnect_hook_sees_the_error_and_the_delay() -> None:
    seen: list[tuple[grpc.StatusCode | None, float]] = []
    base = build_request(
        session_ids=(),
        runtime_ids=(),
        reasons=(),
        heartbeat_interval=None,
        include_meter_updates=False,
    )
    loop = WatchLoop(
        CursorState(base, ""),
        Backoff(initial=0.5, jitter=0.0),
        lambda error, delay: seen.append((error.code if error else None, delay)),
    )
    loop.ended(_failure(grpc.StatusCode.UNAVAILABLE))
    loop.ended(None)
    assert seen == [(grpc.StatusCode.UNAVAILABLE, 0.5), (None, 1.0)]


def test_a_held_item_counts_once_it_is_handed_out() -> None:
    loop = _loop(after_cursor="1-0")
    loop.start_holding()
    (first,) = loop.received(_event("2-0"))
    loop.hold(first)
    assert loop.holding
    assert loop.cursor == "1-0"
    assert loop.take_held() is first
    assert loop.cursor == "2-0"
    assert loop.take_held() is None
