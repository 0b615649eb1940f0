"""What the dashboard counts per session (ops/dashboard/ledger.py): the latest state of each
session and whether each prepared call moved its cut, so a resent history is counted once."""

from __future__ import annotations

from turnkeeper.server.ops.dashboard.ledger import WINDOW, Ledger
from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2

BUDGET = trim_pb2.TRIM_REASON_TOKEN_BUDGET
TURNS = trim_pb2.TRIM_REASON_TURN_LIMIT
CLEARED = trim_pb2.TRIM_REASON_TOOL_RESULTS_CLEARED


def collapse(turns: int, saved: int) -> trim_pb2.ToolContextCollapse:
    return trim_pb2.ToolContextCollapse(
        collapsed_turns=turns, rows_left_out=3 * turns, saved_tokens=saved
    )


def trim(
    session: str,
    dropped_messages: int,
    dropped_turns: int,
    *,
    full: bool,
    before: int = 9_000,
    after: int = 6_000,
    reason: int = BUDGET,
    collapsed: trim_pb2.ToolContextCollapse | None = None,
    pinned_tokens: int = 0,
) -> history_service_pb2.TrimEventsResponse:
    """A trim event; `full`: the history given carried no breadcrumb, so one was inserted."""
    return history_service_pb2.TrimEventsResponse(
        event=events_pb2.TrimEvent(
            trimmed=trim_pb2.HistoryTrimmed(
                reason=reason,  # type: ignore[arg-type]
                dropped_messages=dropped_messages,
                dropped_turns=dropped_turns,
                tokens_before=before,
                tokens_after=after,
                breadcrumb_inserted=full,
                caller=trim_pb2.CallerContext(session_id=session),
                collapse=collapsed,
                pinned_turns=1 if pinned_tokens else 0,
                pinned_tokens=pinned_tokens,
            )
        )
    )


def meter(
    session: str, collapsed: trim_pb2.ToolContextCollapse | None = None, pinned_tokens: int = 0
) -> history_service_pb2.TrimEventsResponse:
    return history_service_pb2.TrimEventsResponse(
        meter_update=events_pb2.MeterUpdate(
            caller=trim_pb2.CallerContext(session_id=session),
            meter=trim_pb2.ContextMeter(used_tokens=1_000, budget_tokens=2_000),
            collapse=collapsed,
            pinned_tokens=pinned_tokens,
        )
    )


def compaction_planned(
    session: str, condensed_turns: int, saved: int
) -> history_service_pb2.TrimEventsResponse:
    """The update PlanCompaction publishes with a plan (spec §15.3): no meter, the plan's saving."""
    planned = events_pb2.CompactionPlanned(
        condensed_turns=condensed_turns, saved_tokens=saved, summary_request_tokens=4_000
    )
    return history_service_pb2.TrimEventsResponse(
        meter_update=events_pb2.MeterUpdate(
            caller=trim_pb2.CallerContext(session_id=session), compaction=planned
        )
    )


def feed(ledger: Ledger, *items: history_service_pb2.TrimEventsResponse) -> None:
    for item in items:
        ledger.read(item)


def test_a_resent_history_cut_at_the_same_row_is_counted_once() -> None:
    ledger = Ledger()
    # A runtime that resends its 29-turn history: every call is trimmed again at the same row.
    for call in range(10):
        feed(ledger, trim("s", 20, 10, full=True, before=9_000 + call, after=6_000), meter("s"))
    state = ledger.session("s")
    assert state is not None
    figures = ledger.annotation("s")["session"]
    assert figures["droppedTurns"] == 10  # not 100
    assert figures["savedByLastCall"] == 3_009  # the last call's saving, not the sum
    assert figures["trimEvents"] == 10
    assert figures["cutMoves"] == 1  # only the first call moved the cut
    assert (figures["recentCalls"], figures["recentCutMoves"]) == (10, 1)


def test_a_resent_history_whose_cut_moves_on_every_call_is_burning_its_cache() -> None:
    ledger = Ledger()
    for call in range(6):
        feed(ledger, trim("s", 2 * (call + 1), call + 1, full=True), meter("s"))
    figures = ledger.annotation("s")["session"]
    assert (figures["recentCalls"], figures["recentCutMoves"], figures["cutMoves"]) == (6, 6, 6)
    assert figures["droppedTurns"] == 6  # the latest full trim says how many are gone


