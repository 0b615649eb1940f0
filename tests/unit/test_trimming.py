"""Whole-turn retention: spec §1, §2, §5, §6 and §9 'Token-budget trim' / 'Turn-count trim'."""

from __future__ import annotations

from turnkeeper.core.recovery import plan_recovery
from turnkeeper.core.rows import RowKind, price, rows_of
from turnkeeper.core.trimming import (
    layout,
    plan_row_count,
    plan_token_budget,
    plan_turn_count,
    recovery_target,
)
from turnkeeper.core.working import WorkingHistory, breadcrumb_cost
from turnkeeper.server.engine.python import PythonHistoryView
from turnkeeper.v1 import history_pb2 as h

from .histories import (
    assistant,
    c_calls,
    c_chat,
    c_results,
    chat,
    conversation,
    crumb,
    system,
    turn,
    user,
)

CRUMB = breadcrumb_cost("[earlier turns omitted to fit the context window]")
TEXT = "[earlier turns omitted to fit the context window]"


def history_of_turns(n: int, *, leading_system: int = 1) -> h.History:
    rows = [system(f"s{i}") for i in range(leading_system)]
    for i in range(n):
        rows.extend(turn(i))
    return chat(*rows)


def test_section1_tool_results_user_row_is_not_a_turn() -> None:
    """§1: a user row starting with `[Tool results]` belongs to the turn before it."""
    rows = rows_of(chat(user("q"), assistant("x"), user("[Tool results] 42"), user("next")))
    assert [r.kind for r in rows][2] is RowKind.CARRIER
    assert layout(rows).boundaries == [0, 3]


def test_section9_breadcrumb_is_never_a_turn_and_sits_in_p() -> None:
    """§9: P = leading system rows plus an existing breadcrumb; the breadcrumb is not a turn."""
    lay = layout(rows_of(chat(system(), system(), crumb(), user("a"), user("b"))))
    assert (lay.system_rows, lay.prefix, lay.boundaries) == (2, 3, [3, 4])


def test_section9_token_budget_unchanged_when_disabled_fitting_or_single_turn() -> None:
    """§9: unchanged when the budget is 0, the estimate fits, or k < 2 (§2: order/shape unchanged)."""
    history = history_of_turns(3)
    w = WorkingHistory.of(history)
    assert not plan_token_budget(w.rows, w.pricing, 0, CRUMB).trimmed
    assert not plan_token_budget(w.rows, w.pricing, w.pricing.total, CRUMB).trimmed
    one = WorkingHistory.of(history_of_turns(1))
    assert not plan_token_budget(one.rows, one.pricing, 1, CRUMB).trimmed
    assert w.apply(plan_token_budget(w.rows, w.pricing, 0, CRUMB), TEXT).history == history


def test_section9_token_budget_drops_fewest_turns_counting_the_new_breadcrumb() -> None:
    """§9: smallest j with estimate(P + new_crumb + B[bj:]) <= budget; the crumb is counted."""
    w = WorkingHistory.of(history_of_turns(4))
    per_turn = sum(w.pricing.tokens[1:5])
    system_cost = w.pricing.tokens[0]
    # Exactly two turns plus the crumb fit: one token less and a third turn must go.
    budget = system_cost + CRUMB + 2 * per_turn
    plan = plan_token_budget(w.rows, w.pricing, budget, CRUMB)
    assert (plan.dropped_turns, plan.kept_turns, plan.dropped_messages) == (2, 2, 8)
    assert plan.tokens_after == budget
    tighter = plan_token_budget(w.rows, w.pricing, budget - 1, CRUMB)
    assert (tighter.dropped_turns, tighter.kept_turns) == (3, 1)
    out = w.apply(plan, TEXT).history.chat.messages
    assert (
        out[0].role == h.ROLE_SYSTEM
        and out[1].breadcrumb
        and out[2].content.startswith("question 2")
    )


def test_section3_budget_is_a_target_newest_turn_kept_when_nothing_fits() -> None:
    """§3/§9: when no j fits, j = k-1: the newest complete turn is kept over the target."""
    w = WorkingHistory.of(history_of_turns(3))
    plan = plan_token_budget(w.rows, w.pricing, 1, CRUMB)
    assert (plan.dropped_turns, plan.kept_turns) == (2, 1)
    assert plan.tokens_after > 1


