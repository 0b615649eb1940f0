"""The cache bench's billing model, session generator and simulator, without a server.

bench/bench_cache.py prints the figures of issue 16 with bench/harness/cache.py; these tests make
sure the prefix-cache bill and the sessions it is computed over are what the bench says they are.
"""

from __future__ import annotations

import itertools

import harness.cache as bc
import pytest
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import trim_pb2
from turnkeeper_client import apply_compaction


def rows(*items: tuple[str, int]) -> list[object]:
    return [bc.RequestRow(key.encode(), tokens) for key, tokens in items]


# ---- billing -------------------------------------------------------------------------------------


def test_a_first_request_is_written_in_full() -> None:
    b = bc.bill([], rows(("s", 100), ("u", 50)), bc.ANTHROPIC)
    assert (b.cached_tokens, b.written_tokens) == (0, 150)
    assert b.cost == pytest.approx(150 * 1.25)


def test_the_shared_prefix_is_read_and_the_appended_rows_are_written() -> None:
    previous = rows(("s", 100), ("u", 50))
    current = rows(("s", 100), ("u", 50), ("a", 30), ("t", 20))
    b = bc.bill(previous, current, bc.ANTHROPIC)
    assert (b.cached_tokens, b.written_tokens, b.input_tokens) == (150, 50, 200)
    assert b.cost == pytest.approx(150 * 0.1 + 50 * 1.25)
    openai = bc.bill(previous, current, bc.OPENAI)
    assert openai.cost == pytest.approx(150 * 0.5 + 50 * 1.0)


def test_everything_after_the_first_changed_row_is_written_even_rows_seen_before() -> None:
    # A moved cut: the system row survives, the breadcrumb is new, the kept turns reappear but
    # at other positions, so the cache cannot serve them.
    previous = rows(("s", 100), ("u1", 40), ("a1", 40), ("u2", 40), ("a2", 40))
    current = rows(("s", 100), ("crumb", 17), ("u2", 40), ("a2", 40), ("u3", 40))
    b = bc.bill(previous, current, bc.ANTHROPIC)
    assert (b.cached_tokens, b.written_tokens) == (100, 137)


def test_rows_match_by_bytes_not_by_tokens() -> None:
    previous = rows(("s", 100), ("abcd", 5))
    current = rows(("s", 100), ("abce", 5))
    assert bc.shared_prefix(previous, current) == 1
    assert bc.shared_prefix(current, current) == 2
    # A request shorter than the previous one shares at most its own length.
    assert bc.shared_prefix(previous, previous[:1]) == 1


def test_custom_price_ratios_parse_and_presets_match_the_providers() -> None:
    assert (bc.ANTHROPIC.read, bc.ANTHROPIC.write) == (0.1, 1.25)
    assert (bc.OPENAI.read, bc.OPENAI.write) == (0.5, 1.0)
    assert bc.parse_pricing("openai") is bc.OPENAI
    assert bc.parse_pricing("gemini=0.25,1") == bc.Pricing("gemini", 0.25, 1.0)
    with pytest.raises(Exception, match="name=read,write"):
        bc.parse_pricing("x=1")


# ---- the session generator -----------------------------------------------------------------------


def test_sessions_are_seeded_and_deterministic() -> None:
    a = bc.generate_session(3, 120)
    b = bc.generate_session(3, 120)
    c = bc.generate_session(4, 120)
    assert a == b
    assert a != c
    assert len(a.calls) == 120


@pytest.mark.parametrize("shape", ["short", "long"])
def test_a_session_is_a_valid_tool_heavy_conversation(shape: str) -> None:
    session = bc.generate_session(16, 400, shape)
    history = [session.system]
    users = tool_rounds = 0
    result_sizes: list[int] = []
    for call in session.calls:
        if call.before and call.before[0].role == h.ROLE_USER:
            users += 1
            assert len(call.before) == 1
        else:
            # Tool results answer the previous call's tool calls, in order, right after it.
            ids = [c.id for c in history[-1].tool_calls]
            assert ids, "only a user row or tool results come before a call"
            assert [m.tool_call_id for m in call.before] == ids
            assert all(m.role == h.ROLE_TOOL for m in call.before)
            result_sizes += [len(m.content) for m in call.before]
        history.extend(call.before)
        history.append(call.answer)
        assert call.answer.role == h.ROLE_ASSISTANT
        tool_rounds += bool(call.answer.tool_calls)
    assert history[1].role == h.ROLE_USER  # the first call opens a turn
    calls_per_turn = 400 / users
    assert (1.8 < calls_per_turn < 2.8) if shape == "short" else (3.8 < calls_per_turn < 5.4)
    assert tool_rounds > users  # tool-heavy: more tool rounds than turns
    # Varied sizes: short results, pages and large dumps all occur.
    assert min(result_sizes) < 1_000 and max(result_sizes) > 8_000
    assert sum(s > 8_000 for s in result_sizes) < len(result_sizes) / 4
    ids = [c.id for m in history for c in m.tool_calls]
    assert len(ids) == len(set(ids))


