"""The dashboard in a real browser: Debian's chromium driven by Playwright, against a real sidecar
started with `--http`, fed by trims and prepared calls sent through gRPC.

Every assertion on the page waits at most 2 s (the issue's bound for rows, meters and charts to
appear). A screenshot is kept in artifacts/ (gitignored) for each run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from playwright.sync_api import BrowserContext, Page, expect
from turnkeeper.v1 import history_pb2, history_service_pb2_grpc, profile_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

REPO = Path(__file__).resolve().parents[2]


ARTIFACTS = REPO / "artifacts"
APPEAR_MS = 2000  # rows, meters and charts must show within 2 s
RESUME_MS = 8000  # a restart: the old process drains, the new one starts, the page reconnects


def history(turns: int, size: int = 400) -> history_pb2.History:
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="system")]
    for i in range(turns):
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"q{i} " * size))
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content="answer"))
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def caller(session: str, runtime: str) -> trim_pb2.CallerContext:
    return trim_pb2.CallerContext(session_id=session, runtime_id=runtime, agent_id="agent-1")


def budget_trim(session: str, runtime: str, budget: int) -> svc.TrimHistoryRequest:
    return svc.TrimHistoryRequest(
        history=history(6),
        mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
        caller_path=trim_pb2.CALLER_PATH_AGENT,
        explicit_limits=svc.ExplicitLimits(budget_tokens=budget),
        caller=caller(session, runtime),
    )


def turn_trim(session: str, runtime: str, limit: int) -> svc.TrimHistoryRequest:
    return svc.TrimHistoryRequest(
        history=history(6, size=2),
        mode=trim_pb2.TRIM_MODE_TURN_COUNT,
        caller_path=trim_pb2.CALLER_PATH_AGENT,
        explicit_limits=svc.ExplicitLimits(max_history_messages=limit),
        caller=caller(session, runtime),
    )


def trim(
    address: str, request: svc.TrimHistoryRequest, token: str | None = None
) -> trim_pb2.HistoryTrimmed:
    metadata = [("authorization", f"Bearer {token}")] if token else None
    with grpc.insecure_channel(address) as channel:
        response = history_service_pb2_grpc.HistoryServiceStub(channel).TrimHistory(
            request, timeout=5, metadata=metadata
        )
    assert response.HasField("history_trimmed"), (
        "the request must trim for this test to mean anything"
    )
    return response.history_trimmed


def prepare(
    address: str, session: str, runtime: str, window: int | None
) -> svc.PrepareModelCallResponse:
    """A prepared call on the `main` route: capacity `window`, or unknown when None."""
    provider = profile_pb2.ProviderProfile(alias="main", model="big-model")
    if window is not None:
        provider.context_window = window
    request = svc.PrepareModelCallRequest(
        history=history(2, size=100),
        profiles=profile_pb2.Profiles(
            runtime=profile_pb2.RuntimeProfile(max_context_tokens=4_000, default_provider="main"),
            providers=[provider],
        ),
        caller=caller(session, runtime),
    )
    with grpc.insecure_channel(address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        response: svc.PrepareModelCallResponse = stub.PrepareModelCall(request, timeout=5)
    return response


def arrow(trimmed: trim_pb2.HistoryTrimmed) -> str:
    return f"{trimmed.tokens_before:,} → {trimmed.tokens_after:,}"


def open_dashboard(context: BrowserContext, http: str) -> tuple[Page, list[str]]:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # The connection refusals while the sidecar restarts are expected; script errors are not.
    page.on(
        "console",
        lambda m: (
            errors.append(m.text)
            if m.type == "error" and "net::ERR_CONNECTION_REFUSED" not in m.text
            else None
        ),
    )
    page.goto(f"http://{http}/")
    expect(page.locator("#status")).to_have_text("Live", timeout=APPEAR_MS)
    return page, errors


def session_row(page: Page, session: str) -> Any:
    return page.locator(f'#sessions-body tr[data-session="{session}"]')


def timeline_rows(page: Page, session: str) -> Any:
    return page.locator(f'#timeline-body tr[data-session="{session}"]')


def chart_data(page: Page, canvas: str) -> dict[str, float]:
    """What Chart.js itself holds for a chart: label -> value."""
    result: dict[str, float] = page.evaluate(
        """(id) => { const c = Chart.getChart(document.getElementById(id));
                     return Object.fromEntries(c.data.labels.map((l, i) => [l, c.data.datasets[0].data[i]])); }""",
        canvas,
    )
    return result


def test_trims_show_as_rows_meters_and_charts_and_a_restart_as_a_gap(
    browser: BrowserContext, server_factory: Callable[..., Any], http: str
) -> None:
    """Spec §7: a trim reaches the observer path used by dashboards. The page shows each trim in
    the timeline and its session, and the charts count them, within 2 s; after a sidecar restart
    it resumes by cursor and shows the gap."""
    server = server_factory("--http", http, unix=False)
    page, errors = open_dashboard(browser, http)

    alpha = trim(server.address, budget_trim("s-alpha", "rt-1", budget=1500))
    beta = trim(server.address, turn_trim("s-beta", "rt-2", limit=2))
    alpha2 = trim(server.address, budget_trim("s-alpha", "rt-1", budget=900))

    # Timeline: newest first, the right numbers.
    expect(timeline_rows(page, "s-alpha")).to_have_count(2, timeout=APPEAR_MS)
    expect(timeline_rows(page, "s-alpha").first).to_contain_text(arrow(alpha2))
    expect(timeline_rows(page, "s-alpha").last).to_contain_text(arrow(alpha))
    beta_row = timeline_rows(page, "s-beta")
    expect(beta_row).to_contain_text("Turn limit")
    expect(beta_row).to_contain_text(f"{beta.dropped_turns} turn")
    expect(beta_row).to_contain_text(f"{beta.dropped_messages} messages")

    # Sessions: one row each, with its runtime and last trim.
    expect(session_row(page, "s-alpha")).to_contain_text("runtime rt-1", timeout=APPEAR_MS)
    expect(session_row(page, "s-alpha")).to_contain_text(arrow(alpha2))
    expect(session_row(page, "s-beta")).to_contain_text("Turn limit")
    expect(page.locator("#total-trims")).to_have_text("3")
    # Each session's latest state: s-alpha's second trim of its full history replaces its first.
    latest = sum(t.tokens_before - t.tokens_after for t in (beta, alpha2))
    expect(page.locator("#total-saved")).to_have_text(f"{latest:,}")
    expect(page.locator("#total-dropped")).to_have_text(
        str(alpha2.dropped_turns + beta.dropped_turns)
    )
    saved = sum(t.tokens_before - t.tokens_after for t in (alpha, beta, alpha2))

    # Meters (spec §10.5): per prepared call, the used tokens against budget and capacity, and
    # "capacity unknown" where the route's window is not configured.
    known = prepare(server.address, "s-alpha", "rt-1", window=16_000).context_meter
    unknown = prepare(server.address, "s-epsilon", "rt-2", window=None).context_meter
    alpha_meter = session_row(page, "s-alpha").locator("td[data-used]")
    expect(alpha_meter).to_have_attribute("data-used", str(known.used_tokens), timeout=APPEAR_MS)
    expect(alpha_meter).to_have_attribute("data-capacity", "16000")
    expect(alpha_meter).to_contain_text(
        f"{known.used_tokens:,} tokens · budget {known.budget_tokens:,}"
    )
    expect(alpha_meter).to_contain_text(f"{known.capacity_fraction:.1%} of 16,000 capacity")
    expect(alpha_meter.get_by_role("meter")).to_have_attribute(
        "aria-valuenow", str(known.used_tokens)
    )
    expect(session_row(page, "s-alpha")).to_contain_text("main / big-model")
    epsilon = session_row(page, "s-epsilon")
    expect(epsilon.locator("td[data-used]")).to_have_attribute(
        "data-used", str(unknown.used_tokens), timeout=APPEAR_MS
    )
    expect(epsilon).to_contain_text("capacity unknown")
    expect(epsilon.locator("td[data-used]")).to_have_attribute("data-capacity", "unknown")
    expect(epsilon).not_to_contain_text("32,000")  # never the fallback as a capacity
    expect(page.locator("#total-sessions")).to_have_text("3")

    # Charts: the numbers Chart.js draws, and the text alternatives next to them.
    expect(page.locator("#chart-reasons-summary")).to_have_text(
        "Token budget: 2; Turn limit: 1.", timeout=APPEAR_MS
    )
    assert chart_data(page, "chart-reasons") == {"Token budget": 2, "Turn limit": 1}
    dropped = chart_data(page, "chart-dropped")
    assert dropped == {"s-alpha": alpha2.dropped_turns, "s-beta": beta.dropped_turns}
    assert sum(chart_data(page, "chart-saved").values()) == saved

    # Filters narrow every view; gaps are never filtered away.
    page.get_by_label("Reason", exact=True).select_option(label="Turn limit")
    expect(timeline_rows(page, "s-alpha")).to_have_count(0, timeout=APPEAR_MS)
    expect(session_row(page, "s-alpha")).to_have_count(0)
    expect(page.locator("#chart-reasons-summary")).to_have_text("Token budget: 0; Turn limit: 1.")
    page.get_by_role("button", name="Clear filters").click()
    page.get_by_label("Session", exact=True).fill("alpha")
    expect(session_row(page, "s-beta")).to_have_count(0, timeout=APPEAR_MS)
    expect(session_row(page, "s-alpha")).to_have_count(1)
    page.get_by_role("button", name="Clear filters").click()

    # Pause freezes the view without losing anything; resume catches up.
    pause = page.get_by_role("button", name="Pause live view")
    pause.focus()
    page.keyboard.press("Enter")  # keyboard operable
    expect(page.locator("#status")).to_have_text("Paused")
    paused_trim = trim(server.address, budget_trim("s-gamma", "rt-1", budget=1200))
    expect(page.get_by_role("button", name="Resume live view (1 new)")).to_be_visible(
        timeout=APPEAR_MS
    )
    expect(timeline_rows(page, "s-gamma")).to_have_count(0)
    page.get_by_role("button", name="Resume live view (1 new)").click()
    expect(timeline_rows(page, "s-gamma")).to_contain_text(arrow(paused_trim), timeout=APPEAR_MS)

    # Restart the sidecar on the same ops port: the page reconnects with its cursor, the ring of
    # the new run cannot vouch for what happened in between, and the page says so.
    server.stop()
    expect(page.locator("#status")).to_have_text("Reconnecting…", timeout=RESUME_MS)
    restarted = server_factory("--http", http, unix=False)
    gap = page.locator('#timeline-body tr[data-kind="gap"]')
    expect(gap).to_have_count(1, timeout=RESUME_MS)
    expect(gap).to_contain_text("the feed restarted")
    expect(page.locator("#status")).to_have_text("Live")
    expect(page.locator("#total-gaps")).to_have_text("1")
    after = trim(restarted.address, budget_trim("s-delta", "rt-3", budget=1000))
    expect(timeline_rows(page, "s-delta")).to_contain_text(arrow(after), timeout=APPEAR_MS)
    # Newest first: the trim after the restart, then the gap, then what came before it.
    kinds = page.locator("#timeline-body tr").evaluate_all(
        "rows => rows.map(r => r.dataset.kind + ':' + (r.dataset.session || ''))"
    )
    assert kinds[:3] == ["trim:s-delta", "gap:", "trim:s-gamma"]
    expect(page.get_by_role("option", name="rt-3")).to_have_count(1)

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
    assert not errors, errors


def prepare_history(
    address: str, session: str, turns: int, budget: int = 600
) -> svc.PrepareModelCallResponse:
    """A prepared call of a runtime that resends its whole `turns`-turn history."""
    request = svc.PrepareModelCallRequest(
        history=history(turns, size=100),
        profiles=profile_pb2.Profiles(
            runtime=profile_pb2.RuntimeProfile(max_context_tokens=budget, default_provider="main"),
            providers=[profile_pb2.ProviderProfile(alias="main", context_window=16_000)],
        ),
        caller=caller(session, "rt-1"),
    )
    with grpc.insecure_channel(address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        response: svc.PrepareModelCallResponse = stub.PrepareModelCall(request, timeout=5)
    assert len(response.trims) == 1, "each call must trim for this test to mean anything"
    return response


def chart_tick_color(page: Page, canvas: str) -> str:
    color: str = page.evaluate(
        "(id) => Chart.getChart(document.getElementById(id)).options.scales.x.ticks.color",
        canvas,
    )
    return color


def test_a_page_opened_later_is_backfilled_counts_each_session_once_and_shows_cut_moves(
    browser: BrowserContext, server_factory: Callable[..., Any], http: str
) -> None:
    """Issue 18: a page opened after the trims shows them (backfilled from the ring, then live
    with nothing twice); a resent history trimmed at the same row again and again counts once;
    issue 16: each session shows how often its cut moved over its last prepared calls."""
    server = server_factory("--http", http, unix=False)
    # Before any page is open: a session resending the same history (its cut holds), and one
    # whose history grows by a turn per call (its minimal cut moves every time).
    steady = [prepare_history(server.address, "s-steady", 12) for _ in range(3)]
    burning = [prepare_history(server.address, "s-burning", 8 + i) for i in range(3)]
    page, errors = open_dashboard(browser, http)

    expect(timeline_rows(page, "s-steady")).to_have_count(3, timeout=APPEAR_MS)
    expect(timeline_rows(page, "s-burning")).to_have_count(3)
    expect(page.locator("#total-trims")).to_have_text("6")
    cut = steady[-1].trims[0]
    last_trim = session_row(page, "s-steady").locator("td[data-dropped-turns]")
    expect(last_trim).to_have_attribute("data-dropped-turns", str(cut.dropped_turns))
    expect(last_trim).to_contain_text(f"{cut.dropped_turns} turns dropped from its history")
    # Meter updates are live only, so the backfill has trims but no prepared calls yet.
    expect(session_row(page, "s-steady")).to_contain_text("1 move; no prepared call seen yet")

    # Live: the same two runtimes go on.
    for i in range(6):
        steady.append(prepare_history(server.address, "s-steady", 12))
        burning.append(prepare_history(server.address, "s-burning", 11 + i))
    steady_cut = session_row(page, "s-steady").locator("td[data-recent-calls]")
    expect(steady_cut).to_have_attribute("data-recent-calls", "6", timeout=APPEAR_MS)
    expect(steady_cut).to_have_attribute("data-recent-moves", "0")
    expect(steady_cut).to_contain_text("moved on 0 of the last 6 calls")
    burning_cut = session_row(page, "s-burning").locator("td[data-recent-calls]")
    expect(burning_cut).to_have_attribute("data-recent-calls", "6", timeout=APPEAR_MS)
    expect(burning_cut).to_have_attribute("data-recent-moves", "6")
    expect(burning_cut).to_contain_text("burning its prompt cache")
    expect(steady_cut).not_to_contain_text("burning")
    # Nothing lost or shown twice between the backfill and the live tail.
    expect(timeline_rows(page, "s-steady")).to_have_count(9)
    expect(timeline_rows(page, "s-burning")).to_have_count(9)
    expect(page.locator("#total-trims")).to_have_text("18")
    expect(page.locator("#total-moves")).to_have_text(str(1 + 9))
    latest = [calls[-1].trims[0] for calls in (steady, burning)]
    expect(page.locator("#total-dropped")).to_have_text(str(sum(t.dropped_turns for t in latest)))
    saved = sum(t.tokens_before - t.tokens_after for t in latest)
    expect(page.locator("#total-saved")).to_have_text(f"{saved:,}")
    assert chart_data(page, "chart-dropped") == {
        "s-steady": latest[0].dropped_turns,
        "s-burning": latest[1].dropped_turns,
    }

    # The OS theme changes while the page is open: the charts' axis labels follow it.
    page.emulate_media(color_scheme="light")
    page.wait_for_function(
        "() => Chart.getChart(document.getElementById('chart-saved')).options.scales.x.ticks.color === '#1b1f24'",
        timeout=APPEAR_MS,
    )
    page.emulate_media(color_scheme="dark")
    for canvas in ("chart-saved", "chart-reasons", "chart-dropped"):
        page.wait_for_function(
            "(id) => Chart.getChart(document.getElementById(id)).options.scales.x.ticks.color === '#e6edf3'",
            arg=canvas,
            timeout=APPEAR_MS,
        )
    bars = page.evaluate(
        "() => Chart.getChart(document.getElementById('chart-dropped')).data.datasets[0].backgroundColor"
    )
    assert set(bars) == {"#3fb950"}  # the dark theme's --ok
    page.emulate_media(color_scheme="light")
    page.wait_for_function(
        "() => Chart.getChart(document.getElementById('chart-dropped')).options.scales.y.ticks.color === '#1b1f24'",
        timeout=APPEAR_MS,
    )
    assert chart_tick_color(page, "chart-reasons") == "#1b1f24"
    assert not errors, errors


def test_one_page_shows_the_whole_fleet(
    browser: BrowserContext, server_factory: Callable[..., Any], redis_server: Any, http: str
) -> None:
    """With the Redis feed, the page on one replica shows the trims of every replica."""
    first = server_factory("--events", redis_server.url, unix=False)
    second = server_factory("--events", redis_server.url, "--http", http, unix=False)
    page, errors = open_dashboard(browser, http)
    on_first = trim(first.address, budget_trim("s-on-first", "rt-a", budget=1500))
    on_second = trim(second.address, turn_trim("s-on-second", "rt-b", limit=2))
    expect(timeline_rows(page, "s-on-first")).to_contain_text(arrow(on_first), timeout=APPEAR_MS)
    expect(timeline_rows(page, "s-on-second")).to_contain_text(arrow(on_second), timeout=APPEAR_MS)
    expect(page.locator("#total-sessions")).to_have_text("2")
    assert not errors, errors


def test_off_loopback_with_token_auth_the_page_asks_for_a_token_that_may_subscribe(
    browser: BrowserContext, server_factory: Callable[..., Any], http: str, tmp_path: Path
) -> None:
    """The ops port bound beyond loopback follows --auth-tokens: no stream without a token that
    may subscribe to TrimEvents; with one, the page is live."""
    watcher, runtime = "w-f6970cd7033b3127607c969b21cccf68", "r-18a2fbc930028b3aa483a16994deb255"
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        f'[[tokens]]\ntoken = "{watcher}"\nruntime_id = "*"\nread_all_runtimes = true\n'
        f'[[tokens]]\ntoken = "{runtime}"\nruntime_id = "rt-1"\ntrim_events = false\n'
    )
    port = http.rpartition(":")[2]
    # Bound on every interface so the page needs a login; the test still talks to loopback only.
    server = server_factory("--http", f"0.0.0.0:{port}", "--auth-tokens", str(tokens), unix=False)
    page = browser.new_page()
    page.goto(f"http://{http}/")
    expect(page.locator("#status")).to_have_text("Signed out", timeout=APPEAR_MS)
    token_box = page.get_by_label("Token", exact=True)
    expect(token_box).to_be_focused()
    token_box.fill(runtime)
    token_box.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("may not subscribe to TrimEvents")
    token_box.fill("x" * 32)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("unknown token")
    token_box.fill(watcher)
    token_box.press("Enter")
    expect(page.locator("#status")).to_have_text("Live", timeout=APPEAR_MS)
    expect(page.locator("#login")).to_be_hidden()
    done = trim(server.address, budget_trim("s-secure", "rt-1", budget=1500), token=runtime)
    expect(timeline_rows(page, "s-secure")).to_contain_text(arrow(done), timeout=APPEAR_MS)
    # The token is not kept by the page: only an HttpOnly session cookie.
    cookies = browser.cookies()
    assert [c["name"] for c in cookies] == ["turnkeeper_dashboard"]
    assert cookies[0]["httpOnly"] and watcher not in cookies[0]["value"]


def tool_history(turns: int) -> history_pb2.History:
    """`turns` user turns, each a prompt, a call with its result and a reply; the last one
    running (its reply not yet given)."""
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="system")]
    for i in range(turns):
        call = history_pb2.ToolCall(id=f"c{i}", name="search", arguments='{"q": 1}')
        rows += [
            history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"task {i}"),
            history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, tool_calls=[call]),
            history_pb2.ChatMessage(
                role=history_pb2.ROLE_TOOL, tool_call_id=call.id, content="result " * 200
            ),
        ]
        if i < turns - 1:
            rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content="done"))
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def prepare_tools(address: str, session: str, turns: int) -> svc.PrepareModelCallResponse:
    """A prepared call that collapses the tool context of all but the newest three turns (K
    unset: 2) and trims nothing."""
    request = svc.PrepareModelCallRequest(
        history=tool_history(turns),
        profiles=profile_pb2.Profiles(
            runtime=profile_pb2.RuntimeProfile(max_context_tokens=100_000, default_provider="m"),
            providers=[profile_pb2.ProviderProfile(alias="m", context_window=200_000)],
        ),
        caller=caller(session, "rt-1"),
    )
    with grpc.insecure_channel(address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        response: svc.PrepareModelCallResponse = stub.PrepareModelCall(request, timeout=5)
    assert response.collapse.collapsed_turns == turns - 3 and not response.trims
    return response


def test_each_session_shows_its_latest_collapse_and_the_totals_count_a_resent_history_once(
    browser: BrowserContext, server_factory: Callable[..., Any], http: str
) -> None:
    """Spec §13.3: the meter update of a prepared call carries what its projection collapsed;
    the page shows each session's latest collapse beside its cut moves and sums the sessions'
    latest ones, so a history resent and collapsed again is counted once."""
    # The reference engine: the projection is the same in both (the differential test).
    server = server_factory("--http", http, "--engine", "python", unix=False)
    page, errors = open_dashboard(browser, http)
    resent = [prepare_tools(server.address, "s-tools", 8) for _ in range(3)]
    other = prepare_tools(server.address, "s-other", 5)
    cell = session_row(page, "s-tools").locator("td[data-collapsed-turns]")
    expect(cell).to_have_attribute("data-collapsed-turns", "5", timeout=APPEAR_MS)
    saved = resent[-1].collapse.saved_tokens
    expect(cell).to_have_attribute("data-collapse-saved", str(saved))
    expect(cell).to_contain_text(f"latest call collapsed 5 turns · saved {saved:,} tokens")
    expect(page.locator("#total-collapsed")).to_have_text("7", timeout=APPEAR_MS)
    both = saved + other.collapse.saved_tokens
    expect(page.locator("#total-collapse-saved")).to_have_text(f"{both:,}")
    # A new, shorter history for the same session: its latest call collapsed less.
    prepare_tools(server.address, "s-tools", 4)
    expect(cell).to_have_attribute("data-collapsed-turns", "1", timeout=APPEAR_MS)
    expect(page.locator("#total-collapsed")).to_have_text("3", timeout=APPEAR_MS)
    assert not errors, errors


def pinned_profiles() -> profile_pb2.Profiles:
    return profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(max_context_tokens=1_200, default_provider="m"),
        providers=[profile_pb2.ProviderProfile(alias="m", context_window=8_000)],
    )


def pinned_history(turns: int) -> history_pb2.History:
    """`history(turns)` with its first turn pinned (spec §15.1)."""
    out = history(turns)
    out.chat.messages[1].pinned = True
    return out


def prepare_pinned(address: str, session: str, turns: int) -> svc.PrepareModelCallResponse:
    request = svc.PrepareModelCallRequest(
        history=pinned_history(turns), profiles=pinned_profiles(), caller=caller(session, "rt-1")
    )
    with grpc.insecure_channel(address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        response: svc.PrepareModelCallResponse = stub.PrepareModelCall(request, timeout=5)
    assert response.trims, "the history must be cut for the pin to matter"
    return response


def plan_compaction(address: str, session: str, turns: int) -> svc.CompactionPlan:
    request = svc.PlanCompactionRequest(
        history=pinned_history(turns),
        profiles=pinned_profiles(),
        caller=caller(session, "rt-1"),
        summary_output_tokens=200,
    )
    with grpc.insecure_channel(address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        response: svc.PlanCompactionResponse = stub.PlanCompaction(request, timeout=5)
    assert response.HasField("plan"), response
    return response.plan


def test_each_session_shows_its_pinned_tokens_and_latest_compaction_plan(
    browser: BrowserContext, server_factory: Callable[..., Any], http: str
) -> None:
    """Spec §15: the meter update of a prepared call carries the pinned turns' tokens, and a
    compaction plan is published as a meter update with the plan in place of the meter; the page
    shows both under the session's meter (the meter stays the prepared call's) and sums the
    sessions' latest states."""
    # The reference engine until the native one has spec 15.
    server = server_factory("--http", http, "--engine", "python", unix=False)
    page, errors = open_dashboard(browser, http)
    resent = [prepare_pinned(server.address, "s-pinned", 6) for _ in range(3)]
    pinned = resent[-1].trims[-1].pinned_tokens
    assert pinned > 0
    cell = session_row(page, "s-pinned").locator("td[data-pinned-tokens]")
    expect(cell).to_have_attribute("data-pinned-tokens", str(pinned), timeout=APPEAR_MS)
    expect(cell).to_contain_text(f"pinned turns {pinned:,} tokens")
    expect(page.locator("#total-pinned")).to_have_text(f"{pinned:,}", timeout=APPEAR_MS)
    used = cell.get_attribute("data-used")
    plans = [plan_compaction(server.address, "s-pinned", 6) for _ in range(2)]
    saved = plans[-1].saved_tokens
    expect(cell).to_have_attribute("data-compaction-saved", str(saved), timeout=APPEAR_MS)
    expect(cell).to_contain_text(
        f"latest compaction plan condenses {plans[-1].condensed_turns} turns · saves {saved:,} tokens"
    )
    expect(cell).to_have_attribute("data-used", used or "")  # the meter is the prepared call's
    expect(page.locator("#total-compaction-saved")).to_have_text(f"{saved:,}", timeout=APPEAR_MS)
    expect(page.locator("#total-pinned")).to_have_text(f"{pinned:,}")
    assert not errors, errors
