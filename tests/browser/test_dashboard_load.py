"""The dashboard stays responsive with 1,000 sessions and 100 events/s (issue 12's quality bar).

The page is served by the dashboard routes on a plain aiohttp app over an in-process ring feed
(in a background thread), so the event rate is exact and the measurement is the page's alone.
The page must take every event (no slow-consumer gap), keep its DOM bounded, answer a click
while the stream runs, and never block its main thread for long. The measured figures are printed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from playwright.sync_api import BrowserContext, expect
from turnkeeper.server.events import RingFeed
from turnkeeper.server.ops.dashboard import add_dashboard_routes
from turnkeeper.v1 import resolution_pb2, trim_pb2

SESSIONS = 1000
RATE = 100  # events per second
SECONDS = 5
LONGEST_TASK_MS = 1000  # generous: CI shares 2 cores with everything else
CLICK_MS = 2000

# Installed before the page's own scripts: long main-thread tasks and the longest frame gap.
PROBE = """
window.__probe = { longest: 0, tasks: 0, frames: 0, worstFrame: 0 };
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    window.__probe.tasks += 1;
    window.__probe.longest = Math.max(window.__probe.longest, e.duration);
  }
}).observe({ type: "longtask", buffered: true });
let last = 0;
const tick = (now) => {
  if (last) window.__probe.worstFrame = Math.max(window.__probe.worstFrame, now - last);
  window.__probe.frames += 1; last = now; requestAnimationFrame(tick);
};
requestAnimationFrame(tick);
"""


class FeedServer:
    """The dashboard routes and a ring feed on their own event loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.feed = RingFeed(ring_size=50_000)
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def _start(self) -> None:
        app = web.Application()
        add_dashboard_routes(app, self.feed)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def _stop(self) -> None:
        await self.feed.close()
        if self.runner is not None:
            await self.runner.cleanup()

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def feed_server() -> Iterator[FeedServer]:
    server = FeedServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def trimmed(i: int) -> trim_pb2.HistoryTrimmed:
    session = i % SESSIONS
    return trim_pb2.HistoryTrimmed(
        reason=trim_pb2.TRIM_REASON_TURN_LIMIT if i % 4 == 0 else trim_pb2.TRIM_REASON_TOKEN_BUDGET,
        dropped_turns=1 + i % 5,
        dropped_messages=2 + i % 9,
        tokens_before=20_000 + i % 7_000,
        tokens_after=12_000,
        route=resolution_pb2.Route(provider="main", model="big-model"),
        caller=trim_pb2.CallerContext(
            session_id=f"session-{session:04d}", runtime_id=f"runtime-{session % 8}"
        ),
    )


def test_a_thousand_sessions_at_a_hundred_events_per_second_stay_responsive(
    browser: BrowserContext, feed_server: FeedServer
) -> None:
    page = browser.new_page()
    page.add_init_script(PROBE)
    page.goto(f"http://127.0.0.1:{feed_server.port}/")
    expect(page.locator("#status")).to_have_text("Live", timeout=2000)

    published = 0
    for _ in range(SESSIONS):  # every session appears at once
        feed_server.feed.publish(trimmed(published))
        published += 1
    start = time.monotonic()
    click_ms: float | None = None
    while (elapsed := time.monotonic() - start) < SECONDS:
        due = SESSIONS + int(elapsed * RATE)
        while published < due:
            feed_server.feed.publish(trimmed(published))
            published += 1
        if click_ms is None and elapsed > SECONDS / 2:
            clicked = time.monotonic()
            page.get_by_role("button", name="Pause live view").click()
            expect(page.locator("#status")).to_have_text("Paused", timeout=CLICK_MS)
            click_ms = (time.monotonic() - clicked) * 1000
            page.get_by_role("button", name="Resume live view").click()
        time.sleep(0.01)

    expect(page.locator("#total-trims")).to_have_text(f"{published:,}", timeout=3000)
    expect(page.locator("#total-sessions")).to_have_text(f"{SESSIONS:,}")
    expect(page.locator("#total-gaps")).to_have_text("0")
    expect(page.locator("#sessions-note")).to_contain_text(f"of {SESSIONS:,} shown")
    assert page.locator("#sessions-body tr").count() == 100
    assert page.locator("#timeline-body tr").count() == 200
    probe: dict[str, Any] = page.evaluate("window.__probe")
    print(
        f"\ndashboard under load: {published} events over {SESSIONS} sessions; longest task "
        f"{probe['longest']:.0f} ms ({probe['tasks']} over 50 ms), worst frame gap "
        f"{probe['worstFrame']:.0f} ms over {probe['frames']} frames, pause click {click_ms:.0f} ms"
    )
    assert click_ms is not None and click_ms < CLICK_MS
    assert probe["longest"] < LONGEST_TASK_MS, probe