def test_section9_existing_breadcrumb_is_kept_and_not_stacked() -> None:
    """§7/§9: an existing breadcrumb stays in P; no second one is inserted."""
    rows = [system(), crumb(), *turn(0), *turn(1), *turn(2)]
    w = WorkingHistory.of(chat(*rows))
    plan = plan_token_budget(w.rows, w.pricing, 1, CRUMB)
    assert plan.breadcrumb_at is None
    out = w.apply(plan, TEXT).history.chat.messages
    assert sum(1 for m in out if m.breadcrumb) == 1
    assert out[1].breadcrumb and plan.drop == range(2, 10)


def test_section2_leading_system_rows_always_kept() -> None:
    """§2: the leading system message is always kept."""
    w = WorkingHistory.of(history_of_turns(3, leading_system=2))
    out = w.apply(plan_token_budget(w.rows, w.pricing, 1, CRUMB), TEXT).history.chat.messages
    assert [m.role for m in out[:2]] == [h.ROLE_SYSTEM, h.ROLE_SYSTEM]


def test_section9_turn_count_keeps_max_limit_1_newest_turns() -> None:
    """§6/§9: keep max(limit, 1) newest turns; explicit 0 still keeps the newest turn."""
    w = WorkingHistory.of(history_of_turns(5))
    assert plan_turn_count(w.rows, w.pricing, 2, CRUMB).kept_turns == 2
    zero = plan_turn_count(w.rows, w.pricing, 0, CRUMB)
    assert (zero.kept_turns, zero.dropped_turns) == (1, 4)
    assert not plan_turn_count(w.rows, w.pricing, 5, CRUMB).trimmed
    assert not plan_turn_count(w.rows, w.pricing, 50, CRUMB).trimmed


def test_section7_legacy_path_inserts_no_breadcrumb() -> None:
    """§7: the legacy loop path only logs count-based trimming: no breadcrumb."""
    w = WorkingHistory.of(history_of_turns(3))
    plan = plan_turn_count(w.rows, w.pricing, 1, None)
    assert plan.trimmed and plan.breadcrumb_at is None
    assert not any(m.breadcrumb for m in w.apply(plan, TEXT).history.chat.messages)


def test_section9_system_rows_after_leading_run_belong_to_their_turn() -> None:
    """§9: system rows after the leading run belong to the turn they sit in."""
    w = WorkingHistory.of(chat(system(), user("a"), system("mid"), user("b")))
    plan = plan_turn_count(w.rows, w.pricing, 1, None)
    assert plan.drop == range(1, 3)


def test_section6_conversation_turn_count_keeps_tool_exchange_whole() -> None:
    """§1/§6: turn limit on ConversationMessage history; tool calls/results take no slots."""
    history = conversation(
        c_chat(system()),
        c_chat(user("a")),
        c_calls("", ("c1", "f", "{}")),
        c_results(("c1", "r")),
        c_chat(user("b")),
        c_calls("", ("c2", "f", "{}")),
        c_results(("c2", "r")),
        c_chat(assistant("done")),
    )
    w = WorkingHistory.of(history)
    plan = plan_turn_count(w.rows, w.pricing, 1, CRUMB)
    out = w.apply(plan, TEXT).history.conversation.messages
    assert plan.drop == range(1, 4)
    assert out[1].chat.breadcrumb and out[2].chat.content == "b"
    assert out[4].tool_results.results[0].tool_call_id == "c2"


def test_section5_overflow_recovery_targets_two_thirds_of_current_estimate() -> None:
    """§5/§9: target = floor(2 x estimate / 3) on the history as it stands."""
    w = WorkingHistory.of(history_of_turns(6))
    plan = plan_recovery(PythonHistoryView(w), CRUMB).plan
    assert plan.target_tokens == recovery_target(w.pricing.total) == 2 * w.pricing.total // 3
    assert plan.tokens_after <= plan.target_tokens


def test_section6_channel_sender_cache_counts_rows_and_zero_means_50() -> None:
    """§6/§9: leading system rows kept and not counted; newest N rows; 0 means 50."""
    w = WorkingHistory.of(history_of_turns(20))  # 1 system + 80 rows
    plan = plan_row_count(w.rows, w.pricing, 3)
    assert plan.drop == range(1, 78) and plan.breadcrumb_at is None
    assert plan_row_count(w.rows, w.pricing, 0).drop == range(1, 31)
    assert not plan_row_count(w.rows, w.pricing, 80).trimmed


def test_rows_and_prices_stay_in_step_after_apply() -> None:
    """Applying a plan to the pricing equals re-pricing the output (O(n) without re-estimation)."""
    w = WorkingHistory.of(history_of_turns(4))
    out = w.apply(plan_token_budget(w.rows, w.pricing, 300, CRUMB), TEXT)
    assert out.pricing == price(rows_of(out.history))
    assert out.rows == rows_of(out.history)