# ---- the simulator and the figures ---------------------------------------------------------------


class FakeSidecar:
    """Drops the oldest whole turns behind one breadcrumb until at most `limit` rows remain: the
    minimal cut, counted in rows, which is enough to tell the two runtime styles apart."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.requests: list[int] = []

    def __call__(self, request: svc.PrepareModelCallRequest) -> svc.PrepareModelCallResponse:
        messages = list(request.history.chat.messages)
        self.requests.append(len(messages))
        out = svc.PrepareModelCallResponse()
        head = 2 if messages[1].breadcrumb else 1
        starts = [i for i in range(head, len(messages)) if messages[i].role == h.ROLE_USER]
        if len(messages) > self.limit and len(starts) > 1:
            cut = next((s for s in starts[1:] if len(messages) - s + 2 <= self.limit), starts[-1])
            crumb = h.ChatMessage(role=h.ROLE_USER, content="[omitted]", breadcrumb=True)
            messages = [messages[0], crumb, *messages[cut:]]
            out.trims.append(trim_pb2.HistoryTrimmed(dropped_messages=cut - head))
        out.history.chat.messages.extend(messages)
        out.context_meter.used_tokens = sum(len(m.content) // 4 + 4 for m in messages)
        return out


def test_resend_sends_the_whole_history_and_keep_sends_what_the_trim_returned() -> None:
    session = bc.generate_session(5, 60)
    resend, keep = FakeSidecar(limit=40), FakeSidecar(limit=40)
    bc.simulate(resend, session, "resend", 1.0, "r")
    bc.simulate(keep, session, "keep", 1.0, "k")
    assert resend.requests == sorted(resend.requests)  # the runtime's copy only grows
    assert max(resend.requests) > 100
    assert max(keep.requests) <= 40 + 4  # a call appends its answer and at most 3 results
    with pytest.raises(ValueError, match="style"):
        bc.simulate(resend, session, "other", 1.0, "x")


def test_figures_count_moved_cuts_hits_and_context() -> None:
    session = bc.generate_session(5, 60)
    run = bc.simulate(FakeSidecar(limit=40), session, "keep", 1.0, "k")
    trimmed = [r for r in run.records if r.trimmed]
    assert trimmed and all(r.moved for r in trimmed)  # every trim of a kept history moves it
    assert not any(r.moved for r in run.records if not r.trimmed)
    f = bc.figures([run], bc.ANTHROPIC)
    assert f.moves_per_100 == pytest.approx(100 * len(trimmed) / 60)
    assert 0 < f.hit_share < 1
    first = next(i for i, r in enumerate(run.records) if r.trimmed)
    expected = sum(r.used_tokens for r in run.records[first:]) / (60 - first) / bc.BUDGET
    assert f.mean_context == pytest.approx(expected)
    manual = 0.0
    previous: list[object] = []
    for record in run.records:
        manual += bc.bill(previous, record.rows, bc.ANTHROPIC).cost
        previous = record.rows
    assert f.cost == pytest.approx(manual)


def test_a_resent_history_cut_at_the_same_row_is_a_cache_hit_not_a_moved_cut() -> None:
    crumb = h.ChatMessage(role=h.ROLE_USER, content="[omitted]", breadcrumb=True)

    def fixed_cut(request: svc.PrepareModelCallRequest) -> svc.PrepareModelCallResponse:
        messages = list(request.history.chat.messages)
        out = svc.PrepareModelCallResponse()
        if len(messages) > 12:  # always cut at the same row: the second call's first row
            messages = [messages[0], crumb, *messages[3:]]
            out.trims.append(trim_pb2.HistoryTrimmed(dropped_messages=2))
        out.history.chat.messages.extend(messages)
        out.context_meter.used_tokens = len(messages)
        return out

    run = bc.simulate(fixed_cut, bc.generate_session(5, 40), "resend", 0.7, "r")
    trimmed = [r for r in run.records if r.trimmed]
    assert len(trimmed) > 10
    assert [r.moved for r in trimmed] == [True] + [False] * (len(trimmed) - 1)
    f = bc.figures([run], bc.ANTHROPIC)
    assert f.moves_per_100 == pytest.approx(100 / 40)


# ---- explicit cache breakpoints (spec §14) --------------------------------------------------------


def keyed(n: int, tokens: int = 10, prefix: str = "r") -> list[object]:
    return rows(*((f"{prefix}{i}", tokens) for i in range(n)))


def test_a_first_marked_request_writes_through_its_last_mark_and_bills_the_tail_plainly() -> None:
    cache = bc.BreakpointCache()
    b = cache.bill(keyed(10), [0, 7])
    assert (b.cached_tokens, b.written_tokens, b.plain_tokens) == (0, 80, 20)
    assert b.cost == pytest.approx(80 * 1.25 + 20 * 1.0)
    unmarked = bc.BreakpointCache().bill(keyed(10), [])
    assert (unmarked.cached_tokens, unmarked.written_tokens, unmarked.plain_tokens) == (0, 0, 100)


def test_a_mark_reads_a_prefix_cached_at_most_twenty_rows_before_it() -> None:
    cache = bc.BreakpointCache()
    cache.bill(keyed(10), [0, 9])
    near = cache.bill(keyed(30), [0, 29])  # the previous last mark is 20 rows back: found
    assert (near.cached_tokens, near.written_tokens) == (100, 200)
    cache = bc.BreakpointCache()
    cache.bill(keyed(10), [0, 9])
    far = cache.bill(keyed(31), [0, 30])  # 21 rows back: only the system mark is read
    assert (far.cached_tokens, far.written_tokens) == (10, 300)


def test_a_changed_row_before_a_cached_mark_breaks_that_prefix_but_not_an_earlier_one() -> None:
    cache = bc.BreakpointCache()
    cache.bill(keyed(12), [0, 5, 11])
    changed = keyed(12)
    changed[8] = bc.RequestRow(b"other", 10)
    b = cache.bill(changed + keyed(2, prefix="n"), [0, 5, 13])
    # The prefix changed at row 8: every mark reads no further than the middle one, row 5.
    assert (b.cached_tokens, b.written_tokens, b.plain_tokens) == (60, 80, 0)


def test_the_runtime_marks_its_last_system_row_and_its_last_row() -> None:
    system = h.ChatMessage(role=h.ROLE_SYSTEM, content="s")
    user = h.ChatMessage(role=h.ROLE_USER, content="u")
    assert bc.system_and_last([system, system, user, user]) == [1, 3]
    assert bc.system_and_last([user, user]) == [1]
    assert bc.system_and_last([system]) == [0]


# ---- tool context sessions and the single-turn case ----------------------------------------------


def test_tool_context_sessions_have_results_of_a_few_hundred_to_several_thousand_tokens() -> None:
    session = bc.generate_session(16, 300, "long", bc.tool_context_result_size)
    sizes = [len(m.content) for c in session.calls for m in c.before if m.role == h.ROLE_TOOL]
    assert 300 * 4 <= min(sizes) < 600 * 4 and 4_000 * 4 < max(sizes) <= 5_000 * 4


def test_the_single_turn_case_is_one_user_turn_of_one_hundred_tool_calls() -> None:
    session = bc.generate_single_turn(16)
    assert len(session.calls) == 101
    assert sum(m.role == h.ROLE_USER for c in session.calls for m in c.before) == 1
    assert sum(len(c.answer.tool_calls) for c in session.calls) == 100
    sizes = [len(m.content) for c in session.calls for m in c.before if m.role == h.ROLE_TOOL]
    assert len(sizes) == 100 and min(sizes) >= 500 * 4 and max(sizes) <= 3_000 * 4


class RefusingSidecar:
    """Sends every history back whole with the system and last-but-one rows as breakpoints, and
    refuses a history longer than `limit` rows as the pre-flight would."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __call__(self, request: svc.PrepareModelCallRequest) -> svc.PrepareModelCallResponse:
        messages = list(request.history.chat.messages)
        if len(messages) > self.limit:
            raise OverflowError("refused")
        out = svc.PrepareModelCallResponse(cache_breakpoints=[0, len(messages) - 2])
        out.history.chat.messages.extend(messages)
        out.collapse.collapsed_turns = 1
        return out


