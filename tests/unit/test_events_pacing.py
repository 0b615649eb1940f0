"""How delivery gives way to calls (events/common.py): the Pacer's share and the Turns queue."""

from __future__ import annotations

import asyncio
import time

from turnkeeper.server.events.common import ITEM_COST_S, QUIET_S, SHARE, Pacer, Turns


class Calls:
    """The edge's record of calls, as the pacer reads it: quiet or not, on demand."""

    def __init__(self, busy: bool) -> None:
        self.busy = busy

    def quiet_for(self) -> float:
        return 0.0 if self.busy else QUIET_S * 2

    async def wait_quiet(self, quiet: float, limit: float) -> None:
        await asyncio.sleep(limit)


async def test_quiet_calls_let_every_round_hand_out_a_full_burst() -> None:
    pacer = Pacer(Calls(busy=False), burst=8)
    for _ in range(100):
        assert await pacer.round() == 8
        pacer.spent(8)


async def test_busy_calls_hold_delivery_to_its_share() -> None:
    pacer = Pacer(Calls(busy=True), burst=8)
    began = time.monotonic()
    handed = 0
    while handed < 400:
        allowed = await pacer.round()
        assert 1 <= allowed <= 8
        pacer.spent(allowed)
        handed += allowed
    # After the first burst, items come at SHARE / ITEM_COST_S per second, never faster.
    assert time.monotonic() - began >= (400 - 8) * ITEM_COST_S / SHARE * 0.9


async def test_a_parked_reader_wakes_on_newer_and_not_before() -> None:
    turns = Turns(Pacer(None, burst=8))
    seen = turns.generation
    woke = asyncio.ensure_future(turns.take(1, parked_since=seen, limit=60))
    await asyncio.sleep(0.05)
    assert not woke.done()
    turns.newer()
    await asyncio.wait_for(woke, 1)
    turns.close()


async def test_a_reader_that_missed_a_newer_does_not_park() -> None:
    turns = Turns(Pacer(None, burst=8))
    seen = turns.generation
    turns.newer()  # landed between its read and its wait
    await asyncio.wait_for(turns.take(1, parked_since=seen, limit=60), 1)
    turns.close()


async def test_a_parked_reader_goes_ahead_when_its_heartbeat_falls_due() -> None:
    turns = Turns(Pacer(None, burst=8))
    began = time.monotonic()
    await asyncio.wait_for(turns.take(1, parked_since=turns.generation, limit=0.2), 2)
    assert time.monotonic() - began >= 0.19
    turns.close()


async def test_turns_are_granted_in_order_and_close_releases_everyone() -> None:
    turns = Turns(Pacer(Calls(busy=True), burst=2))
    order: list[int] = []

    async def reader(number: int) -> None:
        await turns.take(1)
        order.append(number)

    readers = [asyncio.ensure_future(reader(i)) for i in range(6)]
    await asyncio.wait_for(asyncio.gather(*readers), 5)
    assert order == list(range(6))
    parked = asyncio.ensure_future(turns.take(1, parked_since=turns.generation, limit=60))
    await asyncio.sleep(0.05)
    turns.close()
    await asyncio.wait_for(parked, 1)
