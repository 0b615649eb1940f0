"""Clearing the running turn's oldest tool results: spec §13.4."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from turnkeeper.core.clearing import clear_tool_results, cleared_text, running_turn_start
from turnkeeper.core.rows import CLEARED_TOOL_RESULT, PARSE_ERROR_PREFIX
from turnkeeper.core.working import WorkingHistory
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
    tool,
    user,
)
from .test_properties import as_conversation, histories

LONG = "x" * 400


def cleared(n: int) -> str:
    return f"{CLEARED_TOOL_RESULT[0]}{n}{CLEARED_TOOL_RESULT[1]}"


def test_cleared_text_is_the_spec_s_and_counts_code_points() -> None:
    assert cleared_text("h\u00e9\U0001f980") == (
        "[Tool result cleared to fit the context window: 3 characters]"
    )


def running(*results: str, older: bool = True) -> h.History:
    """An older completed turn with one long result, then the running turn: one call per
    result, in one assistant row."""
    rows = [system()]
    if older:
        rows += [user("q0"), assistant("", ("old", "f", "{}")), tool("old", LONG), assistant("a0")]
    ids = [f"c{k}" for k in range(len(results))]
    rows += [user("q1"), assistant("", *[(i, "f", "{}") for i in ids])]
    rows += [tool(i, text) for i, text in zip(ids, results, strict=True)]
    return chat(*rows)


def clear(history: h.History, keep: int, stop: int) -> tuple[h.History, int]:
    clearing = clear_tool_results(WorkingHistory.of(history), keep, stop)
    assert clearing.working.pricing == WorkingHistory.of(clearing.working.history).pricing
    return clearing.working.history, clearing.cleared


def tool_contents(history: h.History) -> list[str]:
    return [m.content for m in history.chat.messages if m.role == h.ROLE_TOOL]


def test_the_newest_r_are_kept_and_older_turns_are_not_touched() -> None:
    out, count = clear(running(LONG, LONG, LONG, LONG), 2, 0)
    assert count == 2
    assert tool_contents(out) == [LONG, cleared(400), cleared(400), LONG, LONG]


def test_results_are_cleared_in_row_order_until_the_stop_bound() -> None:
    history = running(LONG, LONG, LONG)
    total = WorkingHistory.of(history).pricing.total
    saved = (
        WorkingHistory.of(history).pricing.tokens[-1]
        - WorkingHistory.of(chat(tool("c2", cleared(400)))).pricing.tokens[0]
    )
    # One clearing is enough for a bound one token below the estimate, and just enough at
    # the estimate minus one result's saving.
    for stop in (total - 1, total - saved):
        out, count = clear(history, 0, stop)
        assert (count, tool_contents(out)) == (1, [LONG, cleared(400), LONG, LONG])
    out, count = clear(history, 0, total - saved - 1)
    assert (count, tool_contents(out)) == (2, [LONG, cleared(400), cleared(400), LONG])


def test_nothing_is_cleared_when_the_estimate_is_within_the_bound() -> None:
    history = running(LONG)
    view = PythonHistoryView(WorkingHistory.of(history))
    assert view.clear_tool_results(0, view.total_tokens) == (view, 0)
    assert view.clear_tool_results(1, 0) == (view, 0)
    cleared_view, count = view.clear_tool_results(0, 0)
    assert count == 1
    assert cleared_view.total_tokens < view.total_tokens


def test_a_result_already_cleared_or_not_cheaper_is_skipped() -> None:
    out, count = clear(running(cleared(9999), "short", LONG, LONG), 1, 0)
    assert count == 1
    assert tool_contents(out) == [LONG, cleared(9999), "short", cleared(400), LONG]
    # Cleared results sent back are left alone: nothing more may be cleared.
    again, count = clear(out, 1, 0)
    assert (count, again) == (0, out)


def test_a_cleared_result_keeps_its_row_and_id_and_loses_its_attachments() -> None:
    history = running(LONG, LONG)
    history.chat.messages[7].attachments.append(h.Attachment(media_type="image/png", uri="/a.png"))
    history.chat.messages[7].passthrough.update({"openai_chat": {"name": "n"}})
    out, _ = clear(history, 1, 0)
    row = out.chat.messages[7]
    assert (row.role, row.tool_call_id, row.content) == (h.ROLE_TOOL, "c0", cleared(400))
    assert not row.attachments
    assert dict(row.passthrough) == dict(history.chat.messages[7].passthrough)
    # Every other row is as it was, byte for byte.
    for i, message in enumerate(history.chat.messages):
        if i != 7:
            assert out.chat.messages[i].SerializeToString() == message.SerializeToString()


def test_a_carrier_keeps_its_prefix_and_counts_its_whole_content() -> None:
    carrier = "[Tool results] " + LONG
    history = chat(
        user("q"),
        assistant("", ("c1", "f", "{}")),
        h.ChatMessage(role=h.ROLE_USER, content=carrier),
        assistant("", ("c2", "f", "{}")),
        tool("c2", LONG),
    )
    out, count = clear(history, 1, 0)
    assert count == 1
    assert out.chat.messages[2].content == "[Tool results]\n" + cleared(len(carrier))
    assert out.chat.messages[4].content == LONG
    again, count = clear(out, 0, 0)
    assert count == 1
    assert again.chat.messages[2].content == out.chat.messages[2].content


def test_each_result_of_a_tool_results_row_is_cleared_alone() -> None:
    history = conversation(
        c_chat(user("q")),
        c_calls("", ("c1", "f", "{}"), ("c2", "f", "{}"), ("c3", "f", "{}")),
        c_results(("c1", LONG), ("c2", "\u00e9" * 300), ("c3", LONG)),
    )
    history.conversation.messages[2].tool_results.results[0].attachments.append(
        h.Attachment(media_type="image/png", uri="/a.png")
    )
    out, count = clear(history, 1, 0)
    assert count == 2
    results = out.conversation.messages[2].tool_results.results
    assert [r.content for r in results] == [cleared(400), cleared(300), LONG]
    assert [r.tool_call_id for r in results] == ["c1", "c2", "c3"]
    assert [r.tool_name for r in results] == ["t", "t", "t"]
    assert not results[0].attachments
    assert len(out.conversation.messages) == 3


def test_both_shapes_clear_alike() -> None:
    history = running(LONG, "short", LONG, LONG)
    for keep, stop in ((0, 0), (1, 0), (3, 0), (0, 200)):
        chat_out, chat_count = clear(history, keep, stop)
        conv_out, conv_count = clear(as_conversation(history), keep, stop)
        assert conv_count == chat_count
        assert conv_out == as_conversation(chat_out)


def test_the_running_turn_spans_parse_error_rows() -> None:
    history = chat(
        user("q"),
        assistant("", ("c1", "f", "{")),
        tool("c1", LONG),
        user(PARSE_ERROR_PREFIX + " bad arguments"),
        assistant("", ("c2", "f", "{}")),
        tool("c2", LONG),
    )
    assert running_turn_start(WorkingHistory.of(history)) == 0
    out, count = clear(history, 0, 0)
    assert (count, tool_contents(out)) == (2, [cleared(400), cleared(400)])


def test_without_a_boundary_the_running_turn_starts_after_the_breadcrumb() -> None:
    rows = [assistant("", ("c1", "f", "{}")), tool("c1", LONG)]
    with_crumb = chat(system(), crumb(), *rows)
    without = chat(system(), system(), *rows)
    assert running_turn_start(WorkingHistory.of(with_crumb)) == 2
    assert running_turn_start(WorkingHistory.of(without)) == 2
    for history in (with_crumb, without):
        out, count = clear(history, 0, 0)
        assert (count, tool_contents(out)) == (1, [cleared(400)])


def with_longer_results(history: h.History, extra: int) -> h.History:
    """`history` with every tool row and carrier `extra` characters longer (worth clearing)."""
    out = h.History()
    out.CopyFrom(history)
    for message in out.chat.messages:
        if message.role == h.ROLE_TOOL or message.content.startswith("[Tool results]"):
            message.content += "z" * extra
    return out


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 300), st.integers(0, 4), st.integers(0, 4000), st.booleans())
def test_clearing_prices_incrementally_and_never_touches_a_pair(
    drawn: h.History, extra: int, keep: int, stop: int, structured: bool
) -> None:
    history = with_longer_results(drawn, extra)
    if structured:
        history = as_conversation(history)
    before = WorkingHistory.of(history)
    clearing = clear_tool_results(before, keep, stop)
    after = clearing.working
    assert after.pricing == WorkingHistory.of(after.history).pricing
    assert after.rows == WorkingHistory.of(after.history).rows
    assert len(after.rows) == len(before.rows)
    assert (clearing.cleared == 0) == (after is before)
    if clearing.cleared:
        assert after.pricing.total < before.pricing.total
    # Rows keep their kind and order, so every call keeps its answer.
    assert [r.kind for r in after.rows] == [r.kind for r in before.rows]
    # It stopped at the bound or with nothing more to clear: a second pass clears nothing.
    assert clear_tool_results(after, keep, stop).cleared == 0


def test_a_result_before_a_parse_error_row_sends_no_attachments_when_cleared_or_kept() -> None:
    """§9: attachments cost only in the current user turn, which a parse-error row starts; the
    running turn of §13.4 spans it, and the row left with a kept result is priced accordingly."""
    history = conversation(
        c_chat(user("q")),
        c_calls("", ("c1", "f", "{}"), ("c2", "f", "{}")),
        c_results(("c1", LONG), ("c2", LONG)),
        c_chat(user(PARSE_ERROR_PREFIX + " bad arguments")),
        c_calls("", ("c3", "f", "{}")),
        c_results(("c3", LONG)),
    )
    history.conversation.messages[2].tool_results.results[1].attachments.append(
        h.Attachment(media_type="image/png", uri="/a.png")
    )
    out, count = clear(history, 2, 0)
    assert count == 1
    results = out.conversation.messages[2].tool_results.results
    assert [r.content for r in results] == [cleared(400), LONG]
    assert len(results[1].attachments) == 1
