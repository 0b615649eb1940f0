"""Pinned turns and the summary row in the reference engine (spec §15.1, §15.2)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from turnkeeper.core.calibration import ReportedUsage, plan_reported_usage
from turnkeeper.core.projection import project
from turnkeeper.core.recovery import plan_recovery
from turnkeeper.core.rows import RowKind, price, rows_of
from turnkeeper.core.trimming import layout, plan_row_count, plan_token_budget, plan_turn_count
from turnkeeper.core.working import WorkingHistory, breadcrumb_cost
from turnkeeper.server.engine.python import PythonHistoryView
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import trim_pb2

from .histories import assistant, c_calls, c_chat, c_results, chat, conversation, crumb, system

TEXT = "[earlier turns omitted to fit the context window]"
CRUMB = breadcrumb_cost(TEXT)  # 17
ROW = "x" * 400  # ceil(400 / 4) + 4 = 104 tokens
TURN = 208

Shape = Callable[[h.History], h.History]


def as_conversation(history: h.History) -> h.History:
    return conversation(*(c_chat(m) for m in history.chat.messages))


SHAPES = [pytest.param(lambda x: x, id="chat"), pytest.param(as_conversation, id="conversation")]


def user(text: str = ROW, *, pinned: bool = False) -> h.ChatMessage:
    return h.ChatMessage(role=h.ROLE_USER, content=text, pinned=pinned)


def summary(text: str = ROW) -> h.ChatMessage:
    return h.ChatMessage(role=h.ROLE_USER, content=text, summary=True)


def turns(n: int, pinned: set[int] = frozenset()) -> list[h.ChatMessage]:  # type: ignore[assignment]
    """`n` turns of two 104-token rows; the prompt of turn i reads `u<i>` after its padding."""
    rows: list[h.ChatMessage] = []
    for i in range(n):
        rows += [user(ROW[: -len(f"u{i}")] + f"u{i}", pinned=i in pinned), assistant(ROW)]
    return rows


def prompts(history: h.History) -> list[str]:
    """Each output row as a short tag: s(ystem), S(ummary), c(rumb), the turn of a prompt, a."""
    tags = []
    for m in _chat_rows(history):
        if m.summary:
            tags.append("S")
        elif m.breadcrumb:
            tags.append("c")
        elif m.role == h.ROLE_SYSTEM:
            tags.append("s")
        elif m.role == h.ROLE_USER:
            tags.append(m.content.lstrip("x"))
        else:
            tags.append("a")
    return tags


def _chat_rows(history: h.History) -> list[h.ChatMessage]:
    if history.WhichOneof("shape") == "conversation":
        return [m.chat for m in history.conversation.messages]
    return list(history.chat.messages)


def tags(*turn_indices: int) -> list[str]:
    return [tag for i in turn_indices for tag in (f"u{i}", "a")]


@pytest.mark.parametrize("shape", SHAPES)
def test_spec_example_first_turn_pinned(shape: Shape) -> None:
    """§15.1: 104-token system row, 10 turns, budget 2,000, the first turn pinned: j = 1 drops
    nothing (2,201 with the breadcrumb); j = 2 keeps the system row, the first turn, the
    breadcrumb and turns 3 to 10: 1,993 tokens, 1 turn dropped, 9 kept."""
    w = WorkingHistory.of(shape(chat(system(ROW), *turns(10, {0}))))
    assert w.pricing.total + CRUMB == 2201
    plan = plan_token_budget(w.rows, w.pricing, 2000, CRUMB)
    assert (plan.dropped_turns, plan.kept_turns, plan.dropped_messages) == (1, 9, 2)
    assert (plan.tokens_after, plan.pinned_turns, plan.pinned_tokens) == (1993, 1, TURN)
    assert (plan.drop, plan.kept_in_drop, plan.breadcrumb_at) == (range(3, 5), (), 3)
    out = w.apply(plan, TEXT)
    assert prompts(out.history) == ["s", *tags(0), "c", *tags(*range(2, 10))]
    assert out.pricing.total == price(rows_of(out.history)).total == 1993


@pytest.mark.parametrize("shape", SHAPES)
def test_several_pinned_turns_move_ahead_of_the_new_breadcrumb(shape: Shape) -> None:
    w = WorkingHistory.of(shape(chat(system(ROW), *turns(6, {0, 2}))))
    # Four turns must go to fit: turns 1 and 3 are dropped, 0 and 2 kept before the crumb.
    budget = 104 + 4 * TURN + CRUMB
    plan = plan_token_budget(w.rows, w.pricing, budget, CRUMB)
    assert (plan.dropped_turns, plan.kept_turns, plan.dropped_messages) == (2, 4, 4)
    assert (plan.drop, plan.kept_in_drop, plan.breadcrumb_at) == (range(3, 9), (range(5, 7),), 5)
    assert plan.breadcrumb_from is None and plan.pinned_turns == 2
    out = w.apply(plan, TEXT)
    assert prompts(out.history) == ["s", *tags(0, 2), "c", *tags(4, 5)]
    assert plan.tokens_after == out.pricing.total == price(rows_of(out.history)).total == budget
    # Trimmed again to the same budget, the output stays.
    assert not plan_token_budget(out.rows, out.pricing, budget, CRUMB).trimmed


@pytest.mark.parametrize("shape", SHAPES)
def test_every_turn_but_the_newest_pinned_is_unchanged(shape: Shape) -> None:
    history = shape(chat(system(ROW), *turns(4, {0, 1, 2})))
    w = WorkingHistory.of(history)
    for plan in (
        plan_token_budget(w.rows, w.pricing, 1, CRUMB),
        plan_token_budget(w.rows, w.pricing, 1, CRUMB, 0.5),
        plan_turn_count(w.rows, w.pricing, 0, CRUMB),
    ):
        assert not plan.trimmed and plan.drop == range(1, 1)
        assert (plan.kept_turns, plan.pinned_turns, plan.pinned_tokens) == (4, 3, 3 * TURN)
        assert (plan.cut_step, plan.cut_drop_target) == (0, 0)
        assert w.apply(plan, TEXT).history == history


@pytest.mark.parametrize("shape", SHAPES)
def test_kept_breadcrumb_after_pinned_prefix_turns_moves_after_pinned_body_turns(
    shape: Shape,
) -> None:
    """§15.1: the input's breadcrumb, after the pinned turn of the fixed prefix, is moved after
    the pinned turns of B before the cut, its own text kept."""
    old = crumb("[older turns left out]")
    history = shape(chat(system(ROW), *turns(1, {0}), old, *turns(5, {1})[2:]))
    w = WorkingHistory.of(history)
    lay = layout(w.rows)
    assert (lay.head, lay.crumb, lay.prefix, lay.boundaries) == (1, 3, 4, [4, 6, 8, 10])
    assert lay.pinned == [True, False, False, False]
    old_cost = w.pricing.tokens[3]
    budget = 104 + 4 * TURN + old_cost
    plan = plan_token_budget(w.rows, w.pricing, budget, CRUMB)
    assert (plan.drop, plan.kept_in_drop) == (range(3, 8), (range(4, 6),))
    assert (plan.breadcrumb_from, plan.breadcrumb_at) == (3, 5)
    assert (plan.dropped_turns, plan.kept_turns, plan.dropped_messages) == (1, 4, 2)
    assert (plan.pinned_turns, plan.pinned_tokens) == (2, 2 * TURN)
    out = w.apply(plan, TEXT)
    assert prompts(out.history) == ["s", *tags(0, 1), "c", *tags(3, 4)]
    assert _chat_rows(out.history)[5].content == "[older turns left out]"
    assert plan.tokens_after == out.pricing.total == price(rows_of(out.history)).total
    # The output's breadcrumb is the fixed prefix's again.
    assert layout(out.rows).crumb == 5


def test_kept_breadcrumb_stays_when_no_pinned_turn_precedes_the_cut() -> None:
    w = WorkingHistory.of(chat(system(ROW), *turns(1, {0}), crumb(), *turns(4)[2:]))
    plan = plan_token_budget(w.rows, w.pricing, 104 + 3 * TURN + CRUMB, CRUMB)
    assert (plan.drop, plan.breadcrumb_at, plan.breadcrumb_from) == (range(4, 6), None, None)
    assert prompts(w.apply(plan, TEXT).history) == ["s", *tags(0), "c", *tags(2, 3)]


@pytest.mark.parametrize("shape", SHAPES)
def test_summary_row_is_kept_and_the_breadcrumb_follows_it(shape: Shape) -> None:
    """§15.2: the summary row stays in the fixed prefix; the new breadcrumb comes after it."""
    w = WorkingHistory.of(shape(chat(system(ROW), summary(), *turns(4))))
    assert [r.kind for r in w.rows[:2]] == [RowKind.SYSTEM, RowKind.SUMMARY]
    assert not any(r.is_turn_boundary for r in w.rows[:2])
    plan = plan_token_budget(w.rows, w.pricing, 2 * 104 + 2 * TURN + CRUMB, CRUMB)
    assert (plan.drop, plan.breadcrumb_at, plan.dropped_turns, plan.kept_turns) == (
        range(2, 6),
        2,
        2,
        2,
    )
    assert prompts(w.apply(plan, TEXT).history) == ["s", "S", "c", *tags(2, 3)]
    # With a pinned turn and the path that inserts no breadcrumb.
    w = WorkingHistory.of(shape(chat(system(ROW), summary(), *turns(4, {1}))))
    plan = plan_turn_count(w.rows, w.pricing, 1, None)
    assert (plan.drop, plan.kept_in_drop, plan.breadcrumb_at) == (range(2, 8), (range(4, 6),), None)
    assert prompts(w.apply(plan, TEXT).history) == ["s", "S", *tags(1, 3)]


def test_summary_row_is_priced_as_text() -> None:
    """§15.2: no image markers in the summary row; the same text in a real user row sends one."""
    text = "see [IMAGE:https://x/y.jpg]"
    as_summary = rows_of(chat(summary(text)))[0]
    as_prompt = rows_of(chat(user(text)))[0]
    assert (as_summary.marker_images, as_summary.text_bytes) == (0, len(text))
    assert as_prompt.marker_images == 1
    assert price([as_summary]).total == -(-len(text) // 4) + 4


def test_rows_before_the_first_boundary_belong_to_the_first_turn() -> None:
    """§15.1: rows of B before b0 are pinned with the first turn, and dropped with it."""
    pinned = WorkingHistory.of(chat(system(ROW), assistant(ROW), *turns(4, {0})))
    plan = plan_token_budget(pinned.rows, pinned.pricing, 104 + 3 * TURN + 104 + CRUMB, CRUMB)
    assert (plan.drop, plan.breadcrumb_at, plan.pinned_tokens) == (range(4, 6), 4, 104 + TURN)
    assert prompts(pinned.apply(plan, TEXT).history) == ["s", "a", *tags(0), "c", *tags(2, 3)]
    unpinned = WorkingHistory.of(chat(system(ROW), assistant(ROW), *turns(4)))
    plan = plan_token_budget(unpinned.rows, unpinned.pricing, 104 + 2 * TURN + CRUMB, CRUMB)
    assert (plan.drop, plan.dropped_messages) == (range(1, 6), 5)


@pytest.mark.parametrize("shape", SHAPES)
def test_low_water_grid_counts_only_unpinned_turns(shape: Shape) -> None:
    """§15.1 with §11.1: 12 turns, the first pinned, L = 0.7 (S = 600): j0 = 4 drops 3 turns
    (D = 624), rounded up to 1,200: j = 7, six turns dropped (D = 1,248)."""
    w = WorkingHistory.of(shape(chat(system(ROW), *turns(12, {0}))))
    minimal = plan_token_budget(w.rows, w.pricing, 2000, CRUMB)
    assert (minimal.dropped_turns, minimal.tokens_after) == (3, 2600 - 624 + CRUMB)
    plan = plan_token_budget(w.rows, w.pricing, 2000, CRUMB, 0.7)
    assert (plan.cut_step, plan.cut_drop_target, plan.dropped_turns, plan.kept_turns) == (
        600,
        1200,
        6,
        6,
    )
    assert plan.tokens_after == 2600 - 1248 + CRUMB
    assert prompts(w.apply(plan, TEXT).history) == ["s", *tags(0), "c", *tags(*range(7, 12))]


@pytest.mark.parametrize("shape", SHAPES)
def test_turn_count_keeps_pinned_turns_on_top_of_the_limit(shape: Shape) -> None:
    w = WorkingHistory.of(shape(chat(system(ROW), *turns(6, {0, 1}))))
    plan = plan_turn_count(w.rows, w.pricing, 2, CRUMB)
    assert (plan.dropped_turns, plan.kept_turns, plan.dropped_messages) == (2, 4, 4)
    assert prompts(w.apply(plan, TEXT).history) == ["s", *tags(0, 1), "c", *tags(4, 5)]
    # The turn grid applies as before: N = 3, s = 2, j0 = 3 rounds up to 4.
    grid = plan_turn_count(w.rows, w.pricing, 3, CRUMB, 0.5)
    assert (grid.cut_step, grid.cut_drop_target, grid.dropped_turns) == (2, 4, 2)
    # Pinned turns before the cut do not count against the limit, nor make the trim unchanged.
    assert plan_turn_count(w.rows, w.pricing, 4, CRUMB).dropped_turns == 0
    assert plan_turn_count(w.rows, w.pricing, 3, CRUMB).dropped_turns == 1


def test_reported_usage_trim_keeps_pinned_turns() -> None:
    view = PythonHistoryView(WorkingHistory.of(chat(system(ROW), *turns(10, {0}))))
    usage = ReportedUsage(reported=2 * 2184, estimated=2184, tool_schema=0)
    trim = plan_reported_usage(view, 2000, usage, CRUMB)
    assert trim.plan.pinned_turns == 1 and trim.plan.kept_in_drop == ()
    out = view.apply(trim.plan, TEXT)
    assert prompts(out.working.history)[:4] == ["s", *tags(0), "c"]


def test_row_count_trim_ignores_pins_and_the_summary_row() -> None:
    w = WorkingHistory.of(chat(system(ROW), summary(), *turns(3, {0})))
    plan = plan_row_count(w.rows, w.pricing, 2)
    assert (plan.drop, plan.pinned_turns, plan.kept_in_drop) == (range(1, 6), 0, ())
    assert prompts(w.apply(plan, TEXT).history) == ["s", *tags(2)]


def test_recovery_fixed_floor_and_single_turn_when_only_pins_are_left() -> None:
    """§15.1: the fixed floor is the system rows, the summary row and every pinned turn but the
    newest; SINGLE_TURN when only pinned turns and the newest turn are left."""
    view = PythonHistoryView(WorkingHistory.of(chat(system(ROW), summary(), *turns(3, {0, 1}))))
    assert (view.system_floor_tokens, view.fixed_floor_tokens) == (104, 2 * 104 + 2 * TURN)
    assert view.pinned_tokens == 2 * TURN
    report = plan_recovery(view, CRUMB).report
    assert report.blocker == trim_pb2.RECOVERY_BLOCKER_SINGLE_TURN and not report.trimmed
    assert (report.fixed_floor_tokens, report.system_floor_tokens) == (2 * 104 + 2 * TURN, 104)
    # A pinned newest turn is not in the floor; unpinned turns are still dropped.
    view = PythonHistoryView(WorkingHistory.of(chat(system(ROW), *turns(4, {0, 3}))))
    assert view.fixed_floor_tokens == 104 + TURN and view.pinned_tokens == 2 * TURN
    recovery = plan_recovery(view, CRUMB)
    assert recovery.report.trimmed and recovery.plan.pinned_turns == 2
    assert prompts(view.apply(recovery.plan, TEXT).working.history) == [
        "s",
        *tags(0),
        "c",
        *tags(3),
    ]


def test_fixed_floor_with_a_fixed_prefix_breadcrumb_and_no_body_turn() -> None:
    view = PythonHistoryView(WorkingHistory.of(chat(system(ROW), *turns(2, {0, 1}), crumb())))
    # The newest turn is the prefix's last pinned turn.
    assert (view.pinned_tokens, view.fixed_floor_tokens) == (2 * TURN, 104 + TURN)


@pytest.mark.parametrize("shape", SHAPES)
def test_summary_request_ends_with_the_instruction(shape: Shape) -> None:
    view = PythonHistoryView(WorkingHistory.of(shape(chat(system(ROW), summary(), *turns(3)))))
    request = view.summary_request(4, "Summarize.")
    history = request.working.history
    assert history.WhichOneof("shape") == view.working.history.WhichOneof("shape")
    assert prompts(history) == ["s", "S", *tags(0), "Summarize."]
    last = _chat_rows(history)[-1]
    assert last == h.ChatMessage(role=h.ROLE_USER, content="Summarize.")
    assert request.total_tokens == 4 * 104 + 3 + 4


def test_projection_skips_the_summary_row_and_projects_pinned_turns() -> None:
    """§13.1 over §15: the summary row is copied; a pinned turn collapses like any other; the
    closing reply of a pinned prefix turn ending in its breadcrumb is kept."""

    def tool_turn(n: int, pinned: bool) -> list[h.ChatMessage]:
        return [
            user(f"q{n}", pinned=pinned),
            assistant("", (f"c{n}", "f", "{}")),
            h.ChatMessage(role=h.ROLE_TOOL, content="r", tool_call_id=f"c{n}"),
            assistant(f"done{n}"),
        ]

    history = chat(system(), summary("so far"), *tool_turn(0, True), crumb(), *tool_turn(1, False))
    history.chat.messages.extend(tool_turn(2, False))
    projected = project(history, 0)
    out = list(projected.history.chat.messages)
    assert [c.input_start for c in projected.collapsed] == [2, 7]
    assert out[1].summary and out[2].content == "q0" and out[2].pinned
    assert out[3].tool_exchange_summary and out[4].content == "done0" and out[5].breadcrumb
    again = project(projected.history, 0)
    assert not again.collapsed


def test_conversation_pinned_tool_turn_is_kept_whole() -> None:
    history = conversation(
        c_chat(system(ROW)),
        c_chat(user(ROW[:-2] + "u0", pinned=True)),
        c_calls("", ("c0", "f", "{}")),
        c_results(("c0", ROW)),
        c_chat(assistant(ROW)),
        *(c_chat(m) for m in turns(4)[2:]),
    )
    w = WorkingHistory.of(history)
    plan = plan_token_budget(w.rows, w.pricing, 104 + 2 * TURN + 4 * 104 + CRUMB, CRUMB)
    out = w.apply(plan, TEXT).history.conversation.messages
    assert [m.WhichOneof("message") for m in out[1:5]] == [
        "chat",
        "assistant_tool_calls",
        "tool_results",
        "chat",
    ]
    assert out[5].chat.breadcrumb and plan.dropped_turns == 1
