"""edge/drain.py: a drain whose grace ends answers the calls still running UNAVAILABLE, where grpc
would cancel them; a call cancelled by anyone else stays cancelled."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.edge.drain import CallsInService
from turnkeeper.v1 import errors_pb2


async def _served(calls: CallsInService, work: asyncio.Event) -> RequestError | str:
    """A call's shape in the edge: enter, await the work, turn a drain's interruption into its
    answer, leave."""
    task = calls.enter()
    try:
        await work.wait()
        return "answered"
    except asyncio.CancelledError:
        ended = calls.refusal_if_ended(task)
        if ended is None:
            raise
        return ended
    finally:
        calls.leave(task)


async def test_end_all_answers_every_call_in_service_unavailable() -> None:
    calls = CallsInService()
    work = asyncio.Event()
    tasks = [asyncio.create_task(_served(calls, work)) for _ in range(3)]
    await asyncio.sleep(0)
    assert len(calls) == 3
    assert calls.end_all() == 3
    answers = await asyncio.gather(*tasks)
    for answer in answers:
        assert isinstance(answer, RequestError)
        assert answer.code == grpc.StatusCode.UNAVAILABLE
        assert answer.reason == errors_pb2.ERROR_REASON_SHUTTING_DOWN
    assert len(calls) == 0
    assert calls.end_all() == 0


async def test_a_call_cancelled_by_its_client_stays_cancelled() -> None:
    calls = CallsInService()
    work = asyncio.Event()
    task = asyncio.create_task(_served(calls, work))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(calls) == 0
    finished = asyncio.create_task(_served(calls, work))
    await asyncio.sleep(0)
    work.set()
    assert await finished == "answered"


async def test_wait_empty_returns_once_the_last_call_leaves() -> None:
    calls = CallsInService()
    work = asyncio.Event()
    task = asyncio.create_task(_served(calls, work))
    await asyncio.sleep(0)
    assert not await calls.wait_empty(0.01)
    waiting = asyncio.create_task(calls.wait_empty(5))
    await asyncio.sleep(0)
    work.set()
    assert await waiting
    assert await task == "answered"
