"""Hypothesis properties of whole-turn retention over random histories (spec §1, §2, §8, §9).

Histories mix tool-heavy turns, sent and placeholder images, declared attachments, `[Tool results]`
carrier rows, system rows inside turns and an optional existing breadcrumb.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from turnkeeper.core.recovery import plan_recovery
from turnkeeper.core.rows import price, rows_of
from turnkeeper.core.sweep import sweep
from turnkeeper.core.trimming import (
    layout,
    plan_token_budget,
    plan_turn_count,
)
from turnkeeper.core.working import WorkingHistory, breadcrumb_cost
from turnkeeper.server.contract import history_rules
from turnkeeper.server.engine.python import PythonHistoryView
from turnkeeper.v1 import history_pb2 as h

from .histories import assistant, chat, crumb, system, tool, user

TEXT = "[earlier turns omitted to fit the context window]"
CRUMB = breadcrumb_cost(TEXT)

texts = st.text(alphabet=st.sampled_from("ab é🦀 [IMAGE:/x.png]\n"), max_size=30)


@st.composite
def turns(draw: st.DrawFn, index: int) -> list[h.ChatMessage]:
    rows = [user(f"u{index} " + draw(texts))]
    for step in range(draw(st.integers(0, 3))):
        ids = [f"t{index}-{step}-{k}" for k in range(draw(st.integers(1, 2)))]
        rows.append(assistant(draw(texts), *[(i, "fn", draw(texts)) for i in ids]))
        if draw(st.booleans()):
            rows.extend(tool(i, draw(texts), attachments=draw(st.integers(0, 2))) for i in ids)
        else:
            carrier = h.ChatMessage(role=h.ROLE_USER, content="[Tool results] " + draw(texts))
            rows.append(carrier)
    if draw(st.booleans()):
        rows.append(system("mid-turn " + draw(texts)))
    rows.append(assistant(draw(texts)))
    return rows


@st.composite
def histories(draw: st.DrawFn) -> h.History:
    rows = [system(draw(texts)) for _ in range(draw(st.integers(0, 2)))]
    if draw(st.booleans()):
        rows.append(crumb())
    if draw(st.booleans()):  # rows before the first real user row
        rows.append(assistant(draw(texts)))
    for index in range(draw(st.integers(0, 7))):
        rows.extend(draw(turns(index)))
    return chat(*rows)


def call_turns(messages: list[h.ChatMessage]) -> dict[str, tuple[int, int]]:
    """For every tool call id: (rows with the call, rows with its result) present."""
    seen: dict[str, tuple[int, int]] = {}
    for m in messages:
        for c in m.tool_calls:
            calls, results = seen.get(c.id, (0, 0))
            seen[c.id] = (calls + 1, results)
        if m.role == h.ROLE_TOOL:
            calls, results = seen.get(m.tool_call_id, (0, 0))
            seen[m.tool_call_id] = (calls, results + 1)
    return seen


def check_trim_invariants(history: h.History, plan_fn: object, *, budget: int | None) -> None:
    w = WorkingHistory.of(history)
    plan = plan_fn(w)  # type: ignore[operator]
    out = w.apply(plan, TEXT)
    src = list(history.chat.messages)
    dst = list(out.history.chat.messages)
    lay = layout(w.rows)

    # No trim -> identical output (§2).
    if not plan.trimmed:
        assert out.history == history
        return
    # Leading system rows always kept (§2).
    assert dst[: lay.system_rows] == src[: lay.system_rows]
    # The newest complete turn is always kept (§2).
    last = lay.boundaries[-1]
    assert dst[-(len(src) - last) :] == src[last:]
    # A tool call and its result are never separated (§1, §8).
    before = call_turns(src)
    for call_id, pair in call_turns(dst).items():
        assert pair == before[call_id]
    # Counts add up; the estimate is the output's (§9).
    inserted = 1 if plan.breadcrumb_at is not None else 0
    assert plan.dropped_messages + len(dst) - inserted == len(src)
    assert plan.dropped_turns + plan.kept_turns == lay.turns
    assert plan.tokens_after == price(rows_of(out.history)).total
    assert sum(1 for m in dst if m.breadcrumb) <= 1
    # The output fits the budget unless one turn is left (§9).
    if budget is not None and plan.kept_turns > 1:
        assert plan.tokens_after <= budget
    # Trimming the output again with the same limits changes nothing.
    again = plan_fn(out)  # type: ignore[operator]
    assert not again.trimmed


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(0, 4000))
def test_token_budget_properties(history: h.History, budget: int) -> None:
    check_trim_invariants(
        history,
        lambda w: plan_token_budget(w.rows, w.pricing, budget, CRUMB),
        budget=budget or None,
    )


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(0, 8), st.booleans())
def test_turn_count_properties(history: h.History, limit: int, agent_path: bool) -> None:
    crumb_cost = CRUMB if agent_path else None
    check_trim_invariants(
        history, lambda w: plan_turn_count(w.rows, w.pricing, limit, crumb_cost), budget=None
    )


@settings(max_examples=200, deadline=None)
@given(histories())
def test_overflow_recovery_properties(history: h.History) -> None:
    target = 2 * price(rows_of(history)).total // 3
    w = WorkingHistory.of(history)
    plan = plan_recovery(PythonHistoryView(w), CRUMB).plan
    assert plan.target_tokens == target
    assert plan.tokens_after <= w.pricing.total  # recovery never grows the request
    check_trim_invariants(
        history, lambda w: plan_token_budget(w.rows, w.pricing, target, CRUMB), budget=target
    )


def as_conversation(history: h.History) -> h.History:
    """The same history in the structured shape: calls and results become their own rows."""
    rows = []
    for m in history.chat.messages:
        if m.role == h.ROLE_ASSISTANT and m.tool_calls:
            rows.append(
                h.ConversationMessage(
                    assistant_tool_calls=h.AssistantToolCalls(
                        text=m.content, tool_calls=m.tool_calls
                    )
                )
            )
        elif m.role == h.ROLE_TOOL:
            result = h.ToolResult(
                tool_call_id=m.tool_call_id, content=m.content, attachments=m.attachments
            )
            rows.append(h.ConversationMessage(tool_results=h.ToolResults(results=[result])))
        else:
            rows.append(h.ConversationMessage(chat=m))
    return h.History(conversation=h.ConversationHistory(messages=rows))


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 4000), st.integers(0, 8))
def test_both_shapes_price_and_trim_alike(history: h.History, budget: int, limit: int) -> None:
    """§9: a ConversationMessage is priced as the provider rows it stands for, so the structured
    mirror of a chat history gets the same estimates and the same whole-turn cuts (§1: both
    limits act on both shapes)."""
    chat_w = WorkingHistory.of(history)
    conv_w = WorkingHistory.of(as_conversation(history))
    assert conv_w.pricing == chat_w.pricing
    for plan in (
        lambda w: plan_token_budget(w.rows, w.pricing, budget, CRUMB),
        lambda w: plan_turn_count(w.rows, w.pricing, limit, CRUMB),
    ):
        assert plan(conv_w) == plan(chat_w)


@st.composite
def damaged(draw: st.DrawFn) -> h.History:
    """A consistent history with rows deleted, and rows pushed between calls and results (§10.2):
    orphans in both directions."""
    rows = list(draw(histories()).chat.messages)
    for _ in range(draw(st.integers(0, 4))):
        if rows:
            del rows[draw(st.integers(0, len(rows) - 1))]
    intruders = st.sampled_from([user("interjection"), assistant("thinking"), system("note")])
    for _ in range(draw(st.integers(0, 3))):
        rows.insert(draw(st.integers(0, len(rows))), draw(intruders))
    return chat(*rows)


@settings(max_examples=200, deadline=None)
@given(damaged())
def test_sweep_both_shapes_alike(history: h.History) -> None:
    """§10.2: the sweep works alike on both shapes: the structured mirror of a chat history loses
    the same results and calls, reported at the same indices."""
    chat_result = sweep(history)
    conv_result = sweep(as_conversation(history))
    assert conv_result.removals == chat_result.removals
    # A structured call row left without calls stays a structured row, so compare row counts.
    out_rows = len(conv_result.history.conversation.messages)
    assert out_rows == len(chat_result.history.chat.messages)


@settings(max_examples=300, deadline=None)
@given(histories())
def test_sweep_leaves_consistent_histories_unchanged(history: h.History) -> None:
    """§8: the orphan sweep is a safety net: whole-turn histories come back identical."""
    result = sweep(history)
    assert result.history == history and not result.removals


@settings(max_examples=300, deadline=None)
@given(damaged())
def test_sweep_output_pairs_every_call_and_result(history: h.History) -> None:
    """§8, §10.2: after the sweep every result sits in the run of tool rows right after an
    assistant row that calls it, and every call has its result in that run (or a `[Tool results]`
    carrier follows later in its turn); a second sweep removes nothing; every removed row is
    reported."""
    result = sweep(history)
    assert not sweep(result.history).removals
    out = list(result.history.chat.messages)
    anchor: h.ChatMessage | None = None
    for i, m in enumerate(out):
        if m.role == h.ROLE_TOOL:
            assert anchor is not None and m.tool_call_id in {c.id for c in anchor.tool_calls}
            continue
        anchor = m if m.role == h.ROLE_ASSISTANT else None
        if m.tool_calls:
            run: set[str] = set()
            for later in out[i + 1 :]:
                if later.role != h.ROLE_TOOL:
                    break
                run.add(later.tool_call_id)
            carrier_later = False
            for later in out[i + 1 :]:
                if later.role == h.ROLE_USER and later.content.startswith("[Tool results]"):
                    carrier_later = True
                    break
                if later.role == h.ROLE_USER and not later.breadcrumb:
                    break
            assert carrier_later or all(c.id in run for c in m.tool_calls)
    removed_rows = {r.message_index for r in result.removals if r.row_removed}
    assert len(result.history.chat.messages) == len(history.chat.messages) - len(removed_rows)


def with_passthrough(history: h.History, payload: dict[str, object]) -> h.History:
    """A copy of the history with `payload` as the passthrough of every row, step and result."""
    copy = h.History()
    copy.CopyFrom(history)
    for message in copy.conversation.messages:
        kind = message.WhichOneof("message")
        if kind == "chat":
            message.chat.passthrough.update(payload)
        elif kind == "assistant_tool_calls":
            message.assistant_tool_calls.passthrough.update(payload)
        else:
            for result in message.tool_results.results:
                result.passthrough.update(payload)
    for row in copy.chat.messages:
        row.passthrough.update(payload)
    return copy


passthrough_payloads = st.dictionaries(
    st.sampled_from(["openai_chat", "anthropic", "name", "signature"]),
    st.one_of(texts, st.integers(0, 9), st.lists(texts, max_size=3)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(histories(), passthrough_payloads, st.integers(0, 4000), st.booleans())
def test_passthrough_is_never_priced(
    history: h.History, payload: dict[str, object], budget: int, structured: bool
) -> None:
    """§9 prices only the listed row fields: a passthrough (even one holding `[IMAGE:...]` text or
    a long signature) changes no estimate and no cut, in either shape."""
    if structured:
        history = as_conversation(history)
    plain = WorkingHistory.of(history)
    carried = WorkingHistory.of(with_passthrough(history, payload))
    assert carried.pricing == plain.pricing
    assert plan_token_budget(carried.rows, carried.pricing, budget, CRUMB) == plan_token_budget(
        plain.rows, plain.pricing, budget, CRUMB
    )


# §11 cache-stable trimming: the low-water grid cut.
fractions = st.floats(0.02, 0.98)


@st.composite
def sessions(draw: st.DrawFn) -> tuple[list[h.ChatMessage], list[list[h.ChatMessage]]]:
    """A session's leading rows and the turns it appends, one at a time."""
    head = [system(draw(texts)) for _ in range(draw(st.integers(0, 2)))]
    if draw(st.booleans()):
        head.append(crumb())
    appended = [draw(turns(i)) for i in range(draw(st.integers(2, 14)))]
    # Declared attachments are priced only in the current turn, so appending a turn can make a
    # history cheaper; without them an appending session's estimate only grows.
    for turn_rows in appended:
        for row in turn_rows:
            del row.attachments[:]
    return head, appended


