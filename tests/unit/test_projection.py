"""Tool context retention: the §13.1 projection and its §13.3 example, both shapes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from turnkeeper.core.projection import CollapsedTurn, project, project_working
from turnkeeper.core.rows import PARSE_ERROR_PREFIX, TOOL_EXCHANGE_SUMMARY
from turnkeeper.core.sweep import sweep
from turnkeeper.core.working import WorkingHistory
from turnkeeper.server.contract import history_rules
from turnkeeper.server.engine.protocol import NO_PROJECTION
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


def summary_text(n: int) -> str:
    return f"{TOOL_EXCHANGE_SUMMARY[0]}{n}{TOOL_EXCHANGE_SUMMARY[1]}"


def test_summary_text_is_the_spec_s() -> None:
    assert summary_text(2) == "[Tool exchange: 2 tool call(s) \u2014 results collapsed]"


def completed_turn(t: int) -> list[h.ChatMessage]:
    """§13.3: user, assistant with two calls, two tool rows, assistant reply."""
    return [
        user(f"question {t}"),
        assistant("", (f"a{t}", "search", "{}"), (f"b{t}", "read", "{}")),
        tool(f"a{t}", "result a " * 10),
        tool(f"b{t}", "result b " * 10),
        assistant(f"answer {t}"),
    ]


def example() -> h.History:
    """§13.3: a system row, turns 1-4 completed, turn 5 running (user, a call and its result)."""
    rows = [system()]
    for t in range(1, 5):
        rows.extend(completed_turn(t))
    rows.extend([user("question 5"), assistant("", ("c5", "run", "{}")), tool("c5")])
    return chat(*rows)


def contents(history: h.History) -> list[str]:
    return [m.content for m in history.chat.messages]


def test_section13_3_example_sends_20_rows_instead_of_24() -> None:
    history = example()
    projected = project(history, 2)
    out = projected.history.chat.messages
    assert (len(history.chat.messages), len(out)) == (24, 20)
    assert projected.rows_left_out == 6
    summaries = [m for m in out if m.tool_exchange_summary]
    assert len(summaries) == 2
    assert all(
        m.role == h.ROLE_ASSISTANT and m.content == summary_text(2) and not m.tool_calls
        for m in summaries
    )
    assert contents(projected.history)[:7] == [
        "sys",
        "question 1",
        summary_text(2),
        "answer 1",
        "question 2",
        summary_text(2),
        "answer 2",
    ]
    # Turns 3 and 4 and the running turn are sent whole.
    assert list(out[7:]) == list(history.chat.messages[11:])
    assert projected.collapsed == (CollapsedTurn(1, 6, 1, 4), CollapsedTurn(6, 11, 4, 7))


def test_section13_1_k_counts_the_completed_turns_kept_whole() -> None:
    history = example()
    for keep, collapsed in ((0, 4), (1, 3), (2, 2), (3, 1), (4, 0), (50, 0)):
        projected = project(history, keep)
        assert len(projected.collapsed) == collapsed, keep
        assert projected.rows_left_out == 3 * collapsed
        assert len(projected.history.chat.messages) == 24 - 2 * collapsed
    # A K larger than the turns collapses nothing: the history itself comes back.
    assert project(history, 50).history is history


def test_kept_rows_are_copied_byte_for_byte() -> None:
    history = example()
    for message in history.chat.messages:
        message.passthrough.update({"openai_chat": {"name": message.content[:3]}})
    projected = project(history, 2)
    kept = [m for m in projected.history.chat.messages if not m.tool_exchange_summary]
    originals = [history.chat.messages[i] for i in (0, 1, 5, 6, 10, *range(11, 24))]
    assert [m.SerializeToString() for m in kept] == [m.SerializeToString() for m in originals]


def conversation_example() -> h.History:
    rows: list[h.ConversationMessage] = [c_chat(system())]
    for t in range(1, 5):
        rows += [
            c_chat(user(f"question {t}")),
            c_calls("", (f"a{t}", "search", "{}"), (f"b{t}", "read", "{}")),
            c_results((f"a{t}", "result a"), (f"b{t}", "result b")),
            c_chat(assistant(f"answer {t}")),
        ]
    rows += [c_chat(user("question 5")), c_calls("", ("c5", "run", "{}")), c_results(("c5", "x"))]
    return conversation(*rows)


def test_conversation_shape_collapses_the_same_turns() -> None:
    history = conversation_example()
    projected = project(history, 2)
    out = projected.history.conversation.messages
    assert len(out) == len(history.conversation.messages) - 2
    assert projected.rows_left_out == 4
    assert projected.collapsed == (CollapsedTurn(1, 5, 1, 4), CollapsedTurn(5, 9, 4, 7))
    summary = out[2]
    assert summary.WhichOneof("message") == "chat"
    assert summary.chat.tool_exchange_summary
    assert summary.chat.content == summary_text(2)
    assert [m.chat.content for m in out[1:4]] == ["question 1", summary_text(2), "answer 1"]


def test_conversation_n_counts_results_when_no_drained_row_has_calls() -> None:
    history = conversation(
        c_chat(user("q")),
        c_calls("thinking"),
        c_results(("x1", "r"), ("x2", "r")),
        c_chat(h.ChatMessage(role=h.ROLE_USER, content="[Tool results] r3")),
        c_chat(assistant("done")),
        c_chat(user("next")),
    )
    out = project(history, 0).history.conversation.messages
    assert [m.chat.content for m in out] == ["q", summary_text(3), "done", "next"]


def test_both_shapes_project_to_the_same_chat_rows() -> None:
    history = example()
    chat_out = project(history, 1)
    conv_out = project(as_conversation(history), 1)
    assert conv_out.collapsed == chat_out.collapsed
    assert conv_out.history == as_conversation(chat_out.history)


def test_a_parse_error_row_is_no_retention_boundary() -> None:
    turn = [
        user("q1"),
        assistant("", ("c1", "f", "{")),
        tool("c1", "bad arguments"),
        user(PARSE_ERROR_PREFIX + " expected a JSON object"),
        assistant("", ("c2", "f", "{}")),
        tool("c2", "ok"),
        assistant("reply"),
    ]
    history = chat(*turn, user("q2"))
    projected = project(history, 0)
    assert contents(projected.history) == ["q1", summary_text(2), "reply", "q2"]
    assert projected.rows_left_out == 5
    # Alone it is one retention turn (§9 would count two): nothing collapses.
    assert not project(chat(*turn), 0).collapsed


def test_a_turn_without_tool_activity_is_copied() -> None:
    history = chat(
        user("q1"), assistant("thinking"), system("note"), assistant("a1"), user("q2"), user("q3")
    )
    projected = project(history, 0)
    assert not projected.collapsed
    assert projected.history is history


def test_a_turn_ending_on_a_result_keeps_its_prompt_and_the_summary() -> None:
    history = chat(
        user("q1"),
        assistant("", ("c1", "f", "{}")),
        tool("c1"),
        user("q2"),
        assistant("calls again", ("c2", "f", "{}")),
        user("q3"),
    )
    projected = project(history, 0)
    # An assistant row with calls is never a closing reply.
    assert contents(projected.history) == ["q1", summary_text(1), "q2", summary_text(1), "q3"]
    assert projected.collapsed == (CollapsedTurn(0, 3, 0, 2), CollapsedTurn(3, 5, 2, 4))


def test_a_collapsed_turn_sent_back_projects_to_the_same_bytes() -> None:
    once = project(example(), 2)
    twice = project(once.history, 2)
    assert not twice.collapsed
    assert twice.history.SerializeToString() == once.history.SerializeToString()
    # A new user turn collapses the next turn only; the collapsed ones stay as they were.
    grown = h.History()
    grown.CopyFrom(once.history)
    grown.chat.messages.extend([assistant("done 5"), user("question 6")])
    again = project(grown, 2)
    assert len(again.collapsed) == 1
    assert list(again.history.chat.messages[:7]) == list(once.history.chat.messages[:7])


def test_carriers_count_as_results_and_as_tool_activity() -> None:
    carrier = h.ChatMessage(role=h.ROLE_USER, content="[Tool results] a, b")
    history = chat(
        user("q1"),
        assistant("plan"),
        carrier,
        h.ChatMessage(role=h.ROLE_USER, content="[Tool results] c"),
        assistant("a1"),
        user("q2"),
    )
    assert contents(project(history, 0).history) == ["q1", summary_text(2), "a1", "q2"]
    # Calls win over results: two calls answered by one carrier.
    with_calls = chat(
        user("q1"), assistant("", ("x", "f", "{}"), ("y", "f", "{}")), carrier, user("q2")
    )
    assert contents(project(with_calls, 0).history) == ["q1", summary_text(2), "q2"]


def test_no_summary_when_the_first_drained_row_is_not_an_assistant_row() -> None:
    history = chat(
        user("q1"),
        system("mid-turn note"),
        assistant("", ("c1", "f", "{}")),
        tool("c1"),
        assistant("a1"),
        user("q2"),
    )
    projected = project(history, 0)
    assert contents(projected.history) == ["q1", "a1", "q2"]
    assert projected.rows_left_out == 3


def test_system_rows_inside_a_turn_are_drained() -> None:
    history = chat(
        user("q1"),
        assistant("", ("c1", "f", "{}")),
        tool("c1"),
        system("mid-turn note"),
        assistant("a1"),
        user("q2"),
    )
    assert contents(project(history, 0).history) == ["q1", summary_text(1), "a1", "q2"]


def test_leading_rows_breadcrumb_and_rows_before_the_first_prompt_are_copied() -> None:
    history = chat(
        system("s1"),
        system("s2"),
        crumb(),
        assistant("left from a dropped turn"),
        *completed_turn(1),
        user("q2"),
    )
    projected = project(history, 0)
    assert list(projected.history.chat.messages[:4]) == list(history.chat.messages[:4])
    assert projected.collapsed == (CollapsedTurn(4, 9, 4, 7),)


def test_projection_creates_no_orphan() -> None:
    history = example()
    assert not sweep(history).removals
    assert not sweep(project(history, 0).history).removals


def test_only_an_assistant_row_without_calls_can_be_a_summary() -> None:
    """The history rule `tool_exchange_summary` (docs/conventions.md "Validation rules")."""

    def marked(message: h.ChatMessage) -> h.ChatMessage:
        message.tool_exchange_summary = True
        return message

    history = chat(
        system(),
        marked(crumb()),
        user("q"),
        marked(assistant(summary_text(1))),
        marked(assistant("", ("c1", "f", "{}"))),
        tool("c1"),
        marked(user("again")),
    )
    violations = history_rules.history_violations(history, "history", 100)
    fields = [v.field for _, v in violations]
    assert fields == [
        "history.chat.messages[1].tool_exchange_summary",
        "history.chat.messages[4].tool_exchange_summary",
        "history.chat.messages[6].tool_exchange_summary",
    ]
    described = {v.description for _, v in violations}
    assert described == {"Only an assistant row without tool calls can be a tool-exchange summary."}
    structured = conversation(c_chat(user("q")), c_chat(marked(tool("c1"))))
    assert [v.field for _, v in history_rules.history_violations(structured, "history", 100)] == [
        "history.conversation.messages[1].chat.tool_exchange_summary"
    ]
    # What the projection writes passes the rules.
    assert not history_rules.history_violations(project(example(), 0).history, "history", 100).total


def test_view_project_returns_itself_when_nothing_collapses() -> None:
    view = PythonHistoryView(WorkingHistory.of(example()))
    assert view.project(4) == (view, NO_PROJECTION)
    projected, projection = view.project(2)
    assert projection.rows_left_out == 6
    assert len(projection.collapsed) == 2
    assert projected.rows == 20
    assert projected.system_rows == 1
    assert projected.working.pricing == WorkingHistory.of(projected.working.history).pricing
    assert projected.tokens_through(projected.rows - 1) == projected.total_tokens
    assert projected.tokens_through(0) == projected.working.pricing.tokens[0]
    assert projected.tokens_through(-1) == 0


def with_parse_errors(history: h.History, places: list[int]) -> h.History:
    rows = list(history.chat.messages)
    for place in sorted(places, reverse=True):
        at = min(place, len(rows))
        rows.insert(at, user(PARSE_ERROR_PREFIX + " bad call"))
    return chat(*rows)


@settings(max_examples=200, deadline=None)
@given(
    histories(),
    st.lists(st.integers(0, 60), max_size=3),
    st.integers(0, 4),
    st.booleans(),
)
def test_projection_is_idempotent_priced_alike_and_never_orphans(
    drawn: h.History, parse_errors: list[int], keep: int, structured: bool
) -> None:
    history = with_parse_errors(drawn, parse_errors)
    if structured:
        history = as_conversation(history)
    working = WorkingHistory.of(history)
    projected_working, projected = project_working(working, keep)
    out = projected.history
    assert projected_working.history is out
    # Priced without re-pricing, exactly as a fresh pricing would.
    assert projected_working.pricing == WorkingHistory.of(out).pricing
    assert projected_working.rows == WorkingHistory.of(out).rows
    again = project(out, keep)
    assert not again.collapsed
    assert again.history.SerializeToString() == out.SerializeToString()
    if not sweep(history).removals:
        assert not sweep(out).removals
    rows_in = len(working.rows)
    rows_out = len(projected_working.rows)
    summaries = sum(1 for source in projected.sources if source < 0)
    assert rows_out == rows_in - projected.rows_left_out + summaries
    if not projected.collapsed:
        assert out is history