def test_a_kept_history_adds_each_trims_turns_and_every_trim_moves_the_cut() -> None:
    ledger = Ledger()
    feed(ledger, trim("k", 6, 3, full=True), meter("k"))  # the first trim inserts the breadcrumb
    feed(ledger, meter("k"), meter("k"))  # calls that needed no trim: the cut holds
    feed(ledger, trim("k", 4, 2, full=False, before=8_000, after=7_000), meter("k"))
    figures = ledger.annotation("k")["session"]
    assert figures["droppedTurns"] == 5
    assert figures["savedByLastCall"] == 1_000
    assert (figures["recentCalls"], figures["recentCutMoves"], figures["cutMoves"]) == (4, 2, 2)
    feed(ledger, meter("k"))
    assert ledger.annotation("k")["session"]["savedByLastCall"] == 0  # that call saved nothing


def test_one_calls_turn_limit_and_budget_trims_are_one_call_and_one_cut() -> None:
    ledger = Ledger()
    for _ in range(3):
        feed(
            ledger,
            trim("s", 10, 5, full=True, before=20_000, after=12_000, reason=TURNS),
            trim("s", 4, 2, full=False, before=12_000, after=9_000),
            meter("s"),
        )
    figures = ledger.annotation("s")["session"]
    assert figures["droppedTurns"] == 7
    assert figures["savedByLastCall"] == 11_000
    assert (figures["recentCalls"], figures["recentCutMoves"], figures["cutMoves"]) == (3, 1, 1)
    # The same turn-limit cut with a budget cut further on: the call's cut moved.
    feed(
        ledger,
        trim("s", 10, 5, full=True, reason=TURNS),
        trim("s", 6, 3, full=False),
        meter("s"),
    )
    assert ledger.annotation("s")["session"]["recentCutMoves"] == 2


def test_trims_replayed_without_meter_updates_still_give_the_latest_state() -> None:
    ledger = Ledger()  # the ring replays trims only: calls are told apart by their trims' order
    feed(ledger, *(trim("s", 20, 10, full=True, before=9_000, after=5_000) for _ in range(5)))
    figures = ledger.annotation("s")["session"]
    assert (figures["droppedTurns"], figures["savedByLastCall"]) == (10, 4_000)
    assert (figures["cutMoves"], figures["recentCalls"]) == (1, 0)  # no prepared call seen yet


