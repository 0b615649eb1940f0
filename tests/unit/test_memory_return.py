"""When the allocator's free pages go back to the system (issue 19): big requests that follow each
other within `allocator.QUIET_SECONDS` reuse what the one before freed (a trim between them made
the next fault its pages in again); after that quiet time, or at once under memory pressure, the
pages are handed back."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
import turnkeeper.server.allocator as allocator
from turnkeeper.server.edge.admission import Admission, AdmissionLimits

BIG = allocator.RETURN_BEFORE_WORK_BYTES


class BigWork:
    """`before_work` on a clock of the test's, recording when it handed memory back."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        self.trims: list[float] = []
        monkeypatch.setattr(allocator, "time", SimpleNamespace(monotonic=lambda: self.now))
        monkeypatch.setattr(allocator, "return_freed_memory", lambda: self.trims.append(self.now))
        monkeypatch.setattr(allocator, "_last_big_work", -allocator.QUIET_SECONDS)
        monkeypatch.setattr(allocator, "_pressure_bytes", None)

    def at(self, now: float, size: int = BIG) -> None:
        self.now = now
        allocator.before_work(size)


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> BigWork:
    return BigWork(monkeypatch)


def test_big_requests_within_the_quiet_time_of_each_other_are_not_trimmed_between(
    work: BigWork,
) -> None:
    quiet = allocator.QUIET_SECONDS
    work.at(1000.0)  # the first since start: its receive path's memory goes back
    work.at(1000.0 + quiet * 0.9)
    work.at(1000.0 + quiet * 1.8)
    assert work.trims == [1000.0]
    work.at(1000.0 + quiet * 2.8 + 0.1)  # after a quiet spell
    assert work.trims == [1000.0, 1000.0 + quiet * 2.8 + 0.1]
    work.at(1000.0 + quiet * 5, size=BIG - 1)  # small requests never trim
    assert len(work.trims) == 2


def test_under_memory_pressure_every_big_request_trims_first(
    work: BigWork, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(allocator, "_pressure_bytes", 100)
    monkeypatch.setattr(allocator, "_rss_bytes", lambda: 100)
    work.at(1000.0)
    work.at(1000.1)
    assert work.trims == [1000.0, 1000.1]
    monkeypatch.setattr(allocator, "_rss_bytes", lambda: 99)  # under half the limit
    work.at(1000.2)
    assert work.trims == [1000.0, 1000.1]


@pytest.fixture
def wave_trims(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The loop times at which admission handed memory back after heavy calls, with a quiet time
    of 0.4 s and a pressed delay of 0.05 s (the late trim out of the way)."""
    done: list[float] = []
    monkeypatch.setattr(allocator, "QUIET_SECONDS", 0.4)
    monkeypatch.setattr(allocator, "_TRIM_DELAY_SECONDS", 0.05)
    monkeypatch.setattr(allocator, "_LATE_TRIM_SECONDS", 60.0)
    monkeypatch.setattr(allocator, "under_pressure", lambda: False)

    def trim(_pad: int) -> int:
        done.append(time.monotonic())  # (the loop's clock; this runs on a worker thread)
        return 1

    monkeypatch.setattr(allocator, "MALLOC_TRIM", trim)
    return done


LIMITS = AdmissionLimits(max_inflight_bytes=10_000, heavy_call_bytes=300, max_heavy_calls=2)


async def test_after_the_last_heavy_call_memory_goes_back_once_the_quiet_time_has_passed(
    wave_trims: list[float],
) -> None:
    admission = Admission(LIMITS)
    assert await admission.admit(300)
    admission.release(300, True)
    await asyncio.sleep(0.25)
    assert wave_trims == []  # the next big call may come: it reuses the pages
    assert await admission.admit(300)  # and one does
    admission.release(300, True)
    ended = time.monotonic()
    await asyncio.sleep(0.3)
    assert wave_trims == []  # the quiet time counts from the last call
    await asyncio.sleep(0.3)
    assert len(wave_trims) == 1 and wave_trims[0] - ended >= 0.4


async def test_under_memory_pressure_memory_goes_back_soon_after_the_wave(
    wave_trims: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(allocator, "under_pressure", lambda: True)
    admission = Admission(LIMITS)
    assert await admission.admit(300)
    admission.release(300, True)
    await asyncio.sleep(0.2)
    assert len(wave_trims) == 1


async def test_pressure_that_comes_during_the_quiet_time_brings_the_trim_forward(
    wave_trims: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(allocator, "QUIET_SECONDS", 5.0)
    admission = Admission(LIMITS)
    assert await admission.admit(300)
    admission.release(300, True)  # no pressure: armed for the quiet time
    monkeypatch.setattr(allocator, "under_pressure", lambda: True)
    assert await admission.admit(300)
    admission.release(300, True)
    await asyncio.sleep(0.3)
    assert len(wave_trims) == 1
