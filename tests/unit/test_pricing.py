"""Token estimation: spec §4 and the pinned arithmetic of §9 'Estimate of a row'."""

from __future__ import annotations

import pytest
from turnkeeper.core.pricing import is_loadable_ref, price_text, strip_sent_images
from turnkeeper.core.rows import conversation_row, price, rows_of
from turnkeeper.core.working import breadcrumb_cost
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


def estimate(history: h.History) -> list[int]:
    return price(rows_of(history)).tokens


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 4), ("abcd", 5), ("abcde", 6), ("héllo", 6), ("🦀", 5)],
)
def test_section9_examples_one_token_per_four_bytes_plus_four_framing(
    text: str, tokens: int
) -> None:
    """§9: estimate = ceil(utf8 bytes / 4) + 4; the spec's own examples."""
    assert estimate(chat(assistant(text))) == [tokens]
    assert price_text(text) == tokens


def test_section9_default_breadcrumb_costs_17() -> None:
    """§9: the default breadcrumb (49 bytes) -> 17."""
    assert breadcrumb_cost("[earlier turns omitted to fit the context window]") == 17
    assert estimate(chat(crumb())) == [17]


def test_section9_image_markers_in_real_user_row_example() -> None:
    """§9: `look [IMAGE:https://x/y.jpg] and [IMAGE:data:...] now` -> 14 bytes -> 3,208."""
    history = chat(user("look [IMAGE:https://x/y.jpg] and [IMAGE:data:image/png;base64,AAAA] now"))
    assert estimate(history) == [3208]


@pytest.mark.parametrize(
    "ref",
    [
        "/tmp/a.png",
        "http://x",
        "https://x",
        "data:image/png;base64,A",
        "C:\\a.png",
        "c:/a",
        "\\\\srv\\a",
        "  /a  ",
    ],
)
def test_section9_loadable_image_refs(ref: str) -> None:
    """§9: refs starting with /, http://, https://, data:, a drive letter or \\\\ are sent."""
    assert is_loadable_ref(ref)


@pytest.mark.parametrize(
    "content", ["[IMAGE:example.png]", "[IMAGE:...]", "[IMAGE:", "[IMAGE:]", "[image:/a.png]"]
)
def test_section9_other_markers_are_plain_text(content: str) -> None:
    """§9: `[IMAGE:example.png]`, `[IMAGE:...]` and an unterminated `[IMAGE:` are plain text."""
    text, images = strip_sent_images(content)
    assert images == 0
    assert text == content.strip()


def test_section4_markers_only_count_in_real_user_rows() -> None:
    """§4/§9: system, assistant and tool rows price marker-shaped text as bytes."""
    marker = "[IMAGE:/a.png]"  # 14 bytes -> 4 + 4
    assert estimate(chat(system(marker), assistant(marker))) == [8, 8]
    assert estimate(chat(user("q"), tool("c", marker))) == [5, 8]  # tool: 14 + 1 bytes -> 4 + 4


def test_section4_attachments_cost_only_in_current_user_turn() -> None:
    """§4/§9: declared tool attachments cost 1,600 each only after the last real user row."""
    history = chat(
        user("a"),
        assistant("", ("c1", "f", "")),
        tool("c1", "", attachments=2),
        user("b"),
        assistant("", ("c2", "f", "")),
        tool("c2", "", attachments=2),
    )
    tokens = estimate(history)
    assert tokens[2] == 5  # older tool row: bytes only (id "c1": 2 bytes -> 1 + 4)
    assert tokens[5] == 5 + 2 * 1600


def test_section4_attachment_payloads_are_never_text() -> None:
    """§9: attachment payloads are never priced as text."""
    row = h.ChatMessage(
        role=h.ROLE_TOOL,
        tool_call_id="c",
        attachments=[h.Attachment(media_type="image/png", data=b"x" * 4000)],
    )
    assert estimate(chat(user("q"), row)) == [5, 5 + 1600]


def test_section4_tool_results_carrier_attachments_in_current_turn() -> None:
    """§9: declared attachments on a `[Tool results]` carrier row cost 1,600 in the current turn."""
    carrier = h.ChatMessage(
        role=h.ROLE_USER, content="[Tool results]", attachments=[h.Attachment(uri="/a.png")]
    )
    assert estimate(chat(user("q"), carrier)) == [5, 4 + 4 + 1600]


def test_section9_chat_bytes_include_tool_call_id_and_calls() -> None:
    """§9: bytes(content) + bytes(tool_call_id) + per call bytes(id)+bytes(name)+bytes(arguments)."""
    row = assistant("abcd", ("id", "name", '{"a":1}'))  # 4 + 2 + 4 + 7 = 17 bytes -> 5 + 4
    assert estimate(chat(row)) == [9]
    assert estimate(chat(user("q"), tool("abcdefgh", "abcd"))) == [5, 7]


def test_section9_conversation_rows_priced_as_provider_rows() -> None:
    """§9: assistant tool calls = one row of text+reasoning+calls; tool results one row per result."""
    calls = c_calls("ab", ("id", "f", "{}"), reasoning="abcd")  # 2 + 4 + 2 + 1 + 2 = 11 -> 3 + 4
    results = c_results(("id", "abcdef"), ("id2", ""))  # (8 -> 2 + 4) + (3 -> 1 + 4)
    assert estimate(conversation(c_chat(user("q")), calls, results)) == [5, 7, 11]
    assert conversation_row(results).provider_rows == 2


def test_section9_user_row_text_is_trimmed_after_marker_removal() -> None:
    """§9: after removing sent markers the remaining text is trimmed of surrounding whitespace."""
    assert estimate(chat(user("  [IMAGE:/a.png]  abcd  "))) == [5 + 1600]