def test_tool_figures_count_refusals_turns_and_both_markings() -> None:
    session = bc.generate_session(5, 40, "long", bc.tool_context_result_size)
    setting = bc.ToolSetting(10**9, 2, 1.0)
    refusal = bc.simulate_tools(
        RefusingSidecar(30), session, setting, "s", lambda e: isinstance(e, OverflowError)
    )
    prepared = [r for r in refusal.records if not r.failed]
    assert len(refusal.records) == 40 and 0 < len(prepared) < 40
    f = bc.tool_figures([refusal])
    assert (f.calls, f.refused, f.over_budget) == (40, 40 - len(prepared), 0)
    assert f.collapsed_turns == 1.0
    assert f.user_turns == pytest.approx(sum(r.user_turns for r in prepared) / len(prepared))
    # The runtime's own marks differ from the returned ones, and so do the bills.
    assert all(r.returned_marks != r.last_marks for r in prepared)
    assert f.returned_marks_cost != f.last_marks_cost
    # A request that only appends is no rewrite.
    assert f.rewrites == 0
    with pytest.raises(OverflowError):
        bc.simulate_tools(RefusingSidecar(30), session, setting, "s", lambda e: False)


# ---- compaction (spec §15) -----------------------------------------------------------------------


def turn_starts(messages: list[h.ChatMessage]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.role == h.ROLE_USER and not m.summary]