def _body_cost(w: WorkingHistory, j: int) -> int:
    """D(j): the estimate of the body rows before turn boundary j, re-summed from the rows."""
    lay = layout(w.rows)
    return sum(w.pricing.tokens[lay.prefix : lay.boundaries[j]])


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 4000), fractions, st.booleans())
def test_grid_cut_is_the_rule_and_fits_when_the_minimal_cut_does(
    history: h.History, budget: int, fraction: float, conversation: bool
) -> None:
    """§11.1 restated from the rows: the cut is the smallest j >= j0 with D(j) >= ceil(D(j0) / S)
    x S (else k-1); it drops at least what §9 drops, so it fits whenever §9's cut does; L = 1 (and
    an ignored value) is §9 itself; both shapes cut alike."""
    w = WorkingHistory.of(as_conversation(history) if conversation else history)
    minimal = plan_token_budget(w.rows, w.pricing, budget, CRUMB)
    grid = plan_token_budget(w.rows, w.pricing, budget, CRUMB, fraction)
    for same in (1.0, 0.0, 1.5, float("nan")):
        assert plan_token_budget(w.rows, w.pricing, budget, CRUMB, same) == minimal
    assert grid.trimmed == minimal.trimmed
    if not minimal.trimmed:
        assert grid == minimal
        return
    k = layout(w.rows).turns
    step = max(1, budget - min(budget, math.floor(budget * fraction)))
    target = -(-_body_cost(w, minimal.dropped_turns) // step) * step
    reaching = [j for j in range(minimal.dropped_turns, k) if _body_cost(w, j) >= target]
    assert grid.dropped_turns == (reaching[0] if reaching else k - 1)
    assert (grid.cut_step, grid.cut_drop_target) == (step, target)
    assert grid.tokens_after <= minimal.tokens_after
    if minimal.tokens_after <= budget:
        assert grid.tokens_after <= budget
    check_trim_invariants(
        history,
        lambda v: plan_token_budget(v.rows, v.pricing, budget, CRUMB, fraction),
        budget=budget,
    )


@settings(max_examples=150, deadline=None)
@given(sessions(), st.integers(30, 1500), fractions)
def test_an_appending_session_keeps_its_cut_until_it_grows_a_step(
    session: tuple[list[h.ChatMessage], list[list[h.ChatMessage]]], budget: int, fraction: float
) -> None:
    """§11.1 "Why a grid": a runtime that resends its whole history, one turn longer each call.
    The cut (an input row index, counted from the start) never moves back; while the rounded
    target ceil(D(j0) / S) x S stays the same, the cut stays on the same row; it moves only when
    the minimal drop has passed the previous target, that is after about S tokens of growth."""
    head, appended = session
    rows = list(head)
    previous: tuple[int, int, int, bool] | None = None  # (cut row, target, D(j0), fallback)
    for turn_rows in appended:
        rows.extend(turn_rows)
        w = WorkingHistory.of(chat(*rows))
        plan = plan_token_budget(w.rows, w.pricing, budget, CRUMB, fraction)
        if not plan.trimmed:
            assert previous is None  # once over the budget, a growing session stays over it
            continue
        minimal = plan_token_budget(w.rows, w.pricing, budget, CRUMB)
        k = plan.dropped_turns + plan.kept_turns
        fallback = plan.dropped_turns == k - 1 and _body_cost(w, k - 1) < plan.cut_drop_target
        current = (
            plan.drop.stop,
            plan.cut_drop_target,
            _body_cost(w, minimal.dropped_turns),
            fallback,
        )
        if previous is not None:
            cut, target, _, was_fallback = previous
            assert current[0] >= cut and current[1] >= target
            if current[1] == target and not was_fallback:
                assert current[0] == cut
            if current[0] != cut and not was_fallback:
                # The minimal drop passed the old target: the grid target moved by whole steps.
                assert current[2] > target and current[1] >= target + plan.cut_step
        previous = current


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 8), fractions, st.booleans())
def test_turn_grid_keeps_at_least_one_turn_and_l_one_is_section_9(
    history: h.History, limit: int, fraction: float, agent_path: bool
) -> None:
    """§11.1 turn-count: j = min(k - 1, ceil(j0 / s) x s) >= j0; L = 1 is §9's cut."""
    crumb_cost = CRUMB if agent_path else None
    w = WorkingHistory.of(history)
    minimal = plan_turn_count(w.rows, w.pricing, limit, crumb_cost)
    assert plan_turn_count(w.rows, w.pricing, limit, crumb_cost, 1.0) == minimal
    grid = plan_turn_count(w.rows, w.pricing, limit, crumb_cost, fraction)
    assert grid.trimmed == minimal.trimmed
    if minimal.trimmed:
        keep = max(limit, 1)
        step = max(1, keep - min(keep, math.floor(keep * fraction)))
        k = layout(w.rows).turns
        target = -(-minimal.dropped_turns // step) * step
        assert grid.dropped_turns == min(k - 1, target) >= minimal.dropped_turns
        assert (grid.cut_step, grid.cut_drop_target) == (step, target)
    check_trim_invariants(
        history,
        lambda v: plan_turn_count(v.rows, v.pricing, limit, crumb_cost, fraction),
        budget=None,
    )


# --- pinned turns and the summary row (§15.1, §15.2) -------------------------------------------


def summary_row(text: str) -> h.ChatMessage:
    return h.ChatMessage(role=h.ROLE_USER, content="summary " + text, summary=True)


@st.composite
def pinned_histories(draw: st.DrawFn) -> h.History:
    """Histories with pins: an optional summary row, pinned turns before a kept breadcrumb (a
    runtime sends its trimmed history back), and pins on any turn of the body."""
    rows = [system(draw(texts)) for _ in range(draw(st.integers(0, 2)))]
    if draw(st.booleans()):
        rows.append(summary_row(draw(texts)))
    if draw(st.booleans()):
        for index in range(draw(st.integers(0, 2))):
            turn = draw(turns(100 + index))
            turn[0].pinned = True
            rows.extend(turn)
        rows.append(crumb())
    if draw(st.booleans()):  # rows before the first real user row of the body
        rows.append(assistant(draw(texts)))
    for index in range(draw(st.integers(0, 7))):
        turn = draw(turns(index))
        turn[0].pinned = draw(st.booleans())
        rows.extend(turn)
    return chat(*rows)


def check_pinned_trim(history: h.History, plan_fn: object, *, stable: bool = True) -> None:
    """The §15.1 output of a trim, rebuilt from the input's fixed prefix and turns and the cut
    `drop.stop` names: the fixed prefix's rows before its breadcrumb, pinned(< j), the
    breadcrumb (kept or new), B[bj:]. So no pinned turn and no summary row is ever dropped.

    `stable`: trimming the output again changes nothing. Not so for a turn grid without a
    breadcrumb: the pinned turns moved ahead of the cut stay in B, and the grid counts them."""
    w = WorkingHistory.of(history)
    plan = plan_fn(w)  # type: ignore[operator]
    out = w.apply(plan, TEXT)
    assert not history_rules.history_violations(out.history, "history", 10**6).total
    lay = layout(w.rows)
    all_pins = [i for i, row in enumerate(w.rows) if row.is_turn_boundary and row.pinned]
    assert plan.pinned_turns == len(all_pins)
    assert plan.pinned_tokens == PythonHistoryView(w).pinned_tokens
    if not plan.trimmed:
        assert out.history == history
        return
    src = list(history.chat.messages)
    dst = list(out.history.chat.messages)
    j = lay.boundaries.index(plan.drop.stop)
    expected = src[: lay.head if lay.crumb is None else lay.crumb]
    for t in range(j):
        if lay.pinned[t]:
            expected.extend(src[lay.turn_span(t).start : lay.turn_span(t).stop])
    if lay.crumb is not None:
        expected.append(src[lay.crumb])
    elif plan.breadcrumb_at is not None:
        expected.append(crumb(TEXT))
    expected.extend(src[plan.drop.stop :])
    assert dst == expected
    dropped = sum(1 for t in range(j) if not lay.pinned[t])
    assert plan.dropped_turns == dropped > 0
    assert plan.kept_turns == sum(1 for row in w.rows if row.is_turn_boundary) - dropped
    new_crumb = lay.crumb is None and plan.breadcrumb_at is not None
    assert plan.dropped_messages == len(src) - len(dst) + new_crumb
    assert plan.tokens_after == price(rows_of(out.history)).total
    before = call_turns(src)
    for call_id, pair in call_turns(dst).items():
        assert pair == before[call_id]
    if stable or layout(out.rows).has_breadcrumb:
        assert not plan_fn(out).trimmed  # type: ignore[operator]


LOW_WATERS = st.sampled_from([1.0, 0.7, 0.5])


@settings(max_examples=300, deadline=None)
@given(pinned_histories(), st.integers(0, 4000), LOW_WATERS)
def test_pinned_token_budget_properties(history: h.History, budget: int, low: float) -> None:
    check_pinned_trim(history, lambda w: plan_token_budget(w.rows, w.pricing, budget, CRUMB, low))


@settings(max_examples=300, deadline=None)
@given(pinned_histories(), st.integers(0, 8), st.booleans(), LOW_WATERS)
def test_pinned_turn_count_properties(
    history: h.History, limit: int, agent_path: bool, low: float
) -> None:
    crumb_cost = CRUMB if agent_path else None
    check_pinned_trim(
        history,
        lambda w: plan_turn_count(w.rows, w.pricing, limit, crumb_cost, low),
        stable=low == 1.0,
    )


@settings(max_examples=200, deadline=None)
@given(pinned_histories())
def test_pinned_recovery_keeps_the_fixed_floor(history: h.History) -> None:
    view = PythonHistoryView(WorkingHistory.of(history))
    recovery = plan_recovery(view, CRUMB)
    recovered = view.apply(recovery.plan, TEXT)
    assert recovery.report.fixed_floor_tokens == view.fixed_floor_tokens
    assert view.fixed_floor_tokens <= recovered.total_tokens
    assert recovered.pinned_tokens == view.pinned_tokens


@settings(max_examples=200, deadline=None)
@given(pinned_histories(), st.integers(0, 4000), st.integers(0, 8))
def test_pinned_both_shapes_trim_alike(history: h.History, budget: int, limit: int) -> None:
    chat_w = WorkingHistory.of(history)
    conv_w = WorkingHistory.of(as_conversation(history))
    for plan in (
        lambda w: plan_token_budget(w.rows, w.pricing, budget, CRUMB),
        lambda w: plan_turn_count(w.rows, w.pricing, limit, CRUMB),
    ):
        assert plan(conv_w) == plan(chat_w)
