"""Admission control (issues 9, 19): the in-flight request-bytes budget is a hard bound; heavy calls
over their cap wait in FIFO order for a slot, calls over the receiving cap by their cost, then are refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from turnkeeper.server.config import MIB, cgroup_memory_limit, default_inflight_budget
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.edge.admission import Admission, AdmissionLimits, ServiceCost, SlotQueue

LIMITS = AdmissionLimits(
    max_inflight_bytes=1000, heavy_call_bytes=300, max_heavy_calls=2, heavy_wait_seconds=0.2
)


def _details(error: RequestError) -> tuple[error_details_pb2.ErrorInfo, float]:
    status = error.to_status()
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    proto = status_pb2.Status.FromString(dict(status.trailing_metadata)["grpc-status-details-bin"])
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    assert proto.details[0].Unpack(info) and proto.details[1].Unpack(retry)
    return info, retry.retry_delay.ToTimedelta().total_seconds()


async def test_a_heavy_call_over_the_cap_waits_for_a_slot_then_runs() -> None:
    admission = Admission(LIMITS)
    assert await admission.admit(300) and await admission.admit(300)
    third = asyncio.create_task(admission.admit(300))
    await asyncio.sleep(0.05)
    assert not third.done() and admission.heavy.waiting == 1
    assert await admission.admit(10) is False  # light calls do not queue behind heavy ones
    admission.release(300, True)
    assert await third is True
    assert admission.heavy_calls == 2 and admission.heavy.waiting == 0


async def test_heavy_calls_get_their_slots_in_arrival_order() -> None:
    admission = Admission(AdmissionLimits(10_000, 300, 1, heavy_wait_seconds=5))
    await admission.admit(300)
    order: list[int] = []

    async def queued(k: int) -> None:
        await admission.admit(300)
        order.append(k)
        await asyncio.sleep(0.01)
        admission.release(300, True)

    tasks = []
    for k in range(5):
        tasks.append(asyncio.create_task(queued(k)))
        await asyncio.sleep(0.01)
    admission.release(300, True)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert admission.heavy_calls == 0 and admission.inflight_bytes == 0


async def test_a_heavy_call_is_refused_when_no_slot_comes_free_in_time() -> None:
    admission = Admission(LIMITS)
    await admission.admit(300)
    await admission.admit(300)
    with pytest.raises(RequestError) as refused:
        await admission.admit(300)
    info, delay = _details(refused.value)
    assert info.reason == "ERROR_REASON_OVERLOADED" and info.domain == "turnkeeper.v1"
    assert info.metadata["limit"] == "max_heavy_calls"
    assert delay == LIMITS.retry_after_seconds
    # Its bytes were given back, and it left the queue.
    assert admission.inflight_bytes == 600 and admission.heavy.waiting == 0


async def test_the_deadline_bounds_the_wait() -> None:
    admission = Admission(AdmissionLimits(10_000, 300, 1, heavy_wait_seconds=30))
    await admission.admit(300)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RequestError):
        await admission.admit(300, remaining=0.1)
    assert loop.time() - started < 1


async def test_a_cancelled_queued_call_leaves_the_queue() -> None:
    admission = Admission(AdmissionLimits(10_000, 300, 1, heavy_wait_seconds=30))
    await admission.admit(300)
    waiting = asyncio.create_task(admission.admit(300))
    behind = asyncio.create_task(admission.admit(300))
    await asyncio.sleep(0.02)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert admission.heavy.waiting == 1 and admission.inflight_bytes == 600
    admission.release(300, True)
    assert await behind is True  # the slot skipped the cancelled call
    assert admission.heavy_calls == 1 and admission.inflight_bytes == 300


async def test_the_byte_budget_refuses_a_call_that_would_pass_it_at_once() -> None:
    admission = Admission(AdmissionLimits(1000, 300, 2, heavy_wait_seconds=30))
    await admission.admit(200)
    await admission.admit(700)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RequestError) as refused:
        await admission.admit(200)
    assert loop.time() - started < 0.5  # never queued
    assert _details(refused.value)[0].metadata["limit"] == "max_inflight_request_bytes"
    admission.release(700, True)
    await admission.admit(200)
    assert admission.inflight_bytes == 400 and admission.refused == 1


async def test_queued_heavy_calls_hold_their_bytes_against_the_budget() -> None:
    admission = Admission(AdmissionLimits(1000, 300, 1, heavy_wait_seconds=30))
    await admission.admit(300)
    waiting = asyncio.create_task(admission.admit(400))
    await asyncio.sleep(0.02)
    with pytest.raises(RequestError):
        await admission.admit(400)  # 300 running + 400 waiting + 400 > 1000
    admission.release(300, True)
    assert await waiting is True


async def test_a_call_bigger_than_the_budget_runs_alone() -> None:
    """Otherwise it could never run; the message-size limit bounds it instead."""
    admission = Admission(LIMITS)
    await admission.admit(5000)
    with pytest.raises(RequestError):
        await admission.admit(1)
    admission.release(5000, True)
    assert admission.inflight_bytes == 0 and admission.heavy_calls == 0


async def test_receiving_slots_are_fifo_and_bounded_by_their_wait() -> None:
    admission = Admission(
        AdmissionLimits(10_000, 300, 1, max_receiving_calls=1, receive_wait_seconds=0.1)
    )
    assert await admission.receiving_slot()
    assert not await admission.receiving_slot()  # none came free in 0.1 s
    second = asyncio.create_task(admission.receiving_slot())
    await asyncio.sleep(0.02)
    admission.receiving.give()
    assert await second is True and admission.receiving.used == 1


async def test_calls_still_receiving_hold_the_largest_request_against_the_budget() -> None:
    """Issue 19 item 6: the size of a request is known only once it is in, so each receiving
    call reserves the largest one; the bytes of admitted calls and the reservations together stay
    within the budget, but one call may always receive."""
    admission = Admission(
        AdmissionLimits(
            1000, 300, 2, max_receiving_calls=8, receive_wait_seconds=5, max_request_bytes=300
        )
    )
    assert [await admission.receiving_slot() for _ in range(3)] == [True] * 3
    assert admission.reserved_bytes == 900
    fourth = asyncio.create_task(admission.receiving_slot())
    await asyncio.sleep(0.02)
    assert not fourth.done() and admission.receiving.waiting == 1  # 4 x 300 > 1000
    # A request that arrived: its real size is counted in before its reservation goes.
    assert await admission.admit(100, receiving=True) is False
    assert await fourth is True  # 100 + 3 x 300 fits
    assert admission.inflight_bytes == 100 and admission.receiving.used == 3
    fifth = asyncio.create_task(admission.receiving_slot())
    await asyncio.sleep(0.02)
    assert not fifth.done()  # 100 + 4 x 300 does not
    await admission.admit(100, receiving=True)
    await asyncio.sleep(0.02)
    assert not fifth.done()  # 200 + 3 x 300 does not either
    admission.release(100, False)  # an admitted call ended: room for one more reservation
    assert await fifth is True and admission.receiving.used == 3
    admission.receiving.give()  # the third call ended before its request arrived
    assert admission.receiving.used == 2  # the fourth's and the fifth's


async def test_a_call_the_budget_kept_from_receiving_is_refused_unread_after_its_wait() -> None:
    admission = Admission(
        AdmissionLimits(1000, 1000, 2, receive_wait_seconds=0.05, max_request_bytes=600)
    )
    assert await admission.receiving_slot()
    assert not await admission.receiving_slot()  # 2 x 600 > 1000, and none came free
    info, retry = _details(admission.receiving_refusal())
    assert info.metadata["limit"] == "max_inflight_request_bytes" and retry == 1.0
    admission.receiving.give()
    assert admission.receiving.used == 0


async def test_one_call_may_receive_however_full_the_budget() -> None:
    admission = Admission(AdmissionLimits(1000, 1000, 2, max_request_bytes=300))
    for _ in range(3):
        await admission.admit(300)
    assert await admission.receiving_slot()  # nobody else is receiving
    with pytest.raises(RequestError) as refused:
        await admission.admit(300, receiving=True)  # in, but over the budget
    assert _details(refused.value)[0].metadata["limit"] == "max_inflight_request_bytes"
    assert admission.receiving.used == 0 and admission.inflight_bytes == 900


def test_the_default_budget_follows_the_cgroup_memory_limit(tmp_path: Path) -> None:
    root, membership = tmp_path / "cgroup", tmp_path / "self-cgroup"

    def limit(lines: str) -> int | None:
        membership.write_text(lines)
        return cgroup_memory_limit(root, membership)

    # cgroup v2: the process's own cgroup, or one above it, may carry the limit.
    pod = root / "kubepods" / "pod1"
    (pod / "sidecar").mkdir(parents=True)
    (pod / "sidecar" / "memory.max").write_text("max\n")
    (pod / "memory.max").write_text(f"{768 * MIB}\n")
    assert limit("0::/kubepods/pod1/sidecar\n") == 768 * MIB
    (pod / "sidecar" / "memory.max").write_text(f"{512 * MIB}\n")
    assert limit("0::/kubepods/pod1/sidecar\n") == 512 * MIB  # the smallest one counts
    assert default_inflight_budget(768 * MIB) == 192 * MIB
    # cgroup v1 (this is what a v1 host such as CI's shows), with other controllers around it.
    v1 = root / "memory" / "turnkeeper-test"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{768 * MIB}\n")
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{2**63 - 4096}\n")  # no limit
    assert limit("5:cpu,cpuacct:/x\n4:memory:/turnkeeper-test\n0::/\n") == 768 * MIB
    # A container without a cgroup namespace: its cgroup is mounted at the root.
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{1024 * MIB}\n")
    assert limit("4:memory:/docker/0123abcd\n") == 1024 * MIB
    # No limit anywhere, or nothing to read.
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{2**63 - 4096}\n")
    assert limit("4:memory:/docker/0123abcd\n") is None
    assert limit("0::/\n") is None
    assert cgroup_memory_limit(tmp_path / "absent", tmp_path / "absent") is None
    assert default_inflight_budget(32 * MIB) == 16 * MIB  # a floor for tiny containers


async def test_wait_idle_returns_once_the_last_admitted_call_ends_or_after_its_limit() -> None:
    admission = Admission(LIMITS)
    assert await admission.wait_idle(0)  # nothing admitted
    await admission.admit(100)
    await admission.admit(100)
    assert not await admission.wait_idle(0.01)  # calls still in after the limit
    idle = asyncio.create_task(admission.wait_idle(5))
    await asyncio.sleep(0.01)
    admission.release(100, False)
    await asyncio.sleep(0.01)
    assert not idle.done()  # one call is still in
    admission.release(100, False)
    assert await asyncio.wait_for(idle, 1) is True
    assert admission._idle_waiters == []


async def test_calls_refused_while_draining_keep_the_drain_waiting_for_quiet() -> None:
    admission = Admission(LIMITS)
    admission.draining = True

    async def arrivals() -> None:
        for _ in range(5):
            await asyncio.sleep(0.03)
            refusal = admission.draining_refusal()
            assert refusal.code == grpc.StatusCode.UNAVAILABLE

    admission.draining_refusal()  # the first call after the signal
    arriving = asyncio.create_task(arrivals())
    start = asyncio.get_running_loop().time()
    await admission.wait_quiet(0.05, 5.0)
    # Not before the last of the five arrivals (0.15 s in), then 0.05 s of quiet.
    assert asyncio.get_running_loop().time() - start >= 0.15
    assert arriving.done()
    await arriving


async def test_a_freed_slot_goes_to_the_call_that_waited_longest_for_its_cost() -> None:
    """Issue 26 (5): calls of a dear kind that came first do not hold up a cheap one that has
    waited many times its cost; each kind in FIFO order, and the dear ones' turn comes as their
    wait grows."""
    queue = SlotQueue("receiving", 1)
    cheap, dear = ServiceCost(0.001), ServiceCost(0.1)
    assert queue.try_take()
    order: list[str] = []

    async def waiter(name: str, cost: ServiceCost) -> None:
        assert await queue.take(5.0, cost)
        order.append(name)

    tasks = [asyncio.create_task(waiter(f"dear {i}", dear)) for i in range(2)]
    await asyncio.sleep(0.02)
    tasks += [asyncio.create_task(waiter(f"cheap {i}", cheap)) for i in range(2)]
    await asyncio.sleep(0.01)  # the cheap ones waited 10 times their cost, the dear ones 0.3
    assert queue.waiting == 4 and queue.oldest_wait() >= 0.03
    for _ in range(4):
        queue.give()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == ["cheap 0", "cheap 1", "dear 0", "dear 1"]
    assert queue.waiting == 0 and queue.oldest_wait() == 0.0


def test_a_kinds_cost_follows_its_calls() -> None:
    cost = ServiceCost(0.001)
    for _ in range(200):
        cost.observe(0.01)
    assert 0.009 < cost.seconds <= 0.01
    for _ in range(200):
        cost.observe(0.0)  # never taken as free
    assert cost.seconds > 0