class FakeCompactor:
    """A preparation that reports a cut of a turn once the history holds more than `limit` rows
    (and sends it whole), and a planner that condenses every unpinned turn but the newest, the
    old summary with them, as PlanCompaction's ranges say."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.plans = 0

    def prepare(self, request: svc.PrepareModelCallRequest) -> svc.PrepareModelCallResponse:
        messages = list(request.history.chat.messages)
        out = svc.PrepareModelCallResponse()
        if len(messages) > self.limit and len(turn_starts(messages)) > 2:
            out.trims.append(trim_pb2.HistoryTrimmed(dropped_messages=2, dropped_turns=1))
        out.history.chat.messages.extend(messages)
        out.context_meter.used_tokens = sum(len(m.content) // 4 + 4 for m in messages)
        return out

    def plan(self, request: svc.PlanCompactionRequest) -> svc.PlanCompactionResponse:
        self.plans += 1
        messages = list(request.history.chat.messages)
        starts = turn_starts(messages)
        end = starts[-1]
        plan = svc.CompactionPlan(summary_output_tokens=2_000, summary_request_tokens=1_000)
        condensed_from = 1
        for start, stop in itertools.pairwise(starts):
            if messages[start].pinned:
                if start > condensed_from:
                    plan.condensed_rows.add(start=condensed_from, end=start)
                plan.pinned_turns.add(start=start, end=stop)
                condensed_from = stop
            else:
                plan.condensed_turns += 1
        plan.condensed_rows.add(start=condensed_from, end=end)
        instruction = h.ChatMessage(role=h.ROLE_USER, content="Summarize.")
        plan.summary_request.chat.messages.extend([*messages[:end], instruction])
        return svc.PlanCompactionResponse(plan=plan)


def test_the_compact_style_bills_its_summaries_and_represents_every_turn() -> None:
    session = bc.generate_session(5, 80)
    fake = FakeCompactor(limit=30)
    run = bc.simulate_compaction(fake.prepare, fake.plan, apply_compaction, session, 0.7, "c", 5)
    summaries = [r for r in run.records if r.summary_request]
    assert len(summaries) == fake.plans > 1
    assert len(run.records) == 80 + len(summaries)  # every model call, and each summary request
    held = bc.coverage_figures([run])
    assert held.summary_requests == len(summaries)
    assert held.fully_represented == 1.0 and held.represented == 1.0
    assert held.first_turn == 1.0  # pinned, so never condensed
    assert held.over_window == 0
    manual = 0.0
    previous: list[object] = []
    for record in run.records:
        manual += bc.bill(previous, record.rows, bc.ANTHROPIC).cost
        previous = record.rows
    assert bc.figures([run], bc.ANTHROPIC).cost == pytest.approx(manual)
    # A summary request shares the model call before it up to its own instruction row: the
    # cache serves that prefix.
    for summary in summaries:
        before = run.records[run.records.index(summary) - 1].rows
        shared = bc.shared_prefix(before, summary.rows)
        assert shared == min(len(before), len(summary.rows) - 1)


def test_dropping_represents_only_the_turns_it_kept() -> None:
    session = bc.generate_session(5, 80)
    run = bc.simulate(FakeSidecar(limit=30), session, "keep", 1.0, "k")
    held = bc.coverage_figures([run])
    assert held.represented < 1.0 and held.fully_represented < 1.0
    assert held.first_turn < 1.0 and held.summary_requests == 0
