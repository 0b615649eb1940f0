"""Pairing safety: spec §8 and §10.2 (orphan sweep), §8 and §9 'Tool-result cap'."""

from __future__ import annotations

from turnkeeper.core.sweep import sweep
from turnkeeper.core.toolcap import cap_tool_result
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import trim_pb2 as t

from .histories import (
    assistant,
    c_calls,
    c_chat,
    c_results,
    chat,
    conversation,
    system,
    tool,
    user,
)


def test_section8_sweep_removes_result_without_call() -> None:
    """§8: the orphan sweep removes tool results whose call is missing."""
    history = chat(user("q"), tool("ghost", "x"), assistant("a"))
    result = sweep(history)
    assert [m.role for m in result.history.chat.messages] == [h.ROLE_USER, h.ROLE_ASSISTANT]
    assert result.removals == [
        t.OrphanRemoval(
            kind=t.ORPHAN_KIND_TOOL_RESULT_WITHOUT_CALL,
            message_index=1,
            tool_call_id="ghost",
            row_removed=True,
        )
    ]


def test_section8_sweep_removes_unanswered_calls_keeping_text() -> None:
    """§8: assistant tool calls whose results never came are removed; text stays."""
    history = chat(
        user("q"), assistant("thinking", ("c1", "f", "{}"), ("c2", "f", "{}")), tool("c1")
    )
    result = sweep(history)
    row = result.history.chat.messages[1]
    assert [c.id for c in row.tool_calls] == ["c1"] and row.content == "thinking"
    assert [(x.kind, x.tool_call_id, x.row_removed) for x in result.removals] == [
        (t.ORPHAN_KIND_TOOL_CALL_WITHOUT_RESULT, "c2", False)
    ]


def test_section8_sweep_noop_returns_input_unchanged() -> None:
    """§2/§8: a consistent history comes back unchanged."""
    history = chat(user("q"), assistant("", ("c1", "f", "{}")), tool("c1"), assistant("a"))
    assert sweep(history).history == history and not sweep(history).removals


def test_section8_sweep_carrier_answers_calls_of_its_turn() -> None:
    """§1/§8: a `[Tool results]` carrier row answers the calls before it in its turn."""
    history = chat(user("q"), assistant("", ("c1", "f", "{}")), user("[Tool results] ok"))
    assert not sweep(history).removals


def test_section8_sweep_conversation_shape_both_directions() -> None:
    """§8: both directions on ConversationMessage history."""
    history = conversation(
        c_chat(user("q")),
        c_calls("", ("c1", "f", "{}"), ("c2", "f", "{}")),
        c_results(("c1", "ok"), ("zz", "orphan")),
    )
    result = sweep(history)
    msgs = result.history.conversation.messages
    assert [c.id for c in msgs[1].assistant_tool_calls.tool_calls] == ["c1"]
    assert [r.tool_call_id for r in msgs[2].tool_results.results] == ["c1"]
    assert {(x.message_index, x.tool_call_id) for x in result.removals} == {(1, "c2"), (2, "zz")}


def test_section8_tool_result_cap_head_two_thirds_tail_rest() -> None:
    """§8/§9: keep floor(2/3 max) head and (max - head) tail characters, with the notice."""
    capped, cut = cap_tool_result("abcdefghij", 6)
    assert (capped, cut) == ("abcd\n\n[... 4 characters truncated ...]\n\nij", 4)


def test_section8_tool_result_cap_zero_disables_and_within_cap_unchanged() -> None:
    """§8: 0 disables the cap; a result within the cap is unchanged."""
    assert cap_tool_result("x" * 100, 0) == ("x" * 100, 0)
    assert cap_tool_result("x" * 10, 10) == ("x" * 10, 0)


def test_section9_tool_result_cap_counts_code_points() -> None:
    """§9: the cap counts characters (code points), not bytes."""
    capped, cut = cap_tool_result("🦀" * 10, 6)
    assert cut == 4 and capped.startswith("🦀" * 4) and capped.endswith("🦀" * 2)


def test_section8_tool_result_cap_never_splits_image_marker() -> None:
    """Issue 2: the cap never splits an `[IMAGE:...]` marker."""
    content = "ab[IMAGE:/x.png]" + "z" * 30
    capped, cut = cap_tool_result(content, 9)  # head 6 falls inside the marker
    assert capped.startswith("ab\n\n[... ") and "[IMAGE" not in capped
    assert cut == len(content) - 2 - 3


def test_section10_2_interjection_between_call_and_result() -> None:
    """§10.2 example 1: [S, U, A(calls c1), U("interjection"), T(c1)] -> [S, U, U]."""
    history = chat(
        system(), user("q"), assistant("", ("c1", "f", "")), user("interjection"), tool("c1")
    )
    result = sweep(history)
    assert result.history == chat(system(), user("q"), user("interjection"))
    assert [(r.kind, r.message_index) for r in result.removals] == [
        (t.ORPHAN_KIND_TOOL_CALL_WITHOUT_RESULT, 2),
        (t.ORPHAN_KIND_TOOL_RESULT_WITHOUT_CALL, 4),
    ]


def test_section10_2_assistant_between_call_and_result() -> None:
    """§10.2 example 2: [S, U, A(calls c1), A("thinking"), T(c1)] -> [S, U, A("thinking")]."""
    history = chat(
        system(), user("q"), assistant("", ("c1", "f", "")), assistant("thinking"), tool("c1")
    )
    assert sweep(history).history == chat(system(), user("q"), assistant("thinking"))


def test_section10_2_conversation_shape_uses_adjacency() -> None:
    """§10.2 in the structured shape: a result after a user row is an orphan, and so is its call."""
    history = conversation(
        c_chat(user("q")),
        c_calls("", ("c1", "f", "")),
        c_chat(user("interjection")),
        c_results(("c1", "late")),
    )
    result = sweep(history)
    assert result.history == conversation(c_chat(user("q")), c_chat(user("interjection")))
    assert all(r.row_removed for r in result.removals) and len(result.removals) == 2