def test_the_window_covers_the_last_prepared_calls_only() -> None:
    ledger = Ledger()
    for call in range(WINDOW):
        feed(ledger, trim("s", 2 * (call + 1), call + 1, full=True), meter("s"))
    for _ in range(WINDOW // 2):
        feed(ledger, trim("s", 2 * WINDOW, WINDOW, full=True), meter("s"))
    figures = ledger.annotation("s")["session"]
    assert (figures["recentCalls"], figures["recentCutMoves"]) == (WINDOW, WINDOW // 2)
    assert figures["cutMoves"] == WINDOW


def test_the_least_recently_seen_sessions_are_forgotten_first() -> None:
    ledger = Ledger(sessions_kept=2)
    feed(ledger, trim("a", 4, 2, full=True), meter("a"))
    feed(ledger, trim("b", 6, 3, full=True), trim("b", 6, 3, full=True))
    feed(ledger, meter("a"))  # "a" is seen again, so "b" is the oldest now
    feed(ledger, trim("c", 2, 1, full=True))
    assert ledger.session("b") is None
    state = ledger.session("a")
    assert state is not None and (state.recent_calls, state.recent) == (2, 0b10)


def test_heartbeats_and_gaps_change_no_session() -> None:
    ledger = Ledger()
    beat = history_service_pb2.TrimEventsResponse(heartbeat=events_pb2.Heartbeat())
    gap = history_service_pb2.TrimEventsResponse(gap=events_pb2.Gap())
    assert ledger.read(beat) is None and ledger.read(gap) is None
    assert ledger.read(meter("m")) == "m"


def test_the_collapse_is_the_latest_calls_never_a_sum_of_resent_histories() -> None:
    ledger = Ledger()
    # A runtime resending its history: every call collapses the same old turns again, and one
    # more once a user turn arrives.
    for call in range(4):
        feed(ledger, meter("s", collapse(3 + call // 2, 1_000 * (3 + call // 2))))
    figures = ledger.annotation("s")["session"]
    assert (figures["collapsedByLastCall"], figures["savedByLastCollapse"]) == (4, 4_000)
    feed(ledger, meter("s"))  # a call that collapsed nothing (a new, short history)
    figures = ledger.annotation("s")["session"]
    assert (figures["collapsedByLastCall"], figures["savedByLastCollapse"]) == (0, 0)


def test_a_collapse_with_a_cut_is_read_from_the_trims_and_then_the_meter() -> None:
    ledger = Ledger()
    feed(ledger, trim("s", 20, 10, full=True, collapsed=collapse(5, 7_000)))
    figures = ledger.annotation("s")["session"]  # replayed without its meter: the trim says it
    assert (figures["collapsedByLastCall"], figures["savedByLastCollapse"]) == (5, 7_000)
    assert figures["savedByLastCall"] == 3_000  # the cut's saving stays apart from the collapse
    feed(ledger, meter("s", collapse(5, 7_000)))
    feed(
        ledger,
        trim("s", 20, 10, full=True, collapsed=collapse(6, 8_000)),
        meter("s", collapse(6, 8_000)),
    )
    figures = ledger.annotation("s")["session"]
    assert (figures["collapsedByLastCall"], figures["savedByLastCollapse"]) == (6, 8_000)
    assert (figures["cutMoves"], figures["recentCalls"], figures["recentCutMoves"]) == (1, 2, 1)


def test_a_clearing_after_the_cut_is_the_same_call_and_a_clearing_alone_moves_no_cut() -> None:
    ledger = Ledger()
    feed(
        ledger,
        trim("s", 20, 10, full=True, before=40_000, after=31_000),
        trim("s", 0, 0, full=False, before=31_000, after=27_000, reason=CLEARED),
        meter("s"),
    )
    figures = ledger.annotation("s")["session"]
    assert figures["savedByLastCall"] == 13_000  # one call: the cut and the clearing together
    assert (figures["droppedTurns"], figures["cutMoves"], figures["recentCutMoves"]) == (10, 1, 1)
    for _ in range(3):  # the running turn alone is left: only its tool results are cleared
        feed(
            ledger,
            trim("s", 0, 0, full=False, before=31_000, after=25_000, reason=CLEARED),
            meter("s"),
        )
    figures = ledger.annotation("s")["session"]
    assert (figures["droppedTurns"], figures["savedByLastCall"]) == (10, 6_000)
    assert (figures["cutMoves"], figures["recentCalls"], figures["recentCutMoves"]) == (1, 4, 1)
    # The same full cut as before: the clearings in between did not forget where it was.
    feed(ledger, trim("s", 20, 10, full=True), meter("s"))
    assert ledger.annotation("s")["session"]["cutMoves"] == 1


def test_the_pinned_tokens_are_the_latest_requests_never_a_sum_of_resent_histories() -> None:
    ledger = Ledger()
    for _ in range(5):  # a resent history with its first turn pinned, cut at the same row
        feed(ledger, trim("s", 20, 10, full=True, pinned_tokens=300), meter("s", pinned_tokens=300))
    feed(ledger, meter("t", pinned_tokens=120))  # nothing cut, a pinned turn all the same
    assert ledger.annotation("s")["session"]["pinnedTokens"] == 300
    assert ledger.annotation("t")["session"]["pinnedTokens"] == 120
    # The runtime unpinned the turn: the latest call says so.
    feed(ledger, trim("s", 20, 10, full=True, pinned_tokens=0), meter("s"))
    assert ledger.annotation("s")["session"]["pinnedTokens"] == 0


def test_trims_replayed_without_meter_updates_give_the_pinned_tokens_of_the_last_trim() -> None:
    ledger = Ledger()
    feed(
        ledger,
        trim("s", 4, 2, full=True, reason=TURNS, pinned_tokens=500),
        trim("s", 6, 3, full=False, pinned_tokens=450),
    )
    assert ledger.annotation("s")["session"]["pinnedTokens"] == 450


def test_a_compaction_plan_is_the_latest_saving_and_no_prepared_call() -> None:
    ledger = Ledger()
    feed(ledger, trim("s", 20, 10, full=True), meter("s", pinned_tokens=300))
    before = ledger.annotation("s")["session"]
    feed(ledger, compaction_planned("s", 10, 5_000), compaction_planned("s", 10, 5_200))
    after = ledger.annotation("s")["session"]
    assert (after["compactions"], after["savedByLastCompaction"]) == (2, 5_200)
    assert after["condensedByLastCompaction"] == 10
    # The plan is not a prepared call: the window, the cut and the meter's figures stand.
    for key in ("recentCalls", "recentCutMoves", "cutMoves", "pinnedTokens", "savedByLastCall"):
        assert after[key] == before[key], key
    # A plan arriving while a call's trims are open leaves the call open for its meter update.
    feed(ledger, trim("s", 22, 11, full=True), compaction_planned("s", 11, 5_400), meter("s"))
    final = ledger.annotation("s")["session"]
    assert (final["recentCalls"], final["cutMoves"]) == (2, 2)
    assert final["savedByLastCompaction"] == 5_400


def test_a_session_without_a_compaction_plan_reports_none() -> None:
    ledger = Ledger()
    feed(ledger, trim("s", 20, 10, full=True), meter("s"))
    figures = ledger.annotation("s")["session"]
    assert (figures["compactions"], figures["savedByLastCompaction"]) == (0, 0)
