"""What the frameworks hand over converts losslessly: the Agents SDK's items (camelCase callId,
function_call_result, hosted-tool items and input_file parts kept whole as priced rows) and
LangChain v1 content blocks (tool_call echoes, server tool calls, reasoning summaries)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from turnkeeper.v1 import history_pb2, history_service_pb2, trim_pb2

from turnkeeper_client import TurnkeeperClient, from_openai_responses, to_openai_responses
from turnkeeper_client.convert.langchain import from_langchain, to_langchain

AGENTS_ITEMS: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Summarise this file and search the web."},
            {"type": "input_file", "file_id": "file_1", "filename": "report.pdf"},
        ],
    },
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "q"}},
    {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"]},
    {"type": "mcp_call", "id": "mcp_1", "name": "t", "server_label": "s", "arguments": "{}"},
    {"type": "computer_call", "id": "cc_1", "call_id": "c_1", "action": {"type": "screenshot"}},
    {"type": "computer_call_output", "call_id": "c_1", "output": {"type": "computer_screenshot"}},
    {"id": "msg_0"},
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "abc"},
    {"type": "function_call", "callId": "a", "name": "lookup", "arguments": "{}"},
    {"type": "function_call", "callId": "b", "name": "lookup", "arguments": "{}"},
    {
        "type": "function_call_result",
        "callId": "a",
        "name": "lookup",
        "status": "completed",
        "output": {"type": "text", "text": "one"},
    },
    {
        "type": "function_call_result",
        "callId": "b",
        "name": "lookup",
        "status": "completed",
        "output": "two",
    },
]


def test_agents_sdk_items_round_trip(client: TurnkeeperClient) -> None:
    history = from_openai_responses(AGENTS_ITEMS)
    rows = history.chat.messages
    # One row per hosted item, the two calls one row, each result its own tool row.
    assert [r.role for r in rows].count(history_pb2.ROLE_TOOL) == 2
    calls = [r for r in rows if r.tool_calls]
    assert len(calls) == 1 and [c.id for c in calls[0].tool_calls] == ["a", "b"]
    assert '"file_id":"file_1"' in rows[0].content  # the file part is priced as its JSON
    assert to_openai_responses(history) == AGENTS_ITEMS
    bare = from_openai_responses(AGENTS_ITEMS[:1] + AGENTS_ITEMS[8:])
    priced = client.estimate_tokens(history_service_pb2.EstimateTokensRequest(history=history))
    fewer = client.estimate_tokens(history_service_pb2.EstimateTokensRequest(history=bare))
    assert priced.total_tokens > fewer.total_tokens
    swept = client.sweep_orphans(history_service_pb2.SweepOrphansRequest(history=history))
    assert not swept.removals
    assert to_openai_responses(swept.history) == AGENTS_ITEMS


def test_hosted_items_go_with_their_turn(client: TurnkeeperClient) -> None:
    later = [{"role": "user", "content": "next " * 200}, {"role": "assistant", "content": "ok"}]
    history = from_openai_responses([*AGENTS_ITEMS, *later])
    response = client.trim_history(
        history_service_pb2.TrimHistoryRequest(
            history=history,
            mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
            explicit_limits=history_service_pb2.ExplicitLimits(budget_tokens=300),
        )
    )
    assert response.outcome.dropped_turns == 1
    kept = to_openai_responses(response.history)
    assert kept[1:] == later  # the breadcrumb, then the newest turn: no hosted item left behind


def test_langchain_v1_blocks_round_trip(client: TurnkeeperClient) -> None:
    messages = [
        HumanMessage("Find it."),
        AIMessage(
            content=[
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "Search first."}],
                },
                {
                    "type": "server_tool_call",
                    "id": "srv_1",
                    "name": "web_search",
                    "args": {"query": "it"},
                },
                {"type": "server_tool_result", "tool_call_id": "srv_1", "status": "success"},
                {"type": "text", "text": "Looking it up."},
                {"type": "tool_call", "id": "c1", "name": "lookup", "args": {"q": "it"}},
            ],
            tool_calls=[{"id": "c1", "name": "lookup", "args": {"q": "it"}}],
        ),
        ToolMessage("found", tool_call_id="c1"),
    ]
    history = from_langchain(messages)
    assistant = history.chat.messages[1]
    assert "Search first." in assistant.content and "web_search" in assistant.content
    assert to_langchain(history) == messages
